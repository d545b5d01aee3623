// options.js — createEngine's options (see engine.js) resolved against the adapter into the engine's plan: which
// matmul kernel, lanes, workgroup sizes, tiles, fused kernels, command buffer splits, run-ahead limit. Every default
// and every refusal lives here.

import { WG_SIZE } from './kernels.js';

/** SwiftShader / llvmpipe / WARP: workgroup barriers are very expensive there, so matmul runs barrier-free. */
export function isCpuAdapter(info) {
  return !!info.isFallbackAdapter || /swiftshader|llvmpipe|lavapipe|warp|software/i.test(
    `${info.vendor} ${info.architecture} ${info.device} ${info.description}`);
}

/** The matmul kernel and its lanes: matmul_sg.wgsl where the adapter has subgroups of one fixed size S. */
function matmulPlan(opts, info, device, cpu) {
  const S = info.subgroupMinSize === info.subgroupMaxSize ? info.subgroupMinSize : 0;
  const sgOk = device.features.has('subgroups') && S >= 4 && S <= WG_SIZE && WG_SIZE % S === 0;
  const subgroups = sgOk && (opts.subgroups ?? !cpu);
  if (opts.subgroups === true && !sgOk) throw new Error(`subgroups requested but the adapter has none of a fixed size (${info.subgroupMinSize}..${info.subgroupMaxSize})`);
  const lanes = subgroups ? S : (opts.lanes ?? (cpu ? 1 : 32));
  const matmulWg = opts.matmulWg ?? WG_SIZE;
  const ksplit = opts.ksplit ?? 1;
  if (![1, 2, 4].includes(ksplit)) throw new Error(`ksplit ${ksplit} must be 1, 2 or 4`);
  if (ksplit > 1 && !subgroups && !opts.emulatedSubgroups) throw new Error('ksplit > 1 needs the subgroup matmul (matmul_sg.wgsl)');
  if (matmulWg % (lanes * ksplit)) throw new Error(`matmul workgroup ${matmulWg} is not a multiple of lanes ${lanes} x ksplit ${ksplit}`);
  // sgKernel: the matmul runs matmul_sg.wgsl (real subgroups, or emulated ones in tests)
  // tile8: 8-row tiles at all (where a dispatch has at least rowPlan's tile8Rows rows); tile8Rows is where the
  // 8-row tiles' measurements are (bench/h200/results/2026-12-06h, 2026-12-07)
  return { subgroups, sgKernel: subgroups || !!opts.emulatedSubgroups, sgSize: S, lanes, matmulWg, ksplit,
    tile1: opts.tile1 ?? lanes > 1, tile8: opts.tile8 ?? lanes > 1 };
}

/** The fused engine on real subgroups: where the defaults measured on an H200 apply (tests that emulate subgroups
 * pick their own). */
function tunedFused(opts, m, fuse) {
  return m.subgroups && fuse === true && !opts.emulatedSubgroups;
}

/** Storage bindings of attention.wgsl's QKV variant (fuseQkvAttn). */
const QKV_ATTN_STORAGE = 10;

/** The fused kernels that may load their weights early (fuseTouch): the qkv (and fuse 'attn' gate/up) prologue
 * matmul, the head's, attention + O projection, the FFN's gate/up and down weights. */
const TOUCH_KINDS = ['qkv', 'logits', 'attn', 'ffn_gate_up', 'ffn_down'];

