// driver.mjs — run the WebGPU engine (app/gpu/engine.js) under Node + Dawn for tests and benches.
//
//   node tests/gpu/driver.mjs SPEC.json OUT.bin
// Env EXACTSPEC_ENGINE_OPTS: JSON of extra createEngine options (variants: {"splits": 1, "tile8": false}).
// SPEC: {model: PATH (GGUF file or Hugging Face folder), description: describe() dict, seq_len?, backend?:
//        'opengl'|'vulkan'|..., max_rows?, lanes?, engine_opts?: {extra createEngine options, e.g. fuse}, emulate_sg?,
//        ksplit?, max_binding_bytes?, break_shader?, draft?: {model, description, seq_len?} (a second model),
//        head?: {model, description, opts?} (a draft head on the champion: engine.loadHead, ops on: 'head'),
//        ops: [{op: 'forward', tokens, start_pos, n_out?, on?: 'draft'} | {op: 'truncate', n, on?} |
//              {op: 'decode_ahead', token (or 'last': the last id the model's previous decode_ahead returned), start_pos,
//               n, pick: {temperature, seed}, rows, then?, stop?, on?} |
//              {op: 'spec_round', feed, draft_start, k, token, start_pos, pick, rows, draft?: 'draft' | 'head'} |
//              {op: 'verify', tokens, start_pos, pick, rows, on?} |
//              {op: 'ngram_chain', seq, start_pos, rounds, k, pick, ngram, then?, stop?, on?} |
//              {op: 'memory', on} (a head's memory()) |
//              {op: 'read_features', start_pos, n, on?} (a model loaded with spec.features / draft.features) |
//              {op: 'lose_device'} (destroys the device)]}
// Writes every op's logits rows (float32, row-major: forwards, and batched steps asked for rows) back to back into
// OUT.bin and prints one JSON line: {adapter, results: [{op, rows, ...}], load_ms, layers: {ops, far, shared,
// block_kernels} (the champion's layer lists, below)}. If no adapter: prints
// {"no_adapter": reason}, exit 3.
import { readFileSync, writeFileSync } from 'node:fs';
import { createEngine } from '../../app/gpu/engine.js';
import { dawnGpu, fileReader, specEngineOptions } from './engine_env.mjs';

const [specPath, outPath] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(specPath, 'utf8'));
const gpu = dawnGpu(spec.backend ?? 'opengl');

/** One op on the models; returns [result, Float32Array of rows or null]. */
async function runOp(op, models, engine) {
  const m = models[op.on ?? 'champion'];
  const list = (a) => Array.from(a);
  if (op.op === 'forward') {
    const y = await m.forward(op.tokens, op.start_pos, op.n_out);
    return [{ rows: y.length / m.config.vocab_size, dispatches: m.stats.dispatches, fused: m.fused, chunks: m.stats.chunks,
      far_chunks: m.stats.far_chunks }, y];
  }
  if (op.op === 'truncate') { m.truncate(op.n); return [{ length: m.length }, null]; }
  if (op.op === 'decode_ahead') {
    const token = op.token === 'last' ? m.lastId : op.token;   // 'last': the last id of this model's last decode_ahead
    const r = await m.decodeAhead(token, op.start_pos, op.n, op.pick, op.rows, op.then ?? 0, op.stop ?? null);
    m.lastId = r.ids[r.ids.length - 1];
    return [{ ids: list(r.ids), rows: r.rows ? op.n : 0, length: m.length, ...m.stats }, r.rows];
  }
  if (op.op === 'spec_round') {
    const d = models[op.draft ?? 'draft'];
    const r = await m.specRound(d, op.feed, op.draft_start, op.k, op.token, op.start_pos, op.pick, op.rows);
    return [{ proposals: list(r.proposals), ids: list(r.ids), rows: r.rows ? op.k + 1 : 0, length: m.length,
      draft_length: d.length, ...m.stats }, r.rows];
  }
  if (op.op === 'verify') {
    const r = await m.verify(op.tokens, op.start_pos, op.pick, op.rows);
    return [{ ids: list(r.ids), rows: r.rows ? op.tokens.length : 0, length: m.length, ...m.stats }, r.rows];
  }
  if (op.op === 'ngram_chain') {
    const r = await m.ngramChain(op.seq, op.start_pos, op.rounds, op.k, op.pick, op.ngram ?? [2, 3], op.then ?? 0, op.stop ?? null);
    return [{ counts: list(r.counts), accepted: list(r.accepted), proposals: list(r.proposals), ids: list(r.ids),
      length: m.length, ...m.stats }, null];
  }
  if (op.op === 'memory') return [{ memory: m.memory() }, null];
  if (op.op === 'read_features') return [{ features: list(await m.readFeatures(op.start_pos, op.n)) }, null];
  if (op.op === 'lose_device') { engine.device.destroy(); return [{}, null]; }   // what a GPU reset looks like
  throw new Error(`unknown op ${op.op}`);
}

async function main() {
  let engine;
  const trace = [];
  try {
    // spec.trace: the engine's timeline (createEngine's `trace`) comes back beside the results
    engine = await createEngine(gpu, { ...specEngineOptions(spec), ...(spec.trace ? { trace: (r) => trace.push(r) } : {}) });
  } catch (e) {
    if (/no WebGPU adapter/.test(e.message)) {
      console.log(JSON.stringify({ no_adapter: e.message }));
      process.exit(3);
    }
    throw e;
  }
  const readers = [];
  const load = (m) => {
    const r = fileReader(m.model);
    readers.push(r);
    return engine.loadModel(m.description, r, { seq_len: m.seq_len ?? spec.seq_len, features: !!m.features });
  };
  const t0 = performance.now();
  const models = { champion: await load(spec) };
  const loadMs = performance.now() - t0;
  if (spec.draft) models.draft = await load(spec.draft);
  if (spec.head) {
    const r = fileReader(spec.head.model);
    readers.push(r);
    models.head = await engine.loadHead(spec.head.description, r, models.champion, spec.head.opts ?? {});
  }
  const outs = [];
  const results = [];
  for (const op of spec.ops) {
    try {
      const [res, rows] = await runOp(op, models, engine);
      results.push({ op: op.op, ...res });
      if (rows) outs.push(Buffer.from(rows.buffer, rows.byteOffset, rows.byteLength));
    } catch (e) {
      results.push({ op: op.op, error: e.message });
    }
  }
  for (const r of readers) r.close();
  writeFileSync(outPath, Buffer.concat(outs));
  // the champion's layer lists: ops, with attnBlock opsFar and how many of its ops are ops' own (model.js farOps),
  // and whether the engine compiled the key blocks' kernels
  const c = models.champion;
  const layers = { ops: c.ops.length, far: c.opsFar?.length ?? null, shared: c.opsFar?.filter((op, i) => op === c.ops[i]).length ?? null,
    block_kernels: 'attn_o_blocks' in engine.kernels };
  console.log(JSON.stringify({ adapter: engine.adapterInfo, results, load_ms: loadMs, layers, ...(spec.trace ? { trace } : {}) }));
  engine.destroy();
}

main().then(() => process.exit(0), (e) => { console.error(e.stack ?? String(e)); process.exit(1); });
