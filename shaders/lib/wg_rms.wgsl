// lib/wg_rms — a row's RMSNorm scale when a whole workgroup holds the row (head_in.wgsl, head_out.wgsl): each
// invocation's partial sum of squares ss, summed by a fixed binary tree over the invocations in the workgroup array
// red (WG_SIZE a power of two, every invocation takes part), gives
//   scale = rsqrt(sum / params.dim + params.eps)
// the same sequence of adds whatever the chunk, for every invocation. Needs: var<workgroup> red: array<f32, WG_SIZE>,
// the invocation's lid and ss, params.dim, params.eps; defines scale.

  red[lid] = ss;
  workgroupBarrier();
  for (var s = WG_SIZE / 2u; s > 0u; s = s / 2u) {
    if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
    workgroupBarrier();
  }
  let scale = inverseSqrt(red[0] / f32(params.dim) + params.eps);
