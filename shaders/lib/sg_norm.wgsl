// lib/sg_norm — the rows' RMSNorm scales rsqrt(mean(x^2) + eps) from the sums of squares ss (slots 0..3) and ssb
// (4..7) of the same pass, applied to the finished sums s0, s1 (s0b, s1b) of a tile (matmul_sg.wgsl, ffn_sg.wgsl).

let sc = inverseSqrt(ss / f32(params.K) + params.eps);
s0 = s0 * sc;
s1 = s1 * sc;
if (TILE == 8u) {
  let scb = inverseSqrt(ssb / f32(params.K) + params.eps);
  s0b = s0b * scb;
  s1b = s1b * scb;
}
