// spec_bench.mjs — champion tokens/s with and without greedy speculation, both models on the WebGPU engine.
//
//   node bench/gpu/spec_bench.mjs SPEC.json
// SPEC: {backend: 'opengl' | 'vulkan', champion: {model, description}, draft: {model, description},
//        prompt_ids: [...], max_new_tokens, ks: [1, 2, ...], seq_len?}
// (py/bench/gpu_spec.py writes it from the GGUF files.) Prints one JSON line:
// {adapter, plain: {tokens, ms, tok_s}, spec: {k: {ms, tok_s, tau, target_passes, draft_passes, identical}}}.
// Engine options: env EXACTSPEC_ENGINE_OPTS (JSON) and the bench variables (FUSE=1|attn, FUSE_SLICE, ...: see bench.mjs).
// The loop is the greedy case of exactspec.verify.coupled (argmax, lowest id on ties; accept while the draft's argmax
// equals the champion's; emit the champion's token at the first mismatch, the bonus after k matches), and the draft
// catches up on every committed token before proposing, as exactspec.drafters.ModelDrafter does. `identical` says the
// speculative tokens equal plain decoding's (they must: the engine is batch-invariant).
import { readFileSync } from 'node:fs';
import { createEngine } from '../../app/gpu/engine.js';
import { adapterOptions, dawnGpu, envEngineOptions, fileReader } from '../../tests/gpu/engine_env.mjs';

const spec = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const backend = spec.backend ?? 'opengl';
const gpu = dawnGpu(backend);

function argmax(a, row, V) {   // lowest id on ties
  let best = 0, bv = a[row * V];
  for (let i = 1; i < V; i++) { const v = a[row * V + i]; if (v > bv) { bv = v; best = i; } }
  return best;
}

async function load(engine, m) {
  return engine.loadModel(m.description, fileReader(m.model), { seq_len: spec.seq_len ?? 1024 });
}

async function prefill(model, prompt) {
  await model.truncate(0);
  if (prompt.length > 1) await model.forward(prompt.slice(0, -1), 0, 1);
}

async function plain(champ, prompt, n) {
  const V = champ.config.vocab_size;
  await prefill(champ, prompt);
  const seq = prompt.slice();
  const t0 = performance.now();
  while (seq.length - prompt.length < n) {
    const y = await champ.forward([seq[seq.length - 1]], seq.length - 1, 1);
    seq.push(argmax(y, 0, V));
  }
  const ms = performance.now() - t0;
  return { tokens: seq.slice(prompt.length), ms, tok_s: n / (ms / 1000) };
}

async function speculative(champ, draft, prompt, n, k) {
  const V = champ.config.vocab_size;
  await prefill(champ, prompt);
  await draft.truncate(0);
  const seq = prompt.slice();
  let targetPasses = 0, draftPasses = 0;
  const t0 = performance.now();
  while (seq.length - prompt.length < n) {
    const kk = Math.min(k, n - (seq.length - prompt.length) - 1);
    const props = [];
    let feed = seq.slice(draft.length);
    let pos = draft.length;
    for (let i = 0; i < kk; i++) {
      const y = await draft.forward(feed, pos, 1);
      draftPasses++;
      pos += feed.length;
      const tok = argmax(y, 0, V);
      props.push(tok);
      feed = [tok];
    }
    const rows = await champ.forward([seq[seq.length - 1], ...props], seq.length - 1, kk + 1);
    targetPasses++;
    for (let i = 0; i <= kk; i++) {
      const t = argmax(rows, i, V);
      seq.push(t);
      if (i === kk || props[i] !== t) break;
    }
    await champ.truncate(seq.length - 1);
    await draft.truncate(Math.min(draft.length, seq.length - 1));
  }
  const ms = performance.now() - t0;
  const tokens = seq.slice(prompt.length, prompt.length + n);
  return { tokens, ms, tok_s: n / (ms / 1000), tau: (seq.length - prompt.length) / targetPasses,
    target_passes: targetPasses, draft_passes: draftPasses };
}

async function main() {
  const engine = await createEngine(gpu, {
    adapterOptions: adapterOptions(backend),
    ...envEngineOptions(process.env),   // FUSE=1|attn, ..., EMULATE_SG=1, EXACTSPEC_ENGINE_OPTS: see bench.mjs
  });
  const champ = await load(engine, spec.champion);
  const draft = await load(engine, spec.draft);
  if (champ.config.vocab_size !== draft.config.vocab_size) throw new Error('draft and champion vocab_size differ');
  const prompt = spec.prompt_ids, n = spec.max_new_tokens;
  await plain(champ, prompt, Math.min(4, n));                  // warm-up: pipelines and command buffers
  for (const k of spec.ks) await speculative(champ, draft, prompt, Math.min(k + 2, n), k);
  const base = await plain(champ, prompt, n);
  const out = { adapter: engine.adapterInfo, plain: { tokens: base.tokens, ms: base.ms, tok_s: base.tok_s }, spec: {} };
  for (const k of spec.ks) {
    const r = await speculative(champ, draft, prompt, n, k);
    out.spec[k] = { ms: r.ms, tok_s: r.tok_s, tau: r.tau, target_passes: r.target_passes, draft_passes: r.draft_passes,
      identical: r.tokens.every((t, i) => t === base.tokens[i]), speedup: r.tok_s / base.tok_s };
  }
  console.log(JSON.stringify(out));
  champ.destroy();
  draft.destroy();
  engine.destroy();
}

main().then(() => process.exit(0), (e) => { console.error(e.stack || String(e)); process.exit(1); });
