// ffn_sg — the whole FFN of a layer for a slice of hidden units, in one workgroup (fused engine, `fuse` option of
// engine.js), leaving a split-K partial of the down projection:
//   x2 = r_in + P_attn[0] + ... + P_attn[npart-1]   (fixed order; workgroup 0 writes x2 to r_out, the other residual
//                                                     buffer: ping-pong, no workgroup reads what another writes)
//   h[j] = silu(gate_j . RMSNorm(x2)) * (up_j . RMSNorm(x2))          for j in this slice: j0 = SLICE * wid.x .. j1
//   P_ffn[wid.x][t, r] = sum_{j0 <= j < j1} W_down[r, j] * h[j]        r = 0 .. dim-1
// (workgroup 0 = the one of slice 0 for the tile's rows)
// The next consumer (matmul_sg.wgsl PRO: the next layer's qkv, or the head) adds r + P_ffn[0] + ... in fixed order.
//
// Work split: workgroup (wid.x, wid.y) takes the slice wid.x of SLICE hidden units (a multiple of 32: whole quant
// blocks of W_down's rows) for the chunk's row tiles wid.y, wid.y + nwg.y, ... (tiles of TILE = 1, 4 or 8 rows, by
// the dispatch's row count as in matmul_sg.wgsl; the engine dispatches one y per tile). Per tile:
//   1. stage the tile's x2 rows in workgroup memory `xs` (lib/stage: matmul_sg.wgsl PRO's prologue);
//   2. gate/up: gate/up rows are stored interleaved (row 2j = gate_j, 2j + 1 = up_j), so a slice is SLICE row pairs;
//      subgroup g (LANES = subgroup size) takes pairs g, g + G, ... with lib/tiles' dot1/dot4/dot8 (lanes over
//      8-value units, RMSNorm statistic from the same loads, subgroupAdd); SwiGLU -> `hs` (TILE, SLICE) in
//      workgroup memory;
//   3. down: invocation l takes output rows r = l, l + WG_SIZE, ... (two a trip, their loads in flight together; one
//      a trip with LIGHT_DOWN, the engine's 1-row-tile pipelines of dispatches of more rows (option lightDown: fewer
//      loads per invocation where a verify block's workgroups share the SMs), or where WG_SIZE >= dim) and sums
//      W_down[r, j0..j1) . hs[slot] over the slice's units in ascending order, each unit decoded once for the tile's
//      slots.
// Slice size (engine option fuseSlice, default 32 since the H200 measured it fastest: 1.15 ms vs 1.31 ms GPU per
// SmolLM2 forward at 64; SmolLM2 at 64: 1536 / 64 = 24 workgroups and 24 partials): the slice
// count is both this kernel's parallelism (one workgroup per slice, each reading 3 * SLICE * dim weights: ~69 KB of
// Q4_1 at 64) and the number of partials every workgroup of the next qkv matmul and of the head adds in its
// prologue (25 loads per x element at 64). 32 doubles the workgroups and the prologue, 128 halves both.
// Workgroup size (engine option fuseWg, default 512 on GPUs): with so few workgroups the time is latency, i.e. the
// dependent steps one subgroup/invocation takes: gate/up takes SLICE / (WG_SIZE / 32) pairs one after another (one
// memory round trip each: dot1's loads are issued together), down ceil(dim / WG_SIZE) passes (the SLICE / 8 unit
// loads of a pass are in flight together: constant trip count). At 512 and 64: 4 pairs + 2 passes; at 256: 8 + 3;
// 1024 halves again but leaves 64 registers per invocation (dot8 needs more). The H200 run (bench/h200/h200_run.sh)
// measures slices 32 / 64 / 128 and workgroups 256 / 512 / 1024.
// TOUCH / TOUCH_D (overrides; engine option fuseTouch): before step 1 every invocation loads the words of the weights it
// will read (lib/touch: its subgroup's gate/up pairs / its down rows' units), so steps 2-3 find them in the cache.
// BATCH INVARIANCE: every x2 element, gate/up dot (lib/tiles' slot code) and partial element (one add per
// unit, ascending, the same code in every slot) is a fixed sequence whatever the chunk's row count or tile.
//
// Define KVCOPY (kernels.js `ffn_kv`, with the engine's fuseQkvAttn): in a one-row pass, one workgroup also copies the
// layer's k and v at pos from the tail of the attention's scratch `scores`, where attention.wgsl QKV left them, into
// the KV cache (so that the attention kernel binds the cache read only); chunks of more rows wrote theirs in the qkv
// matmul. A plain copy of 2 * kv_dim floats: no arithmetic.
//
// Define BLOCKS (kernels.js: the fused engine's `ffn` with engine option attnBlock): the attention left each head's
// partial in key blocks (attention.wgsl BLOCKS); the prologue weighs and adds them (lib/stage BLOCKS: stage_weights,
// then stage), and x2 is r_in + P_attn[0] + ... exactly as without blocks for rows before position KB.
//
// Bindings: 0 params, 1 step (dynamic offset), 2 w gate/up interleaved (2 * hidden, dim), 3 r_in (max_rows, dim),
//           4 gamma (ffn_norm, dim), 5 pattn (npart, max_rows, dim), 6 r_out rw (max_rows, dim),
//           7 wd W_down (dim, hidden), 8 pffn rw (n_slices, max_rows, dim); KVCOPY also 9 scores (its tail: k, v at
//           pos, (2, kv_dim)), 10 kv rw (2, seq_len, kv_dim); BLOCKS: 5 pattn is (npart, NB, max_rows, dim), and 9 ml
//           (max_rows, npart, NB, 2) each block's (max, sum).

