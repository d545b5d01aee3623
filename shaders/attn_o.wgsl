// attn_o — attention.wgsl followed, in the same workgroup, by this head's slice of the O projection (fused engine,
// `fuse` option of engine.js): for one (head h, chunk row t), o_h = softmax(q_h . K^T) . V (head_dim values, kept in
// workgroup memory), then the split-K partial
//     P_attn[h][t, r] = sum_{d < head_dim} W_o[r, h * head_dim + d] * o_h[d]      (r = 0 .. dim-1)
// The consumer (matmul_sg_pro.wgsl / ffn_sg.wgsl) adds r + P_attn[0] + ... + P_attn[n_heads-1] in that fixed order.
//
// Work split: one workgroup per (h = wid.x, t = wid.y, z = wid.z). Steps 1-3 are attention.wgsl's, unchanged (see
// there), except that the head's output goes to workgroup memory `oh` instead of the attention buffer (with a grid
// z > 1, engine option attnSplit, each z workgroup computes them, into its own scores row). Step 4: invocation l of
// workgroup z computes output rows r = z * WG_SIZE + l, + WG_SIZE * nwg.z, ... of the partial (z > 1: more
// workgroups share the O projection), each a dot over the head's columns in ascending
// 8-value units (matmul_sg.wgsl's load_unit/term: W_o is stored (dim, q_dim) with its 32-value quant blocks along
// q_dim). When head_dim is not a multiple of 32 a Q4 block holds two heads' columns (its 8-value units interleave
// the block's halves): the units of every block touching the head are taken and the other head's inputs are
// exact zeros, which adds exactly nothing. W_o's slice is read by the n_rows workgroups of a head (from L2).
// BATCH INVARIANCE: attention as in attention.wgsl; each partial element is one fixed sequence of adds in
// ascending unit order, whatever chunk the row is in.
//
// Bindings:
//   0 params  uniform Params
//   1 step    uniform Step (dynamic offset: one slot per chunk)
//   2 q       array<vec4<f32>>  (max_rows, q_dim)   RoPE'd queries, q_dim = n_heads * head_dim
//   3 kv      array<vec4<f32>>  (2, seq_len, kv_dim) K then V of this layer
//   4 scores  array<f32>        read_write (max_rows, n_heads, split z, seq_len) scratch
//   5 w       array<u32>        W_o (dim, q_dim) as stored by weights.js (type WTYPE)
//   6 pattn   array<f32>        read_write (n_heads, max_rows, dim) partials

override WG_SIZE: u32 = 64;
override WTYPE: u32 = 0;
override OU: u32 = 8u;   // most 8-value units of W_o any head's slice takes (engine: max over heads of u1 - u0)

struct Params {
  n_heads: u32,
  n_kv_heads: u32,
  head_dim: u32,
  seq_len: u32,
  q_dim: u32,
  kv_dim: u32,
  scale: f32,      // 1 / sqrt(head_dim)
  dim: u32,        // rows of W_o (the model dimension)
  K: u32,          // = q_dim: columns of W_o (load_unit reads params.K)
  pstride: u32,    // floats from one head's partial to the next (max_rows * dim)
  _p0: u32, _p1: u32, _p2: u32, _p3: u32, _p4: u32,
};

struct Step {
  n: u32,
  start_pos: u32,
  out_lo: u32,
  out_base: u32,
  tok0: u32,
  _p0: u32, _p1: u32, _p2: u32,
};

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> kv: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> scores: array<f32>;
@group(0) @binding(5) var<storage, read> w: array<u32>;
@group(0) @binding(6) var<storage, read_write> pattn: array<f32>;

var<workgroup> red: array<f32, WG_SIZE>;
var<workgroup> qs: array<vec4<f32>, 64>;   // head_dim <= 256
var<workgroup> part: array<vec4<f32>, WG_SIZE>;   // (S, head_dim/4) slice sums
var<workgroup> oh: array<vec4<f32>, 64>;          // (head_dim) this head's attention output

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let h = wid.x;
  let t = wid.y;
  if (t >= step.n) { return; }              // uniform per workgroup
  let pos = step.start_pos + t;
  let nkeys = pos + 1u;
  let hd4 = params.head_dim / 4u;
  let kvh = h / (params.n_heads / params.n_kv_heads);
  let kv4 = params.kv_dim / 4u;
  let koff = kvh * hd4;                                   // vec4 offset of this kv head within a key row
  let voff = params.seq_len * kv4 + kvh * hd4;            // V section
  let sbase = ((t * params.n_heads + h) * nwg.z + wid.z) * params.seq_len;  // scores row (one per split z)

  for (var i = lid; i < hd4; i = i + WG_SIZE) {
    qs[i] = q[t * (params.q_dim / 4u) + h * hd4 + i];
  }
  workgroupBarrier();

  // 1. scores and per-lane max
  var m = -3.4e38;
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
    let e = exp(scores[sbase + j] - mx);
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
    // keys sl, sl + S, ... in groups of four with independent accumulators (loads in flight), then the tail
    var a1 = vec4<f32>(0.0);
    var a2 = vec4<f32>(0.0);
    var a3 = vec4<f32>(0.0);
    var j = sl;
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
    oh[d4] = o;
  }
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


