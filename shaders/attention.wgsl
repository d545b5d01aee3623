// attention — causal GQA attention of a chunk of new positions over this layer's KV cache (which already holds
// the chunk's own keys/values, written by matmul MODE 3).
//
// Work split: one workgroup per (head h = wid.x, chunk row t = wid.y (ROWS_Z: wid.z)); pos = start_pos + t attends
// keys 0..pos.
//   1. lane l scores keys j = l, l + AW, ... (AW = WG_SIZE but with QKV; dot over head_dim in ascending vec4
//      order), keeps its max (and its first two scores in registers);
//   2. fixed binary tree max over lanes; lane l exponentiates its keys and sums them in ascending j; fixed tree sum;
//   3. the workgroup splits into S = AW / (head_dim/4) key slices; invocation (s, d4) sums p_j * v[j, 4*d4..]
//      over keys j = s, s + S, ... ascending; the S slice sums are added in slice order by invocation (0, d4).
// Latency (a pass at a short position is a chain of dependent memory round trips): HD4 (override, head_dim / 4)
// makes the head_dim loops constant, so a key's loads issue together; step 2 reads a lane's first two scores from
// registers; step 3 issues two groups' loads before their adds. None of it changes an operation or its order.
// BATCH INVARIANCE: every reduction is over absolute key positions in an order fixed by pos alone, so a row's
// result is the same whatever chunk it is computed in.
//
// Define O_PROJ (kernels.js: the fused engine's `attn_o`, `fuse` option of engine.js): the same workgroup then
// applies this head's slice of the O projection: o_h = softmax(q_h . K^T) . V (head_dim values) stays in workgroup
// memory `oh` instead of going to the attention buffer, and step 4 leaves the split-K partial
//     P_attn[h][t, r] = sum_{d < head_dim} W_o[r, h * head_dim + d] * o_h[d]      (r = 0 .. dim-1)
// The consumer (matmul_sg.wgsl PRO / ffn_sg.wgsl) adds r + P_attn[0] + ... + P_attn[n_heads-1] in that fixed order.
// With a grid z > 1 (engine option attnSplit) each z workgroup computes steps 1-3, into its own scores row. Step 4:
// invocation l < OW of workgroup z (OW = WG_SIZE but with QKV) computes output rows r = z * OW + l, + OW * Z, ...
// of the partial (z > 1: more workgroups share the O projection), each a dot over the head's columns in ascending
// 8-value units (lib/quant, lib/term: W_o is stored (dim, q_dim) with its 32-value quant blocks along q_dim). When head_dim is not a multiple
// of 32 a Q4 block holds two heads' columns (its 8-value units interleave the block's halves): the units of every
// block touching the head are taken and the other head's inputs are exact zeros, which adds exactly nothing. W_o's
// slice is read by the n_rows workgroups of a head (from L2). BATCH INVARIANCE: each partial element is one fixed
// sequence of adds in ascending unit order, whatever chunk the row is in.
//
// Define BLOCKS as well as O_PROJ (kernels.js: the fused engine's `attn_o` with engine option attnBlock; not with QKV):
// the keys are split into blocks of KB fixed by absolute position (block b: keys b * KB .. (b + 1) * KB - 1), so
// that a long row's attention runs on several workgroups instead of one (one workgroup walks all keys of its head:
// at long positions a head is bound by one SM's loads). Grid z = NB * Z: workgroup z takes key block b = z / Z and
// O-projection split z % Z; a block past the row's position returns at once. A row at pos has nb = pos / KB + 1
// blocks. Steps 1-3 run over the block's keys as above (scores row of KB floats); with nb = 1 the workgroup does
// exactly what the kernel without BLOCKS does (keys 0 .. pos, o * (1 / l), step 4), so rows before position KB get
// the same bits either way. With nb > 1, o_b = sum_j exp(s_j - m_b) v_j stays unnormalised, step 4 leaves
// P_attn[h, b] = W_o[:, head h] . o_b, and the block's max m_b and sum l_b go to `ml`; the FFN's prologue
// (lib/stage BLOCKS) weighs block b by exp(m_b - M) / L (M = max_b m_b, L = sum_b exp(m_b - M) l_b, ascending b)
// and adds the blocks in ascending order. BATCH INVARIANCE: the blocks, their order and every reduction depend on
// pos alone.
//
// ROWS_Z with O_PROJ (override; engine option attnRowsZ): the grid is (heads, Z, rows) instead of (heads, rows, Z), so
// workgroup (h, z, t) does what (h, t, z) did. Why: a chain round's pass (shaders/chain.wgsl) computes 1 + c rows of a
// grid sized for k + 1, and with rows in y the live row's workgroups sit among the returning ones at a stride of
// heads x (k + 1) in dispatch order; with rows in z they come first, together. Indexing only: the same operations.
//
// TOUCH with O_PROJ (override; engine option fuseTouch): before step 0 / 1 each invocation of step 4 loads the words of
// its first output row's W_o units (lib/touch), so step 4 finds them in the cache; loads only, no operation changes.
//
// Define WINDOW (the draft head's `head_attention`, app/gpu/head.js; not with O_PROJ): an attention window W =
// params.window > 0: position pos attends keys lo .. pos, lo = max(0, pos + 1 - W) (the numpy reference's
// `keys > pos - window`, py/exactspec/reference.py; a head's GGUF may set exactspec.head.attention.window); W = 0:
// keys 0 .. pos. Key lo + j is key j of the steps above (koff and voff start at key lo) and scores row entry j (rows
// of params.span = min(W, seq_len) floats, seq_len when W = 0). lo depends on pos and W only: still batch invariant.
//
// Define QKV as well as O_PROJ (kernels.js: the fused engine's `qkv_attn`, engine option fuseQkvAttn): for a chunk of
// ONE row (a decode pass), the layer's qkv projection runs in the same workgroup before step 1, so a layer is 2
// dispatches instead of 3. Step 0: the workgroup stages x = r_in + parts[0] + ... (lib/stage, as matmul_sg.wgsl PRO:
// workgroup (0, 0, 0) writes x to r_out), then its subgroups compute this head's q rows and its kv head's k and v rows
// (row pairs g, g + G, ...: lib/tiles' dot1, subgroupAdd, the RMSNorm scale, lib/rope: the very text matmul_sg.wgsl
// PRO runs for a 1-row tile, so the same bits) into workgroup memory; the workgroups (h, z = 0) of each kv group's
// first head also leave k and v at pos in the tail of `scores` (params.kvnew), and the layer's FFN dispatch copies
// them into the cache (ffn_sg.wgsl KVCOPY): the cache stays a read-only binding here (the H200 read a read_write
// cache much slower). Steps 1-3 read key/value pos from workgroup memory and keys 0 .. pos-1 from the cache, as
// above; they run on the first AW invocations (AW = the attention's own workgroup size: the same lanes, trees and
// slices as the 2-dispatch path), the others only join the barriers; step 4 takes OW output rows per workgroup and
// trip. Chunks of more rows (verify, prefill) run the qkv matmul and this kernel's O_PROJ variant as before: row t's
// attention needs the keys of rows t' < t, which other workgroups compute.
// BATCH INVARIANCE with QKV: q, k, v at pos are the 1-row tile's arithmetic of matmul_sg.wgsl PRO, steps 1-4 are this
// file's, so a decode pass's rows equal the same rows computed in any chunk, bit for bit (tests/gpu).
//
// Bindings:
//   0 params  uniform Params
//   1 step    uniform Step (dynamic offset: one slot per chunk)
//   2 q       array<vec4<f32>>  (max_rows, q_dim)   RoPE'd queries, q_dim = n_heads * head_dim
//   3 kv      array<vec4<f32>>  (2, seq_len, kv_dim) K then V of this layer
//   4 scores  array<f32>        read_write (max_rows, n_heads, seq_len) scratch (O_PROJ: (max_rows, n_heads, split z,
//                               seq_len); WINDOW: (max_rows, n_heads, span))
//   5 out     array<f32>        read_write (max_rows, q_dim)
//   O_PROJ instead of out: 5 w  array<u32> W_o (dim, q_dim) as stored by weights.js (type WTYPE),
//                          6 pattn array<f32> read_write (n_heads, max_rows, dim) partials
//   BLOCKS (with O_PROJ): pattn (n_heads, NB, max_rows, dim) partials (head h's block b at h * NB + b),
//                         7 ml array<f32> read_write (max_rows, n_heads, NB, 2) each block's (max, sum)
//   QKV (with O_PROJ): no q; 2 w array<u32> W_qkv ((q_dim + 2 kv_dim), dim, type WTYPE), 3 kv, 4 scores (+ its tail),
//                      5 wo W_o (type WTYPE_O), 6 pattn, 7 r_in (max_rows, dim), 8 parts (npart, max_rows, dim),
//                      9 r_out read_write (max_rows, dim), 10 gamma (attn_norm, dim), 11 rope (positions, rope_dim/2)