/** The fused engine: false | 'attn' | true, with its workgroup sizes; fuseAuto: fall back rather than refuse. */
function fusePlan(opts, m, device, cpu) {
  // default: the fused engine (3 dispatches per layer, FFN slices of 32) wherever matmul_sg.wgsl runs — measured
  // on an H200 (bench/h200/h200_results.md): 7-10% less GPU time per token than unfused, same verify cost for
  // k <= 3; a model it cannot take (split attention/FFN bindings, small workgroup memory) runs unfused.
  // The qkv prologue matmul's workgroup: 256 invocations with real subgroups (each workgroup stages x = r + the 48
  // FFN partials once per chunk row, so 60 workgroups instead of 240 stage it a quarter as often): on an H200
  // (bench/h200/results/2026-12-02b/engine_sweep.txt) 1.130 vs 1.170 ms GPU a pass running ahead, T_verify(4)
  // 1.385 vs 1.546-1.591 ms, T_verify(8) 1.950 vs 2.087-2.134 ms; more row pairs per subgroup (fuseQkvPairs) cut
  // the verify further but cost the one-row pass (1.22-1.44 ms)
  const req = opts.fuse ?? (opts.emulatedSubgroups ? false : 'auto');   // (tests emulate the unfused kernel)
  if (![false, true, 'attn', 'auto'].includes(req)) throw new Error(`fuse ${JSON.stringify(req)} must be false, true, 'attn' or 'auto'`);
  const fuseAuto = req === 'auto';
  const fuse = fuseAuto ? (m.subgroups || !!opts.emulatedSubgroups) && m.ksplit === 1 : req;
  if (fuse && !m.subgroups && !opts.emulatedSubgroups) throw new Error('fuse needs the subgroup matmul (matmul_sg.wgsl): a GPU with a fixed subgroup size');
  if (fuse && m.ksplit > 1) throw new Error('fuse needs ksplit 1');
  // default workgroup sizes within the device's limit (WebGPU guarantees 256 invocations; many GPUs give 1024)
  const maxInv = device.limits.maxComputeInvocationsPerWorkgroup;
  const fitWg = (want) => Math.max(m.lanes, Math.min(want, Math.floor(maxInv / m.lanes) * m.lanes));
  const tuned = tunedFused(opts, m, fuse);   // where the defaults measured on an H200 / H100 apply
  const f = { fuse, fuseAuto, fuseWg: opts.fuseWg ?? (cpu ? 64 : fitWg(512)), fuseSlice: opts.fuseSlice ?? 32,
    fuseHeadPairs: opts.fuseHeadPairs ?? 4, fuseHeadWg: opts.fuseHeadWg ?? (cpu ? 64 : fitWg(256)),
    fuseMatmulWg: opts.fuseMatmulWg ?? (tuned ? fitWg(256) : m.matmulWg),
    fuseQkvPairs: opts.fuseQkvPairs ?? 1,
    // dispatches of more than one row (verify blocks, prefill) may run the FFN and the qkv prologue matmul with their
    // own workgroup size / row pairs (each row's arithmetic is the same code in the same order: the same bits); default
    // the one-row values
    fuseWgRows: opts.fuseWgRows ?? null, fuseMatmulWgRows: opts.fuseMatmulWgRows ?? null,
    fuseQkvPairsRows: opts.fuseQkvPairsRows ?? (tuned ? 2 : null),
    // the qkv matmul's multi-row variant (fuseMatmulWgRows, fuseQkvPairsRows) only for dispatches of qkvRowsMin ..
    // qkvRowsMax rows (null: no upper bound), and with qkvRowsDense only in passes whose rows are all live (verify
    // blocks, prefill), not a chain round's (model.js `sparse`: 1 + c rows of a grid sized for k + 1); other
    // dispatches run the one-row variant (the same bits either way). On an H100, fuseQkvPairsRows 2 for 5-9 rows:
    // T_verify(4) 1.232-1.237 vs 1.290 ms GPU, k = 1..3 unchanged (bench/h200/results/2026-12-06g), but no faster
    // through the product's loop while chain rounds ran it too (most rounds verify fewer than k, on which the pairs
    // cost what 2-4 rows do); with qkvRowsDense (2026-12-07d call 19) T_verify(4) 1.240-1.241 vs 1.290, the chain rounds
    // the same (0.986 / 0.992 ms at k = 3 / 4), the shipped draft's answers at k = 4 0.971 [0.956-0.981] of the time
    // (the champion alone 0.995). Defaults where the H200 defaults apply: 2 pairs for 5-9 rows, dense passes only
    qkvRowsMin: opts.qkvRowsMin ?? (tuned ? 5 : 2),
    qkvRowsMax: opts.qkvRowsMax ?? (tuned && opts.qkvRowsMin == null ? 9 : null),
    qkvRowsDense: opts.qkvRowsDense ?? tuned,
    // dispatches of more than one row that run each row in its own workgroup (rowTiles: verify blocks) run the FFN's
    // down projection one row a trip instead of two (the same bits; tiles of 4 or 8 rows keep two):
    // fewer loads per invocation where the row's workgroups share the SMs. Default on real subgroups, measured on an
    // H100 (bench/h200/results/2026-12-06f, two leases, 2 rounds each): T_verify(4) 1.288-1.289 vs 1.327-1.331 ms GPU,
    // T_verify(8) 1.792-1.794 vs 1.845-1.850, T_verify(1) equal; one-row passes keep two rows a trip (2026-12-04's
    // latency change; one a trip not measured there)
    lightDown: opts.lightDown ?? tuned,
    // a decode pass's qkv + attention in one dispatch (attention.wgsl QKV; 10 storage bindings): off by default, as
    // the H200 measured it slower (bench/h200/results/2026-12-04b, call 3: GPU 1.23 vs 1.05 ms a pass running ahead, with 30
    // dispatches fewer); its workgroup: the qkv rows' subgroups (96 row pairs for SmolLM2's heads of 64: 3 trips a
    // subgroup at 1,024 invocations), of which the attention's own workgroup size (attnWg) runs the attention
    fuseQkvAttn: opts.fuseQkvAttn ?? false,
    // the fused kernels (prologue matmuls, attention + O projection, FFN) load the words of their weights before their
    // prologue, so that the dots find them in the cache (lib/touch; the same bits): true (every kind), false, or a
    // list of TOUCH_KINDS. Default on real subgroups: the qkv matmul and attention + O projection, measured on an H100
    // (bench/h200/results/2026-12-05e): GPU 0.967-0.968 vs 1.007 ms a one-row pass, T_verify(4) 1.325 vs 1.344 ms; the
    // FFN's (1.020 with its down weights, 1.155 with gate/up) and the head's (no change) are slower or no faster
    fuseTouch: opts.fuseTouch ?? (tuned ? ['qkv', 'attn'] : false),
    fuseQkvAttnWg: opts.fuseQkvAttnWg ?? (cpu ? 64 : fitWg(1024)) };
  f.fuseWgRows ??= f.fuseWg;
  f.fuseMatmulWgRows ??= f.fuseMatmulWg;
  f.fuseQkvPairsRows ??= f.fuseQkvPairs;
  const touch = f.fuseTouch === true ? TOUCH_KINDS : f.fuseTouch === false ? [] : f.fuseTouch;
  if (!Array.isArray(touch) || touch.some((k) => !TOUCH_KINDS.includes(k))) {
    throw new Error(`fuseTouch ${JSON.stringify(f.fuseTouch)} must be true, false or a list of ${TOUCH_KINDS.join(', ')}`);
  }
  f.fuseTouch = new Set(touch);
  if (typeof f.fuseQkvAttn !== 'boolean') throw new Error(`fuseQkvAttn ${JSON.stringify(f.fuseQkvAttn)} must be true or false`);
  if (!fuse) return { ...f, fuseQkvAttn: false };
  if (f.fuseQkvAttn && fuse !== true) throw new Error("fuseQkvAttn needs fuse true (the fused engine's 3 kernels a layer)");
  if (f.fuseQkvAttn && device.limits.maxStorageBuffersPerShaderStage < QKV_ATTN_STORAGE) {
    throw new Error(`fuseQkvAttn needs ${QKV_ATTN_STORAGE} storage buffers per shader stage; the device has ${device.limits.maxStorageBuffersPerShaderStage}`);
  }
  for (const k of ['fuseWg', 'fuseHeadWg', 'fuseMatmulWg', 'fuseQkvAttnWg', 'fuseWgRows', 'fuseMatmulWgRows']) {
    const v = f[k];
    if (!Number.isInteger(v) || v < m.lanes || v % m.lanes || v > maxInv) {
      throw new Error(`${k} ${v} must be a multiple of the subgroup size ${m.lanes} within the device's workgroup limit`);
    }
  }
  if (!Number.isInteger(f.qkvRowsMin) || f.qkvRowsMin < 2) throw new Error(`qkvRowsMin ${JSON.stringify(f.qkvRowsMin)} must be an integer >= 2`);
  if (f.qkvRowsMax !== null && (!Number.isInteger(f.qkvRowsMax) || f.qkvRowsMax < f.qkvRowsMin)) {
    throw new Error(`qkvRowsMax ${JSON.stringify(f.qkvRowsMax)} must be null or an integer >= qkvRowsMin (${f.qkvRowsMin})`);
  }
  if (typeof f.lightDown !== 'boolean') throw new Error(`lightDown ${JSON.stringify(f.lightDown)} must be true or false`);
  if (typeof f.qkvRowsDense !== 'boolean') throw new Error(`qkvRowsDense ${JSON.stringify(f.qkvRowsDense)} must be true or false`);
  if (!Number.isInteger(f.fuseSlice) || f.fuseSlice < 32 || f.fuseSlice % 32) throw new Error(`fuseSlice ${f.fuseSlice} must be a positive multiple of 32`);
  for (const k of ['fuseHeadPairs', 'fuseQkvPairs', 'fuseQkvPairsRows']) {
    if (!Number.isInteger(f[k]) || f[k] < 1 || f[k] > 64) throw new Error(`${k} ${f[k]} must be in 1..64`);
  }
  return f;
}

