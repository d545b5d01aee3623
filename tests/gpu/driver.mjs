// driver.mjs — run the WebGPU engine (app/gpu/engine.js) under Node + Dawn for tests and benches.
//
//   node tests/gpu/driver.mjs SPEC.json OUT.bin
// Env EXACTSPEC_ENGINE_OPTS: JSON of extra createEngine options (variants: {"splits": 1, "tile8": false}).
// SPEC: {model: PATH (GGUF file or Hugging Face folder), description: describe() dict, seq_len?, backend?: 'opengl'|'vulkan'|..., max_rows?, lanes?,
//        engine_opts?: {extra createEngine options, e.g. fuse}, emulate_sg?, ksplit?,
//        ops may also hold {op: 'lose_device'} (destroys the device),
//        max_binding_bytes?, ops: [{op: 'forward', tokens, start_pos, n_out?} | {op: 'truncate', n}]}
// Writes every forward's logits (float32, row-major) back to back into OUT.bin and prints one JSON line:
// {adapter, results: [{op, rows, dispatches}], load_ms}. If no adapter: prints {"no_adapter": reason}, exit 3.
import { readFileSync, writeFileSync, openSync, readSync, closeSync } from 'node:fs';
import { join } from 'node:path';
import { create, globals } from 'webgpu';
import { createEngine } from '../../app/gpu/engine.js';
import { defaultShaderSource } from '../../app/gpu/kernels.js';
import { emulateSubgroups } from './engine_env.mjs';

Object.assign(globalThis, globals);
const [specPath, outPath] = process.argv.slice(2);
const spec = JSON.parse(readFileSync(specPath, 'utf8'));
const backend = spec.backend ?? 'opengl';
const flags = [`backend=${backend}`];
if (backend === 'vulkan') flags.push('disable-dawn-features=timestamp_quantization');
const gpu = create(flags);
globalThis.__dawnGPU = gpu;   // keep the reference alive (GC of it crashes Node)

async function main() {
  let engine;
  try {
    engine = await createEngine(gpu, {
      adapterOptions: backend === 'opengl' ? { featureLevel: 'compatibility' } : { powerPreference: 'high-performance' },
      maxRows: spec.max_rows, maxBindingBytes: spec.max_binding_bytes, lanes: spec.lanes,
      ...(spec.emulate_sg ? { shaderSource: emulateSubgroups, lanes: 1, subgroups: false, tile8: true, tile1: true,
        emulatedSubgroups: true, ksplit: spec.ksplit ?? 1 } : {}),
      ...(spec.engine_opts ?? {}),   // the test's own extra options (e.g. {"fuse": true, "fuseSlice": 32})
      // spec.break_shader: that kernel's WGSL is served broken (tests of what the engine does when a kernel is rejected)
      ...(spec.break_shader ? { shaderSource: async (name) => (name === spec.break_shader ? 'fn main( {'
        : (spec.emulate_sg ? emulateSubgroups : defaultShaderSource(new URL('../../shaders/', import.meta.url)))(name)) } : {}),
      // extra engine options (variants on a GPU host, e.g. {"splits": 1, "tile8": false})
      ...JSON.parse(process.env.EXACTSPEC_ENGINE_OPTS || '{}'),
    });
  } catch (e) {
    if (/no WebGPU adapter/.test(e.message)) {
      console.log(JSON.stringify({ no_adapter: e.message }));
      process.exit(3);
    }
    throw e;
  }
  // spec.model: a GGUF file, or a Hugging Face folder (each tensor's `file` is a shard in it)
  const fds = new Map();
  const fdOf = (file) => {
    const p = file ? join(spec.model, file) : spec.model;
    if (!fds.has(p)) fds.set(p, openSync(p, 'r'));
    return fds.get(p);
  };
  const readSlice = async (offset, nbytes, file) => {
    const b = Buffer.alloc(nbytes);
    const got = readSync(fdOf(file), b, 0, nbytes, offset);
    return b.buffer.slice(b.byteOffset, b.byteOffset + got);
  };
  const t0 = performance.now();
  const model = await engine.loadModel(spec.description, readSlice, { seq_len: spec.seq_len });
  const loadMs = performance.now() - t0;
  const outs = [];
  const results = [];
  for (const op of spec.ops) {
    if (op.op === 'forward') {
      try {
        const y = await model.forward(op.tokens, op.start_pos, op.n_out);
        outs.push(Buffer.from(y.buffer));
        results.push({ op: 'forward', rows: y.length / model.config.vocab_size, dispatches: model.stats.dispatches, fused: model.fused,
          chunks: model.stats.chunks });
      } catch (e) {
        results.push({ op: 'forward', error: e.message });
      }
    } else if (op.op === 'truncate') {
      try { model.truncate(op.n); results.push({ op: 'truncate', length: model.length }); }
      catch (e) { results.push({ op: 'truncate', error: e.message }); }
    } else if (op.op === 'lose_device') {
      engine.device.destroy();   // what a GPU reset looks like to the engine
      results.push({ op: 'lose_device' });
    } else throw new Error(`unknown op ${op.op}`);
  }
  for (const fd of fds.values()) closeSync(fd);
  writeFileSync(outPath, Buffer.concat(outs));
  console.log(JSON.stringify({ adapter: engine.adapterInfo, results, load_ms: loadMs }));
  model.destroy();
  engine.destroy();
}

main().then(() => process.exit(0), (e) => { console.error(e.stack ?? String(e)); process.exit(1); });
