// residual — the residual stream after the last layer, for every row of a chunk:
//   x[t] = r_in[t] + parts[0][t] + parts[1][t] + ... + parts[NPART-1][t]     (vec4s, in that fixed order: the same
//                                                                           adds as matmul_sg.wgsl PRO's prologue)
// written to `out` (OUT: the head's input, so the head runs as a plain matmul_sg.wgsl: engine option headSum) and
// to features[start_pos + t] (FEATURES: the final hidden state of every position the model computes, kept by
// absolute position for a draft head; model option features). NPART = 0: x = r_in (the unfused engine).
//
// Work split: grid (ceil(dim / 4 / WG_SIZE), rows): invocation i of workgroup (x, t) takes vec4 x * WG_SIZE + i of
// chunk row t.
// BATCH INVARIANCE: each element is one fixed sequence of adds, whatever the chunk.
//
// Bindings:
//   0 params    uniform Params
//   1 step      uniform Step (dynamic offset: the chunk's slot)
//   2 r_in      array<vec4<f32>>  (max_rows, dim) the residual before the pending partials
//   3 parts     array<vec4<f32>>  (NPART, max_rows, dim) split-K partials (fused engine: the last FFN's)
//   4 out       array<vec4<f32>>  read_write (max_rows, dim)
//   5 features  array<vec4<f32>>  read_write (seq_len, dim)

override WG_SIZE: u32 = 64;
override NPART: u32 = 0u;
override OUT: bool = true;
override FEATURES: bool = false;

struct Params {
  dim: u32,
  pstride: u32,     // vec4s from one partial to the next (max_rows * dim / 4)
  _p0: u32, _p1: u32,
};

// #include step
@group(0) @binding(2) var<storage, read> r_in: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> parts: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> features: array<vec4<f32>>;

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let t = wid.y;
  let K4 = params.dim / 4u;
  let i = wid.x * WG_SIZE + lid;
  if (t >= step.n || i >= K4) { return; }
  let g = t * K4 + i;
  var v = r_in[g];
  for (var p = 0u; p < NPART; p = p + 1u) {
    v = v + parts[p * params.pstride + g];
  }
  if (OUT) { out[g] = v; }
  if (FEATURES) { features[(step.start_pos + t) * K4 + i] = v; }
}
