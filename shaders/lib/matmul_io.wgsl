// lib/matmul_io — the interface of the matmul family (matmul.wgsl, matmul_sg.wgsl and its PRO variant): overrides,
// struct Params, the bindings. The PRO variant (define PRO: the fused engine's prologue matmul) reads its layer input
// as r_in + parts[0] + ... (binding 8) instead of x, may write that sum to r_out (binding 9), and takes PAIRS row
// pairs per subgroup instead of KSPLIT subgroups per pair.

override WG_SIZE: u32 = 64;
override WTYPE: u32 = 0;
override MODE: u32 = 0;
override NORM: bool = false;
override TILE: u32 = 4u;   // GPU paths: chunk rows per weight decode: 1 (dot1), 4 (dot4) or 8 (dot8)

override LANES: u32 = 32;   // invocations per row pair: 1, 2, 4, ... 32 (matmul.wgsl); the subgroup size (matmul_sg)
// #if PRO
override KX: u32 = 64u;    // = params.K (sizes the staging array)
override PAIRS: u32 = 1u;  // row pairs per subgroup
override NPART: u32 = 0u;  // partial sums added to r_in (= params.npart)
override STRIDE: u32 = LANES;
override TOUCH: bool = false;   // warm the pairs' weights before the prologue (lib/touch; engine option fuseTouch)
// #else
override KSPLIT: u32 = 1u;  // subgroups per row pair (1, 2 or 4; matmul_sg.wgsl only): each takes every KSPLIT-th group of LANES units
override STRIDE: u32 = LANES * KSPLIT;   // unit stride of one lane
// #endif
const TB: u32 = 8u;

struct Params {
  K: u32,           // in features (multiple of 32)
  N: u32,           // weight rows in this part
  row0: u32,        // global row of this part's first row (even)
  out_stride: u32,  // floats per output row
  window: u32,      // 1: only chunk rows step.out_lo.. written to out rows step.out_base..
  q_dim: u32,
  kv_dim: u32,
  head_dim: u32,
  rope_dim: u32,
  seq_len: u32,
  n_groups: u32,    // number of row pairs in this part: ceil(N / 2)
  eps: f32,
// #if PRO
  npart: u32,       // partial sums added to r_in (the kernel uses the override NPART, equal to it)
  pstride: u32,     // vec4s from one partial to the next (max_rows * K / 4)
  write_r: u32,     // 1: workgroup 0 writes x to r_out
  _p0: u32,
// #endif
};

// #include step
@group(0) @binding(2) var<storage, read> w: array<u32>;
// #if PRO
@group(0) @binding(3) var<storage, read> r_in: array<vec4<f32>>;
// #else
@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
// #endif
@group(0) @binding(4) var<storage, read> gamma: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> rope: array<vec2<f32>>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> kv: array<f32>;
// #if PRO
@group(0) @binding(8) var<storage, read> parts: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read_write> r_out: array<vec4<f32>>;

var<workgroup> xs: array<vec4<f32>, TILE * KX / 4u>;   // (TILE, K) this tile's x rows (slot s = chunk row t + s)
// #endif