// #if QKV
enable subgroups;
diagnostic(off, subgroup_uniformity);

// #endif
override WG_SIZE: u32 = 64;
override HD4: u32 = 0u;  // head_dim / 4 as a pipeline constant (its loops unroll: a key's loads issue together); 0: from params
override AW: u32 = WG_SIZE;   // invocations running steps 1-3 (QKV: the attention's workgroup size; else all)
override OW: u32 = WG_SIZE;   // O_PROJ: invocations taking output rows in step 4, per workgroup and trip
// #if O_PROJ
// #if QKV
override WTYPE: u32 = 0;      // W_qkv
override WTYPE_O: u32 = 0;    // W_o
override NORM: bool = true;
override TILE: u32 = 1u;      // the 1-row tile of lib/tiles
override LANES: u32 = 32;     // MUST equal the subgroup size
override KX: u32 = 64u;       // = params.K = dim (sizes the staging array)
override NPART: u32 = 0u;     // FFN partials added to r_in (= params.npart)
override STRIDE: u32 = LANES;
const TB: u32 = 8u;
// #let LUO = load_unit_o
// #let TERMO = term_o
// #let WTO = WTYPE_O
// #else
override WTYPE: u32 = 0;
// #let LUO = load_unit
// #let TERMO = term
// #let WTO = WTYPE
// #endif
override OU: u32 = 8u;   // most 8-value units of W_o any head's slice takes (engine: max over heads of u1 - u0)
override TOUCH: bool = false;   // warm W_o's words before step 1 (lib/touch; engine option fuseTouch)
override ROWS_Z: bool = false;  // grid (heads, Z, rows) instead of (heads, rows, Z) (engine option attnRowsZ)
// #if BLOCKS
override KB: u32 = 64u;         // keys per block (engine option attnBlock)
override NB: u32 = 1u;          // blocks of the longest row: ceil(seq_len / KB); grid z = NB * Z
// #let ZI = zi
// #let ZN = zn
// #else
// #let ZI = wz
// #let ZN = nz
// #endif
// #let RAW = 1
// #endif

