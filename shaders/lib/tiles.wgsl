// lib/tiles — the matmul family's row tiles: dot1, dot4, dot8 (lib/tile_dot, from ONE template) give a weight-row
// pair's partial dot products with S = 1, 4 or 8 chunk rows t .. t+S-1 at once (each weight unit read and decoded
// once for the S rows), and with NORM each row's partial sum of squares from the same x loads. Lane l takes the
// 8-value units u = l, l + STRIDE, ... (K/8 units per row; consecutive lanes read consecutive weight words and x
// vec4s, so loads coalesce); every slot adds its terms in ascending u, R units per loop trip with all loads first
// (R only changes how many loads are in flight, never the order of the adds). Slots past the last row (n < S)
// repeat the last row and are discarded. EVERY SLOT OF EVERY VARIANT RUNS THE SAME CODE (loads, gx, term, one add
// per unit in ascending u), so a row's bits do not depend on its slot, on S, or on how many rows the dispatch has.
// Needs: load_unit, term (lib/quant, lib/term), overrides NORM and STRIDE, binding gamma, params.K, and the
// activations X (a binding, or a workgroup array holding the tile's rows: xs). lib/tile_call picks the routine.
// #param X = x

struct Oct {
  y0: vec4<f32>,   // row r0 against chunk rows t .. t+3 (slots 0..3)
  y0b: vec4<f32>,  // row r0 against chunk rows t+4 .. t+7 (slots 4..7)
  y1: vec4<f32>,   // row r0 + 1, slots 0..3
  y1b: vec4<f32>,  // row r0 + 1, slots 4..7
  ss: vec4<f32>,   // NORM: sum of x^2 over this lane's units, slots 0..3 (the RMSNorm statistic, same pass)
  ssb: vec4<f32>,  // slots 4..7
};

// x * gamma (the RMSNorm weight) when NORM; the row's scale rsqrt(mean(x^2) + eps) is applied to the finished sum.
fn gx(v: vec4<f32>, i: u32) -> vec4<f32> {
  if (NORM) { return v * gamma[i]; }
  return v;
}

// #include tile_dot S=1 R=4
// #include tile_dot S=4 R=2
// #include tile_dot S=8 R=2

fn pick(v: vec4<f32>, vb: vec4<f32>, i: u32) -> f32 {   // slot i of an oct (0..3 in v, 4..7 in vb)
  if (i < 4u) { return v[i]; }
  return vb[i - 4u];
}
