// ab_engines.mjs — engine option sets against each other IN ONE PROCESS, rounds interleaved, on a SmolLM2-135M-shaped
// model (synth.mjs): a difference smaller than what separate processes give (placement, clocks, the machine's other
// work) shows here or not at all. Each variant is its own engine (createEngine with its options) and model.
//
//   node bench/gpu/ab_engines.mjs [--backend vulkan|opengl] VARIANTS_JSON
//     VARIANTS_JSON: [{"name": "default", "opts": {}}, {"name": "kb0", "opts": {"attnBlock": 0}}, ...]
//   env: ROUNDS (5) rounds, each variant in turn; ITERS (20) one-row passes a round; AHEAD_N (16), AHEAD_RUNS (8):
//        decodeAhead runs of n tokens chained by continuations (the champion alone's path in the decode loop), one
//        chain a round; BENCH_POS (64) where both start, BENCH_SEQ (1,024) the KV capacity; SYNTH_LAYERS (30);
//        engine_env.mjs's variables (EMULATE_SG=1, FUSE, ...) apply to every variant before its own opts.
// Prints per variant: T_single (wall, GPU with timestamps, submit, wait) and the chained decodeAhead's ms a token,
// medians over every round's values [min-max of the round medians], and each ratio to the first variant; then one
// line `JSON {...}`. Timestamps are on for T_single and off for the chains (the engine runs no continuation while
// it times a submission).
// Dry run here: EMULATE_SG=1 FUSE=1 SYNTH_LAYERS=1 ROUNDS=2 ITERS=3 AHEAD_RUNS=2 node bench/gpu/ab_engines.mjs
//   --backend opengl '[{"name":"kb0","opts":{"attnBlock":0}},{"name":"kb512","opts":{"attnBlock":512}}]'
import { createEngine } from '../../app/gpu/engine.js';
import { adapterOptions, dawnGpu, envEngineOptions } from '../../tests/gpu/engine_env.mjs';
import { smolDescription, synthBytes } from './synth.mjs';
import { median } from './stats.mjs';

const args = process.argv.slice(2);
const bi = args.indexOf('--backend');
const backend = bi >= 0 ? args[bi + 1] : 'vulkan';
const variants = JSON.parse(args.filter((a, i) => i !== bi && i !== bi + 1)[0] ?? 'null');
if (!Array.isArray(variants) || !variants.length || variants.some((v) => typeof v?.name !== 'string' || typeof v.opts !== 'object')) {
  throw new Error('usage: node bench/gpu/ab_engines.mjs [--backend B] \'[{"name": ..., "opts": {...}}, ...]\'');
}
const env = (k, d) => Number(process.env[k] ?? d);
const [rounds, iters, aheadN, aheadRuns] = [env('ROUNDS', 5), env('ITERS', 20), env('AHEAD_N', 16), env('AHEAD_RUNS', 8)];
const P = env('BENCH_POS', 64);
const seqLen = env('BENCH_SEQ', 1024);
if (P + 9 > seqLen || P + aheadN * aheadRuns > seqLen) throw new Error(`BENCH_POS ${P} + the chains' tokens exceed BENCH_SEQ ${seqLen}`);
const gpu = dawnGpu(backend);
const desc = smolDescription(env('SYNTH_LAYERS', 30));
const V = desc.config.vocab_size;
const tok = (n, at = 0) => Array.from({ length: n }, (_, i) => ((at + i) * 7919 + 13) % V);

const runs = [];
for (const v of variants) {
  const engine = await createEngine(gpu, { adapterOptions: adapterOptions(backend), timestamps: true,
    ...envEngineOptions(process.env), ...v.opts });
  const model = await engine.loadModel(desc, async (o, n) => synthBytes(desc, o, n), { seq_len: seqLen });
  await model.forward(tok(P), 0, 1);
  runs.push({ v, engine, model, single: { wall: [], gpu: [], submit: [], wait: [] }, chain: [], roundMed: { wall: [], gpu: [], chain: [] } });
  console.log(`${v.name}: ${JSON.stringify(v.opts)}; the model's attnBlock ${model.plan.attnBlock}, fuse ${model.plan.fuse}`);
}

