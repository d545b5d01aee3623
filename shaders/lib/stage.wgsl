// lib/stage — the fused engine's prologue: stage(t, n4, lid, writer) puts chunk rows t .. t+n4-1 of
// x = r_in + parts[0] + ... + parts[NPART-1] (in that fixed order: every workgroup and dispatch shape adds the same
// sequence) into the workgroup array xs (TILE, K); the writer (workgroup 0 where params.write_r) also stores them to
// r_out, the other residual buffer. Every invocation sums whole vec4s: elements lid, lid + WG_SIZE, ...
// Needs: bindings r_in, parts, r_out, workgroup array xs, params.K and params.PS (vec4s from one partial to the next;
// PS = pstride unless the includer names another field), overrides NPART, WG_SIZE.
//
// With define BLOCKS (ffn_sg.wgsl under engine option attnBlock: the attention's keys in blocks of KB, attention.wgsl
// BLOCKS): partial p is head p's attention, in blocks b = 0 .. NB-1 at parts index p * NB + b; a row at pos has
// nb = pos / KB + 1 of them. stage_weights(t, n4, lid) (a tile with a row past position KB - 1 only: the caller's
// uniform test) copies the tile's (max, sum) pairs from `ml` (as attention.wgsl left them) into the workgroup array
// cw (TILE, NPART, NB, 2), then for the rows with nb > 1 replaces each block's max m_b by its weight
// c_b = exp(m_b - M) / L (M = max_b m_b, L = sum_b exp(m_b - M) l_b, ascending b); stage then adds for each head p,
// in order, a_p = c_0 P[p, 0] + c_1 P[p, 1] + ... (ascending b), or P[p, 0] itself when nb = 1 (the loop without
// blocks): then x is exactly the sum above. Needs as well: binding ml, the step uniform, workgroup array cw, overrides
// KB, NB.
// #param PS = pstride

// #if BLOCKS
fn stage_weights(t: u32, n4: u32, lid: u32) {
  let w = NPART * NB * 2u;   // floats of one row's (max, sum) pairs
  for (var i = lid; i < n4 * w; i = i + WG_SIZE) { cw[i] = ml[t * w + i]; }   // independent loads, all rows
  workgroupBarrier();
  for (var i = lid; i < n4 * NPART; i = i + WG_SIZE) {   // (row, head) i / NPART, i % NPART
    let nb = (step.start_pos + t + i / NPART) / KB + 1u;
    if (nb > 1u) {
      let c = i * NB * 2u;   // the pair of block 0 in cw
      var m = cw[c];
      for (var b = 1u; b < nb; b = b + 1u) { m = max(m, cw[c + 2u * b]); }
      var l = 0.0;
      for (var b = 0u; b < nb; b = b + 1u) {
        let e = exp(cw[c + 2u * b] - m);
        cw[c + 2u * b] = e;                                  // m_b -> exp(m_b - M)
        l = l + e * cw[c + 2u * b + 1u];
      }
      let inv = 1.0 / l;
      for (var b = 0u; b < nb; b = b + 1u) { cw[c + 2u * b] = cw[c + 2u * b] * inv; }   // -> c_b
    }
  }
}

fn stage(t: u32, n4: u32, lid: u32, writer: bool) {
  let K4 = params.K / 4u;
  for (var i = lid; i < n4 * K4; i = i + WG_SIZE) {
    let g = t * K4 + i;   // row t + i / K4, vec4 i % K4
    let nb = (step.start_pos + t + i / K4) / KB + 1u;
    var v = r_in[g];
    if (nb == 1u) {
      for (var p = 0u; p < NPART; p = p + 1u) {   // a constant trip count: the loads can all be in flight
        v = v + parts[p * NB * params.${PS} + g];
      }
    } else {
      for (var p = 0u; p < NPART; p = p + 1u) {
        let c = ((i / K4) * NPART + p) * NB * 2u;   // block b's weight at cw[c + 2b]
        var a = parts[p * NB * params.${PS} + g] * cw[c];
        for (var b = 1u; b < NB; b = b + 1u) {   // a constant trip count (blocks past the row's: clamped loads, not added)
          let x = parts[(p * NB + min(b, nb - 1u)) * params.${PS} + g];
          if (b < nb) { a = a + x * cw[c + 2u * b]; }
        }
        v = v + a;
      }
    }
    xs[i] = v;
    if (writer) { r_out[g] = v; }
  }
}
// #else
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
// #endif
