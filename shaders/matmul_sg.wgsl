// matmul_sg — matmul.wgsl's GPU path with subgroup reductions instead of workgroup-memory trees: no barriers.
// Used where the adapter offers `subgroups` with one fixed subgroup size S (NVIDIA: 32); LANES = S.
// Same weight formats, modes, bindings, epilogues and per-unit arithmetic as matmul.wgsl (see there).
//
// Work split: one subgroup owns one row PAIR; a workgroup holds WG_SIZE/LANES subgroups. Per tile of four chunk
// rows (quad_dot, identical to matmul.wgsl), lane l accumulates the 32-value blocks l, l+LANES, ...; the lane
// partials are summed with subgroupAdd. The fused RMSNorm scale of a row is computed by each subgroup on its own
// (lanes stride over K, subgroupAdd). BATCH INVARIANCE: a row's arithmetic (its lanes, their order, the subgroup
// reduction) never depends on how many rows the chunk has or where it starts.
//
// Bindings: as matmul.wgsl (0 params, 1 step (dynamic offset), 2 w, 3 x, 4 gamma, 5 rope, 6 out rw, 7 kv rw).

enable subgroups;
diagnostic(off, subgroup_uniformity);

override WG_SIZE: u32 = 64;
override WTYPE: u32 = 0;
override MODE: u32 = 0;
override NORM: bool = false;
override TILE: u32 = 4u;   // GPU paths: chunk rows per weight decode: 1 (dot1), 4 (dot4) or 8 (dot8)

override LANES: u32 = 32;   // MUST equal the subgroup size (all subgroups full, aligned in local_invocation_index)
const TB: u32 = 8u;

struct Params {
  K: u32,           // in features (multiple of 32)
  N: u32,           // weight rows in this part
  row0: u32,        // global row of this part's first row (even)
  out_stride: u32,  // floats per output row
  window: u32,      // 1: only chunk rows step.out_lo.. written to out rows step.out_base..
  q_dim: u32,
  kv_dim: u32,
  head_dim: u32,
  rope_dim: u32,
  seq_len: u32,
  n_groups: u32,    // number of row pairs in this part: ceil(N / 2)
  eps: f32,
};

struct Step {
  n: u32,          // rows in this chunk
  start_pos: u32,  // absolute position of chunk row 0
  out_lo: u32,     // first chunk row that produces logits
  out_base: u32,   // logits row of chunk row out_lo
  tok0: u32,       // index of chunk row 0 in the forward's token list
  _p0: u32, _p1: u32, _p2: u32,
};

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<uniform> step: Step;
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> gamma: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read> rope: array<vec2<f32>>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
@group(0) @binding(7) var<storage, read_write> kv: array<f32>;


struct Unit {
  w0: vec4<f32>,   // weights (or raw quants) for x vec4 i0
  w1: vec4<f32>,   // for x vec4 i1
  i0: u32,         // vec4 index within an x row
  i1: u32,
  scale: f32,      // value = scale * q + bias (quantised types)
  bias: f32,
};

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

