// embed — token embedding gather: out[t, :] = E[tokens[tok0 + t], :] for the rows of a chunk, dequantising only
// the gathered rows from the weights as stored (the formats and unit layout of lib/quant).
//
// Work split: one workgroup per chunk row t (wid.x); lane l writes 8-value units u = l, l + WG_SIZE, ... of the row.
// The embedding may be split into parts (rows row0 .. row0+N) when it exceeds the binding limit: each part's
// dispatch writes only the rows whose token falls inside it.
//
// Bindings:
//   0 params  uniform Params
//   1 step    uniform Step (dynamic offset: one slot per chunk)
//   2 w       array<u32>        (N, K) embedding rows of this part, layout per WTYPE
//   3 tokens  array<u32>        (n) token ids of the whole forward
//   4 out     array<vec4<f32>>  read_write (max_rows, K) residual stream

override WG_SIZE: u32 = 64;
override WTYPE: u32 = 0;

struct Params {
  K: u32,      // dim
  N: u32,      // rows in this part
  row0: u32,   // first token id of this part
  _p0: u32,
};

// #include step
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read> tokens: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;

// #include unpack

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let t = wid.x;
  if (t >= step.n) { return; }
  let tok = tokens[step.tok0 + t];
  if (tok < params.row0 || tok >= params.row0 + params.N) { return; }
  let r = tok - params.row0;
  let K = params.K;
  let ob = t * (K / 4u);
  for (var u = lid; u < K / 8u; u = u + WG_SIZE) {
    if (WTYPE == 0u) {
      let b = r * K + 8u * u;
      out[ob + 2u * u] = vec4<f32>(bitcast<f32>(w[b]), bitcast<f32>(w[b + 1u]), bitcast<f32>(w[b + 2u]), bitcast<f32>(w[b + 3u]));
      out[ob + 2u * u + 1u] = vec4<f32>(bitcast<f32>(w[b + 4u]), bitcast<f32>(w[b + 5u]), bitcast<f32>(w[b + 6u]), bitcast<f32>(w[b + 7u]));
    } else if (WTYPE == 1u) {
      let b = r * (K / 2u) + 4u * u;
      out[ob + 2u * u] = vec4<f32>(unpack2x16float(w[b]), unpack2x16float(w[b + 1u]));
      out[ob + 2u * u + 1u] = vec4<f32>(unpack2x16float(w[b + 2u]), unpack2x16float(w[b + 3u]));
    } else if (WTYPE == 30u) {
      let b = r * (K / 2u) + 4u * u;
      out[ob + 2u * u] = vec4<f32>(bf2(w[b]), bf2(w[b + 1u]));
      out[ob + 2u * u + 1u] = vec4<f32>(bf2(w[b + 2u]), bf2(w[b + 3u]));
    } else if (WTYPE == 8u) {
      let blk = u / 4u;
      let sub = u % 4u;
      let b = (r * (K / 32u) + blk) * 9u;
      let d = unpack2x16float(w[b]).x;
      out[ob + blk * 8u + 2u * sub] = d * i8x4(w[b + 1u + 2u * sub]);
      out[ob + blk * 8u + 2u * sub + 1u] = d * i8x4(w[b + 2u + 2u * sub]);
    } else {
      let blk = u / 4u;
      let sub = u % 4u;
      let b = (r * (K / 32u) + blk) * 5u;
      let dm = unpack2x16float(w[b]);
      let q = w[b + 1u + sub];
      if (WTYPE == 3u) {
        out[ob + blk * 8u + sub] = dm.x * nib_lo(q) + dm.y;
        out[ob + blk * 8u + 4u + sub] = dm.x * nib_hi(q) + dm.y;
      } else {
        out[ob + blk * 8u + sub] = dm.x * (nib_lo(q) - 8.0);
        out[ob + blk * 8u + 4u + sub] = dm.x * (nib_hi(q) - 8.0);
      }
    }
  }
}