struct Unit {
  w0: vec4<f32>,   // weights (or raw quants) for x vec4 i0
  w1: vec4<f32>,   // for x vec4 i1
  i0: u32,         // vec4 index within an x row
  i1: u32,
  scale: f32,      // value = scale * q + bias (quantised types)
  bias: f32,
};

fn nib_lo(q: u32) -> vec4<f32> {
  return vec4<f32>(f32(q & 15u), f32((q >> 8u) & 15u), f32((q >> 16u) & 15u), f32((q >> 24u) & 15u));
}
fn nib_hi(q: u32) -> vec4<f32> {
  return vec4<f32>(f32((q >> 4u) & 15u), f32((q >> 12u) & 15u), f32((q >> 20u) & 15u), f32(q >> 28u));
}
fn i8x4(q: u32) -> vec4<f32> {
  let v = vec4<i32>(bitcast<i32>(q << 24u), bitcast<i32>(q << 16u), bitcast<i32>(q << 8u), bitcast<i32>(q)) >> vec4<u32>(24u);
  return vec4<f32>(v);
}
fn bf2(q: u32) -> vec2<f32> {
  return vec2<f32>(bitcast<f32>(q << 16u), bitcast<f32>(q & 0xffff0000u));
}

// Unit u (8 consecutive-in-storage values) of weight row r.
fn load_unit(r: u32, u: u32) -> Unit {
  var o: Unit;
  let K = params.K;
  o.scale = 1.0;
  o.bias = 0.0;
  if (WTYPE == 0u) {          // F32: 8 floats
    let b = r * K + 8u * u;
    o.w0 = vec4<f32>(bitcast<f32>(w[b]), bitcast<f32>(w[b + 1u]), bitcast<f32>(w[b + 2u]), bitcast<f32>(w[b + 3u]));
    o.w1 = vec4<f32>(bitcast<f32>(w[b + 4u]), bitcast<f32>(w[b + 5u]), bitcast<f32>(w[b + 6u]), bitcast<f32>(w[b + 7u]));
    o.i0 = 2u * u;
    o.i1 = 2u * u + 1u;
  } else if (WTYPE == 1u) {   // F16: 4 words of 2 halves
    let b = r * (K / 2u) + 4u * u;
    o.w0 = vec4<f32>(unpack2x16float(w[b]), unpack2x16float(w[b + 1u]));
    o.w1 = vec4<f32>(unpack2x16float(w[b + 2u]), unpack2x16float(w[b + 3u]));
    o.i0 = 2u * u;
    o.i1 = 2u * u + 1u;
  } else if (WTYPE == 30u) {  // BF16
    let b = r * (K / 2u) + 4u * u;
    o.w0 = vec4<f32>(bf2(w[b]), bf2(w[b + 1u]));
    o.w1 = vec4<f32>(bf2(w[b + 2u]), bf2(w[b + 3u]));
    o.i0 = 2u * u;
    o.i1 = 2u * u + 1u;
  } else if (WTYPE == 8u) {   // Q8_0 padded: 9 words per block, unit = 2 words = elements 8*sub .. 8*sub+7
    let blk = u / 4u;
    let sub = u % 4u;
    let b = (r * (K / 32u) + blk) * 9u;
    o.scale = unpack2x16float(w[b]).x;
    o.w0 = i8x4(w[b + 1u + 2u * sub]);
    o.w1 = i8x4(w[b + 2u + 2u * sub]);
    o.i0 = blk * 8u + 2u * sub;
    o.i1 = blk * 8u + 2u * sub + 1u;
  } else {                    // Q4_0 padded / Q4_1: 5 words per block, unit = 1 word of qs
    let blk = u / 4u;
    let sub = u % 4u;
    let b = (r * (K / 32u) + blk) * 5u;
    let dm = unpack2x16float(w[b]);
    let q = w[b + 1u + sub];
    o.w0 = nib_lo(q);           // elements 4*sub .. 4*sub+3
    o.w1 = nib_hi(q);           // elements 16+4*sub ..
    o.i0 = blk * 8u + sub;
    o.i1 = blk * 8u + 4u + sub;
    o.scale = dm.x;
    if (WTYPE == 3u) { o.bias = dm.y; } else { o.bias = -8.0 * dm.x; }
  }
  return o;
}


// One unit's contribution to a row's dot product (the same expression on every path and in every slot).
fn term(p: Unit, x0: vec4<f32>, x1: vec4<f32>) -> f32 {
  if (WTYPE == 0u || WTYPE == 1u || WTYPE == 30u) {
    return dot(p.w0, x0) + dot(p.w1, x1);
  } else if (WTYPE == 8u) {
    return p.scale * (dot(p.w0, x0) + dot(p.w1, x1));
  }
  let sx = dot(x0 + x1, vec4<f32>(1.0));
  return p.scale * (dot(p.w0, x0) + dot(p.w1, x1)) + p.bias * sx;
}