struct Params {
  n_heads: u32,
  n_kv_heads: u32,
  head_dim: u32,
  seq_len: u32,
  q_dim: u32,
  kv_dim: u32,
  scale: f32,      // 1 / sqrt(head_dim)
// #if O_PROJ
  dim: u32,        // rows of W_o (the model dimension)
// #if QKV
  KO: u32,         // = q_dim: columns of W_o (load_unit_o reads params.KO)
  pstride: u32,    // floats from one head's partial to the next (max_rows * dim)
  K: u32,          // = dim: columns of W_qkv (lib/tiles, lib/stage)
  rope_dim: u32,
  eps: f32,        // RMSNorm epsilon
  npart: u32,      // FFN partials added to r_in (the kernel uses the override NPART, equal to it)
  xstride: u32,    // vec4s from one FFN partial to the next (max_rows * dim / 4)
  write_r: u32,    // 1: workgroup (0, 0, 0) writes x to r_out
  kvnew: u32,      // float offset in scores of k, v at pos (2, kv_dim): the tail past the score rows
  _p0: u32, _p1: u32,
// #else
  K: u32,          // = q_dim: columns of W_o (load_unit reads params.K)
  pstride: u32,    // floats from one head's partial to the next (max_rows * dim)
  _p0: u32, _p1: u32, _p2: u32, _p3: u32, _p4: u32,
// #endif
// #else
// #if WINDOW
  window: u32,     // W: attend to the last W positions (0: all)
  span: u32,       // scores row length: min(W, seq_len), or seq_len when W == 0
  _p0: u32, _p1: u32,
// #else
  _p0: u32,
// #endif
// #endif
};

