// head_bench.mjs — the draft head on the engine (app/gpu/head.js) against its champion, under Node + Dawn (llvmpipe
// over OpenGL here, an H200 over Vulkan): what one head pass costs next to one champion pass, for the head's LM head
// variants, and what the head adds to the GPU's memory. Driven by py/bench/head_engine.py (which writes the
// descriptions with exactspec.formats.describe).
//
//   node bench/gpu/head_bench.mjs SPEC.json
//   SPEC: {backend, champion: {model, description, seq_len}, heads: [{name, model, description, opts}], prompt: [ids],
//          reps, ks: [k...], engine_opts, timestamps}
// Prints one JSON line: {adapter, champion: {forward_ms, verify_ms: {k}, gpu_ms?}, heads: {name: {forward_ms,
// forward_gpu_ms?, round_ms: {k}, champion_round_ratio, memory, dispatches, profile?}}}. Wall times are medians
// over reps of a forward with its readback at the position right after the prompt (then rolled back); a head
// pass is its forward of one token (the first pass of a round: it reads the champion's feature). round_ms: the
// champion's specRound(head, [token], ..., k) — k head passes and the verify in one submission.
import { readFileSync } from 'node:fs';
import { createEngine } from '../../app/gpu/engine.js';
import { adapterOptions, dawnGpu, envEngineOptions, fileReader } from '../../tests/gpu/engine_env.mjs';

const spec = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const gpu = dawnGpu(spec.backend ?? 'opengl');
const median = (a) => { const b = [...a].sort((x, y) => x - y); return b[Math.floor(b.length / 2)]; };
const reps = spec.reps ?? 5;

async function timed(fn) {
  const t = [];
  const g = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    const st = await fn();
    t.push(performance.now() - t0);
    if (st?.gpu_ms != null) g.push(st.gpu_ms);
  }
  return { ms: median(t), min: Math.min(...t), gpu_ms: g.length ? median(g) : null };
}

async function main() {
  const engine = await createEngine(gpu, { adapterOptions: adapterOptions(spec.backend ?? 'opengl'),
    ...envEngineOptions(process.env), ...(spec.engine_opts ?? {}), timestamps: !!spec.timestamps });
  const c = await engine.loadModel(spec.champion.description, fileReader(spec.champion.model),
    { seq_len: spec.champion.seq_len, features: true });
  const prompt = spec.prompt;
  const P = prompt.length - 1;
  const tok = prompt[P];
  await c.forward(prompt.slice(0, P), 0, 1);
  const one = async () => { await c.forward([tok], P, 1); const st = { ...c.stats }; c.truncate(P); return st; };
  await one();
  const out = { adapter: engine.adapterInfo, champion: { forward: await timed(one), dispatches: c.stats.dispatches, verify: {} }, heads: {} };
  for (const k of spec.ks) {
    const ver = async () => { await c.forward(Array(k + 1).fill(tok), P, k + 1); const st = { ...c.stats }; c.truncate(P); return st; };
    await ver();
    out.champion.verify[k] = await timed(ver);
  }
  const pick = { temperature: 0, seed: 0 };
  for (const h of spec.heads) {
    const head = await engine.loadHead(h.description, fileReader(h.model), c, h.opts ?? {});
    await head.forward(prompt.slice(0, P), 0, 1);                      // the head holds the prompt but its last token
    const hp = head.length;
    const fwd = async () => { await head.forward([tok], hp, 1); const st = { ...head.stats }; head.truncate(hp); return st; };
    await fwd();
    const r = { forward: await timed(fwd), dispatches: head.stats.dispatches, round: {}, memory: head.memory() };
    for (const k of spec.ks) {
      const rnd = async () => {
        await c.specRound(head, [tok], hp, k, tok, P, pick, false);
        const st = { ...c.stats };
        c.truncate(P);
        head.truncate(hp);
        return st;
      };
      await rnd();
      r.round[k] = await timed(rnd);
    }
    r.head_over_champion = r.forward.ms / out.champion.forward.ms;
    if (spec.timestamps && head.ts) r.profile_us = await head.profile(1);
    out.heads[h.name] = r;
    head.destroy();
  }
  if (spec.timestamps && c.ts) out.champion.profile_us = await c.profile(1);
  console.log(JSON.stringify(out));
  engine.destroy();
}

main().then(() => process.exit(0), (e) => { console.error(e.stack ?? String(e)); process.exit(1); });
