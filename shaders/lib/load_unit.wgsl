// lib/load_unit — FN(r, u): unit u (8 consecutive-in-storage values) of weight row r of the binding W (type WT,
// params.KP columns), decoded into a Unit (lib/quant). Q4 units are one word of qs: the block's elements
// 4*sub .. 4*sub+3 and 16+4*sub .. (so i0, i1 are not adjacent); the other types' units are 8 adjacent values.
// #param FN = load_unit
// #param W = w
// #param WT = WTYPE
// #param KP = K

fn ${FN}(r: u32, u: u32) -> Unit {
  var o: Unit;
  let K = params.${KP};
  o.scale = 1.0;
  o.bias = 0.0;
  if (${WT} == 0u) {          // F32: 8 floats
    let b = r * K + 8u * u;
    o.w0 = vec4<f32>(bitcast<f32>(${W}[b]), bitcast<f32>(${W}[b + 1u]), bitcast<f32>(${W}[b + 2u]), bitcast<f32>(${W}[b + 3u]));
    o.w1 = vec4<f32>(bitcast<f32>(${W}[b + 4u]), bitcast<f32>(${W}[b + 5u]), bitcast<f32>(${W}[b + 6u]), bitcast<f32>(${W}[b + 7u]));
    o.i0 = 2u * u;
    o.i1 = 2u * u + 1u;
  } else if (${WT} == 1u) {   // F16: 4 words of 2 halves
    let b = r * (K / 2u) + 4u * u;
    o.w0 = vec4<f32>(unpack2x16float(${W}[b]), unpack2x16float(${W}[b + 1u]));
    o.w1 = vec4<f32>(unpack2x16float(${W}[b + 2u]), unpack2x16float(${W}[b + 3u]));
    o.i0 = 2u * u;
    o.i1 = 2u * u + 1u;
  } else if (${WT} == 30u) {  // BF16
    let b = r * (K / 2u) + 4u * u;
    o.w0 = vec4<f32>(bf2(${W}[b]), bf2(${W}[b + 1u]));
    o.w1 = vec4<f32>(bf2(${W}[b + 2u]), bf2(${W}[b + 3u]));
    o.i0 = 2u * u;
    o.i1 = 2u * u + 1u;
  } else if (${WT} == 8u) {   // Q8_0 padded: 9 words per block, unit = 2 words = elements 8*sub .. 8*sub+7
    let blk = u / 4u;
    let sub = u % 4u;
    let b = (r * (K / 32u) + blk) * 9u;
    o.scale = unpack2x16float(${W}[b]).x;
    o.w0 = i8x4(${W}[b + 1u + 2u * sub]);
    o.w1 = i8x4(${W}[b + 2u + 2u * sub]);
    o.i0 = blk * 8u + 2u * sub;
    o.i1 = blk * 8u + 2u * sub + 1u;
  } else {                    // Q4_0 padded / Q4_1: 5 words per block, unit = 1 word of qs
    let blk = u / 4u;
    let sub = u % 4u;
    let b = (r * (K / 32u) + blk) * 5u;
    let dm = unpack2x16float(${W}[b]);
    let q = ${W}[b + 1u + sub];
    o.w0 = nib_lo(q);           // elements 4*sub .. 4*sub+3
    o.w1 = nib_hi(q);           // elements 16+4*sub ..
    o.i0 = blk * 8u + sub;
    o.i1 = blk * 8u + 4u + sub;
    o.scale = dm.x;
    if (${WT} == 3u) { o.bias = dm.y; } else { o.bias = -8.0 * dm.x; }
  }
  return o;
}
// #if RAW
// ${FN}_raw(r, u) (with RAW set by the kernel, for lib/touch): the words ${FN}(r, u) reads, as stored and undecoded:
// one word of each 32-byte sector the unit lies in (F32: 8 words, F16 / BF16: 4; Q8_0: the scale word and the unit's
// two; Q4: the scale word and the unit's one). Loading them early warms the cache for ${FN}; nothing is computed.
fn ${FN}_raw(r: u32, u: u32) -> vec4<u32> {
  let K = params.${KP};
  if (${WT} == 0u) {
    return vec4<u32>(${W}[r * K + 8u * u], 0u, 0u, 0u);
  } else if (${WT} == 1u || ${WT} == 30u) {
    return vec4<u32>(${W}[r * (K / 2u) + 4u * u], 0u, 0u, 0u);
  } else if (${WT} == 8u) {
    let b = (r * (K / 32u) + u / 4u) * 9u;
    return vec4<u32>(${W}[b], ${W}[b + 1u + 2u * (u % 4u)], ${W}[b + 2u + 2u * (u % 4u)], 0u);
  }
  let b = (r * (K / 32u) + u / 4u) * 5u;
  return vec4<u32>(${W}[b], ${W}[b + 1u + u % 4u], 0u, 0u);
}
// #endif
