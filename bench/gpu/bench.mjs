// bench.mjs — speed of the WebGPU engine under Node + Dawn (H200 over Vulkan, or llvmpipe over OpenGL here).
//
//   node bench/gpu/bench.mjs [--backend vulkan|opengl] [--model FILE --desc DESC.json] [--quick] [--model-only]
// Engine variants by environment (engine_env.mjs envEngineOptions): SPLITS, PASS_SPLITS, KSPLIT, TILE1/TILE8,
// MATMUL_WG, ATTN_WG, SUBGROUPS, LANES, ROW_TILES (qkv,ffn,... | all) / ROW_TILES_MAX, ATTN_SPLIT, HEAD_SUM=1 and the fused engine
// FUSE=0|1|attn, FUSE_SLICE, FUSE_WG, FUSE_HEAD_WG, FUSE_HEAD_PAIRS, FUSE_MM_WG; EMULATE_SG=1 runs the subgroup
// kernels with one-lane subgroups (a check that they run on llvmpipe here, not a speed figure). AHEAD_NS (default
// 4,8,16,32): decodeAhead sizes; DRAFT_LAYERS (default 2): the synthetic draft of the specRound measurement;
// SYNTH_LAYERS (default 30): layers of the synthetic model (fewer: dry runs of the scripts here). CHAIN=1: also the
// n-gram chain's GPU time per round (benchChain). VERIFY_ONLY=1: stop after T_single, T_verify(k) and the GPU time per kind.
// EXACTSPEC_ENGINE_OPTS (JSON): any createEngine option (e.g. fuseWgRows). BENCH_POS (default 64): the position the
// model's passes are timed at (T_single, T_verify, the profiles' first two), BENCH_SEQ (default 1,024) its KV capacity.
// Without --model it builds SmolLM2-135M-shaped weights in memory (same shapes and ggml types as the champion:
// Q4_1 matrices, Q8_0 token_embd, F32 norms; random quants): speed depends on shapes and types only.
// Prints: copy bandwidth, matmul effective bandwidth (Q4_1 / Q8_0 / F32, 8192 x 4096, B = 1..9 rows),
// T_verify(k) / T_single for k = 1..8, tokens/s decoding alone (one forward and readback per token), the batched step:
// decodeAhead tok/s and GPU time per pass for each n, specRound(k) time against T_single with a DRAFT_LAYERS-layer
// draft, dispatches per forward, GPU vs encode time.
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { createEngine } from '../../app/gpu/engine.js';
import { matmulTiles, tileFor } from '../../app/gpu/graph.js';
import { MODE } from '../../app/gpu/kernels.js';
import { rowBytes } from '../../app/gpu/weights.js';
import { adapterOptions, dawnGpu, envEngineOptions, fileReader } from '../../tests/gpu/engine_env.mjs';
import { smolDescription, synthBytes } from './synth.mjs';
import { median } from './stats.mjs';

const args = process.argv.slice(2);
const arg = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };
const backend = arg('--backend', 'vulkan');
const quick = args.includes('--quick');
const only = args.includes('--matmul-only');
const modelOnly = args.includes('--model-only');
const gpu = dawnGpu(backend);
const out = {};
const log = (...a) => console.log(...a);

async function timeSubmit(device, fn) {
  const t0 = performance.now();
  fn();
  await device.queue.onSubmittedWorkDone();
  return performance.now() - t0;
}