enable subgroups;
diagnostic(off, subgroup_uniformity);

override WG_SIZE: u32 = 256;
override WTYPE: u32 = 0;     // gate/up weights
override WTYPE_D: u32 = 0;   // down weights
override NORM: bool = true;
override TILE: u32 = 4u;     // chunk rows per weight decode: 1, 4 or 8
override LANES: u32 = 32;    // MUST equal the subgroup size
override KX: u32 = 64u;      // = params.K = dim (sizes the staging array)
override SLICE: u32 = 64u;   // hidden units per workgroup (multiple of 32)
override NPART: u32 = 1u;    // attention partials (= params.npart = n_heads)
override STRIDE: u32 = LANES;
override TOUCH: bool = false;     // warm the gate/up weights before the prologue (lib/touch; engine option fuseTouch)
override TOUCH_D: bool = false;   // and the down weights
override LIGHT_DOWN: bool = false; // down: one row a trip instead of two (engine option lightDown: 1-row tiles of multi-row dispatches)
const TB: u32 = 8u;
// #if BLOCKS
override KB: u32 = 64u;      // keys per attention block (engine option attnBlock)
override NB: u32 = 1u;       // attention blocks of the longest row: ceil(seq_len / KB)
// #endif

struct Params {
  K: u32,           // dim: gate/up in features
  KD: u32,          // hidden_dim: W_down in features
  dim: u32,         // W_down rows
  npart: u32,       // attention partials (n_heads)
  pstride: u32,     // vec4s from one partial to the next, in pattn and pffn (max_rows * dim / 4)
  write_r: u32,     // 1: workgroup 0 writes x2 to r_out
  eps: f32,
// #if KVCOPY
  kv_dim: u32,
  seq_len: u32,
  kvnew: u32,       // float offset of k, v at pos (2, kv_dim) in scores (attention.wgsl QKV leaves them there)
// #else
  _p0: u32,
// #endif
};

