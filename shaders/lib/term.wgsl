// lib/term — FN(p, x0, x1): one unit's contribution to a row's dot product, for weights of type WT (lib/quant):
// the same expression on every path and in every slot of every kernel, which is what keeps rows bitwise equal
// whatever kernel, tile or slot computes them. Q4: scale * (q . x) + bias * sum(x), one rounding order.
// #param FN = term
// #param WT = WTYPE

fn ${FN}(p: Unit, x0: vec4<f32>, x1: vec4<f32>) -> f32 {
  if (${WT} == 0u || ${WT} == 1u || ${WT} == 30u) {
    return dot(p.w0, x0) + dot(p.w1, x1);
  } else if (${WT} == 8u) {
    return p.scale * (dot(p.w0, x0) + dot(p.w1, x1));
  }
  let sx = dot(x0 + x1, vec4<f32>(1.0));
  return p.scale * (dot(p.w0, x0) + dot(p.w1, x1)) + p.bias * sx;
}
