// engine_server.mjs — the WebGPU engine (Node + Dawn) served over stdin/stdout, one JSON request per line, so that
// Python can drive engine models as JS model objects (tests/gpu/engine_rpc.py: the decode loop through
// exactspec.bridge.JsBackend, end to end on the engine).
//
//   node tests/gpu/engine_server.mjs SPEC.json      SPEC: createEngine options of a test spec (engine_env.mjs)
// Requests {cmd, ...}: load {name, model, description, seq_len?} -> {config, length, aheadMax, chainRounds,
//   chainMaxK};
//   forward {name, tokens, start_pos, n_out} -> {rows (base64 float32), length};  truncate {name, n} -> {length};
//   decodeAhead {name, token, start_pos, n, pick, rows, then?, stop?} -> {ids, rows, length, continued (its result was a
//     continuation the call before had submitted)};
//   specRound {name, draft, feed, draft_start, k, token, start_pos, pick, rows, copy?} -> {proposals, ids, rows, length,
//   draft_length}; verify {name, tokens, start_pos, pick, rows} -> {ids, rows, length}; ngramChain {name, seq,
//   start_pos, rounds, k, pick, ngram, then?, stop?} -> {counts, accepted, proposals, ids, length, continued};
//   specChain {name, draft, seq, draft_start, rounds, k, pick, restart?, then?, stop?, copy?} -> {counts, accepted, proposals,
//   ids, length, draft_length, continued};
//   info -> {adapter};
//   load_head {name, model, description, champion, opts?} -> {config, length, aheadMax, memory} (a draft head on the
//   model named `champion`: engine.loadHead); bind {name, champion} (the head re-pointed). A failed request answers
//   {error: message}.
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { createEngine } from '../../app/gpu/engine.js';
import { dawnGpu, fileReader, specEngineOptions } from './engine_env.mjs';

const spec = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const gpu = dawnGpu(spec.backend ?? 'opengl');
const b64 = (a) => (a ? Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString('base64') : null);

async function handle(engine, models, q) {
  const m = models.get(q.name);
  if (q.cmd === 'info') return { adapter: engine.adapterInfo };
  if (q.cmd === 'load') {
    const model = await engine.loadModel(q.description, fileReader(q.model), { seq_len: q.seq_len ?? undefined });
    models.set(q.name, model);
    return { config: model.config, length: model.length, aheadMax: model.aheadMax, chainRounds: model.chainRounds,
      chainMaxK: model.chainMaxK };
  }
  if (q.cmd === 'load_head') {
    const head = await engine.loadHead(q.description, fileReader(q.model), models.get(q.champion), q.opts ?? {});
    models.set(q.name, head);
    return { config: head.config, length: head.length, aheadMax: head.aheadMax, memory: head.memory(), head_config: head.headConfig };
  }
  if (!m) throw new Error(`no model ${q.name}`);
  if (q.cmd === 'bind') { m.bind(models.get(q.champion)); return { length: m.length }; }
  if (q.cmd === 'forward') return { rows: b64(await m.forward(q.tokens, q.start_pos, q.n_out)), length: m.length };
  if (q.cmd === 'truncate') { m.truncate(q.n); return { length: m.length }; }
  if (q.cmd === 'decodeAhead') {
    const r = await m.decodeAhead(q.token, q.start_pos, q.n, q.pick, q.rows, q.then ?? 0, q.stop ?? null);
    return { ids: Array.from(r.ids), rows: b64(r.rows), length: m.length, continued: m.stats.continued ?? false };
  }
  if (q.cmd === 'specRound') {
    const d = models.get(q.draft);
    const r = await m.specRound(d, q.feed, q.draft_start, q.k, q.token, q.start_pos, q.pick, q.rows, q.copy ?? null);
    return { proposals: Array.from(r.proposals), ids: Array.from(r.ids), rows: b64(r.rows), length: m.length, draft_length: d.length };
  }
  if (q.cmd === 'verify') {
    const r = await m.verify(q.tokens, q.start_pos, q.pick, q.rows);
    return { ids: Array.from(r.ids), rows: b64(r.rows), length: m.length };
  }
  if (q.cmd === 'ngramChain') {
    const r = await m.ngramChain(q.seq, q.start_pos, q.rounds, q.k, q.pick, q.ngram, q.then ?? 0, q.stop ?? null);
    return { counts: Array.from(r.counts), accepted: Array.from(r.accepted), proposals: Array.from(r.proposals),
      ids: Array.from(r.ids), length: m.length, continued: m.stats.continued ?? false, far_chunks: m.stats.far_chunks };
  }
  if (q.cmd === 'specChain') {
    const d = models.get(q.draft);
    const r = await m.specChain(d, q.seq, q.draft_start, q.rounds, q.k, q.pick, q.restart ?? false, q.then ?? 0, q.stop ?? null,
      q.copy ?? null);
    return { counts: Array.from(r.counts), accepted: Array.from(r.accepted), proposals: Array.from(r.proposals),
      ids: Array.from(r.ids), length: m.length, draft_length: d.length, continued: m.stats.continued ?? false,
      far_chunks: m.stats.far_chunks };
  }
  throw new Error(`unknown command ${q.cmd}`);
}

async function main() {
  const engine = await createEngine(gpu, specEngineOptions(spec));
  const models = new Map();
  for await (const line of createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    let out;
    try { out = await handle(engine, models, JSON.parse(line)); } catch (e) { out = { error: e.message }; }
    process.stdout.write(JSON.stringify(out) + '\n');
  }
  engine.destroy();
}

main().then(() => process.exit(0), (e) => { console.error(e.stack ?? String(e)); process.exit(1); });