/** Tile and split policies: the op kinds that run every chunk row in its own workgroup (1-row tiles) up to
 * rowTilesMax rows; attention + O projection workgroups per head; the fused head's input summed once (headSum).
 * Default on the fused engine with real subgroups: 1-row tiles for qkv and the FFN, attention split 3, headSum —
 * measured on an H200 (bench/h200/results/2026-12-01/engine_variants.txt): GPU time of a pass 1.12 ms vs 1.19,
 * T_verify(4) 1.58 ms vs 1.90 (T_verify(4)/T_single 1.41 vs 1.60), T_verify(8) 2.07 vs 2.31 (with split 2); split 3
 * (bench/h200/results/2026-12-02b/attn_sweep.txt, with the qkv prologue's 256-invocation workgroup): 1.072 vs
 * 1.127 ms GPU a pass running ahead, T_verify(4) 1.319 vs 1.38 ms (4 and 6: 1.071 / 1.066 ms, verify 1.39 / 1.36);
 * none of them changes a bit of any row (tests/gpu/test_gpu_engine.py test_tile_policies_give_the_same_bits).
 * Elsewhere: none. */
const ROW_KINDS = ['qkv', 'attn_output', 'ffn_gate_up', 'ffn_down', 'ffn', 'logits'];
function rowPlan(opts, m, f) {
  const tuned = tunedFused(opts, m, f.fuse);
  const want = opts.rowTiles ?? (tuned ? ['qkv', 'ffn'] : []);
  const kinds = want === 'all' ? ROW_KINDS.filter((k) => k !== 'logits') : want;
  if (!Array.isArray(kinds) || kinds.some((k) => !ROW_KINDS.includes(k))) {
    throw new Error(`rowTiles ${JSON.stringify(want)} must be 'all' or a list of ${ROW_KINDS.join(', ')}`);
  }
  if (kinds.length && !m.subgroups && !opts.emulatedSubgroups) throw new Error('rowTiles needs the subgroup matmul (matmul_sg.wgsl)');
  const rowTilesMax = opts.rowTilesMax ?? 16;
  if (!Number.isInteger(rowTilesMax) || rowTilesMax < 1) throw new Error(`rowTilesMax ${rowTilesMax} must be a positive integer`);
  // tile8Rows: the fewest rows of a dispatch that takes the 8-row tiles (where tile8; fewer, from 2: the 4-row ones).
  // Where the H200 defaults apply, rowTilesMax + 1: verify blocks and chain rounds (k + 1 <= rowTilesMax rows) run the
  // kinds not run row by row (the head among them) in tiles of 4, prefill chunks as before. On H100s, `tile8` false
  // for those (two leases, bench/h200/results/2026-12-06h call 1 and 2026-12-07 call 1, GPU ms): an n-gram chain round
  // at k = 4 that finds nothing 0.991-0.993 instead of 1.021-1.029, one that verifies 4 proposals 1.065-1.069
  // instead of 1.088-1.089 (k = 3: the same either way), a 9-row verify block 1.771-1.782 instead of 1.794-1.810, a
  // 5-row one 1.294-1.314 against 1.288-1.325; through the product's loop about 1% (sides of 22 prompts, not
  // resolved). The same bits (tests/gpu/test_gpu_engine.py test_tile_policies_give_the_same_bits). Elsewhere 5.
  const tile8Rows = opts.tile8Rows ?? (tuned ? rowTilesMax + 1 : 5);
  if (!Number.isInteger(tile8Rows) || tile8Rows < 5) throw new Error(`tile8Rows ${tile8Rows} must be an integer >= 5`);
  const headSum = opts.headSum ?? tuned;
  if (typeof headSum !== 'boolean') throw new Error(`headSum ${JSON.stringify(headSum)} must be true or false`);
  // the head's input, summed once (headSum), staged per workgroup in workgroup memory: matmul_sg PRO without partials,
  // fuseHeadPairs row pairs a subgroup, fuseHeadWg invocations (the same slot code on the same values: the same bits)
  const headStage = opts.headStage ?? false;
  if (typeof headStage !== 'boolean') throw new Error(`headStage ${JSON.stringify(headStage)} must be true or false`);
  if (headStage && (f.fuse !== true || !headSum)) throw new Error('headStage needs fuse true and headSum');
  const attnSplit = opts.attnSplit ?? (tuned ? 3 : 1);
  if (!Number.isInteger(attnSplit) || attnSplit < 1 || attnSplit > 16) throw new Error(`attnSplit ${attnSplit} must be in 1..16`);
  // the fused attention's grid (heads, Z, rows) instead of (heads, rows, Z) (attention.wgsl ROWS_Z; the same
  // operations) for the passes whose rows the GPU decides (true: a chain round's 1 + c rows of a grid sized for k + 1,
  // model.js `sparse`; 'all': every pass). Why: with rows in y a chain round's live row runs its workgroups among the
  // returning ones, and at long positions its attention is slower; on an H100 (bench/h200/results/2026-12-07d,
  // bench.mjs, GPU ms) an n-gram chain round that finds nothing at position 1,870 took 1.373 ms instead of 1.613 at
  // k = 4 (1.365 / 1.485 at k = 3; a pass running ahead 1.328), one verifying k proposals 1.588 / 1.759; but a 5-row
  // verify block 2.229 against 2.194 (rows all live), so only the chains' passes by default. true where the H200
  // defaults apply, false elsewhere
  const attnRowsZ = opts.attnRowsZ ?? tuned;
  if (attnRowsZ !== true && attnRowsZ !== false && attnRowsZ !== 'all') throw new Error(`attnRowsZ ${JSON.stringify(attnRowsZ)} must be true, false or 'all'`);
  // the attention's keys in blocks of attnBlock fixed by position, each block its own workgroups, combined by the FFN's
  // prologue (attention.wgsl / lib/stage BLOCKS); rows before position attnBlock get the same bits as without, and only
  // chunks that may reach it run the blocks' kernels (model.js opsFar). 512 where the H200 defaults apply: on an H100
  // (2026-12-06, bench/h200/results/2026-12-06) a one-row pass at position 2,000 took 1.36 ms of GPU time against
  // 2.00 without blocks, and the product's loop on the long-context stratum ran at 532-556 tok/s against 391-393
  // 'auto' (the default there): 512 on the fused engine without fuseQkvAttn, else 0, and 0 for a model whose blocks'
  // partials would exceed a storage binding (model.js; a number is refused there instead)
  const wantBlock = opts.attnBlock ?? (tuned ? 'auto' : 0);
  const attnBlockAuto = wantBlock === 'auto';
  const attnBlock = attnBlockAuto ? (f.fuse === true && !f.fuseQkvAttn ? 512 : 0) : wantBlock;
  if (!Number.isInteger(attnBlock) || attnBlock < 0 || (attnBlock > 0 && (attnBlock < 16 || (attnBlock & (attnBlock - 1)) !== 0))) {
    throw new Error(`attnBlock ${JSON.stringify(attnBlock)} must be 'auto', 0 (off) or a power of two >= 16`);
  }
  if (attnBlock && (f.fuse !== true || f.fuseQkvAttn)) throw new Error('attnBlock needs fuse true without fuseQkvAttn');
  return { rowTiles: new Set(kinds), rowTilesMax, tile8Rows, attnSplit, attnRowsZ, headSum, headStage, attnBlock, attnBlockAuto };
}

