// lib/tile_slots — unit J's adds for every slot I of a dotS routine (lib/tile_dot): the slot's two x vec4s, times
// gamma when NORM (gx), one term per weight row, and the sum of squares of the raw x for the RMSNorm statistic.
// #param J
// #for I in 0..S
    let v${J}${I}0 = ${X}[${ROW[I]} * K4 + p${J}.i0];
    let v${J}${I}1 = ${X}[${ROW[I]} * K4 + p${J}.i1];
    let g${J}${I}0 = gx(v${J}${I}0, p${J}.i0);
    let g${J}${I}1 = gx(v${J}${I}1, p${J}.i1);
    ${A[I]}.${C[I]} = ${A[I]}.${C[I]} + term(p${J}, g${J}${I}0, g${J}${I}1);
    ${B[I]}.${C[I]} = ${B[I]}.${C[I]} + term(q${J}, g${J}${I}0, g${J}${I}1);
    if (NORM) { ${Q[I]}.${C[I]} = ${Q[I]}.${C[I]} + (dot(v${J}${I}0, v${J}${I}0) + dot(v${J}${I}1, v${J}${I}1)); }
// #end
