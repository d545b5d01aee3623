// head_attention — the draft head's causal GQA attention (shaders/attention.wgsl with an attention window): the
// chunk's new positions over the head's KV cache (which already holds the chunk's own keys/values, written by
// matmul MODE 3). With window W > 0, position pos attends keys lo .. pos, lo = max(0, pos + 1 - W) (the numpy
// reference's `keys > pos - window`, py/exactspec/reference.py); W = 0: keys 0 .. pos. Used by app/gpu/head.js only
// (a head's GGUF may set exactspec.head.attention.window), so the champion's kernel stays as it is.
//
// Work split: one workgroup per (head h = wid.x, chunk row t = wid.y); with n = pos + 1 - lo keys, key lo + j is
// scored by lane j % WG_SIZE:
//   1. lane l scores keys lo + j, j = l, l + WG_SIZE, ... (dot over head_dim in ascending vec4 order), keeps its max;
//   2. fixed binary tree max over lanes; lane l exponentiates its keys and sums them in ascending j; fixed tree sum;
//   3. the workgroup splits into S = WG_SIZE / (head_dim/4) key slices; invocation (s, d4) sums p_j * v[lo + j, 4*d4..]
//      over j = s, s + S, ... ascending; the S slice sums are added in slice order by invocation (0, d4).
// BATCH INVARIANCE: every reduction is over keys lo .. pos in an order fixed by pos alone (lo depends on pos and W
// only), so a row's result is the same whatever chunk it is computed in.
//
// Bindings:
//   0 params  uniform Params
//   1 step    uniform Step (dynamic offset: one slot per chunk)
//   2 q       array<vec4<f32>>  (max_rows, q_dim)   RoPE'd queries, q_dim = n_heads * head_dim
//   3 kv      array<vec4<f32>>  (2, seq_len, kv_dim) K then V of the head's layer
//   4 scores  array<f32>        read_write (max_rows, n_heads, span) scratch, span = min(W, seq_len) (W = 0: seq_len)
//   5 out     array<f32>        read_write (max_rows, q_dim)

override WG_SIZE: u32 = 64;

struct Params {
  n_heads: u32,
  n_kv_heads: u32,
  head_dim: u32,
  seq_len: u32,
  q_dim: u32,
  kv_dim: u32,
  scale: f32,      // 1 / sqrt(head_dim)
  window: u32,     // W: attend to the last W positions (0: all)
  span: u32,       // scores row length: min(W, seq_len), or seq_len when W == 0
  _p0: u32, _p1: u32,
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
@group(0) @binding(5) var<storage, read_write> out: array<f32>;

var<workgroup> red: array<f32, WG_SIZE>;
var<workgroup> qs: array<vec4<f32>, 64>;   // head_dim <= 256
var<workgroup> part: array<vec4<f32>, WG_SIZE>;   // (S, head_dim/4) slice sums

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let h = wid.x;
  let t = wid.y;
  if (t >= step.n) { return; }              // uniform per workgroup
  let pos = step.start_pos + t;
  var lo = 0u;
  if (params.window > 0u && pos + 1u > params.window) { lo = pos + 1u - params.window; }
  let nkeys = pos + 1u - lo;
  let hd4 = params.head_dim / 4u;
  let kvh = h / (params.n_heads / params.n_kv_heads);
  let kv4 = params.kv_dim / 4u;
  let koff = kvh * hd4;                                   // vec4 offset of this kv head within a key row
  let voff = params.seq_len * kv4 + kvh * hd4;            // V section
  let sbase = (t * params.n_heads + h) * params.span;     // scores row (key lo + j at j)

  for (var i = lid; i < hd4; i = i + WG_SIZE) {
    qs[i] = q[t * (params.q_dim / 4u) + h * hd4 + i];
  }
  workgroupBarrier();

  // 1. scores and per-lane max
  var m = -3.4e38;
  for (var j = lid; j < nkeys; j = j + WG_SIZE) {
    // four independent partial dots (head_dim % 16 == 0) combined in a fixed order
    let kb = (lo + j) * kv4 + koff;
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
      acc = acc + scores[sbase + j] * kv[voff + (lo + j) * kv4 + d4];
      a1 = a1 + scores[sbase + j + S] * kv[voff + (lo + j + S) * kv4 + d4];
      a2 = a2 + scores[sbase + j + 2u * S] * kv[voff + (lo + j + 2u * S) * kv4 + d4];
      a3 = a3 + scores[sbase + j + 3u * S] * kv[voff + (lo + j + 3u * S) * kv4 + d4];
    }
    for (; j < nkeys; j = j + S) {
      acc = acc + scores[sbase + j] * kv[voff + (lo + j) * kv4 + d4];
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
    let ob = t * params.q_dim + h * params.head_dim + 4u * d4;
    out[ob] = o.x;
    out[ob + 1u] = o.y;
    out[ob + 2u] = o.z;
    out[ob + 3u] = o.w;
  }
}
