// matmul_sg — matmul.wgsl's GPU path with subgroup reductions instead of workgroup-memory trees: no barriers.
// Used where the adapter offers `subgroups` with one fixed subgroup size S (NVIDIA: 32); LANES = S.
// Same weight formats, modes, bindings, epilogues and per-unit arithmetic as matmul.wgsl (lib/quant, lib/term,
// lib/epilogue, lib/tiles: the very same text).
//
// Work split: one subgroup owns one row PAIR; a workgroup holds WG_SIZE/LANES subgroups. The chunk's rows go in
// tiles of TILE = 1, 4 or 8 rows (the engine picks the pipeline by the dispatch's row count: 1, 2..4, more), and
// each weight unit is read and decoded once per tile (dot1/dot4/dot8 of lib/tiles); the dispatch's grid z splits
// the tiles over workgroups (z = 1: one workgroup loops over them all; the engine's row-parallel policy, option
// rowTiles, runs 1-row tiles with z = rows, every row in its own workgroup): lane l takes the 8-value units
// l, l + LANES, ... of the row; with NORM the same loads give each row's sum of squares. Lane partials are summed
// with subgroupAdd; the RMSNorm scale rsqrt(mean(x^2) + eps) multiplies the finished sums. KSPLIT > 1: KSPLIT
// subgroups share a pair (each every KSPLIT-th group of LANES units), their sums added in part order.
// BATCH INVARIANCE: a row's arithmetic (its slot code, which is the same in every slot of every tile variant, its
// lanes and their order, the subgroup reduction) never depends on how many rows the chunk has or where it starts.
//
// Define PRO (kernels.js: the fused engine's `matmul_pro`): a PROLOGUE. The layer input x is not read from one
// buffer but summed, per element, from the residual r_in and npart split-K partial sums:
//     x[t, i] = r_in[t, i] + parts[0][t, i] + parts[1][t, i] + ... + parts[npart-1][t, i]   (in that fixed order)
// The partials are what the previous fused kernel left: the FFN slices' down projections (ffn_sg.wgsl) before the
// qkv matmul and the head, or the heads' O-projection slices (attention.wgsl, O_PROJ) before gate/up (fuse 'attn').
// Workgroup 0 of the dispatch (params.write_r == 1) also writes x to r_out, the OTHER residual buffer (ping-pong:
// no workgroup reads a buffer another one writes in the same dispatch); later kernels read it as the residual.
// Work split with PRO: as above (no KSPLIT), plus
//   - per tile, the workgroup first stages the tile's x rows (TILE x K floats) in workgroup memory `xs` (lib/stage:
//     every invocation sums whole vec4s: elements lid, lid + WG_SIZE, ...), a barrier, then the dot loops read xs;
//   - each subgroup takes PAIRS row pairs one after another (pairs wg*G*PAIRS + k*G + g, G = subgroups per
//     workgroup, k = 0..PAIRS-1) so that the staging is shared by more weight rows (the head: 49152 rows).
// Cost of the prologue: each workgroup reads (npart + 1) * K floats per chunk row from L2 (the partials are a few
// tens of KB per row, hot in L2) and adds them. The weights it reads are 2 * PAIRS * G rows * K * (bytes per weight):
// for Q4_1 (0.625 B/weight) and npart = 24 (SmolLM2: 1536 hidden / 64 per FFN workgroup) a workgroup of G = 2
// subgroups and PAIRS = 1 stages 25 * 4 = 100 B per weight column against 2.5 B of weights, so the qkv matmul's
// prologue costs more loads than its dot, but from L2 and in parallel over all workgroups; for the head
// (49152 x 576 Q8_0, 12288 workgroups at G = 2, PAIRS = 1) that ratio would make the prologue dominate, hence
// G = 8 (256 invocations) and PAIRS = 4 there (engine options fuseHeadWg, fuseHeadPairs: 64 weight rows per
// staging, 768 workgroups). The partial loop has a constant trip count (NPART) so its loads are all in flight. The
// FFN slice size (engine option fuseSlice) sets npart: fewer, larger slices cut this prologue but leave fewer FFN
// workgroups (fewer SMs busy).
// TOUCH with PRO (override; engine option fuseTouch): before the first staging each subgroup loads the words of its
// pairs' weight units (lib/touch), so the dots find them in the cache; loads only, no operation changes.
// BATCH INVARIANCE with PRO: x[t, i] is the same fixed-order sum in every workgroup and every dispatch shape; the
// dots are the same slot code (reading xs instead of x), so a row's bits do not depend on the chunk's row count.
//
// Bindings (lib/matmul_io): 0 params, 1 step (dynamic offset), 2 w, 3 x (PRO: r_in) (max_rows, K), 4 gamma, 5 rope,
//           6 out rw, 7 kv rw, as matmul.wgsl; PRO also 8 parts (npart, max_rows, K) read, 9 r_out (max_rows, K) rw.

enable subgroups;
diagnostic(off, subgroup_uniformity);

// #include matmul_io

// #if PRO
// #let RAW = 1
// #endif
// #include quant
// #include epilogue
// #include term
// #if PRO
// #include tiles X=xs
// #include stage
// #include touch
// #else
// #include tiles

var<workgroup> kpart: array<vec4<f32>, WG_SIZE / LANES * 6u>;   // KSPLIT > 1: (subgroup, 6) subgroup sums
// #endif