// Unit u (8 consecutive-in-storage values) of weight row r.
fn load_unit(r: u32, u: u32) -> Unit {
  var o: Unit;
  let K = params.K;
  o.scale = 1.0;
  o.bias = 0.0;
  if (WTYPE == 0u) {          // F32: 8 floats
    let b = r * K + 8u * u;
    o.w0 = vec4<f32>(bitcast<f32>(w[b]), bitcast<f32>(w[b + 1u]), bitcast<f32>(w[b + 2u]), bitcast<f32>(w[b + 3u]));
    o.w1 = vec4<f32>(bitcast<f32>(w[b + 4u]), bitcast<f32>(w[b + 5u]), bitcast<f32>(w[b + 6u]), bitcast<f32>(w[b + 7u]));
    o.i0 = 2u * u;
    o.i1 = 2u * u + 1u;
  } else if (WTYPE == 1u) {   // F16: 4 words of 2 halves
    let b = r * (K / 2u) + 4u * u;
    o.w0 = vec4<f32>(unpack2x16float(w[b]), unpack2x16float(w[b + 1u]));
    o.w1 = vec4<f32>(unpack2x16float(w[b + 2u]), unpack2x16float(w[b + 3u]));
    o.i0 = 2u * u;
    o.i1 = 2u * u + 1u;
  } else if (WTYPE == 30u) {  // BF16
    let b = r * (K / 2u) + 4u * u;
    o.w0 = vec4<f32>(bf2(w[b]), bf2(w[b + 1u]));
    o.w1 = vec4<f32>(bf2(w[b + 2u]), bf2(w[b + 3u]));
    o.i0 = 2u * u;
    o.i1 = 2u * u + 1u;
  } else if (WTYPE == 8u) {   // Q8_0 padded: 9 words per block, unit = 2 words = elements 8*sub .. 8*sub+7
    let blk = u / 4u;
    let sub = u % 4u;
    let b = (r * (K / 32u) + blk) * 9u;
    o.scale = unpack2x16float(w[b]).x;
    o.w0 = i8x4(w[b + 1u + 2u * sub]);
    o.w1 = i8x4(w[b + 2u + 2u * sub]);
    o.i0 = blk * 8u + 2u * sub;
    o.i1 = blk * 8u + 2u * sub + 1u;
  } else {                    // Q4_0 padded / Q4_1: 5 words per block, unit = 1 word of qs
    let blk = u / 4u;
    let sub = u % 4u;
    let b = (r * (K / 32u) + blk) * 5u;
    let dm = unpack2x16float(w[b]);
    let q = w[b + 1u + sub];
    o.w0 = nib_lo(q);           // elements 4*sub .. 4*sub+3
    o.w1 = nib_hi(q);           // elements 16+4*sub ..
    o.i0 = blk * 8u + sub;
    o.i1 = blk * 8u + 4u + sub;
    o.scale = dm.x;
    if (WTYPE == 3u) { o.bias = dm.y; } else { o.bias = -8.0 * dm.x; }
  }
  return o;
}

fn xin(t: u32, i: u32, sc: f32) -> vec4<f32> {
  var v = x[t * (params.K / 4u) + i];
  if (NORM) {
    v = v * sc * gamma[i];
  }
  return v;
}

fn epilogue(t: u32, y0: f32, y1: f32, r: u32, have1: bool) {
  if (MODE == 0u) {
    var orow = t;
    if (params.window == 1u) { orow = step.out_base + (t - step.out_lo); }
    out[orow * params.out_stride + r] = y0;
    if (have1) { out[orow * params.out_stride + r + 1u] = y1; }
  } else if (MODE == 1u) {
    let o = t * params.out_stride + r;
    out[o] = out[o] + y0;
    if (have1) { out[o + 1u] = out[o + 1u] + y1; }
  } else if (MODE == 2u) {
    let gate = y0;
    out[t * params.out_stride + r / 2u] = gate / (1.0 + exp(-gate)) * y1;
  } else {
    let pos = step.start_pos + t;
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
    if (r < params.q_dim) {
      out[t * params.q_dim + r] = v0;
      out[t * params.q_dim + r + 1u] = v1;
    } else if (r < qk) {
      let o = pos * params.kv_dim + (r - params.q_dim);
      kv[o] = v0;
      kv[o + 1u] = v1;
    } else {
      let o = params.seq_len * params.kv_dim + pos * params.kv_dim + (r - qk);
      kv[o] = v0;
      kv[o + 1u] = v1;
    }
  }
}

// One unit's contribution to a row's dot product (the same expression on every path and in every slot).
fn term(p: Unit, x0: vec4<f32>, x1: vec4<f32>) -> f32 {
  if (WTYPE == 0u || WTYPE == 1u || WTYPE == 30u) {
    return dot(p.w0, x0) + dot(p.w1, x1);
  } else if (WTYPE == 8u) {
    return p.scale * (dot(p.w0, x0) + dot(p.w1, x1));
  }
  let sx = dot(x0 + x1, vec4<f32>(1.0));
  return p.scale * (dot(p.w0, x0) + dot(p.w1, x1)) + p.bias * sx;
}

struct Oct {
  y0: vec4<f32>,   // row r0 against chunk rows t .. t+3 (slots 0..3)
  y0b: vec4<f32>,  // row r0 against chunk rows t+4 .. t+7 (slots 4..7)
  y1: vec4<f32>,   // row r0 + 1, slots 0..3
  y1b: vec4<f32>,  // row r0 + 1, slots 4..7
};

