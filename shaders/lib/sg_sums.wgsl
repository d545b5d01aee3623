// lib/sg_sums — a tile's subgroup sums (matmul_sg.wgsl): s0, s1 = the pair's dot products for slots 0..3 (s0b, s1b:
// slots 4..7 when TILE is 8) summed over the subgroup's lanes; ss, ssb start at zero (the RMSNorm statistic, summed
// by the kernel where it needs it). y: the lane's Oct (lib/tiles).

var s0 = subgroupAdd(y.y0);
var s1 = subgroupAdd(y.y1);
var s0b = vec4<f32>(0.0);
var s1b = vec4<f32>(0.0);
var ss = vec4<f32>(0.0);
var ssb = vec4<f32>(0.0);
if (TILE == 8u) {
  s0b = subgroupAdd(y.y0b);
  s1b = subgroupAdd(y.y1b);
}
