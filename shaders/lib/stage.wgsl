// lib/stage — the fused engine's prologue: stage(t, n4, lid, writer) puts chunk rows t .. t+n4-1 of
// x = r_in + parts[0] + ... + parts[NPART-1] (in that fixed order: every workgroup and dispatch shape adds the same
// sequence) into the workgroup array xs (TILE, K); the writer (workgroup 0 where params.write_r) also stores them to
// r_out, the other residual buffer. Every invocation sums whole vec4s: elements lid, lid + WG_SIZE, ...
// Needs: bindings r_in, parts, r_out, workgroup array xs, params.K and params.PS (vec4s from one partial to the next;
// PS = pstride unless the includer names another field), overrides NPART, WG_SIZE.
// #param PS = pstride

fn stage(t: u32, n4: u32, lid: u32, writer: bool) {
  let K4 = params.K / 4u;
  for (var i = lid; i < n4 * K4; i = i + WG_SIZE) {
    let g = t * K4 + i;   // row t + i / K4, vec4 i % K4
    var v = r_in[g];
    for (var p = 0u; p < NPART; p = p + 1u) {   // a constant trip count: the loads can all be in flight
      v = v + parts[p * params.${PS} + g];
    }
    xs[i] = v;
    if (writer) { r_out[g] = v; }
  }
}