// #include step
@group(0) @binding(2) var<storage, read> w: array<u32>;                  // (2 * hidden_dim, dim) gate/up rows interleaved
@group(0) @binding(3) var<storage, read> r_in: array<vec4<f32>>;        // (max_rows, dim) residual
@group(0) @binding(4) var<storage, read> gamma: array<vec4<f32>>;       // (dim) ffn_norm
@group(0) @binding(5) var<storage, read> parts: array<vec4<f32>>;       // (npart, max_rows, dim) P_attn
@group(0) @binding(6) var<storage, read_write> r_out: array<vec4<f32>>; // (max_rows, dim) the other residual
@group(0) @binding(7) var<storage, read> wd: array<u32>;                 // (dim, hidden_dim) W_down
@group(0) @binding(8) var<storage, read_write> pffn: array<f32>;        // (n_slices, max_rows, dim) P_ffn
// #if KVCOPY
@group(0) @binding(9) var<storage, read> scores: array<f32>;             // attention's scratch; k, v at pos in its tail
@group(0) @binding(10) var<storage, read_write> kv: array<vec4<f32>>;    // (2, seq_len, kv_dim) this layer's cache
// #endif
// #if BLOCKS
@group(0) @binding(9) var<storage, read> ml: array<f32>;                 // (max_rows, npart, NB, 2) block max, sum
var<workgroup> cw: array<f32, TILE * NPART * NB * 2u>;   // (TILE, npart, NB, 2) the blocks' (max, sum), then weights (lib/stage)
// #endif

var<workgroup> xs: array<vec4<f32>, TILE * KX / 4u>;   // (TILE, dim) this tile's x2 rows
var<workgroup> hs: array<f32, TILE * SLICE>;           // (TILE, SLICE) SwiGLU outputs of the slice

// #let RAW = 1
// #include quant
// #include load_unit FN=load_unit_d W=wd WT=WTYPE_D KP=KD
// #include term
// #include term FN=term_d WT=WTYPE_D
// #include tiles X=xs
// #include stage
// #include touch

