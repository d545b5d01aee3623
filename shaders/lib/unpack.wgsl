// lib/unpack — the bit unpacking of the stored weight formats (app/gpu/weights.js lays them out): 4-bit quants
// (the low and the high nibbles of a word of 8), signed 8-bit quants, bfloat16 pairs. Exact conversions to f32.

fn nib_lo(q: u32) -> vec4<f32> {
  return vec4<f32>(f32(q & 15u), f32((q >> 8u) & 15u), f32((q >> 16u) & 15u), f32((q >> 24u) & 15u));
}
fn nib_hi(q: u32) -> vec4<f32> {
  return vec4<f32>(f32((q >> 4u) & 15u), f32((q >> 12u) & 15u), f32((q >> 20u) & 15u), f32(q >> 28u));
}
fn i8x4(q: u32) -> vec4<f32> {
  let v = vec4<i32>(bitcast<i32>(q << 24u), bitcast<i32>(q << 16u), bitcast<i32>(q << 8u), bitcast<i32>(q)) >> vec4<u32>(24u);
  return vec4<f32>(v);
}
fn bf2(q: u32) -> vec2<f32> {
  return vec2<f32>(bitcast<f32>(q << 16u), bitcast<f32>(q & 0xffff0000u));
}