// #include step
// #if QKV
@group(0) @binding(2) var<storage, read> w: array<u32>;                  // W_qkv (q_dim + 2 kv_dim, dim)
@group(0) @binding(3) var<storage, read> kv: array<vec4<f32>>;           // (2, seq_len, kv_dim) K then V (read only)
@group(0) @binding(4) var<storage, read_write> scores: array<f32>;
@group(0) @binding(5) var<storage, read> wo: array<u32>;                 // W_o (dim, q_dim)
@group(0) @binding(6) var<storage, read_write> pattn: array<f32>;
@group(0) @binding(7) var<storage, read> r_in: array<vec4<f32>>;         // (max_rows, dim) residual
@group(0) @binding(8) var<storage, read> parts: array<vec4<f32>>;        // (npart, max_rows, dim) P_ffn
@group(0) @binding(9) var<storage, read_write> r_out: array<vec4<f32>>;  // (max_rows, dim) the other residual
@group(0) @binding(10) var<storage, read> gamma: array<vec4<f32>>;       // (dim) attn_norm
@group(0) @binding(11) var<storage, read> rope: array<vec2<f32>>;        // (positions, rope_dim / 2) cos, sin
// #else
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> kv: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> scores: array<f32>;
// #if O_PROJ
@group(0) @binding(5) var<storage, read> w: array<u32>;
@group(0) @binding(6) var<storage, read_write> pattn: array<f32>;
// #if BLOCKS
@group(0) @binding(7) var<storage, read_write> ml: array<f32>;           // (max_rows, n_heads, NB, 2) block max, sum
// #endif
// #else
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
// #endif
// #endif

var<workgroup> red: array<f32, AW>;
var<workgroup> qs: array<vec4<f32>, 64>;   // head_dim <= 256
var<workgroup> part: array<vec4<f32>, AW>;        // (S, head_dim/4) slice sums
// #if O_PROJ
var<workgroup> oh: array<vec4<f32>, 64>;          // (head_dim) this head's attention output
// #endif
// #if QKV
var<workgroup> xs: array<vec4<f32>, KX / 4u>;     // (dim) the row's x (lib/stage, lib/tiles)
var<workgroup> qkvf: array<f32, 768>;             // (3, head_dim) q, k, v at pos as the pairs finish
var<workgroup> kq: array<vec4<f32>, 64>;          // (head_dim) k at pos
var<workgroup> vq: array<vec4<f32>, 64>;          // (head_dim) v at pos

// key / value vec4 `at` of the cache, or of the row's own k / v (workgroup memory) when j is pos. The cache is read
// whatever j (at pos it holds an older value, discarded), so that a key's loads still issue together, unguarded.
fn key4(j: u32, at: u32, i: u32, cur: u32) -> vec4<f32> {
  let c = kv[at];
  return select(c, kq[i], j == cur);
}
fn val4(j: u32, at: u32, d4: u32, cur: u32) -> vec4<f32> {
  let c = kv[at];
  return select(c, vq[d4], j == cur);
}
// #else
fn key4(j: u32, at: u32, i: u32, cur: u32) -> vec4<f32> { return kv[at]; }
fn val4(j: u32, at: u32, d4: u32, cur: u32) -> vec4<f32> { return kv[at]; }
// #endif