// GPU paths: the pair's partial dot products with S = 1, 4 or 8 chunk rows t .. t+S-1 at once (dot1, dot4, dot8:
// each weight unit read and decoded once for the S rows). Lane l takes the 8-value units u = l, l + LANES, ...
// (K/8 units per row; consecutive lanes read consecutive weight words and x vec4s, so loads coalesce), and every
// slot adds its terms in ascending u, R units per loop trip with all loads first (R only changes how many loads
// are in flight, never the order of the adds). Slots past the last row (n < S) repeat the last row and are
// discarded. EVERY SLOT OF EVERY VARIANT RUNS THE SAME CODE (xin, term, one add per unit in ascending u), so a
// row's bits do not depend on its slot, on S, or on how many rows the dispatch has. sc / scb: RMSNorm scales of
// slots 0..3 / 4..7.

fn dot1(r0: u32, have1: bool, t: u32, n: u32, sc: vec4<f32>, scb: vec4<f32>, lane: u32) -> Oct {
  var a = vec4<f32>(0.0);
  var ab = vec4<f32>(0.0);
  var b = vec4<f32>(0.0);
  var bb = vec4<f32>(0.0);
  let U = params.K / 8u;
  var u = lane;
  for (; u + 3u * LANES < U; u = u + 4u * LANES) {   // 4 units per trip: loads first, adds in unit order
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
    let p1 = load_unit(r0, u + 1u * LANES);
    var q1 = p1;
    if (have1) { q1 = load_unit(r0 + 1u, u + 1u * LANES); }
    let p2 = load_unit(r0, u + 2u * LANES);
    var q2 = p2;
    if (have1) { q2 = load_unit(r0 + 1u, u + 2u * LANES); }
    let p3 = load_unit(r0, u + 3u * LANES);
    var q3 = p3;
    if (have1) { q3 = load_unit(r0 + 1u, u + 3u * LANES); }
    let x000 = xin(t, p0.i0, sc.x);
    let x001 = xin(t, p0.i1, sc.x);
    a.x = a.x + term(p0, x000, x001);
    b.x = b.x + term(q0, x000, x001);
    let x100 = xin(t, p1.i0, sc.x);
    let x101 = xin(t, p1.i1, sc.x);
    a.x = a.x + term(p1, x100, x101);
    b.x = b.x + term(q1, x100, x101);
    let x200 = xin(t, p2.i0, sc.x);
    let x201 = xin(t, p2.i1, sc.x);
    a.x = a.x + term(p2, x200, x201);
    b.x = b.x + term(q2, x200, x201);
    let x300 = xin(t, p3.i0, sc.x);
    let x301 = xin(t, p3.i1, sc.x);
    a.x = a.x + term(p3, x300, x301);
    b.x = b.x + term(q3, x300, x301);
  }
  for (; u < U; u = u + LANES) {
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
    let x000 = xin(t, p0.i0, sc.x);
    let x001 = xin(t, p0.i1, sc.x);
    a.x = a.x + term(p0, x000, x001);
    b.x = b.x + term(q0, x000, x001);
  }
  return Oct(a, ab, b, bb);
}

