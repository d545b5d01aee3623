// attention — causal GQA attention of a chunk of new positions over this layer's KV cache (which already holds
// the chunk's own keys/values, written by matmul MODE 3).
//
// Work split: one workgroup per (head h = wid.x, chunk row t = wid.y); pos = start_pos + t attends keys 0..pos.
//   1. lane l scores keys j = l, l + WG_SIZE, ... (dot over head_dim in ascending vec4 order), keeps its max (and its
//      first two scores in registers);
//   2. fixed binary tree max over lanes; lane l exponentiates its keys and sums them in ascending j; fixed tree sum;
//   3. the workgroup splits into S = WG_SIZE / (head_dim/4) key slices; invocation (s, d4) sums p_j * v[j, 4*d4..]
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
// invocation l of workgroup z computes output rows r = z * WG_SIZE + l, + WG_SIZE * nwg.z, ... of the partial (z > 1:
// more workgroups share the O projection), each a dot over the head's columns in ascending 8-value units (lib/quant,
// lib/term: W_o is stored (dim, q_dim) with its 32-value quant blocks along q_dim). When head_dim is not a multiple
// of 32 a Q4 block holds two heads' columns (its 8-value units interleave the block's halves): the units of every
// block touching the head are taken and the other head's inputs are exact zeros, which adds exactly nothing. W_o's
// slice is read by the n_rows workgroups of a head (from L2). BATCH INVARIANCE: each partial element is one fixed
// sequence of adds in ascending unit order, whatever chunk the row is in.
//
// Define WINDOW (the draft head's `head_attention`, app/gpu/head.js; not with O_PROJ): an attention window W =
// params.window > 0: position pos attends keys lo .. pos, lo = max(0, pos + 1 - W) (the numpy reference's
// `keys > pos - window`, py/exactspec/reference.py; a head's GGUF may set exactspec.head.attention.window); W = 0:
// keys 0 .. pos. Key lo + j is key j of the steps above (koff and voff start at key lo) and scores row entry j (rows
// of params.span = min(W, seq_len) floats, seq_len when W = 0). lo depends on pos and W only: still batch invariant.
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

override WG_SIZE: u32 = 64;
override HD4: u32 = 0u;  // head_dim / 4 as a pipeline constant (its loops unroll: a key's loads issue together); 0: from params
// #if O_PROJ
override WTYPE: u32 = 0;
override OU: u32 = 8u;   // most 8-value units of W_o any head's slice takes (engine: max over heads of u1 - u0)
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
  K: u32,          // = q_dim: columns of W_o (load_unit reads params.K)
  pstride: u32,    // floats from one head's partial to the next (max_rows * dim)
  _p0: u32, _p1: u32, _p2: u32, _p3: u32, _p4: u32,
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
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> kv: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> scores: array<f32>;
// #if O_PROJ
@group(0) @binding(5) var<storage, read> w: array<u32>;
@group(0) @binding(6) var<storage, read_write> pattn: array<f32>;
// #else
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
// #endif

var<workgroup> red: array<f32, WG_SIZE>;
var<workgroup> qs: array<vec4<f32>, 64>;   // head_dim <= 256
var<workgroup> part: array<vec4<f32>, WG_SIZE>;   // (S, head_dim/4) slice sums
// #if O_PROJ
var<workgroup> oh: array<vec4<f32>, 64>;          // (head_dim) this head's attention output
// #endif

@compute @workgroup_size(WG_SIZE)
// #if O_PROJ
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
// #else
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
// #endif
  let h = wid.x;
  let t = wid.y;
  if (t >= step.n) { return; }              // uniform per workgroup
  let pos = step.start_pos + t;
// #if WINDOW
  var lo = 0u;                                            // the window's first key
  if (params.window > 0u && pos + 1u > params.window) { lo = pos + 1u - params.window; }
  let nkeys = pos + 1u - lo;
// #else
  let nkeys = pos + 1u;
// #endif
  let hd4 = select(params.head_dim / 4u, HD4, HD4 > 0u);
  let kvh = h / (params.n_heads / params.n_kv_heads);
  let kv4 = params.kv_dim / 4u;
// #if WINDOW
  let koff = lo * kv4 + kvh * hd4;                        // key lo + j of this kv head at j * kv4 + koff
  let voff = (params.seq_len + lo) * kv4 + kvh * hd4;     // its value, in the V section
  let sbase = (t * params.n_heads + h) * params.span;     // scores row (key lo + j at j)
// #else
  let koff = kvh * hd4;                                   // vec4 offset of this kv head within a key row
  let voff = params.seq_len * kv4 + kvh * hd4;            // V section
// #if O_PROJ
  let sbase = ((t * params.n_heads + h) * nwg.z + wid.z) * params.seq_len;  // scores row (one per split z)
// #else
  let sbase = (t * params.n_heads + h) * params.seq_len;  // scores row