/** The engine's plan from createEngine's options (see engine.js for each option). */
export function resolvePlan(opts, info, device) {
  const cpu = isCpuAdapter(info);
  const m = matmulPlan(opts, info, device, cpu);
  const f = fusePlan(opts, m, device, cpu);
  const r = rowPlan(opts, m, f);
  const pickWg = cpu ? 64 : 256;
  // 4 on GPUs: with continuations (aheadThen) the GPU always has the next run queued, so shorter runs cost little
  // speed and waste fewer passes past an answer's EOS (a run is paid in full, and the run after it is queued already).
  // On an H200 through the product's loop: 8 against 16 (bench/h200/results/2026-12-04, call 5): 674 vs 541 / 556
  // tok/s over all strata; 4 against 8 (bench/h200/results/2026-12-04d, calls 3-4): per prompt 1.12-1.23x (geometric
  // means of two runs) on the 64-token workload answers, 0.95-1.02x on 256-token ones
  const aheadMax = opts.aheadMax ?? (cpu ? 0 : 4);
  if (!Number.isInteger(aheadMax) || aheadMax < 0 || aheadMax > MAX_PASSES) throw new Error(`aheadMax ${aheadMax} must be in 0..${MAX_PASSES}`);
  const aheadThen = opts.aheadThen ?? true;
  if (typeof aheadThen !== 'boolean') throw new Error(`aheadThen ${JSON.stringify(aheadThen)} must be true or false`);
  // n-gram rounds on the GPU, R a submission (model.ngramChain), and a draft's (model.specChain): 4 on GPUs, 0 (not
  // offered) on CPU adapters, where a verify row costs most of a pass and the decode loop verifies only what the
  // host's lookup finds
  const chainRounds = opts.chainRounds ?? (cpu ? 0 : 4);
  if (!Number.isInteger(chainRounds) || chainRounds < 0 || chainRounds > MAX_PASSES) throw new Error(`chainRounds ${chainRounds} must be in 0..${MAX_PASSES}`);
  const chainRowwise = opts.chainRowwise ?? false;
  if (typeof chainRowwise !== 'boolean') throw new Error(`chainRowwise ${JSON.stringify(chainRowwise)} must be true or false`);
  // chainStepDirect: the n-gram chain kernel (shaders/chain.wgsl) writes each round's Step into its slot of the step
  // buffer (bound as storage) itself, so that a chain's rounds run in one compute pass; false: it writes the Step to
  // a buffer of its own, which a copy between compute passes puts into the slot (before 2026-12-07). The same Steps
  // either way (tests/gpu/test_chain_engine.py)
  const chainStepDirect = opts.chainStepDirect ?? true;
  if (typeof chainStepDirect !== 'boolean') throw new Error(`chainStepDirect ${JSON.stringify(chainStepDirect)} must be true or false`);
  const mapFence = opts.mapFence ?? true;
  if (typeof mapFence !== 'boolean') throw new Error(`mapFence ${JSON.stringify(mapFence)} must be true or false`);
  // pre-encoded command buffers kept per submission shape (model.js putPre: the most recent shapes): 16, as a decode
  // loop with speculation makes a dozen or so between two answers' first runs (verify blocks of 2..5 rows, chains
  // and their continuations, runs ahead of 1..4 passes, prefill chunks)
  const preKeep = opts.preKeep ?? 16;
  if (!Number.isInteger(preKeep) || preKeep < 0) throw new Error(`preKeep ${JSON.stringify(preKeep)} must be an integer >= 0`);
  // an answer's second run (fresh, of its first run's shape, with a continuation) takes the first run's pre-encoded
  // commands; preFirst: a later continued call (the GPU busy) encodes that shape again (model.js refillPre), so that
  // the next answer's first run comes pre-encoded: on an H100 through the product's loop its first token 4.6-4.8 ms
  // instead of 6.0-6.2 (bench/h200/results/2026-12-06c, calls 14-15; without it no first run was pre-encoded)
  const preFirst = opts.preFirst ?? true;
  if (typeof preFirst !== 'boolean') throw new Error(`preFirst ${JSON.stringify(preFirst)} must be true or false`);
  // a continuation queued behind the run before it (model.js runChained) finds the GPU busy: splitting it would only
  // cost GPU time (each further command buffer ~18 us of a one-row pass on an H100: 0.969 -> 0.914 ms with one;
  // bench/h200/results/2026-12-06b). 1: one command buffer; 0: as any submission (splits, passSplits)
  // ... up to contSplitsMaxPasses passes: in one process on an H100 (calls 9-10 there), chained runs of 4 gained
  // 1.5-10% in one buffer, but runs of 16 lost 4% (cause not known), so longer continuations keep the plan's splits
  const contSplits = opts.contSplits ?? 1;
  if (!Number.isInteger(contSplits) || contSplits < 0) throw new Error(`contSplits ${JSON.stringify(contSplits)} must be an integer >= 0`);
  const contSplitsMaxPasses = opts.contSplitsMaxPasses ?? 4;
  if (!Number.isInteger(contSplitsMaxPasses) || contSplitsMaxPasses < 1) {
    throw new Error(`contSplitsMaxPasses ${JSON.stringify(contSplitsMaxPasses)} must be an integer >= 1`);
  }
  // a continuation submitted after a FRESH run's readback (runChained's follow from afterRun: the GPU is idle) takes
  // splits + passSplits command buffers (7 for 4 passes), so that the GPU starts on a small first one. The timelines
  // of bench/h200/results/2026-12-06d (calls 10-11, an H100, 650 such calls) put its last buffer 3.9 ms after the
  // fresh run's readback (its own encoding, ~1.7-2 ms, included: it waited for the readback until model.js
  // runChained was fixed the same day), and the call's return 2.6 ms later: the launch pre-encodes the next
  // continuation's commands, but for a shape of that many buffers, while the next (continued) call submits one of
  // contSplits (1) buffers, which it finds pre-encoded only where an earlier run of that shape left it (352 of 474
  // runs ahead, 2 of 23 chains there), else it encodes it then (2.3 ms into the call, the GPU idle by then).
  // contSplitsFresh: that continuation's command buffers (0: as before; 1: the continued calls' shape, whose launch
  // then pre-encodes what the next call submits; tests/gpu/test_batched_engine.py). Off by default until measured
  // through the product's loop (bench/h200/product_sides.sh, sides {} and {"contSplitsFresh":1}); it changes no bit.
  const contSplitsFresh = opts.contSplitsFresh ?? 0;
  if (!Number.isInteger(contSplitsFresh) || contSplitsFresh < 0) throw new Error(`contSplitsFresh ${JSON.stringify(contSplitsFresh)} must be an integer >= 0`);
  // the continuation a fresh run submits after its readback pre-encoded the next continuation's commands (launch's
  // preEncode) before the call returned: on an H100, 2.0-2.9 ms between that submission and the return, the tokens
  // waiting in the engine. preDefer (default since 2026-12-06): that pre-encoding is put off (model.js deferPre) until
  // the next call takes the shape or the thread is idle. Through the product's loop on H100s (bench/h200/results/
  // 2026-12-06e calls 13 and 10, engine timelines, a quiet host and a noisy one): such a call 5.0 / 5.7 ms instead of
  // 6.4 / 9.1 (runs ahead), the continued calls after them no slower; an answer's time x0.985 on the quiet host (the
  // next call mostly waits for the GPU instead); it changes no bit
  const preDefer = opts.preDefer ?? true;
  if (typeof preDefer !== 'boolean') throw new Error(`preDefer ${JSON.stringify(preDefer)} must be true or false`);
  const attnWg = opts.attnWg ?? (cpu ? 64 : 256);
  if (f.fuseQkvAttn && (attnWg > f.fuseQkvAttnWg)) throw new Error(`fuseQkvAttnWg ${f.fuseQkvAttnWg} must be at least attnWg ${attnWg}`);
  return { cpu, ...m, ...f, ...r, attnWg, maxRows: opts.maxRows ?? 64,
    splits: opts.splits ?? (cpu ? 1 : 4), passSplits: opts.passSplits ?? 1, preKeep, preFirst, preDefer, contSplits, contSplitsMaxPasses, contSplitsFresh, pickWg, aheadMax, aheadThen, chainRounds, chainRowwise, chainStepDirect, mapFence,
    timestamps: !!opts.timestamps && device.features.has('timestamp-query'),
    // benches: a function given {t (performance.now()), ev: 'call' | 'ret' | 'submit' | 'mapped' | 'pre', kind, ...}
    // at each batched call's start and end, each submission's submit and readback, and each pre-encoding
    // (bench/product/node_host.mjs with EXACTSPEC_TRACE, bench/gpu/head_bench.mjs, tests/gpu/driver.mjs)
    trace: typeof opts.trace === 'function' ? opts.trace : null };
}