for (let r = 0; r < rounds; r++) {
  for (const run of runs) {
    const { model, single } = run;
    const wall = [];
    const gpuMs = [];
    for (let i = 0; i < iters + 1; i++) {   // the first pass of a round warms (encodes and pre-encodes)
      const t = performance.now();
      await model.forward(tok(1, P + i), P, 1);
      const ms = performance.now() - t;
      model.truncate(P);
      if (i === 0) continue;
      wall.push(ms);
      single.wall.push(ms);
      single.submit.push(model.stats.submit_ms);
      single.wait.push(model.stats.wait_ms);
      if (model.stats.gpu_ms != null) { gpuMs.push(model.stats.gpu_ms); single.gpu.push(model.stats.gpu_ms); }
    }
    run.roundMed.wall.push(median(wall));
    if (gpuMs.length) run.roundMed.gpu.push(median(gpuMs));
    // the champion alone's path: decodeAhead runs of n chained by continuations (timestamps off)
    const ts = model.ts;
    model.ts = null;
    model.pres.clear();
    const pick = { temperature: 0, seed: 0 };
    let id = 7;
    await model.decodeAhead(id, P, aheadN, pick, false, 0);   // warm
    model.truncate(P);
    const t0 = performance.now();
    for (let c = 0; c < aheadRuns; c++) {
      const out = await model.decodeAhead(id, P + c * aheadN, aheadN, pick, false, c < aheadRuns - 1 ? aheadN : 0);
      id = out.ids[aheadN - 1];
    }
    const perTok = (performance.now() - t0) / (aheadRuns * aheadN);
    run.chain.push(perTok);
    run.roundMed.chain.push(perTok);
    model.truncate(P);
    model.ts = ts;
    model.pres.clear();
  }
}

const out = { backend, pos: P, seq_len: seqLen, rounds, iters, ahead_n: aheadN, ahead_runs: aheadRuns,
  adapter: runs[0].engine.adapterInfo.description || runs[0].engine.adapterInfo.device,
  kernels: runs.map((run) => run.engine.adapterInfo.kernels), variants: [] };
const base = runs[0];
const span = (a) => (a.length ? `[${Math.min(...a).toFixed(3)}-${Math.max(...a).toFixed(3)}]` : '');
for (const run of runs) {
  const s = run.single;
  const res = { name: run.v.name, opts: run.v.opts, single_wall_ms: median(s.wall), single_gpu_ms: s.gpu.length ? median(s.gpu) : null,
    submit_ms: median(s.submit), wait_ms: median(s.wait), chain_ms_per_token: median(run.chain), round_medians: run.roundMed };
  res.ratio = { single_wall: res.single_wall_ms / median(base.single.wall), chain: res.chain_ms_per_token / median(base.chain),
    single_gpu: res.single_gpu_ms != null && base.single.gpu.length ? res.single_gpu_ms / median(base.single.gpu) : null };
  out.variants.push(res);
  console.log(`${run.v.name}: T_single wall ${res.single_wall_ms.toFixed(3)} ms ${span(run.roundMed.wall)} (x${res.ratio.single_wall.toFixed(3)}), ` +
    `GPU ${res.single_gpu_ms?.toFixed(3) ?? 'n/a'} ms ${span(run.roundMed.gpu)}${res.ratio.single_gpu ? ` (x${res.ratio.single_gpu.toFixed(3)})` : ''}, ` +
    `submit ${res.submit_ms.toFixed(3)}, wait ${res.wait_ms.toFixed(3)}; decodeAhead chained ${res.chain_ms_per_token.toFixed(3)} ms/token ` +
    `${span(run.roundMed.chain)} = ${(1e3 / res.chain_ms_per_token).toFixed(0)} tok/s (x${res.ratio.chain.toFixed(3)} time)`);
}
console.log('JSON ' + JSON.stringify(out));
for (const run of runs) { run.model.destroy(); run.engine.destroy(); }
process.exit(0);