@compute @workgroup_size(WG_SIZE)
// #if QKV
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {
// #else
// #if O_PROJ
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
// #else
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
// #endif
// #endif
  let h = wid.x;
// #if O_PROJ
  let t = select(wid.y, wid.z, ROWS_Z);     // the chunk row
  let wz = select(wid.z, wid.y, ROWS_Z);    // the head's workgroup z: O-projection split (BLOCKS: x key block)
  let nz = select(nwg.z, nwg.y, ROWS_Z);    // the head's workgroups
// #else
  let t = wid.y;
// #endif
  if (t >= step.n) { return; }              // uniform per workgroup
  let pos = step.start_pos + t;
// #if WINDOW
  var lo = 0u;                                            // the window's first key
  if (params.window > 0u && pos + 1u > params.window) { lo = pos + 1u - params.window; }
  let nkeys = pos + 1u - lo;
// #else
// #if BLOCKS
  let zn = nz / NB;                         // O-projection splits a block (Z)
  let blk = wz / zn;                        // key block: keys j0 .. j0 + nkeys - 1
  let zi = wz % zn;
  if (blk * KB > pos) { return; }           // uniform per workgroup
  let nb = pos / KB + 1u;                   // the row's blocks
  let j0 = blk * KB;
  let nkeys = min(pos + 1u, j0 + KB) - j0;
// #else
  let nkeys = pos + 1u;
// #endif
// #endif
  let hd4 = select(params.head_dim / 4u, HD4, HD4 > 0u);
  let kvh = h / (params.n_heads / params.n_kv_heads);
  let kv4 = params.kv_dim / 4u;
// #if WINDOW
  let koff = lo * kv4 + kvh * hd4;                        // key lo + j of this kv head at j * kv4 + koff
  let voff = (params.seq_len + lo) * kv4 + kvh * hd4;     // its value, in the V section
  let sbase = (t * params.n_heads + h) * params.span;     // scores row (key lo + j at j)
// #else
// #if BLOCKS
  let koff = j0 * kv4 + kvh * hd4;                        // key j0 + j of this kv head at j * kv4 + koff
  let voff = (params.seq_len + j0) * kv4 + kvh * hd4;     // its value, in the V section
  let sbase = ((t * params.n_heads + h) * nz + wz) * KB;       // scores row (key j0 + j at j)
// #else
  let koff = kvh * hd4;                                   // vec4 offset of this kv head within a key row
  let voff = params.seq_len * kv4 + kvh * hd4;            // V section
// #if O_PROJ
  let sbase = ((t * params.n_heads + h) * nz + wz) * params.seq_len;  // scores row (one per split z)
// #else
  let sbase = (t * params.n_heads + h) * params.seq_len;  // scores row
// #endif
// #endif
// #endif
// #if O_PROJ
  // step 4's units: those of the blocks touching the head
  let c0 = h * params.head_dim;                 // first column of the head
  let c1 = c0 + params.head_dim;
  var u0 = c0 / 8u;
  var u1 = c1 / 8u;
  if (${WTO} == 2u || ${WTO} == 3u || ${WTO} == 8u) {   // W_o's quant blocks of 32: whole blocks
    u0 = (c0 / 32u) * 4u;
    u1 = ((c1 + 31u) / 32u) * 4u;
  }
  // TOUCH (lib/touch): the words of step 4's first output row (its first 16 units), loaded now, before step 0 / 1
  var to: array<vec4<u32>, 16>;
  if (TOUCH && lid < OW) {
    let r = min(${ZI} * OW + lid, params.dim - 1u);
    for (var k = 0u; k < min(OU, 16u); k = k + 1u) {
      to[k] = ${LUO}_raw(r, min(u0 + k, u1 - 1u));
    }
  }
// #endif

// #if QKV
  // 0. x = r_in + P_ffn[0] + ... (workgroup (0, 0, 0) writes it to r_out); q of head h, k and v of kv head kvh at pos:
  //    row pairs p = g, g + G, ... of [q_h | k_kvh | v_kvh], each matmul_sg.wgsl PRO's 1-row tile (dot1 over xs, the
  //    subgroup's sums, the RMSNorm scale) and lib/rope, into qkvf; then as vec4s into qs, kq, vq, and k, v into the
  //    tail of scores
  let G = WG_SIZE / LANES;
  let lane = sid;
  let g = (lid - sid) / LANES;
  stage(0u, 1u, lid, params.write_r == 1u && h == 0u && wz == 0u);
  workgroupBarrier();
  let hp = 2u * hd4;                        // row pairs per head (a constant with HD4: the pair loop unrolls)
  for (var k = 0u; k < (3u * hp + G - 1u) / G; k = k + 1u) {
    let pi = g + k * G;
    let have = pi < 3u * hp;
    let pc = min(pi, 3u * hp - 1u);                        // a subgroup past the end computes a valid pair, stores nothing
    let e = 2u * (pc % hp);                                // the pair's first dim within its head
    var r0 = h * params.head_dim + e;                                                          // q
    if (pc >= 2u * hp) { r0 = params.q_dim + params.kv_dim + kvh * params.head_dim + e; }      // v
    else if (pc >= hp) { r0 = params.q_dim + kvh * params.head_dim + e; }                      // k
    var y: Oct;
    y = dot1(r0, true, 0u, 1u, lane);
// #include sg_sums
    ss = subgroupAdd(y.ss);
// #include sg_norm
    if (lane == 0u && have) {
      let v = rope_pair(pick(s0, s0b, 0u), pick(s1, s1b, 0u), r0, pos);
      let f = (pc / hp) * params.head_dim + e;
      qkvf[f] = v.x;
      qkvf[f + 1u] = v.y;
    }
  }
  workgroupBarrier();
  for (var i = lid; i < hd4; i = i + WG_SIZE) {
    qs[i] = vec4<f32>(qkvf[4u * i], qkvf[4u * i + 1u], qkvf[4u * i + 2u], qkvf[4u * i + 3u]);
    let kb4 = params.head_dim + 4u * i;
    kq[i] = vec4<f32>(qkvf[kb4], qkvf[kb4 + 1u], qkvf[kb4 + 2u], qkvf[kb4 + 3u]);
    let vb4 = 2u * params.head_dim + 4u * i;
    vq[i] = vec4<f32>(qkvf[vb4], qkvf[vb4 + 1u], qkvf[vb4 + 2u], qkvf[vb4 + 3u]);
    if (h % (params.n_heads / params.n_kv_heads) == 0u && wz == 0u) {   // one workgroup per kv head leaves k, v
      for (var c = 0u; c < 4u; c = c + 1u) {   // at pos in the scores buffer's tail; ffn_sg.wgsl KVCOPY copies them
        scores[params.kvnew + kvh * params.head_dim + 4u * i + c] = kq[i][c];
        scores[params.kvnew + params.kv_dim + kvh * params.head_dim + 4u * i + c] = vq[i][c];
      }
    }
  }
  workgroupBarrier();
// #else
  for (var i = lid; i < hd4; i = i + WG_SIZE) {
    qs[i] = q[t * (params.q_dim / 4u) + h * hd4 + i];
  }
  workgroupBarrier();
// #endif
// #if O_PROJ
  if (TOUCH && step.n > 0xFFFFu) {   // never (lib/touch): what keeps the warming loads, here: no longer than the
    var s = 0u;                      // prologue holds their registers
    for (var k = 0u; k < 16u; k = k + 1u) { s = s ^ kept(to[k]); }
    pattn[lid] = bitcast<f32>(s);
  }
// #endif

  // 1. scores and per-lane max; a lane's first two scores also stay in registers (r0, r1) for step 2
  var m = -3.4e38;
  var r0 = 0.0;
  var r1 = 0.0;
  let al = lid < AW;                        // a lane of steps 1-3 (QKV: the others only join the barriers)
  for (var j = lid; al && j < nkeys; j = j + AW) {
    // four independent partial dots (head_dim % 16 == 0) combined in a fixed order
    let kb = j * kv4 + koff;
    var s4 = vec4<f32>(0.0);
    for (var i = 0u; i < hd4; i = i + 4u) {
      s4 = s4 + vec4<f32>(dot(qs[i], key4(j, kb + i, i, pos)), dot(qs[i + 1u], key4(j, kb + i + 1u, i + 1u, pos)),
                          dot(qs[i + 2u], key4(j, kb + i + 2u, i + 2u, pos)), dot(qs[i + 3u], key4(j, kb + i + 3u, i + 3u, pos)));
    }
    let s = ((s4.x + s4.y) + (s4.z + s4.w)) * params.scale;
    scores[sbase + j] = s;
    if (j == lid) { r0 = s; } else if (j == lid + AW) { r1 = s; }
    m = max(m, s);
  }
  if (al) { red[lid] = m; }
  workgroupBarrier();
  for (var s = AW / 2u; s > 0u; s = s / 2u) {
    if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
    workgroupBarrier();
  }
  let mx = red[0];
  workgroupBarrier();

  // 2. exponentials and their sum
  var l = 0.0;
  for (var j = lid; al && j < nkeys; j = j + AW) {
    var sv = r0;                               // the same value as in scores: read back only past two keys a lane
    if (j == lid + AW) { sv = r1; } else if (j != lid) { sv = scores[sbase + j]; }
    let e = exp(sv - mx);
    scores[sbase + j] = e;
    l = l + e;
  }
  if (al) { red[lid] = l; }
  storageBarrier();
  workgroupBarrier();
  for (var s = AW / 2u; s > 0u; s = s / 2u) {
    if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
    workgroupBarrier();
  }
  let inv = 1.0 / red[0];
// #if BLOCKS
  if (nb > 1u && zi == 0u && lid == 0u) {   // the block's max and sum, for the FFN's prologue
    let mb = ((t * params.n_heads + h) * NB + blk) * 2u;
    ml[mb] = mx;
    ml[mb + 1u] = red[0];
  }
// #endif

  // 3. weighted sum of values: S key slices x head_dim/4 vec4 lanes, slices combined in order
  let S = AW / hd4;
  let d4 = lid % hd4;
  let sl = lid / hd4;
  var acc = vec4<f32>(0.0);
  if (sl < S) {
    // keys sl, sl + S, ... in groups of four with independent accumulators (loads in flight), then the tail;
    // first two groups a trip, all sixteen loads before the adds (the same adds in the same order as two trips)
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    var j = sl;
    for (; j + 7u * S < nkeys; j = j + 8u * S) {
      let s0 = scores[sbase + j];
      let s1 = scores[sbase + j + S];
      let s2 = scores[sbase + j + 2u * S];
      let s3 = scores[sbase + j + 3u * S];
      let s4 = scores[sbase + j + 4u * S];
      let s5 = scores[sbase + j + 5u * S];
      let s6 = scores[sbase + j + 6u * S];
      let s7 = scores[sbase + j + 7u * S];
      let v0 = val4(j, voff + j * kv4 + d4, d4, pos);
      let v1 = val4((j + S), voff + (j + S) * kv4 + d4, d4, pos);
      let v2 = val4((j + 2u * S), voff + (j + 2u * S) * kv4 + d4, d4, pos);
      let v3 = val4((j + 3u * S), voff + (j + 3u * S) * kv4 + d4, d4, pos);
      let v4 = val4((j + 4u * S), voff + (j + 4u * S) * kv4 + d4, d4, pos);
      let v5 = val4((j + 5u * S), voff + (j + 5u * S) * kv4 + d4, d4, pos);
      let v6 = val4((j + 6u * S), voff + (j + 6u * S) * kv4 + d4, d4, pos);
      let v7 = val4((j + 7u * S), voff + (j + 7u * S) * kv4 + d4, d4, pos);
      acc = acc + s0 * v0;
      a1 = a1 + s1 * v1;
      a2 = a2 + s2 * v2;
      a3 = a3 + s3 * v3;
      acc = acc + s4 * v4;
      a1 = a1 + s5 * v5;
      a2 = a2 + s6 * v6;
      a3 = a3 + s7 * v7;
    }
    for (; j + 3u * S < nkeys; j = j + 4u * S) {
      acc = acc + scores[sbase + j] * val4(j, voff + j * kv4 + d4, d4, pos);
      a1 = a1 + scores[sbase + j + S] * val4((j + S), voff + (j + S) * kv4 + d4, d4, pos);
      a2 = a2 + scores[sbase + j + 2u * S] * val4((j + 2u * S), voff + (j + 2u * S) * kv4 + d4, d4, pos);
      a3 = a3 + scores[sbase + j + 3u * S] * val4((j + 3u * S), voff + (j + 3u * S) * kv4 + d4, d4, pos);
    }
    for (; j < nkeys; j = j + S) {
      acc = acc + scores[sbase + j] * val4(j, voff + j * kv4 + d4, d4, pos);
    }
    acc = (acc + a1) + (a2 + a3);
  }
  if (al) { part[lid] = acc; }
  workgroupBarrier();
  if (sl == 0u) {
    var o = part[d4];
    for (var k = 1u; k < S; k = k + 1u) {
      o = o + part[k * hd4 + d4];
    }
// #if BLOCKS
    if (nb == 1u) { o = o * inv; }           // more blocks: unnormalised (the FFN's prologue weighs them)
// #else
    o = o * inv;
// #endif
// #if O_PROJ
    oh[d4] = o;
// #else
    let ob = t * params.q_dim + h * params.head_dim + 4u * d4;
    out[ob] = o.x;
    out[ob + 1u] = o.y;
    out[ob + 2u] = o.z;
    out[ob + 3u] = o.w;
// #endif
  }
// #if O_PROJ
  workgroupBarrier();

  // 4. this head's O-projection slice: rows r = z * OW + lid, + OW * Z, ..., units u0 .. u1 (above)
  let h4 = c0 / 4u;
// #if BLOCKS
  let pb = (h * NB + blk) * params.pstride + t * params.dim;   // P_attn[h, blk]
// #else
  let pb = h * params.pstride + t * params.dim;
// #endif
  for (var r = ${ZI} * OW + lid; lid < OW && r < params.dim; r = r + OW * ${ZN}) {
    var acc = 0.0;
    for (var k = 0u; k < OU; k = k + 1u) {   // constant trip count: loads can all be in flight
      let u = min(u0 + k, u1 - 1u);
      let p = ${LUO}(r, u);
      if (u0 + k < u1) {
        acc = acc + ${TERMO}(p, ohv(p.i0, h4, hd4), ohv(p.i1, h4, hd4));
      }
    }
    pattn[pb + r] = acc;
  }
}

// vec4 i (of a q_dim row) of this head's output; zeros outside the head (columns of another head in a shared block)
fn ohv(i: u32, h4: u32, hd4: u32) -> vec4<f32> {
  if (i >= h4 && i < h4 + hd4) { return oh[i - h4]; }
  return vec4<f32>(0.0);
}

// #include quant
// #include term
// #if !QKV
// #include touch PAIR=0
// #endif
// #if QKV
// #include load_unit FN=load_unit_o W=wo WT=WTYPE_O KP=KO
// #include term FN=term_o WT=WTYPE_O
// #include tiles X=xs
// #include stage PS=xstride
// #include rope
// #include touch
// #endif
// #else
}
// #endif