/** A model's attnBlock under the engine's plan (after its own fuse / fuseQkvAttn and max_rows: model.js loadModel):
 * 0 where it does not run fused true, runs fuseQkvAttn or holds no more than one block (seq_len <= attnBlock); where
 * the blocks' partials (n_heads, blocks, max_rows, dim) floats would exceed a storage binding of maxBinding bytes, 0
 * with 'auto' (plan.attnBlockAuto), and a number given is refused. */
export function modelAttnBlock(plan, cfg, maxBinding) {
  if (!plan.attnBlock || plan.fuse !== true || plan.fuseQkvAttn || cfg.seq_len <= plan.attnBlock) return 0;
  const nb = attnBlocks(plan, cfg.seq_len);
  const bytes = cfg.n_heads * nb * plan.maxRows * cfg.dim * 4;
  if (bytes <= maxBinding) return plan.attnBlock;
  if (plan.attnBlockAuto) return 0;
  throw new Error(`attnBlock ${plan.attnBlock}: the attention's partials of ${nb} key blocks (seq_len ${cfg.seq_len}, ${plan.maxRows} rows) take ${bytes} bytes, more than the storage binding limit ${maxBinding}; use a larger attnBlock or a smaller seq_len`);
}

/** The attention's key blocks for a KV capacity of seqLen (plan.attnBlock keys each; 1 without them). */
export const attnBlocks = (plan, seqLen) => (plan.attnBlock ? Math.ceil(seqLen / plan.attnBlock) : 1);

