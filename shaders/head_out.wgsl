// head_out — the draft head's output feature and its LM head input (py/exactspec/drafters/head.py: f_q is kept by
// position, the logits are E_out . rmsnorm(f_q, w_out_norm)): for chunk row t at position pos = start_pos + t,
//   ring[pos % ring_rows] = x[t]                                  the predicted feature f_pos (the next pass may
//                                                                 read it: head_in.wgsl)
//   xn[t] = x[t] * rsqrt(sum(x[t]^2) / dim + eps) * out_norm      only rows t >= step.out_lo (those with logits)
// x: the residual after the head's one decoder layer; out_norm: the champion's output norm (shared, not copied).
//
// Work split: one workgroup per chunk row (wid.x = t). Invocation l sums x^2 over vec4s i = l, l + WG_SIZE, ...
// ascending, then a fixed binary tree over the invocations (WG_SIZE a power of two); each writes its vec4s.
// BATCH INVARIANCE: a row's arithmetic depends only on the row.
//
// Bindings:
//   0 params    uniform Params
//   1 step      uniform Step (dynamic offset: the chunk's slot)
//   2 x         array<vec4<f32>>  (max_rows, dim) the residual after the layer
//   3 out_norm  array<vec4<f32>>  (dim) output_norm.weight of the champion
//   4 ring      array<vec4<f32>>  read_write (ring_rows, dim) predicted features by position % ring_rows
//   5 xn        array<vec4<f32>>  read_write (max_rows, dim) the LM head's input rows
// Includes: lib/head_params (WG_SIZE, Params, lib/step with src_len: bindings 0-1; shared with head_in.wgsl),
// lib/wg_rms (the workgroup's tree sum and the rmsnorm scale).

// #include head_params
@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> out_norm: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> ring: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> xn: array<vec4<f32>>;

var<workgroup> red: array<f32, WG_SIZE>;

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let t = wid.x;
  if (t >= step.n) { return; }              // uniform per workgroup
  let K4 = params.dim / 4u;
  let rb = ((step.start_pos + t) % params.ring_rows) * K4;
  var ss = 0.0;
  for (var i = lid; i < K4; i = i + WG_SIZE) {
    let v = x[t * K4 + i];
    ring[rb + i] = v;
    ss = ss + dot(v, v);
  }
  if (t < step.out_lo) { return; }          // uniform per workgroup: no logits from this row
// #include wg_rms
  for (var i = lid; i < K4; i = i + WG_SIZE) {
    xn[t * K4 + i] = (x[t * K4 + i] * scale) * out_norm[i];
  }
}