// #endif
// #endif

  for (var i = lid; i < hd4; i = i + WG_SIZE) {
    qs[i] = q[t * (params.q_dim / 4u) + h * hd4 + i];
  }
  workgroupBarrier();

  // 1. scores and per-lane max; a lane's first two scores also stay in registers (r0, r1) for step 2
  var m = -3.4e38;
  var r0 = 0.0;
  var r1 = 0.0;
  for (var j = lid; j < nkeys; j = j + WG_SIZE) {
    // four independent partial dots (head_dim % 16 == 0) combined in a fixed order
    let kb = j * kv4 + koff;
    var s4 = vec4<f32>(0.0);
    for (var i = 0u; i < hd4; i = i + 4u) {
      s4 = s4 + vec4<f32>(dot(qs[i], kv[kb + i]), dot(qs[i + 1u], kv[kb + i + 1u]),
                          dot(qs[i + 2u], kv[kb + i + 2u]), dot(qs[i + 3u], kv[kb + i + 3u]));
    }
    let s = ((s4.x + s4.y) + (s4.z + s4.w)) * params.scale;
    scores[sbase + j] = s;
    if (j == lid) { r0 = s; } else if (j == lid + WG_SIZE) { r1 = s; }
    m = max(m, s);
  }
  red[lid] = m;
  workgroupBarrier();
  for (var s = WG_SIZE / 2u; s > 0u; s = s / 2u) {
    if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
    workgroupBarrier();
  }
  let mx = red[0];
  workgroupBarrier();

  // 2. exponentials and their sum
  var l = 0.0;
  for (var j = lid; j < nkeys; j = j + WG_SIZE) {
    var sv = r0;                               // the same value as in scores: read back only past two keys a lane
    if (j == lid + WG_SIZE) { sv = r1; } else if (j != lid) { sv = scores[sbase + j]; }
    let e = exp(sv - mx);
    scores[sbase + j] = e;
    l = l + e;
  }
  red[lid] = l;
  storageBarrier();
  workgroupBarrier();
  for (var s = WG_SIZE / 2u; s > 0u; s = s / 2u) {
    if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
    workgroupBarrier();
  }
  let inv = 1.0 / red[0];

  // 3. weighted sum of values: S key slices x head_dim/4 vec4 lanes, slices combined in order
  let S = WG_SIZE / hd4;
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
      let v0 = kv[voff + j * kv4 + d4];
      let v1 = kv[voff + (j + S) * kv4 + d4];
      let v2 = kv[voff + (j + 2u * S) * kv4 + d4];
      let v3 = kv[voff + (j + 3u * S) * kv4 + d4];
      let v4 = kv[voff + (j + 4u * S) * kv4 + d4];
      let v5 = kv[voff + (j + 5u * S) * kv4 + d4];
      let v6 = kv[voff + (j + 6u * S) * kv4 + d4];
      let v7 = kv[voff + (j + 7u * S) * kv4 + d4];
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
      acc = acc + scores[sbase + j] * kv[voff + j * kv4 + d4];
      a1 = a1 + scores[sbase + j + S] * kv[voff + (j + S) * kv4 + d4];
      a2 = a2 + scores[sbase + j + 2u * S] * kv[voff + (j + 2u * S) * kv4 + d4];
      a3 = a3 + scores[sbase + j + 3u * S] * kv[voff + (j + 3u * S) * kv4 + d4];
    }
    for (; j < nkeys; j = j + S) {
      acc = acc + scores[sbase + j] * kv[voff + j * kv4 + d4];
    }
    acc = (acc + a1) + (a2 + a3);
  }
  part[lid] = acc;
  workgroupBarrier();
  if (sl == 0u) {
    var o = part[d4];
    for (var k = 1u; k < S; k = k + 1u) {
      o = o + part[k * hd4 + d4];
    }
    o = o * inv;
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

  // 4. this head's O-projection slice: rows r = lid, lid + WG_SIZE, ..., units of the blocks touching the head
  let c0 = h * params.head_dim;                 // first column of the head
  let c1 = c0 + params.head_dim;
  var u0 = c0 / 8u;
  var u1 = c1 / 8u;
  if (WTYPE == 2u || WTYPE == 3u || WTYPE == 8u) {   // quant blocks of 32: whole blocks
    u0 = (c0 / 32u) * 4u;
    u1 = ((c1 + 31u) / 32u) * 4u;
  }
  let h4 = c0 / 4u;
  let pb = h * params.pstride + t * params.dim;
  for (var r = wid.z * WG_SIZE + lid; r < params.dim; r = r + WG_SIZE * nwg.z) {
    var acc = 0.0;
    for (var k = 0u; k < OU; k = k + 1u) {   // constant trip count: loads can all be in flight
      let u = min(u0 + k, u1 - 1u);
      let p = load_unit(r, u);
      if (u0 + k < u1) {
        acc = acc + term(p, ohv(p.i0, h4, hd4), ohv(p.i1, h4, hd4));
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
// #else
}
// #endif