/** The most passes one batched step (decodeAhead / specRound) may hold. */
export const MAX_PASSES = 64;

/** What adapterInfo.kernels reports: the kernels and variants the engine runs. */
export function kernelsInfo(plan) {
  const fuse = plan.fuse ? { fuse: plan.fuse, fuseWg: plan.fuseWg, fuseSlice: plan.fuseSlice, fuseHeadWg: plan.fuseHeadWg,
    fuseHeadPairs: plan.fuseHeadPairs, fuseMatmulWg: plan.fuseMatmulWg, fuseQkvPairs: plan.fuseQkvPairs, auto: plan.fuseAuto,
    fuseQkvAttn: plan.fuseQkvAttn, fuseQkvAttnWg: plan.fuseQkvAttnWg, fuseWgRows: plan.fuseWgRows,
    fuseMatmulWgRows: plan.fuseMatmulWgRows, fuseQkvPairsRows: plan.fuseQkvPairsRows, qkvRowsMin: plan.qkvRowsMin,
    qkvRowsMax: plan.qkvRowsMax, qkvRowsDense: plan.qkvRowsDense, fuseTouch: [...plan.fuseTouch],
    lightDown: plan.lightDown } : false;
  return { matmul: (plan.subgroups ? `matmul_sg (LANES=${plan.sgSize}` : `matmul (LANES=${plan.lanes}`) + (plan.ksplit > 1 ? `, KSPLIT=${plan.ksplit})` : ')'),
    attention_wg: plan.attnWg, fuse, row_tiles: [...plan.rowTiles], row_tiles_max: plan.rowTilesMax, tile8_rows: plan.tile8Rows, attn_split: plan.attnSplit,
    attn_rows_z: plan.attnRowsZ, head_sum: plan.headSum, head_stage: plan.headStage, attn_block: plan.attnBlock };
}
