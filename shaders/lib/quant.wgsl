// lib/quant — a weight row read as stored, one 8-value unit at a time: struct Unit, the unpacking helpers and
// load_unit(r, u) for the binding `w` of type WTYPE with params.K columns (lib/load_unit; a kernel with a second
// weight matrix includes load_unit again under other names). The formats (override WTYPE, ggml ids): 0 F32, 1 F16,
// 30 BF16, 3 Q4_1 (blocks as stored: f16 d, f16 m, 16 B), 2 Q4_0 and 8 Q8_0 (blocks as stored, the f16 scale padded
// to 4 bytes so the block is word aligned: Q4_0 20 B = d, pad, qs[16]; Q8_0 36 B = d, pad, qs[32]). Values are
// never dequantised in the buffer: lib/term takes a unit's contribution to a dot product.

struct Unit {
  w0: vec4<f32>,   // weights (or raw quants) for x vec4 i0
  w1: vec4<f32>,   // for x vec4 i1
  i0: u32,         // vec4 index within an x row
  i1: u32,
  scale: f32,      // value = scale * q + bias (quantised types)
  bias: f32,
};

// #include unpack
// #include load_unit