async function main() {
  const engine = await createEngine(gpu, {
    adapterOptions: adapterOptions(backend),
    timestamps: true,
    shaderBase: process.env.SHADER_BASE ? pathToFileURL(process.env.SHADER_BASE + '/') : undefined,
    ...envEngineOptions(process.env),
  });
  const { device, kernels } = engine;
  const hasTs = device.features.has('timestamp-query');
  out.adapter = engine.adapterInfo;
  log('adapter:', JSON.stringify(engine.adapterInfo.description || engine.adapterInfo.device), 'timestamps:', hasTs,
    'kernels:', JSON.stringify(engine.adapterInfo.kernels));

  // ---- matmul effective bandwidth
  out.matmul = {};
  if (!modelOnly) {
  const K = Number(process.env.MM_K ?? 4096);
  const N = Number(process.env.MM_N ?? 8192);
  const qs = hasTs ? device.createQuerySet({ type: 'timestamp', count: 2 }) : null;
  const qbuf = device.createBuffer({ size: 16, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
  const qread = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  for (const type of process.env.MM_TYPES ? process.env.MM_TYPES.split(',') : quick ? ['Q4_1'] : ['Q4_1', 'Q8_0', 'F32']) {
    const wtype = { Q4_1: 3, Q8_0: 8, F32: 0 }[type];
    const rb = rowBytes(type, K).packed;
    const wBytes = rb * N;
    const copies = Math.max(2, Math.ceil((256 << 20) / wBytes));
    const ws = [];
    for (let c = 0; c < copies; c++) {
      const buf = device.createBuffer({ size: wBytes, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
      const row = new Uint8Array(synthBytes({ tensors: [{ offset: 0, nbytes: 1 << 30, ggml_type: type === 'F32' ? 'F32' : type }] }, 0, Math.min(wBytes, 16 << 20)));
      if (type === 'Q8_0') { /* already padded-agnostic random; scales at 34-byte stride are fine for timing */ }
      for (let o = 0; o < wBytes; o += row.byteLength) device.queue.writeBuffer(buf, o, row, 0, Math.min(row.byteLength, wBytes - o));
      ws.push(buf);
    }
    const maxB = 9;
    const x = device.createBuffer({ size: maxB * K * 4, usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(x, 0, new Float32Array(maxB * K).map(() => Math.random() - 0.5));
    const o = device.createBuffer({ size: maxB * N * 4, usage: GPUBufferUsage.STORAGE });
    const mm = kernels.matmul;
    const { lanes, matmulWg, ksplit } = engine.plan;
    const pb = device.createBuffer({ size: 48, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(pb, 0, mm.pack('params', { K, N, row0: 0, out_stride: N, window: 0, q_dim: 0, kv_dim: 0,
      head_dim: 0, rope_dim: 0, seq_len: 0, n_groups: N / 2, eps: 0 }));
    const sb = device.createBuffer({ size: 256, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    // the engine's choice (graph.js tileFor): weights decoded once per 1, 4 or 8 rows
    const tiles = matmulTiles(engine.plan);
    const pipe = (tile) => mm.pipeline({ WG_SIZE: matmulWg, WTYPE: wtype, MODE: MODE.store, NORM: 0, LANES: lanes, TILE: tile, KSPLIT: ksplit });
    const pipes = {};
    for (const t of new Set(Object.values(tiles))) pipes[t] = await pipe(t);
    const bgs = ws.map((w) => mm.bind('matmul', { params: pb, step: sb, w, x, gamma: null, rope: null, out: o, kv: null }));
    const wg = Math.ceil(N / 2 / (matmulWg / (lanes * ksplit)));
    const res = {};
    for (const B of [1, 2, 4, 5, 8, 9]) {
      device.queue.writeBuffer(sb, 0, new Uint32Array([B, 0, 0, 0, 0, 0, 0, 0]));
      const pipe = pipes[tileFor(tiles, B, engine.plan.tile8Rows)];
      const D = quick ? 8 : 60;
      const run = async () => {
        const e = device.createCommandEncoder();
        const pass = e.beginComputePass(hasTs ? { timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 } } : {});
        pass.setPipeline(pipe);
        for (let i = 0; i < D; i++) { pass.setBindGroup(0, bgs[i % copies], [0]); pass.dispatchWorkgroups(wg); }
        pass.end();
        if (hasTs) { e.resolveQuerySet(qs, 0, 2, qbuf, 0); e.copyBufferToBuffer(qbuf, 0, qread, 0, 16); }
        const t0 = performance.now();
        device.queue.submit([e.finish()]);
        if (hasTs) {
          await qread.mapAsync(GPUMapMode.READ);
          const q = new BigUint64Array(qread.getMappedRange());
          const ns = Number(q[1] - q[0]);
          qread.unmap();
          return ns / 1e6 / D;
        }
        await device.queue.onSubmittedWorkDone();
        return (performance.now() - t0) / D;
      };
      await run();
      const ms = Math.min(await run(), await run(), await run());
      res[B] = { us: ms * 1e3, GBps: wBytes / (ms / 1e3) / 1e9 };
    }
    out.matmul[type] = res;
    log(`matmul ${type} ${N}x${K} (${(wBytes / 1e6).toFixed(1)} MB, ${copies} copies rotated): ` +
      Object.entries(res).map(([B, r]) => `B=${B} ${r.us.toFixed(1)}us ${r.GBps.toFixed(0)}GB/s (x${(r.us / res[1].us).toFixed(2)})`).join(' | '));
    for (const b of [...ws, x, o, pb, sb]) b.destroy();
  }
  // ---- copy bandwidth
  {
    const size = Math.min(1 << 30, device.limits.maxBufferSize, quick ? 64 << 20 : 1 << 30);
    const a = device.createBuffer({ size, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    const b = device.createBuffer({ size, usage: GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
    const reps = 10;
    const go = () => { const e = device.createCommandEncoder(); for (let i = 0; i < reps; i++) e.copyBufferToBuffer(a, 0, b, 0, size); device.queue.submit([e.finish()]); };
    await timeSubmit(device, go);
    let ms = Infinity;
    for (let i = 0; i < 5; i++) ms = Math.min(ms, await timeSubmit(device, go));
    out.copy_GBps = (2 * size * reps) / (ms / 1e3) / 1e9;
    log(`copy bandwidth, copyBufferToBuffer (read+write, ${size >> 20} MiB x ${reps}, wall): ${out.copy_GBps.toFixed(0)} GB/s`);
    if (hasTs) try {
      // the same bytes moved by a compute shader (vec4 per invocation, grid-stride), timed by timestamps
      const mod = device.createShaderModule({ code: `
        @group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
        @group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
        @compute @workgroup_size(256) fn main(@builtin(global_invocation_id) g: vec3<u32>,
                                               @builtin(num_workgroups) n: vec3<u32>) {
          let stride = n.x * 256u;
          for (var i = g.x; i < arrayLength(&dst); i = i + stride) { dst[i] = src[i]; }
        }` });
      const pl = await device.createComputePipelineAsync({ layout: 'auto', compute: { module: mod, entryPoint: 'main' } });
      const bsz = Math.min(size, device.limits.maxStorageBufferBindingSize - (device.limits.maxStorageBufferBindingSize % 16));
      const sa = device.createBuffer({ size: bsz, usage: GPUBufferUsage.STORAGE });
      const sb2 = device.createBuffer({ size: bsz, usage: GPUBufferUsage.STORAGE });
      const bg = device.createBindGroup({ layout: pl.getBindGroupLayout(0), entries: [
        { binding: 0, resource: { buffer: sa } }, { binding: 1, resource: { buffer: sb2 } }] });
      const qs2 = device.createQuerySet({ type: 'timestamp', count: 2 });
      const qb2 = device.createBuffer({ size: 16, usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC });
      const qr2 = device.createBuffer({ size: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      let best = Infinity;
      for (let it = 0; it < 6; it++) {
        const e = device.createCommandEncoder();
        const p = e.beginComputePass({ timestampWrites: { querySet: qs2, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 } });
        p.setPipeline(pl); p.setBindGroup(0, bg);
        for (let r = 0; r < reps; r++) p.dispatchWorkgroups(132 * 16);
        p.end();
        e.resolveQuerySet(qs2, 0, 2, qb2, 0); e.copyBufferToBuffer(qb2, 0, qr2, 0, 16);
        device.queue.submit([e.finish()]);
        await qr2.mapAsync(GPUMapMode.READ);
        const q = new BigUint64Array(qr2.getMappedRange());
        best = Math.min(best, Number(q[1] - q[0]) / 1e6);
        qr2.unmap();
      }
      out.copy_kernel_GBps = (2 * bsz * reps) / (best / 1e3) / 1e9;
      log(`copy bandwidth, compute-shader copy (read+write, ${bsz >> 20} MiB x ${reps}, timestamps): ${out.copy_kernel_GBps.toFixed(0)} GB/s`);
      out.copy_GBps = Math.max(out.copy_GBps, out.copy_kernel_GBps);
      sa.destroy(); sb2.destroy();
    } catch (e) { log('compute-shader copy failed:', e.message); }
    a.destroy(); b.destroy();
  }

  for (const [ty, r] of Object.entries(out.matmul)) {
    log(`matmul ${ty} B=1 effective bandwidth / best copy bandwidth: ${(100 * r[1].GBps / out.copy_GBps).toFixed(0)}%`);
  }

  }
  if (only) { console.log('JSON ' + JSON.stringify(out)); engine.destroy(); return; }
  // ---- the model
  const modelPath = arg('--model', null);
  let desc;
  let readSlice;
  if (modelPath) {
    desc = JSON.parse(readFileSync(arg('--desc'), 'utf8'));
    readSlice = fileReader(modelPath);
  } else {
    desc = smolDescription(Number(process.env.SYNTH_LAYERS ?? 30));
    readSlice = async (offset, nbytes) => synthBytes(desc, offset, nbytes);
  }
  const t0 = performance.now();
  const P = Number(process.env.BENCH_POS ?? 64);
  const seqLen = Number(process.env.BENCH_SEQ ?? 1024);
  if (!(P >= 1 && P + 9 <= seqLen && seqLen >= 513)) throw new Error(`BENCH_POS ${P} / BENCH_SEQ ${seqLen}: need 1 <= pos, pos + 9 <= seq and seq > 512`);
  const model = await engine.loadModel(desc, readSlice, { seq_len: seqLen });
  out.load_ms = performance.now() - t0;
  log(`model: ${modelPath ?? 'SmolLM2-135M-shaped synthetic (Q4_1 + Q8_0 embd)'}; weights on GPU ${(model.weightBytes / 1e6).toFixed(1)} MB; load ${out.load_ms.toFixed(0)} ms`);
  const V = desc.config.vocab_size;
  const tok = (n) => Array.from({ length: n }, (_, i) => (i * 7919 + 13) % V);
  let tp = performance.now();
  await model.forward(tok(P), 0, 1);
  log(`prefill ${P} tokens (one forward, ${model.stats.chunks} chunk): ${(performance.now() - tp).toFixed(1)} ms`);
  const iters = quick ? 3 : 40;
  const measure = async (n) => {
    const wall = []; const gpuMs = []; const enc = []; const sub = []; const wait = []; let pre = 0;
    for (let i = 0; i < iters; i++) {
      const t = performance.now();
      await model.forward(tok(n), P, n);
      wall.push(performance.now() - t);
      if (model.stats.gpu_ms != null) gpuMs.push(model.stats.gpu_ms);
      enc.push(model.stats.encode_ms);
      sub.push(model.stats.submit_ms);
      wait.push(model.stats.wait_ms);
      pre += model.stats.pre_encoded ? 1 : 0;
      model.truncate(P);
    }
    return { wall: median(wall), gpu: gpuMs.length ? median(gpuMs) : null, enc: median(enc), submit: median(sub),
      wait: median(wait), pre_encoded: pre / iters, dispatches: model.stats.dispatches };
  };
  await measure(1);
  const single = await measure(1);
  out.single = single;
  out.dispatches_per_forward = single.dispatches;
  log(`command buffers per forward: ${model.stats.command_buffers}`);
  log(`T_single at pos ${P}: wall ${single.wall.toFixed(3)} ms (GPU ${single.gpu?.toFixed(3)} ms, encode+submit ${single.enc.toFixed(3)} ms of which submit ${single.submit.toFixed(3)}, wait for readback ${single.wait.toFixed(3)} ms, pre-encoded ${(100 * single.pre_encoded).toFixed(0)}%), ${single.dispatches} dispatches/forward`);
  out.verify = {};
  for (let k = 1; k <= 8; k++) {
    const r = await measure(k + 1);
    out.verify[k] = { ...r, ratio_wall: r.wall / single.wall, ratio_gpu: r.gpu && single.gpu ? r.gpu / single.gpu : null };
    log(`T_verify(k=${k}) / T_single: wall ${(r.wall / single.wall).toFixed(3)} (${r.wall.toFixed(3)} ms)` +
      (r.gpu ? `, GPU ${(r.gpu / single.gpu).toFixed(3)} (${r.gpu.toFixed(3)} ms)` : ''));
  }
  if (device.features.has('timestamp-query')) {
    for (const [n, pos] of [[1, P], [5, P], [1, 512]]) {
      model.truncate(Math.min(pos, model.length));
      if (model.length < pos) await model.forward(tok(pos - model.length), model.length, 1);
      let prof;
      try { prof = await model.profile(n); } catch (e) { log('profile failed:', e.message); break; }
      const tot = Object.values(prof).reduce((a, b) => a + b, 0);
      out[`profile_n${n}_pos${pos}`] = prof;
      log(`GPU us per kind (n=${n}, pos ${pos}, one pass per dispatch): ` + Object.entries(prof).map(([k, v]) => `${k} ${v.toFixed(0)}`).join(', ') + ` | total ${tot.toFixed(0)}`);
    }
  }
  if (process.env.VERIFY_ONLY === '1') {   // the pass and verify timings only (bench/h200/verify_rows.sh), and CHAIN=1's
    if (process.env.CHAIN === '1') await benchChain(model, P, out, quick);
    console.log('JSON ' + JSON.stringify(out));
    model.destroy();
    engine.destroy();
    return;
  }
  // sequential decoding alone: one token per forward, logits read back each step
  const nDec = quick ? 8 : 200;
  model.truncate(P);
  const td = performance.now();
  for (let i = 0; i < nDec; i++) await model.forward([(i * 31) % V], P + i, 1);
  const decMs = performance.now() - td;
  out.decode_tok_s = nDec / (decMs / 1e3);
  log(`decode alone: ${nDec} tokens from pos ${P} in ${decMs.toFixed(1)} ms = ${out.decode_tok_s.toFixed(0)} tok/s`);
  await benchAhead(model, P, out, quick);
  if (process.env.ABLATE === '1') await benchAblate(model, P, out, quick);
  if (process.env.CHAIN === '1') await benchChain(model, P, out, quick);
  if (!modelPath && process.env.SPEC_ROUND !== '0') await benchSpecRound(engine, model, P, single, out, quick);
  console.log('JSON ' + JSON.stringify(out));
  model.destroy();
  engine.destroy();
}

/** decodeAhead: greedy ids only (what the decode loop reads back for greedy), and with rows (coupled), per n. */
async function benchAhead(model, P, out, quick) {
  const V = model.config.vocab_size;
  const ns = (process.env.AHEAD_NS ?? '4,8,16,32').split(',').map(Number);
  const total = quick ? 8 : 256;
  out.ahead = {};
  for (const rows of [false, true]) {
    for (const n of ns) {
      const reps = Math.max(2, Math.ceil(total / n));
      const pick = rows ? { temperature: 0.7, seed: 1 } : { temperature: 0, seed: 0 };
      model.truncate(P);
      await model.decodeAhead(7, P, n, pick, rows);   // warm (encodes; pre-encodes the next)
      const gpu = [];
      const enc = [];
      model.truncate(P);
      const t0 = performance.now();
      for (let r = 0; r < reps; r++) {
        await model.decodeAhead((r * 31) % V, P + r * n, n, pick, rows);
        if (model.stats.gpu_ms != null) gpu.push(model.stats.gpu_ms / n);
        enc.push(model.stats.encode_ms);
      }
      const ms = performance.now() - t0;
      const r = { tok_s: (reps * n) / (ms / 1e3), wall_ms_per_token: ms / (reps * n), gpu_ms_per_pass: gpu.length ? median(gpu) : null,
        encode_submit_ms: median(enc), command_buffers: model.stats.command_buffers, pre_encoded: model.stats.pre_encoded };
      out.ahead[`${n}${rows ? '_rows' : ''}`] = r;
      log(`decodeAhead n=${n} ${rows ? 'coupled, rows read back' : 'greedy, ids only'}: ${r.tok_s.toFixed(0)} tok/s ` +
        `(${r.wall_ms_per_token.toFixed(3)} ms/token wall, GPU ${r.gpu_ms_per_pass?.toFixed(3)} ms/pass, encode+submit ` +
        `${r.encode_submit_ms.toFixed(3)} ms, ${r.command_buffers} command buffers, pre-encoded ${r.pre_encoded})`);
    }
  }
  // chained by continuations (decodeAhead's `then`), as the decode loop runs the champion alone: CHAIN runs of n,
  // each hinting the next; wall ms a token against the same runs unhinted (timestamps off meanwhile: the engine runs
  // no continuation while it times submissions)
  const ts = model.ts;
  model.ts = null;
  model.pres.clear();   // (commands pre-encoded with the timestamps on)
  const chainRuns = quick ? 2 : 8;
  for (const n of ns.filter((x) => 64 + chainRuns * x <= 1024)) {
    const pick = { temperature: 0, seed: 0 };
    const res = {};
    const parts = {};   // per run after the first: the run's encode / submit / wait ms (its own launch's), the call's ms
    for (const hint of [true, false, true, false]) {
      model.truncate(P);
      let tok = 7;
      const t0 = performance.now();
      for (let r = 0; r < chainRuns; r++) {
        const tc = performance.now();
        const out = await model.decodeAhead(tok, P + r * n, n, pick, false, hint && r < chainRuns - 1 ? n : 0);
        tok = out.ids[n - 1];
        const s = model.stats;
        if (r > 0) for (const [k, v] of [['encode', s.encode_ms], ['submit', s.submit_ms], ['wait', s.wait_ms], ['call', performance.now() - tc]]) (parts[`${hint}_${k}`] ??= []).push(v);
      }
      (res[hint] ??= []).push((performance.now() - t0) / (chainRuns * n));
    }
    out.ahead[`${n}_chain`] = { hinted: median(res.true), plain: median(res.false) };
    const pm = (h) => ['encode', 'submit', 'wait', 'call'].map((k) => `${k} ${median(parts[`${h}_${k}`]).toFixed(2)}`).join(', ');
    log(`decodeAhead n=${n}, ${chainRuns} runs chained: ${median(res.true).toFixed(3)} ms/token with continuations, ` +
      `${median(res.false).toFixed(3)} without; medians per run (ms) with: ${pm(true)}; without: ${pm(false)}`);
  }
  model.ts = ts;
  model.pres.clear();
}

/** ABLATE=1: where a pass's GPU time goes INSIDE one submission (profile() times each dispatch in a pass of its own,
 * which adds a pass's overhead to each): the GPU time per pass of decodeAhead(n = 16, greedy) with every dispatch of
 * one kind left out (its cost = full - without), at positions 64 and 512; and with every dispatch replaced by the
 * embed kernel's (tiny) dispatch: the floor the dispatch count alone sets. The rows are wrong while ablated.
 * (Without timestamps, e.g. llvmpipe here, wall times: a dry run of the code, not a figure.) */
async function benchAblate(model, P, out, quick) {
  const kindOf = (label) => label.replace(/^blk\.\d+\./, '');
  const full = { ops: model.ops, opsFar: model.opsFar, head: model.headOps, pick: model.pickOps };   // (opsFar: attnBlock)
  const kinds = [...new Set([...full.ops, ...full.head].map((op) => kindOf(op.label)))];
  const n = 16;
  const reps = quick ? 2 : 8;
  const run = async (pos) => {
    const gpu = [];
    model.pres.clear();   // (pre-encoded commands of the old ops)
    for (let r = 0; r < reps + 1; r++) {
      model.truncate(pos);
      const t = performance.now();
      await model.decodeAhead(7, pos, n, { temperature: 0, seed: 0 }, false);
      if (r > 0) gpu.push((model.stats.gpu_ms ?? performance.now() - t) / n);   // (no timestamps: wall, a dry run)
    }
    return median(gpu);
  };
  const restore = () => {
    Object.assign(model, { ops: full.ops, opsFar: full.opsFar, headOps: full.head, pickOps: full.pick });
    model.pres.clear();
  };
  out.ablate = {};
  for (const pos of [P, 512]) {
    model.truncate(Math.min(pos, model.length));
    if (model.length < pos) await model.forward(Array.from({ length: pos - model.length }, (_, i) => (i * 13) % 1000), model.length, 1);
    const r = { full: await run(pos), without: {} };
    for (const k of kinds) {
      model.ops = full.ops.filter((op) => kindOf(op.label) !== k);
      model.opsFar = full.opsFar?.filter((op) => kindOf(op.label) !== k) ?? null;
      model.headOps = full.head.filter((op) => kindOf(op.label) !== k);
      r.without[k] = await run(pos);
      restore();
    }
    model.pickOps = { tokens: [], ids: [] };
    r.without.pick = await run(pos);
    const embed = full.ops[0];
    model.ops = full.ops.filter((op) => op.select(1)).map(() => embed);   // the dispatches a one-row pass makes
    model.opsFar = full.opsFar && model.ops;
    model.headOps = full.head.map(() => embed);
    model.pickOps = { tokens: full.pick.tokens.map(() => embed), ids: [] };
    r.floor_all_embed = await run(pos);
    restore();
    out.ablate[pos] = r;
    const counts = Object.fromEntries(kinds.map((k) => [k, [...full.ops, ...full.head].filter((op) => kindOf(op.label) === k).length]));
    log(`ablation at pos ${pos} (GPU ms per pass, decodeAhead n=${n}): full ${r.full.toFixed(4)}; floor (every dispatch the embed's) ` +
      `${r.floor_all_embed.toFixed(4)}; cost of each kind (full - without): ` +
      Object.entries(r.without).map(([k, v]) => `${k} x${counts[k] ?? full.pick.tokens.length} ${(r.full - v).toFixed(4)}`).join(', '));
  }
  model.truncate(P);
}

/** CHAIN=1: the n-gram drafter's rounds on the GPU (model.ngramChain): GPU ms per round of a chain of R rounds at k
 * proposals, on a sequence with no repeated pair (no round finds proposals: every pass computes 1 row of a k + 1
 * grid) and on a periodic one (its first round finds k), with the tiles the grid picks and row-parallel
 * (chainRowwise); beside decodeAhead's GPU ms per pass (n = 1 and 4). (No timestamps: wall, a dry run.)
 * CHAIN_KS (default 2,4): the k measured; CHAIN_ROWWISE (default 0,1): chainRowwise off (0) and/or on (1). */
async function benchChain(model, P, out, quick) {
  const V = model.config.vocab_size;
  const pick = { temperature: 0, seed: 0 };
  const reps = quick ? 2 : 20;
  const seqs = { none: Array.from({ length: P }, (_, i) => (i * 7919 + 13) % V),
    found: Array.from({ length: P }, (_, i) => (i % 16) * 97 + 5) };
  const gpuOf = async (fn) => {
    const g = [];
    for (let r = 0; r < reps + 1; r++) {
      const t = performance.now();
      const per = await fn();
      if (r > 0) g.push((model.stats.gpu_ms ?? performance.now() - t) / per);
    }
    return median(g);
  };
  out.chain = {};
  for (const [name, seq] of Object.entries(seqs)) {
    model.truncate(0);
    await model.forward(seq.slice(0, P - 1), 0, 1);
    for (const n of [1, 4]) {
      out.chain[`${name}_ahead${n}`] = await gpuOf(async () => { model.truncate(P - 1); await model.decodeAhead(seq[P - 1], P - 1, n, pick, false); return n; });
    }
    for (const rowwise of (process.env.CHAIN_ROWWISE ?? '0,1').split(',').map((x) => x === '1')) {
      model.plan.chainRowwise = rowwise;
      for (const k of (process.env.CHAIN_KS ?? '2,4').split(',').map(Number)) {
        for (const R of [1, 4]) {
          const key = `${name}_k${k}_R${R}${rowwise ? '_row' : ''}`;
          out.chain[key] = await gpuOf(async () => { model.truncate(P - 1); await model.ngramChain(seq, P - 1, R, k, pick, [2, 3]); return R; });
        }
      }
    }
    model.plan.chainRowwise = false;
    log(`chain (${name}), GPU ms per pass / round: ` + Object.entries(out.chain).filter(([k]) => k.startsWith(name))
      .map(([k, v]) => `${k.slice(name.length + 1)} ${v.toFixed(3)}`).join(', '));
  }
  model.truncate(P);
}

/** specRound(k) with a SmolLM2-shaped draft of DRAFT_LAYERS layers: one submission, greedy ids only. */
async function benchSpecRound(engine, model, P, single, out, quick) {
  const nl = Number(process.env.DRAFT_LAYERS ?? 2);
  const desc = smolDescription(nl);
  const draft = await engine.loadModel(desc, async (o, n) => synthBytes(desc, o, n), { seq_len: 1024 });
  const pick = { temperature: 0, seed: 0 };
  const feed = Array.from({ length: P }, (_, i) => (i * 7919 + 13) % desc.config.vocab_size);
  out.spec_round = {};
  for (let k = 1; k <= 8; k++) {
    const wall = [];
    const gpu = [];
    for (let it = 0; it < (quick ? 2 : 30); it++) {
      model.truncate(P - 1);
      draft.truncate(0);
      await draft.forward(feed.slice(0, P - 2), 0, 1);
      const t = performance.now();
      await model.specRound(draft, feed.slice(P - 2), P - 2, k, feed[P - 1], P - 1, pick, false);
      wall.push(performance.now() - t);
      if (model.stats.gpu_ms != null) gpu.push(model.stats.gpu_ms);
    }
    const r = { wall: median(wall), gpu: gpu.length ? median(gpu) : null };
    r.ratio_wall = r.wall / single.wall;
    r.ratio_gpu = r.gpu && single.gpu ? r.gpu / single.gpu : null;
    out.spec_round[k] = r;
    log(`specRound(k=${k}, ${nl}-layer draft) / T_single: wall ${r.ratio_wall.toFixed(3)} (${r.wall.toFixed(3)} ms)` +
      (r.gpu ? `, GPU ${r.ratio_gpu.toFixed(3)} (${r.gpu.toFixed(3)} ms)` : ''));
  }
  draft.destroy();
}

main().then(() => process.exit(0), (e) => { console.error(e.stack ?? String(e)); process.exit(1); });