fn dot4(r0: u32, have1: bool, t: u32, n: u32, sc: vec4<f32>, scb: vec4<f32>, lane: u32) -> Oct {
  var a = vec4<f32>(0.0);
  var ab = vec4<f32>(0.0);
  var b = vec4<f32>(0.0);
  var bb = vec4<f32>(0.0);
  let t1 = t + min(1u, n - 1u);
  let t2 = t + min(2u, n - 1u);
  let t3 = t + min(3u, n - 1u);
  let U = params.K / 8u;
  var u = lane;
  for (; u + 1u * LANES < U; u = u + 2u * LANES) {   // 2 units per trip: loads first, adds in unit order
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
    let p1 = load_unit(r0, u + 1u * LANES);
    var q1 = p1;
    if (have1) { q1 = load_unit(r0 + 1u, u + 1u * LANES); }
    let x000 = xin(t, p0.i0, sc.x);
    let x001 = xin(t, p0.i1, sc.x);
    a.x = a.x + term(p0, x000, x001);
    b.x = b.x + term(q0, x000, x001);
    let x010 = xin(t1, p0.i0, sc.y);
    let x011 = xin(t1, p0.i1, sc.y);
    a.y = a.y + term(p0, x010, x011);
    b.y = b.y + term(q0, x010, x011);
    let x020 = xin(t2, p0.i0, sc.z);
    let x021 = xin(t2, p0.i1, sc.z);
    a.z = a.z + term(p0, x020, x021);
    b.z = b.z + term(q0, x020, x021);
    let x030 = xin(t3, p0.i0, sc.w);
    let x031 = xin(t3, p0.i1, sc.w);
    a.w = a.w + term(p0, x030, x031);
    b.w = b.w + term(q0, x030, x031);
    let x100 = xin(t, p1.i0, sc.x);
    let x101 = xin(t, p1.i1, sc.x);
    a.x = a.x + term(p1, x100, x101);
    b.x = b.x + term(q1, x100, x101);
    let x110 = xin(t1, p1.i0, sc.y);
    let x111 = xin(t1, p1.i1, sc.y);
    a.y = a.y + term(p1, x110, x111);
    b.y = b.y + term(q1, x110, x111);
    let x120 = xin(t2, p1.i0, sc.z);
    let x121 = xin(t2, p1.i1, sc.z);
    a.z = a.z + term(p1, x120, x121);
    b.z = b.z + term(q1, x120, x121);
    let x130 = xin(t3, p1.i0, sc.w);
    let x131 = xin(t3, p1.i1, sc.w);
    a.w = a.w + term(p1, x130, x131);
    b.w = b.w + term(q1, x130, x131);
  }
  for (; u < U; u = u + LANES) {
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
    let x000 = xin(t, p0.i0, sc.x);
    let x001 = xin(t, p0.i1, sc.x);
    a.x = a.x + term(p0, x000, x001);
    b.x = b.x + term(q0, x000, x001);
    let x010 = xin(t1, p0.i0, sc.y);
    let x011 = xin(t1, p0.i1, sc.y);
    a.y = a.y + term(p0, x010, x011);
    b.y = b.y + term(q0, x010, x011);
    let x020 = xin(t2, p0.i0, sc.z);
    let x021 = xin(t2, p0.i1, sc.z);
    a.z = a.z + term(p0, x020, x021);
    b.z = b.z + term(q0, x020, x021);
    let x030 = xin(t3, p0.i0, sc.w);
    let x031 = xin(t3, p0.i1, sc.w);
    a.w = a.w + term(p0, x030, x031);
    b.w = b.w + term(q0, x030, x031);
  }
  return Oct(a, ab, b, bb);
}

