// lib/rope — rope_pair(y0, y1, r, pos): the finished pair of rows r, r + 1 of a [q | k | v] projection at absolute
// position pos, with RoPE applied where r is a q or k row within the first rope_dim dims of its head (GGUF's
// interleaved-pair order: a pair is one rotation): (y0 cos - y1 sin, y0 sin + y1 cos), cos/sin from the table `rope`;
// v rows and dims past rope_dim unchanged. One text for every kernel that finishes q/k rows (lib/epilogue MODE 3,
// attention.wgsl QKV), so a position's q and k have the same bits whichever computes them.
// Needs params.q_dim, kv_dim, head_dim, rope_dim and the binding rope (array<vec2<f32>>: (positions, rope_dim / 2)).

fn rope_pair(y0: f32, y1: f32, r: u32, pos: u32) -> vec2<f32> {
  var v0 = y0;
  var v1 = y1;
  let qk = params.q_dim + params.kv_dim;
  if (r < qk) {
    var dd = r % params.head_dim;
    if (r >= params.q_dim) { dd = (r - params.q_dim) % params.head_dim; }
    if (dd < params.rope_dim) {
      let cs = rope[pos * (params.rope_dim / 2u) + dd / 2u];
      v0 = y0 * cs.x - y1 * cs.y;
      v1 = y0 * cs.y + y1 * cs.x;
    }
  }
  return vec2<f32>(v0, v1);
}