fn hv(slot: u32, i: u32) -> vec4<f32> {   // vec4 i of slot's slice of h
  let b = slot * SLICE + 4u * i;
  return vec4<f32>(hs[b], hs[b + 1u], hs[b + 2u], hs[b + 3u]);
}

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {
  let sl = wid.x;                               // hidden slice
  let j0 = sl * SLICE;
  let j1 = min(j0 + SLICE, params.KD);
  let G = WG_SIZE / LANES;
  let lane = sid;
  let g = (lid - sid) / LANES;
  let writer = sl == 0u && params.write_r == 1u;
  let hi = step.n;
// #if KVCOPY
  if (hi == 1u && wid.x == nwg.x - 1u && wid.y == 0u) {   // one-row pass: k, v into the cache (the last slice's workgroup)
    let kv4 = params.kv_dim / 4u;
    for (var i = lid; i < 2u * kv4; i = i + WG_SIZE) {
      let b = params.kvnew + 4u * i;
      let v = vec4<f32>(scores[b], scores[b + 1u], scores[b + 2u], scores[b + 3u]);
      let sec = i / kv4;                                   // 0 K, 1 V
      kv[(sec * params.seq_len + step.start_pos) * kv4 + i % kv4] = v;
    }
  }
// #endif
  for (var t = wid.y * TILE; t < hi; t = t + TILE * nwg.y) {   // tiles wid.y, wid.y + nwg.y, ...
    let n4 = min(TILE, hi - t);   // uniform
    // TOUCH (lib/touch): the words of the gate/up pairs' units (the first 4 pairs a subgroup takes) and of the down
    // rows' units (the first trip's two rows, the slice's first 8 units), loaded now, before the prologue
    var tw: array<array<vec4<u32>, 8>, 4>;
    var td: array<vec4<u32>, 16>;
    if (TOUCH) {
      for (var k = 0u; k < min((SLICE + G - 1u) / G, 4u); k = k + 1u) {
        let r0 = 2u * min(j0 + g + k * G, j1 - 1u);
        tw[k] = touch_pair(r0, r0 + 1u, lane);
      }
    }
    if (TOUCH_D) {
      let r = min(lid, params.dim - 1u);
      let r2 = min(lid + WG_SIZE, params.dim - 1u);
      for (var k = 0u; k < min(SLICE / 8u, 8u); k = k + 1u) {
        let u = min(j0 / 8u + k, j1 / 8u - 1u);
        td[2u * k] = load_unit_d_raw(r, u);
        td[2u * k + 1u] = load_unit_d_raw(r2, u);
      }
    }
    workgroupBarrier();           // the previous tile is done with xs and hs
// #if BLOCKS
    if ((step.start_pos + t + n4 - 1u) / KB > 0u) {   // a row of the tile has more than one key block (uniform)
      stage_weights(t, n4, lid);
      workgroupBarrier();
    }
// #endif
    stage(t, n4, lid, writer);
    workgroupBarrier();
    if ((TOUCH || TOUCH_D) && hi > 0xFFFFu) {   // never (lib/touch): what keeps the warming loads, here: no longer
                                                  // than the prologue holds their registers
      var s = 0u;
      for (var k = 0u; k < 4u; k = k + 1u) {
        for (var j = 0u; j < 8u; j = j + 1u) { s = s ^ kept(tw[k][j]); }
      }
      for (var k = 0u; k < 16u; k = k + 1u) { s = s ^ kept(td[k]); }
      pffn[lid] = bitcast<f32>(s);
    }
    // 2. gate/up pairs j0 + g + k * G -> SwiGLU -> hs
    for (var k = 0u; k < (SLICE + G - 1u) / G; k = k + 1u) {
      let jj = g + k * G;
      let have = j0 + jj < j1;
      let r0 = 2u * min(j0 + jj, j1 - 1u);
      var y: Oct;
// #include tile_call ARGS="r0, true, 0u, n4, lane"
      var s0 = subgroupAdd(y.y0);
      var s1 = subgroupAdd(y.y1);
      var s0b = vec4<f32>(0.0);
      var s1b = vec4<f32>(0.0);
      let ss = subgroupAdd(y.ss);
      var ssb = vec4<f32>(0.0);
      if (TILE == 8u) {
        s0b = subgroupAdd(y.y0b);
        s1b = subgroupAdd(y.y1b);
        ssb = subgroupAdd(y.ssb);
      }
// #include sg_norm
      for (var i = lane; i < n4 && have; i = i + LANES) {   // one slot per lane
        let gate = pick(s0, s0b, i);
        hs[i * SLICE + jj] = gate / (1.0 + exp(-gate)) * pick(s1, s1b, i);
      }
    }
    workgroupBarrier();
    // 3. down: rows r = lid, lid + WG_SIZE, ... over the slice's units, ascending; one decode per unit for all slots;
    //    two rows a trip (r and r + WG_SIZE, the second clamped in range and not written past dim): both rows' loads
    //    are in flight together, each row's adds as with one row a trip (`one`: LIGHT_DOWN or WG_SIZE >= dim)
    let hb = j0 / 4u;
    let one = LIGHT_DOWN || WG_SIZE >= KX;   // one row a trip (KX = dim: a workgroup of >= dim invocations has no second)
    let trip = select(2u, 1u, one);
    for (var r = lid; r < params.dim; r = r + trip * WG_SIZE) {
      let rb = select(r + WG_SIZE, params.dim, one);   // one: no second row (r2 = r, not written)
      let r2 = min(rb, params.dim - 1u);
      var acc: array<f32, 8>;   // slots 0 .. TILE-1 of row r
      var acc2: array<f32, 8>;  // of row r2
      for (var i = 0u; i < TILE; i = i + 1u) { acc[i] = 0.0; acc2[i] = 0.0; }
      for (var k = 0u; k < SLICE / 8u; k = k + 1u) {   // constant trip count: loads can all be in flight
        let u = min(j0 / 8u + k, j1 / 8u - 1u);         // (a short last slice: clamped load, no add)
        let p = load_unit_d(r, u);
        var p2 = p;
        if (!one) { p2 = load_unit_d(r2, u); }
        if (j0 / 8u + k < j1 / 8u) {
          for (var i = 0u; i < TILE; i = i + 1u) {
            let slot = min(i, n4 - 1u);
            acc[i] = acc[i] + term_d(p, hv(slot, p.i0 - hb), hv(slot, p.i1 - hb));
            acc2[i] = acc2[i] + term_d(p2, hv(slot, p2.i0 - hb), hv(slot, p2.i1 - hb));
          }
        }
      }
      for (var i = 0u; i < n4; i = i + 1u) {
        pffn[(sl * params.pstride * 4u) + (t + i) * params.dim + r] = acc[i];
        if (rb < params.dim) { pffn[(sl * params.pstride * 4u) + (t + i) * params.dim + rb] = acc2[i]; }
      }
    }
  }
}