fn dot8(r0: u32, have1: bool, t: u32, n: u32, sc: vec4<f32>, scb: vec4<f32>, lane: u32) -> Oct {
  var a = vec4<f32>(0.0);
  var ab = vec4<f32>(0.0);
  var b = vec4<f32>(0.0);
  var bb = vec4<f32>(0.0);
  let t1 = t + min(1u, n - 1u);
  let t2 = t + min(2u, n - 1u);
  let t3 = t + min(3u, n - 1u);
  let t4 = t + min(4u, n - 1u);
  let t5 = t + min(5u, n - 1u);
  let t6 = t + min(6u, n - 1u);
  let t7 = t + min(7u, n - 1u);
  let U = params.K / 8u;
  var u = lane;
  for (; u + 1u * LANES < U; u = u + 2u * LANES) {   // 2 units per trip: loads first, adds in unit order
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
    let p1 = load_unit(r0, u + 1u * LANES);
    var q1 = p1;
    if (have1) { q1 = load_unit(r0 + 1u, u + 1u * LANES); }
    let x000 = xin(t, p0.i0, sc.x);
    let x001 = xin(t, p0.i1, sc.x);
    a.x = a.x + term(p0, x000, x001);
    b.x = b.x + term(q0, x000, x001);
    let x010 = xin(t1, p0.i0, sc.y);
    let x011 = xin(t1, p0.i1, sc.y);
    a.y = a.y + term(p0, x010, x011);
    b.y = b.y + term(q0, x010, x011);
    let x020 = xin(t2, p0.i0, sc.z);
    let x021 = xin(t2, p0.i1, sc.z);
    a.z = a.z + term(p0, x020, x021);
    b.z = b.z + term(q0, x020, x021);
    let x030 = xin(t3, p0.i0, sc.w);
    let x031 = xin(t3, p0.i1, sc.w);
    a.w = a.w + term(p0, x030, x031);
    b.w = b.w + term(q0, x030, x031);
    let x040 = xin(t4, p0.i0, scb.x);
    let x041 = xin(t4, p0.i1, scb.x);
    ab.x = ab.x + term(p0, x040, x041);
    bb.x = bb.x + term(q0, x040, x041);
    let x050 = xin(t5, p0.i0, scb.y);
    let x051 = xin(t5, p0.i1, scb.y);
    ab.y = ab.y + term(p0, x050, x051);
    bb.y = bb.y + term(q0, x050, x051);
    let x060 = xin(t6, p0.i0, scb.z);
    let x061 = xin(t6, p0.i1, scb.z);
    ab.z = ab.z + term(p0, x060, x061);
    bb.z = bb.z + term(q0, x060, x061);
    let x070 = xin(t7, p0.i0, scb.w);
    let x071 = xin(t7, p0.i1, scb.w);
    ab.w = ab.w + term(p0, x070, x071);
    bb.w = bb.w + term(q0, x070, x071);
    let x100 = xin(t, p1.i0, sc.x);
    let x101 = xin(t, p1.i1, sc.x);
    a.x = a.x + term(p1, x100, x101);
    b.x = b.x + term(q1, x100, x101);
    let x110 = xin(t1, p1.i0, sc.y);
    let x111 = xin(t1, p1.i1, sc.y);
    a.y = a.y + term(p1, x110, x111);
    b.y = b.y + term(q1, x110, x111);
    let x120 = xin(t2, p1.i0, sc.z);
    let x121 = xin(t2, p1.i1, sc.z);
    a.z = a.z + term(p1, x120, x121);
    b.z = b.z + term(q1, x120, x121);
    let x130 = xin(t3, p1.i0, sc.w);
    let x131 = xin(t3, p1.i1, sc.w);
    a.w = a.w + term(p1, x130, x131);
    b.w = b.w + term(q1, x130, x131);
    let x140 = xin(t4, p1.i0, scb.x);
    let x141 = xin(t4, p1.i1, scb.x);
    ab.x = ab.x + term(p1, x140, x141);
    bb.x = bb.x + term(q1, x140, x141);
    let x150 = xin(t5, p1.i0, scb.y);
    let x151 = xin(t5, p1.i1, scb.y);
    ab.y = ab.y + term(p1, x150, x151);
    bb.y = bb.y + term(q1, x150, x151);
    let x160 = xin(t6, p1.i0, scb.z);
    let x161 = xin(t6, p1.i1, scb.z);
    ab.z = ab.z + term(p1, x160, x161);
    bb.z = bb.z + term(q1, x160, x161);
    let x170 = xin(t7, p1.i0, scb.w);
    let x171 = xin(t7, p1.i1, scb.w);
    ab.w = ab.w + term(p1, x170, x171);
    bb.w = bb.w + term(q1, x170, x171);
  }
  for (; u < U; u = u + LANES) {
    let p0 = load_unit(r0, u);
    var q0 = p0;
    if (have1) { q0 = load_unit(r0 + 1u, u); }
    let x000 = xin(t, p0.i0, sc.x);
    let x001 = xin(t, p0.i1, sc.x);
    a.x = a.x + term(p0, x000, x001);
    b.x = b.x + term(q0, x000, x001);
    let x010 = xin(t1, p0.i0, sc.y);
    let x011 = xin(t1, p0.i1, sc.y);
    a.y = a.y + term(p0, x010, x011);
    b.y = b.y + term(q0, x010, x011);
    let x020 = xin(t2, p0.i0, sc.z);
    let x021 = xin(t2, p0.i1, sc.z);
    a.z = a.z + term(p0, x020, x021);
    b.z = b.z + term(q0, x020, x021);
    let x030 = xin(t3, p0.i0, sc.w);
    let x031 = xin(t3, p0.i1, sc.w);
    a.w = a.w + term(p0, x030, x031);
    b.w = b.w + term(q0, x030, x031);
    let x040 = xin(t4, p0.i0, scb.x);
    let x041 = xin(t4, p0.i1, scb.x);
    ab.x = ab.x + term(p0, x040, x041);
    bb.x = bb.x + term(q0, x040, x041);
    let x050 = xin(t5, p0.i0, scb.y);
    let x051 = xin(t5, p0.i1, scb.y);
    ab.y = ab.y + term(p0, x050, x051);
    bb.y = bb.y + term(q0, x050, x051);
    let x060 = xin(t6, p0.i0, scb.z);
    let x061 = xin(t6, p0.i1, scb.z);
    ab.z = ab.z + term(p0, x060, x061);
    bb.z = bb.z + term(q0, x060, x061);
    let x070 = xin(t7, p0.i0, scb.w);
    let x071 = xin(t7, p0.i1, scb.w);
    ab.w = ab.w + term(p0, x070, x071);
    bb.w = bb.w + term(q0, x070, x071);
  }
  return Oct(a, ab, b, bb);
}


