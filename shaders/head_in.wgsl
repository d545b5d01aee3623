// head_in — the draft head's input rows (py/exactspec/drafters/head.py: HeadModel._features_in and _pass): for chunk
// row t at absolute position pos = start_pos + t, the feature f_{pos-1} is
//   zeros                                   pos == 0
//   the champion's kept feature              pos - 1 < step.src_len (the champion holds that position at this pass)
//     feat[pos - 1]                          (its final hidden state: app/gpu/model.js option features)
//   the head's own predicted feature         otherwise (kept by position in a ring: ring[(pos - 1) % ring_rows],
//     ring[(pos - 1) % ring_rows]            written by head_out.wgsl; app/gpu/head.js checks the ring holds it)
// and the row written is [rmsnorm(f) * feat_norm | rmsnorm(e_t) * emb_norm] (2 * dim): the input of the head's fc
// (one matmul over the two halves), e_t the token's embedding row (embed.wgsl's output).
// rmsnorm(v) = v * rsqrt(sum(v^2) / dim + eps) (zeros stay zeros).
//
// Work split: grid (rows, 2): workgroup (t, half) normalises one half of chunk row t (half 0: the feature, 1: the
// embedding). Invocation l sums v[i]^2 over vec4s i = l, l + WG_SIZE, ... in ascending order; a fixed binary tree
// over the invocations (WG_SIZE a power of two) gives the row's sum; each invocation then writes its vec4s.
// BATCH INVARIANCE: a row's arithmetic depends only on the row (its values, the fixed order), never on the chunk,
// and the feature source only on the absolute position and src_len (which the decode loop's rule fixes).
//
// Bindings:
//   0 params     uniform Params
//   1 step       uniform Step (dynamic offset: the chunk's slot; src_len: the champion's length at this pass)
//   2 feat       array<vec4<f32>>  (champion seq_len, dim) the champion's kept features
//   3 ring       array<vec4<f32>>  (ring_rows, dim) the head's predicted features by position % ring_rows
//   4 emb        array<vec4<f32>>  (max_rows, dim) the chunk's token embedding rows
//   5 feat_norm  array<vec4<f32>>  (dim) head.feat_norm.weight
//   6 emb_norm   array<vec4<f32>>  (dim) head.emb_norm.weight
//   7 out        array<vec4<f32>>  read_write (max_rows, 2 * dim) the fc's input rows
// Includes: lib/head_params (WG_SIZE, Params, lib/step with src_len: bindings 0-1; shared with head_out.wgsl),
// lib/wg_rms (the workgroup's tree sum and the rmsnorm scale).

// #include head_params
@group(0) @binding(2) var<storage, read> feat: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> ring: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> emb: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> feat_norm: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> emb_norm: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read_write> out: array<vec4<f32>>;

var<workgroup> red: array<f32, WG_SIZE>;

// vec4 i of the half `half` of chunk row t, before the norm
fn value(t: u32, half: u32, i: u32) -> vec4<f32> {
  let K4 = params.dim / 4u;
  if (half == 1u) { return emb[t * K4 + i]; }
  let pos = step.start_pos + t;
  if (pos == 0u) { return vec4<f32>(0.0); }
  let p = pos - 1u;
  if (p < step.src_len) { return feat[p * K4 + i]; }
  return ring[(p % params.ring_rows) * K4 + i];
}

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let t = wid.x;
  let half = wid.y;
  if (t >= step.n) { return; }              // uniform per workgroup
  let K4 = params.dim / 4u;
  var ss = 0.0;
  for (var i = lid; i < K4; i = i + WG_SIZE) {
    let v = value(t, half, i);
    ss = ss + dot(v, v);
  }
// #include wg_rms
  let ob = t * 2u * K4 + half * K4;
  for (var i = lid; i < K4; i = i + WG_SIZE) {
    var g = emb_norm[i];
    if (half == 0u) { g = feat_norm[i]; }
    out[ob + i] = (value(t, half, i) * scale) * g;
  }
}