@compute @workgroup_size(WG_SIZE)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) sid: u32) {
  let wg = wid.y * nwg.x + wid.x;
// #if PRO
  let G = WG_SIZE / LANES;                     // subgroups (row pairs at a time) per workgroup
  if (wg * G * PAIRS >= params.n_groups) { return; }   // uniform per workgroup
  let lane = sid;
  let g = (lid - sid) / LANES;                 // this subgroup's index in the workgroup
  let writer = wg == 0u && params.write_r == 1u;
// #else
  let groups_per_wg = WG_SIZE / (LANES * KSPLIT);
  if (wg * groups_per_wg >= params.n_groups) { return; }   // uniform per workgroup
  let lane = sid;
  let gi = (lid - sid) / LANES;                // this subgroup's index in the workgroup
  let g = gi / KSPLIT;                         // its row pair's index in the workgroup
  let part = gi % KSPLIT;                      // which K-interleaved share of the pair's units it takes
  let vl = part * LANES + lane;                // units vl, vl + STRIDE, ...
  let pair = wg * groups_per_wg + g;           // row pair within this part
  let have0 = 2u * pair < params.N;
  let r0 = min(2u * pair, params.N - 1u);      // a subgroup past the end computes a valid row, writes nothing
  let have1 = have0 && r0 + 1u < params.N;
// #endif

  var lo = 0u;
  if (params.window == 1u) { lo = step.out_lo; }
  let hi = step.n;
  for (var t = lo + wid.z * TILE; t < hi; t = t + TILE * nwg.z) {   // tiles wid.z, wid.z + nwg.z, ... (grid z: engine)
    let n4 = min(TILE, hi - t);   // rows of this tile (TILE = 1, 4 or 8); uniform
// #if PRO
    // TOUCH (lib/touch): the words of this subgroup's pairs' units (its first 4 pairs), loaded now, before the
    // prologue
    var tw: array<array<vec4<u32>, 8>, 4>;
    if (TOUCH) {
      for (var k = 0u; k < min(PAIRS, 4u); k = k + 1u) {
        let r0 = min(2u * ((wg * PAIRS + k) * G + g), params.N - 1u);
        tw[k] = touch_pair(r0, min(r0 + 1u, params.N - 1u), lane);
      }
    }
    workgroupBarrier();           // the previous tile's dots are done with xs
    stage(t, n4, lid, writer);
    workgroupBarrier();
    if (TOUCH && hi > 0xFFFFu) {   // never (lib/touch): what keeps the warming loads, here: no longer than the
      var s = 0u;                  // prologue holds their registers
      for (var k = 0u; k < 4u; k = k + 1u) {
        for (var j = 0u; j < 8u; j = j + 1u) { s = s ^ kept(tw[k][j]); }
      }
      out[lid] = bitcast<f32>(s);
    }
    for (var k = 0u; k < PAIRS; k = k + 1u) {
      let pair = (wg * PAIRS + k) * G + g;       // row pair within this part
      let have0 = 2u * pair < params.N;
      let r0 = min(2u * pair, params.N - 1u);    // a subgroup past the end computes a valid row, writes nothing
      let have1 = have0 && r0 + 1u < params.N;
      var y: Oct;
// #include tile_call ARGS="r0, have1, 0u, n4, lane"
// #include sg_sums
      if (NORM) {
        ss = subgroupAdd(y.ss);
        if (TILE == 8u) { ssb = subgroupAdd(y.ssb); }
// #include sg_norm
      }
      for (var i = lane; i < n4 && have0; i = i + LANES) {   // one slot per lane
        epilogue(t + i, pick(s0, s0b, i), pick(s1, s1b, i), params.row0 + r0, have1);
      }
    }
// #else
    var y: Oct;
// #include tile_call ARGS="r0, have1, t, n4, vl"
// #include sg_sums
    if (NORM) {
      ss = subgroupAdd(y.ss);
      if (TILE == 8u) { ssb = subgroupAdd(y.ssb); }
    }
    if (KSPLIT > 1u) {
      // the pair's KSPLIT subgroup sums, added in part order by part 0 (a fixed order: batch invariant)
      if (lane == 0u) {
        kpart[gi * 6u] = s0;
        kpart[gi * 6u + 1u] = s1;
        kpart[gi * 6u + 2u] = s0b;
        kpart[gi * 6u + 3u] = s1b;
        kpart[gi * 6u + 4u] = ss;
        kpart[gi * 6u + 5u] = ssb;
      }
      workgroupBarrier();
      if (part == 0u) {
        for (var k = 1u; k < KSPLIT; k = k + 1u) {
          let o = (gi + k) * 6u;
          s0 = s0 + kpart[o];
          s1 = s1 + kpart[o + 1u];
          s0b = s0b + kpart[o + 2u];
          s1b = s1b + kpart[o + 3u];
          ss = ss + kpart[o + 4u];
          ssb = ssb + kpart[o + 5u];
        }
      }
      workgroupBarrier();
    }
    if (NORM) {   // the rows' RMSNorm scales (sums of squares from the same pass), applied to the finished sums
// #include sg_norm
    }
    for (var i = lane; i < n4 && have0 && part == 0u; i = i + LANES) {   // one slot per lane (LANES >= 8 on GPUs)
      epilogue(t + i, pick(s0, s0b, i), pick(s1, s1b, i), params.row0 + r0, have1);
    }
// #endif
  }
}
