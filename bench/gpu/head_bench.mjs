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
import { readFileSync, writeFileSync } from 'node:fs';
import { createEngine } from '../../app/gpu/engine.js';
import { adapterOptions, dawnGpu, envEngineOptions, fileReader } from '../../tests/gpu/engine_env.mjs';
import { median } from './stats.mjs';

const spec = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const gpu = dawnGpu(spec.backend ?? 'opengl');
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
  const recs = [];                   // EXACTSPEC_TRACE=FILE: the engine's timeline (createEngine's trace), at exit
  if (process.env.EXACTSPEC_TRACE) process.on('exit', () => writeFileSync(process.env.EXACTSPEC_TRACE, recs.map((r) => JSON.stringify(r)).join('\n')));
  const engine = await createEngine(gpu, { adapterOptions: adapterOptions(spec.backend ?? 'opengl'),
    ...envEngineOptions(process.env), ...(spec.engine_opts ?? {}), timestamps: !!spec.timestamps,
    ...(process.env.EXACTSPEC_TRACE ? { trace: (r) => recs.push(r) } : {}) });
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
  if (!spec.timestamps) {            // the champion alone as the decode loop runs it: decodeAhead runs of 4, continued
    const n = spec.chain_loop ?? 8;
    for (let rep = 0; rep < 2; rep++) {
      let t = tok;
      const t0 = performance.now();
      for (let i = 0; i < 2 * n; i++) {
        const res = await c.decodeAhead(t, P + 4 * i, 4, pick, false, i < 2 * n - 1 ? 4 : 0);
        t = res.ids[3];
      }
      out.champion.ahead_loop = { ms_per_token: (performance.now() - t0) / (8 * n), continued_last: c.stats.continued };
      c.truncate(P);
    }
  }
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
    // specChain: R rounds a submission (one timed alone: wall, GPU with timestamps, the host's share), then chains
    // back to back as the decode loop runs them (each hinting the next: continuations; without timestamps only)
    const R = spec.chain_rounds ?? 4;
    r.chain = {};
    r.chain_loop = {};
    for (const k of spec.ks) {
      let st = null;
      const once = async () => {
        await c.specChain(head, prompt, hp, R, k, pick, true);
        st = { ...c.stats };
        c.truncate(P);
        head.truncate(hp);
        return st;
      };
      await once();
      r.chain[k] = { ...(await timed(once)), rounds: R, dispatches: st.dispatches, encode_ms: st.encode_ms,
        submit_ms: st.submit_ms, pre_encoded: st.pre_encoded };   // (the host's share: the last timed call's)
      if (spec.timestamps) continue;
      const n = spec.chain_loop ?? 8;
      for (let rep = 0; rep < 2; rep++) {      // (the first: warm-up)
        let seq = prompt.slice();
        let rounds = 0;
        let tokens = 0;
        const t0 = performance.now();
        for (let i = 0; i < n; i++) {
          const res = await c.specChain(head, seq, head.length, R, k, pick, true, i < n - 1 ? R : 0);
          let o = 0;
          for (let j = 0; j < R; j++) {
            const a = res.accepted[j];
            seq = seq.concat(Array.from(res.proposals.slice(j * k, j * k + a)), [res.ids[o + a]]);
            o += k + 1;
            tokens += a + 1;
          }
          rounds += R;
        }
        r.chain_loop[k] = { ms_per_round: (performance.now() - t0) / rounds, ms_per_token: (performance.now() - t0) / tokens,
          rounds, tokens, continued_last: c.stats.continued };
        c.truncate(P);
        head.truncate(hp);
      }
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
