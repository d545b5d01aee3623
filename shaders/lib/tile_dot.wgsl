// lib/tile_dot — the template of dot1 / dot4 / dot8 (lib/tiles): dotS over S slots (chunk rows t + min(i, n - 1)),
// R units per loop trip. Unit j's loads are p_j (row r0) and q_j (row r0 + 1, = p_j when there is none); then, unit by
// unit in ascending order, every slot's adds (lib/tile_slots). The tail takes the last 1 .. R-1 units with their
// loads clamped in range and only the adds of the units that exist.
// #param S
// #param R
// Slot i's chunk row, and where its sums go: row r0 in A[i].C[i], row r0 + 1 in B[i].C[i], NORM's x^2 in Q[i].C[i].
// #let ROW = t t1 t2 t3 t4 t5 t6 t7
// #let A = a a a a ab ab ab ab
// #let B = b b b b bb bb bb bb
// #let Q = s s s s sb sb sb sb
// #let C = x y z w x y z w

fn dot${S}(r0: u32, have1: bool, t: u32, n: u32, lane: u32) -> Oct {
  var a = vec4<f32>(0.0);
  var ab = vec4<f32>(0.0);
  var b = vec4<f32>(0.0);
  var bb = vec4<f32>(0.0);
  var s = vec4<f32>(0.0);
  var sb = vec4<f32>(0.0);
// #for I in 1..S
  let t${I} = t + min(${I}u, n - 1u);
// #end
  let K4 = params.K / 4u;
  let U = params.K / 8u;
  var u = lane;
  for (; u + ${R-1}u * STRIDE < U; u = u + ${R}u * STRIDE) {   // R units per trip: loads first, adds in unit order
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
// #for J in 1..R
    let p${J} = load_unit(r0, u + ${J}u * STRIDE);
    var q${J} = p${J};
    if (have1) { q${J} = load_unit(r0 + 1u, u + ${J}u * STRIDE); }
// #end
// #for J in 0..R
// #include tile_slots
// #end
  }
  if (u < U) {   // the last 1 .. R-1 units: loads (clamped in range) first, then the adds of the units that exist
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
// #for J in 1..R-1
    let p${J} = load_unit(r0, min(u + ${J}u * STRIDE, U - 1u));
    var q${J} = p${J};
    if (have1) { q${J} = load_unit(r0 + 1u, min(u + ${J}u * STRIDE, U - 1u)); }
// #end
// #include tile_slots J=0
// #for J in 1..R-1
    if (u + ${J}u * STRIDE < U) {
// #include tile_slots
    }
// #end
  }
  return Oct(a, ab, b, bb, s, sb);
}