// RMSNorm scales of chunk rows t + min(i, n - 1), i = 0..3, summed over the subgroup: one pass over K for the four
// rows (their loads in flight together). Component i's arithmetic is the same for every i and every n, so a row's
// scale has the same bits wherever it is computed.
fn norm4(t: u32, n: u32, lane: u32) -> vec4<f32> {
  let K4 = params.K / 4u;
  let t1 = t + min(1u, n - 1u);
  let t2 = t + min(2u, n - 1u);
  let t3 = t + min(3u, n - 1u);
  var ss = vec4<f32>(0.0);
  var i = lane;
  // two strides per trip, loads first (more in flight), then the adds in the plain loop's order
  for (; i + LANES < K4; i = i + 2u * LANES) {
    let d0 = sq4(x[t * K4 + i], x[t1 * K4 + i], x[t2 * K4 + i], x[t3 * K4 + i]);
    let j = i + LANES;
    let d1 = sq4(x[t * K4 + j], x[t1 * K4 + j], x[t2 * K4 + j], x[t3 * K4 + j]);
    ss = ss + d0;
    ss = ss + d1;
  }
  if (i < K4) {
    ss = ss + sq4(x[t * K4 + i], x[t1 * K4 + i], x[t2 * K4 + i], x[t3 * K4 + i]);
  }
  return inverseSqrt(subgroupAdd(ss) / f32(params.K) + params.eps);
}

fn sq4(v0: vec4<f32>, v1: vec4<f32>, v2: vec4<f32>, v3: vec4<f32>) -> vec4<f32> {
  return vec4<f32>(dot(v0, v0), dot(v1, v1), dot(v2, v2), dot(v3, v3));
}

fn pick(v: vec4<f32>, vb: vec4<f32>, i: u32) -> f32 {   // slot i of an oct (0..3 in v, 4..7 in vb)
  if (i < 4u) { return v[i]; }
  return vb[i - 4u];
}

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {
  let wg = wid.y * nwg.x + wid.x;
  let groups_per_wg = WG_SIZE / LANES;
  if (wg * groups_per_wg >= params.n_groups) { return; }   // uniform per workgroup
  let lane = sid;
  let g = (lid - sid) / LANES;                 // this subgroup's index in the workgroup
  let pair = wg * groups_per_wg + g;           // row pair within this part
  let have0 = 2u * pair < params.N;
  let r0 = min(2u * pair, params.N - 1u);      // a subgroup past the end computes a valid row, writes nothing
  let have1 = have0 && r0 + 1u < params.N;

  var lo = 0u;
  if (params.window == 1u) { lo = step.out_lo; }
  let hi = step.n;
  for (var t = lo; t < hi; t = t + TILE) {
    let n4 = min(TILE, hi - t);   // rows of this tile (TILE = 1, 4 or 8); uniform
    var sc = vec4<f32>(1.0);
    var scb = vec4<f32>(1.0);
    if (NORM) {
      sc = norm4(t, min(n4, 4u), lane);
      if (n4 > 4u) { scb = norm4(t + 4u, n4 - 4u, lane); } else { scb = vec4<f32>(sc[n4 - 1u]); }
    }
    var s0b = vec4<f32>(0.0);
    var s1b = vec4<f32>(0.0);
    var s0: vec4<f32>;
    var s1: vec4<f32>;
    if (TILE == 8u) {
      let y = dot8(r0, have1, t, n4, sc, scb, lane);
      s0 = subgroupAdd(y.y0);
      s1 = subgroupAdd(y.y1);
      s0b = subgroupAdd(y.y0b);
      s1b = subgroupAdd(y.y1b);
    } else if (TILE == 4u) {
      let y = dot4(r0, have1, t, n4, sc, scb, lane);
      s0 = subgroupAdd(y.y0);
      s1 = subgroupAdd(y.y1);
    } else {
      let y = dot1(r0, have1, t, n4, sc, scb, lane);
      s0 = subgroupAdd(y.y0);
      s1 = subgroupAdd(y.y1);
    }
    for (var i = lane; i < n4 && have0; i = i + LANES) {   // one slot per lane (LANES >= 8 on real GPUs)
      epilogue(t + i, pick(s0, s0b, i), pick(s1, s1b, i), params.row0 + r0, have1);
    }
  }
}
