// model.js — a loaded model on the engine's device: weights, KV cache, activations, the forward graph, and the model
// object the decode loop drives through py/exactspec/bridge.py (forward, the batched step, truncate, destroy).
// API: see engine.js.

import { encodeSubmission, passChunks } from './encode.js';
import { blockKernelFiles, compileKernels } from './kernels.js';
import { BLOCK_KINDS, FORWARDS, GraphBuilder } from './graph.js';
import { MAX_PASSES, attnBlocks, modelAttnBlock } from './options.js';
import { checkPick, pickParams } from './pick.js';
import { profileOps } from './profile.js';
import { loadWeights } from './weights.js';

const CONFIG_KEYS = ['dim', 'hidden_dim', 'n_layers', 'n_heads', 'n_kv_heads', 'head_dim', 'vocab_size', 'seq_len'];

function checkConfig(cfg) {
  if (!cfg || typeof cfg !== 'object') throw new Error('model description has no config');
  for (const k of CONFIG_KEYS) {
    if (!Number.isInteger(cfg[k]) || cfg[k] <= 0) throw new Error(`model config: ${k} must be a positive integer, got ${cfg[k]}`);
  }
  if (cfg.n_heads % cfg.n_kv_heads) throw new Error('model config: n_heads must be a multiple of n_kv_heads');
  if (cfg.head_dim % 16 || cfg.head_dim > 256) throw new Error(`model config: head_dim ${cfg.head_dim} must be a multiple of 16 and <= 256`);
  const rd = cfg.rope_dim || cfg.head_dim;
  if (rd % 2 || rd > cfg.head_dim) throw new Error(`model config: bad rope_dim ${cfg.rope_dim}`);
  if ((cfg.arch ?? 'llama') !== 'llama') throw new Error(`model config: arch ${cfg.arch} is not supported (llama only)`);
}

/** The GPU buffers a model owns (destroyed with it). */
class Memory {
  constructor(device, maxBinding) {
    this.device = device;
    this.maxBinding = maxBinding;
    this.buffers = [];
  }

  own(b) { this.buffers.push(b); return b; }

  create(label, size, usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC) {
    if (size > this.maxBinding && usage & GPUBufferUsage.STORAGE) throw new Error(`${label}: ${size} bytes exceed the storage binding limit ${this.maxBinding}; use a smaller seq_len`);
    return this.own(this.device.createBuffer({ label, size: Math.max(16, Math.ceil(size / 16) * 16), usage }));
  }

  uniform(label, words) {
    const b = this.create(label, words.byteLength, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
    this.device.queue.writeBuffer(b, 0, words);
    return b;
  }

  free(b) {
    if (!b) return;
    this.buffers = this.buffers.filter((x) => x !== b);
    b.destroy();
  }

  destroy() { for (const b of this.buffers) b.destroy(); this.buffers = []; }
}

/** The fused kernels this model runs (plan.fuse, unless the model cannot take them): false | 'attn' | true. They need
 * W_o (and, fuse true, the FFN weights) in one storage binding each and one row of x (plus an FFN slice) in workgroup
 * memory. Fused by default ('auto'): a model without that runs unfused; fused on request: refused, naming why. */
function modelFuse(plan, W, dim, wgMem, weightBinding) {
  if (!plan.fuse) return false;
  const full = plan.fuse === true;
  const split = W.layers.flatMap((L, i) => [['attn_output', L.o], ...(full ? [['ffn_gate_up', L.gateUp], ['ffn_down', L.down]] : [])]
    .map(([what, lin]) => ({ what: `blk.${i}.${what}`, lin }))).find(({ lin }) => lin.parts.length !== 1);
  const why = split
    ? `${split.what} is split over ${split.lin.parts.length} storage bindings (binding limit ${weightBinding} bytes); fused kernels need it in one`
    : (dim + (full ? plan.fuseSlice : 0)) * 4 > wgMem ? `one row of dim ${dim} does not fit the device's ${wgMem} bytes of workgroup memory` : null;
  if (why && plan.fuseAuto) return false;
  if (why) throw new Error(`fuse: ${why}`);
  return plan.fuse;
}

/** Whether this model's decode passes can run qkv + attention as one dispatch (plan.fuseQkvAttn, attention.wgsl
 * QKV): q, k, v in one weight binding, heads of at most 256 dims (a multiple of 16), and its workgroup arrays within
 * the device's workgroup memory. Otherwise the model runs the two dispatches (the same bits). */
function modelQkvAttn(plan, W, cfg, wgMem) {
  if (!plan.fuseQkvAttn) return false;
  const one = W.layers.every((L) => L.qkv.length === 1 && L.qkv[0].parts.length === 1);
  const hd = cfg.head_dim;
  // xs (dim) + q|k|v floats (768) + qs, kq, vq, oh (4 x 64 vec4) + red (attnWg) + part (attnWg vec4s), in bytes
  const bytes = 4 * cfg.dim + 4 * 768 + 4 * 16 * 64 + 4 * plan.attnWg + 16 * plan.attnWg;
  return one && hd <= 256 && hd % 16 === 0 && bytes <= wgMem;   // (fuseQkvAttnWg >= attnWg: options.js refuses less)
}

/** Floats of the score rows in 'scores' (max_rows, n_heads, attn split, seq_len; with attnBlock (max_rows, n_heads,
 * blocks x attn split, attnBlock)): with fuseQkvAttn a one-row pass's k, v (2, kv_dim) follow them, at this offset
 * (graph.js kvNew). */
const scoreFloats = (cfg, plan) => plan.maxRows * cfg.n_heads * plan.attnSplit
  * (plan.attnBlock ? attnBlocks(plan, cfg.seq_len) * plan.attnBlock : cfg.seq_len);

/** The activations (named buffers the graph reads and writes). */
function activations(mem, cfg, plan, nSlices) {
  const { dim, hidden_dim: hidden, n_heads: nH, head_dim: hd, seq_len: seqLen } = cfg;
  const R = plan.maxRows;
  const ropeDim = cfg.rope_dim || hd;
  const b = {
    resid: mem.create('resid', R * dim * 4),                 // (max_rows, dim)
    q: mem.create('q', R * nH * hd * 4),                     // (max_rows, q_dim)
    att: mem.create('attn_out', R * nH * hd * 4),            // (max_rows, q_dim)
    hidden: mem.create('hidden', R * hidden * 4),            // (max_rows, hidden_dim)
    // (max_rows, n_heads, attn split, seq_len), then (fuseQkvAttn) k, v of a one-row pass (2, kv_dim)
    scores: mem.create('scores', (scoreFloats(cfg, plan) + (plan.fuseQkvAttn ? 2 * cfg.n_kv_heads * hd : 0)) * 4),
    tokens: mem.create('tokens', (seqLen + 1) * 4),          // (seq_len + 1) token ids of one submission
    ids: mem.create('ids', (seqLen + 1) * 4),                // (seq_len + 1) picks on verify rows
    rope: mem.create('rope', seqLen * (ropeDim / 2) * 8),    // (seq_len, rope_dim/2) (cos, sin)
    pick_params: mem.create('pick_params', 32, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST),
  };
  if (plan.fuse) {
    b.resid2 = mem.create('resid2', R * dim * 4);            // (max_rows, dim) the residual's ping-pong partner
    // (n_heads, max_rows, dim) attention partials; with attnBlock (n_heads, blocks, max_rows, dim) and each block's
    // (max, sum) in attn_ml (max_rows, n_heads, blocks, 2)
    const nb = attnBlocks(plan, seqLen);   // (plan.attnBlock: checked against the binding limit, options.js modelAttnBlock)
    b.p_attn = mem.create('p_attn', nH * nb * R * dim * 4);
    if (plan.attnBlock) b.attn_ml = mem.create('attn_ml', R * nH * nb * 2 * 4);
  }
  if (plan.fuse === true) b.p_ffn = mem.create('p_ffn', nSlices * R * dim * 4);   // (n_slices, max_rows, dim)
  if (plan.fuse === true && plan.headSum) b.x_final = mem.create('x_final', R * dim * 4);   // (max_rows, dim) the head's input
  const tab = new Float32Array(seqLen * ropeDim);
  const theta = cfg.rope_theta ?? 10000;
  for (let pos = 0; pos < seqLen; pos++) {
    for (let i = 0; i < ropeDim / 2; i++) {
      const a = pos * Math.pow(theta, (-2 * i) / ropeDim);
      tab[(pos * (ropeDim / 2) + i) * 2] = Math.cos(a);
      tab[(pos * (ropeDim / 2) + i) * 2 + 1] = Math.sin(a);
    }
  }
  mem.device.queue.writeBuffer(b.rope, 0, tab);
  return b;
}

/** A model's attnBlock once the key blocks' kernels are compiled (once per engine, at the first model that runs
 * them; added to eng.kernels): where they are rejected, 0 with a warning under 'auto' (the layers without blocks, the
 * same bits), a load refused naming the option for a number given. */
async function blockKernels(eng, plan, attnBlock) {
  if (!attnBlock || eng.kernels.attn_o_blocks) return attnBlock;
  const { files, defines } = blockKernelFiles();
  eng.blockKernels ??= compileKernels(eng.device, eng.shaderSource, files, defines).then((k) => Object.assign(eng.kernels, k));
  try {
    await eng.blockKernels;
    return attnBlock;
  } catch (e) {
    if (!plan.attnBlockAuto) throw new Error(`attnBlock ${attnBlock}: the key blocks' kernels are unavailable (${e.message})`);
    console.warn(`exactspec engine: the key blocks' kernels are unavailable (${e.message}); running without them`);
    return 0;
  }
}

/** Load a model (engine.loadModel). eng: the engine's shared state (engine.js). */
export async function loadModel(eng, description, readSlice, lopts) {
  const cfg0 = description?.config;
  checkConfig(cfg0);
  const seqLen = lopts.seq_len ?? cfg0.seq_len;
  if (!Number.isInteger(seqLen) || seqLen <= 0 || seqLen > cfg0.seq_len) throw new Error(`seq_len ${seqLen} must be an integer in 1..${cfg0.seq_len}`);
  const cfg = { ...cfg0, seq_len: seqLen };
  const { device } = eng;
  const mem = new Memory(device, eng.maxBinding);
  try {
    const W = await loadWeights(device, description, readSlice, cfg, { maxBinding: eng.weightBinding,
      alloc: (label, n) => mem.create(label, n * 4), own: (b) => mem.own(b) });
    const weightBufs = new Set(mem.buffers);   // what memoryReport() counts as weights
    for (const [i, L] of W.layers.entries()) L.kv = mem.create(`blk.${i}.kv`, 2 * seqLen * cfg.n_kv_heads * cfg.head_dim * 4);   // (2, seq_len, kv_dim)
    const wgMem = device.limits.maxComputeWorkgroupStorageSize;
    const fuse = modelFuse(eng.plan, W, cfg.dim, wgMem, eng.weightBinding);
    const plan = { ...eng.plan, fuse, fuseQkvAttn: fuse === true && modelQkvAttn(eng.plan, W, cfg, wgMem),
      maxRows: Math.max(1, Math.min(eng.plan.maxRows, seqLen)) };
    plan.attnBlock = await blockKernels(eng, plan, modelAttnBlock(plan, cfg, mem.maxBinding));
    const model = new EngineModel(eng, cfg, W, plan, mem, wgMem, !!lopts.features);
    model.weightBufs = weightBufs;
    await model.build();
    return model;
  } catch (e) {
    mem.destroy();
    throw e;
  }
}

let nextId = 0;

export class EngineModel {
  constructor(eng, cfg, W, plan, mem, wgMem, keepFeatures) {
    Object.assign(this, { eng, device: eng.device, config: cfg, W, plan, mem, wgMem, keepFeatures });
    this.id = nextId++;
    this.nSlices = plan.fuse === true ? Math.ceil(cfg.hidden_dim / plan.fuseSlice) : 0;
    this.bufs = this.makeBuffers();
    if (keepFeatures) this.bufs.features = mem.create('features', cfg.seq_len * cfg.dim * 4);   // (seq_len, dim)
    this.featFrom = 0;       // positions below it were computed without keeping their features (enableFeatures)
    this.pickGroups = Math.max(1, Math.min(256, Math.ceil(cfg.vocab_size / (plan.pickWg * 16))));
    this.stepKernel = eng.kernels.embed;   // every kernel declares the same struct Step: pack slots with one
    this.slotBytes = Math.max(this.stepKernel.uniformBytes('step'), this.device.limits.minUniformBufferOffsetAlignment);
    this.maxSlots = Math.ceil(cfg.seq_len / plan.maxRows) + MAX_PASSES;
    this.bufs.copy_ids = mem.create('copy_ids', MAX_PASSES * 4);   // (k,) specRound's copies (a draft head's)
    // ngramChain (shaders/chain.wgsl): not where a one-row chunk's ops differ from a multi-row one's (fuseQkvAttn),
    // since a chain's pass computes 1 + c rows of a grid sized for k + 1
    this.chainMaxK = Math.min(MAX_PASSES, plan.maxRows - 1);   // (a round's k + 1 rows are one chunk)
    this.chainRounds = plan.fuseQkvAttn || this.chainMaxK < 1 ? 0 : plan.chainRounds;
    // (maxSlots, slot words): every chunk's Step; with chainStepDirect the chain kernel writes its rounds' there too
    this.stepDirect = this.chainRounds > 0 && plan.chainStepDirect;
    this.stepBuf = mem.create('step', this.maxSlots * this.slotBytes, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST |
      (this.stepDirect ? GPUBufferUsage.STORAGE : 0));
    if (this.chainRounds > 0) {
      this.bufs.chain_state = mem.create('chain_state', 16);                            // (4,) L, r, 0, 0
      this.bufs.chain_hist = mem.create('chain_hist', (cfg.seq_len + 1) * 4);           // (seq_len + 1)
      this.bufs.chain_slot = mem.create('chain_slot', this.slotBytes);                  // (slot words) the next Step
      // (slot words) the chain kernel's own step binding where its `slot` is the step buffer (unused; a buffer may
      // not be uniform and writable storage in one dispatch)
      if (this.stepDirect) this.bufs.chain_nostep = mem.create('chain_nostep', this.slotBytes, GPUBufferUsage.UNIFORM);
      this.bufs.chain_rec = mem.create('chain_rec', MAX_PASSES * (MAX_PASSES + 2) * 4); // (rounds, 2 + k)
      this.bufs.chain_params = mem.create('chain_params', 32, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
      // specChain (shaders/draft_chain.wgsl; chain_state, chain_hist and chain_rec shared with ngramChain)
      this.bufs.chain_slots = mem.create('chain_slots', (this.chainMaxK + 1) * this.slotBytes);   // (k + 1, slot words)
      this.bufs.chain_feed = mem.create('chain_feed', (this.chainMaxK + 1) * 4);                  // (k + 1)
      this.bufs.dchain_params = mem.create('dchain_params', 32, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
      // specChain's copies for a draft head (chain.wgsl COPY, its own params)
      this.bufs.copy_params = mem.create('copy_params', 32, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
    } else {
      this.ngramChain = undefined;           // not offered (py/exactspec/bridge.py offers)
      this.specChain = undefined;
    }
    this.length = 0;
    this.destroyed = false;
    this.outCap = 0;         // rows the logits buffer holds
    this.gen = 0;            // bumps when the logits buffer (and so the commands reading it) changes
    this.pres = new Map();   // key -> command buffers pre-encoded for the next submission of that shape (plan.preKeep)
    this.refill = null;      // {sub, gen}: a fresh run whose pre-encoded commands were taken (refillPre)
    this.deferred = null;    // {key, make, gen}: a pre-encoding put off until after the call returns (plan.preDefer)
    this.ahead = null;       // a continuation of decodeAhead already submitted (aheadNow), or null
    this.stats = { dispatches: 0, chunks: 0, encode_ms: 0, gpu_ms: null };
    this.weightBytes = W.bytes;
    this.fused = plan.fuse;
    this.maxRows = plan.maxRows;
    this.aheadMax = plan.aheadMax;
    if (plan.timestamps) {
      this.ts = { set: this.device.createQuerySet({ type: 'timestamp', count: 2 }),
        buf: mem.create('ts', 16, GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC),
        read: mem.create('ts_read', 16, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST) };
    }
  }

  /** Whether a chunk of rows whose positions all lie before `end` runs the key blocks' layers (opsFar: attnBlock):
   * one that may reach position attnBlock does. */
  usesBlocks(end) { return this.opsFar != null && end > this.plan.attnBlock; }

  /** The layers with the attention's keys in blocks (plan.attnBlock): the ops of BLOCK_KINDS made again with them, in
   * the same order, every other op the one of `ops` (the layers without blocks) itself. */
  async farOps(ops) {
    const g = this.builder(undefined, this.plan);
    g.only = BLOCK_KINDS;
    await FORWARDS[this.plan.fuse](g, this.W);
    const near = ops.filter((op) => BLOCK_KINDS.has(op.kind));
    if (g.ops.length !== near.length || g.ops.some((op, i) => op.label !== near[i].label)) {
      throw new Error(`attnBlock: the key blocks' layers made ${g.ops.length} ops where the layers without them have ${near.length}`);
    }
    let i = 0;
    return ops.map((op) => (BLOCK_KINDS.has(op.kind) ? g.ops[i++] : op));
  }

  /** The activations (a draft head has its own set: app/gpu/head.js). */
  makeBuffers() { return activations(this.mem, this.config, this.plan, this.nSlices); }

  builder(list, plan = this.plan) {
    return new GraphBuilder({ kernels: this.eng.kernels, plan, cfg: this.config, wgMem: this.wgMem,
      nSlices: this.nSlices, pickGroups: this.pickGroups, list, kvNew: scoreFloats(this.config, this.plan),
      buffer: (name) => { if (name === null) return null; const b = this.bufs[name]; if (!b) throw new Error(`no buffer ${name}`); return b; },
      uniform: (label, words) => this.mem.uniform(label, words), step: this.stepBuf });
  }

  async build() {
    // plan.attnBlock: a chunk whose rows all come before position attnBlock runs the layers without key blocks (ops),
    // one that may reach it the blocks' (opsFar; Submission.pass picks): rows before attnBlock get the same bits from
    // both, and short contexts do not pay for the blocks (their wider grid and prologue)
    const g = this.builder(undefined, this.plan.attnBlock ? { ...this.plan, attnBlock: 0 } : this.plan);
    this.headIn = await g.final(await FORWARDS[this.plan.fuse](g, this.W), this.keepFeatures);
    this.ops = g.ops;
    this.opsFar = this.plan.attnBlock ? await this.farOps(g.ops) : null;
    if (this.chainRounds > 0) {
      const K = this.eng.kernels.chain;
      const b = this.bufs;
      const bg = K.bind('chain', { params: b.chain_params, step: this.stepDirect ? b.chain_nostep : this.stepBuf,
        state: b.chain_state, hist: b.chain_hist, tokens: b.tokens, ids: b.ids,
        slot: this.stepDirect ? this.stepBuf : b.chain_slot, rec: b.chain_rec });
      const pipeline = await K.pipeline({ WG_SIZE: Math.min(256, this.device.limits.maxComputeInvocationsPerWorkgroup) });
      this.chainOps = [{ label: 'chain', kind: 'chain', bindGroup: bg, select: () => ({ pipeline, grid: [1, 1, 1] }) }];
      const D = this.eng.kernels.draft_chain;
      const dbg = D.bind('draft_chain', { params: b.dchain_params, step: this.stepBuf, state: b.chain_state,
        hist: b.chain_hist, tokens: b.tokens, ids: b.ids, slots: b.chain_slots, feed: b.chain_feed, rec: b.chain_rec });
      const dpipe = await D.pipeline({});
      this.draftChainOps = [{ label: 'draft_chain', kind: 'chain', bindGroup: dbg, select: () => ({ pipeline: dpipe, grid: [1, 1, 1] }) }];
      const C = this.eng.kernels.chain_copy;
      const cbg = C.bind('chain_copy', { params: b.copy_params, step: this.stepBuf, state: b.chain_state, hist: b.chain_hist,
        tokens: b.tokens, ids: b.ids, slot: b.chain_slot, rec: b.chain_rec });
      const cpipe = await C.pipeline({ WG_SIZE: Math.min(256, this.device.limits.maxComputeInvocationsPerWorkgroup) });
      this.copyOps = [{ label: 'chain_copy', kind: 'chain', bindGroup: cbg, select: () => ({ pipeline: cpipe, grid: [1, 1, 1] }) }];
    }
    await this.ensureOut(1);
  }

  /** Keep the features from now on (what a draft head reads: app/gpu/head.js calls it when it binds): positions
   * already computed have none (featFrom = length until a truncate below it). No-op when already kept. */
  async enableFeatures() {
    if (this.keepFeatures) return;
    this.usable();
    const cfg = this.config;
    this.bufs.features = this.mem.create('features', cfg.seq_len * cfg.dim * 4);   // (seq_len, dim)
    this.keepFeatures = true;
    this.featFrom = this.length;
    this.outCap = 0;          // rebuild the forward (with the residual kernel keeping them) and its head and picks
    this.pres.clear();
    this.refill = null;
    this.deferred = null;
    await this.build();
  }

  /** Room for `rows` logits rows (and their readback and picks); rebuilds the head and pick ops when it grows. */
  async ensureOut(rows) {
    if (rows <= this.outCap) return;
    const { vocab_size: vocab } = this.config;
    const cap = Math.max(rows, Math.min(this.plan.maxRows, 16));
    if (cap * vocab * 4 > this.eng.maxBinding) throw new Error(`n_out ${rows}: logits exceed the binding limit`);
    await this.settleAhead();   // (its commands read the buffers replaced here)
    for (const k of ['logits', 'staging', 'staging2', 'pick_part']) this.mem.free(this.bufs[k]);
    this.bufs.logits = this.mem.create('logits', cap * vocab * 4);                                     // (cap, vocab)
    // readbacks: staging, and staging2 for a continuation submitted while staging still waits for its map
    for (const k of ['staging', 'staging2']) {
      this.bufs[k] = this.mem.create(k, cap * vocab * 4 + 8 * (cap + 1), GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
    }
    this.bufs.pick_part = this.mem.create('pick_part', cap * this.pickGroups * 8);                     // (cap, groups) (value, id)
    const head = [];
    await this.builder(head).head(this.W, this.headIn);
    const picks = { tokens: [], ids: [] };
    for (const dest of ['tokens', 'ids']) await this.builder(picks[dest]).pick(dest);
    Object.assign(this, { headOps: head, pickOps: picks, outCap: cap });
    this.gen++;
  }

  /** Bytes of this model's GPU buffers (exactspec.memory(); the bench matrix): weights (as packed on the device),
   * kv (every layer's cache, allocated at load for seq_len positions: also its peak), features (the rows a draft
   * head reads, where kept), scratch (activations, logits, staging, picks, uniforms), total. */
  memoryReport() {
    const out = { weights: 0, kv: 0, features: 0, scratch: 0 };
    for (const b of this.mem.buffers) {
      const part = this.weightBufs && this.weightBufs.has(b) ? 'weights'
        : /^blk\.\d+\.kv$/.test(b.label) ? 'kv' : b.label === 'features' ? 'features' : 'scratch';
      out[part] += Number(b.size);
    }
    return { ...out, total: out.weights + out.kv + out.features + out.scratch, kv_positions: this.config.seq_len,
      buffers: this.mem.buffers.length };
  }

  // ---- the public API (engine.js): every call holds the engine's lock, so submissions never interleave; any call
  // but decodeAhead first waits for a continuation it does not take (settled)

  settled(fn) { return this.eng.locked(async () => { await this.settleAhead(); return fn(); }); }

  forward(tokens, startPos, nOut) { return this.traced('forward', this.settled(() => this.forwardNow(tokens, startPos, nOut))); }

  /** p (a call's promise), its start and end given to plan.trace (benches) when there is one. */
  traced(kind, p) {
    const tr = this.plan.trace;
    if (!tr) return p;
    tr({ t: performance.now(), ev: 'call', kind, model: this.id });
    return p.then((v) => { tr({ t: performance.now(), ev: 'ret', kind, model: this.id, continued: this.stats.continued ?? null }); return v; });
  }

  decodeAhead(token, startPos, n, pick, rows = true, then = 0, stop = null) {
    return this.traced('ahead', this.eng.locked(() => this.aheadNow(token, startPos, n, pick, rows, then, stop)));
  }

  specRound(draft, feed, draftStart, k, token, startPos, pick, rows = true, copy = null) {
    return this.traced('round', this.settled(() => this.roundNow(draft, feed, draftStart, k, token, startPos, pick, rows, copy)));
  }

  verify(tokens, startPos, pick, rows = false) { return this.settled(() => this.verifyNow(tokens, startPos, pick, rows)); }

  ngramChain(seq, startPos, rounds, k, pick, ngram = [2, 3], then = 0, stop = null) {
    return this.traced('ngram_chain', this.eng.locked(() => this.chainNow(seq, startPos, rounds, k, pick, ngram, then, stop)));
  }

  specChain(draft, seq, draftStart, rounds, k, pick, restart = false, then = 0, stop = null, copy = null) {
    return this.traced('spec_chain', this.eng.locked(() => this.specChainNow(draft, seq, draftStart, rounds, k, pick, restart, then, stop, copy)));
  }

  /** The kept final hidden states (loadModel option features) of positions startPos .. startPos + n - 1 (< length):
   * Float32Array (n * dim), row-major: the residual after the last layer, before the output norm. */
  readFeatures(startPos, n) {
    return this.eng.locked(async () => {
      this.usable();
      if (!this.keepFeatures) throw new Error('readFeatures: load the model with {features: true}');
      if (!Number.isInteger(startPos) || !Number.isInteger(n) || startPos < 0 || n < 1 || startPos + n > this.length) {
        throw new Error(`readFeatures: positions ${startPos}..${startPos + n - 1} are not all in 0..${this.length - 1}`);
      }
      const bytes = n * this.config.dim * 4;
      const buf = this.device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      try {
        const enc = this.device.createCommandEncoder();
        enc.copyBufferToBuffer(this.bufs.features, startPos * this.config.dim * 4, buf, 0, bytes);
        this.device.queue.submit([enc.finish()]);
        await this.mapped(buf, bytes);
        return new Float32Array(buf.getMappedRange().slice(0));
      } finally {
        buf.destroy();
      }
    });
  }

  truncate(n) {
    if (!Number.isInteger(n) || n < 0 || n > this.length) throw new Error(`truncate: ${n} must be in 0..${this.length}`);
    if (this.ahead && n !== this.length) this.ahead.stale = true;   // its passes were fed what is rolled back now
    this.length = n;
    this.featFrom = Math.min(this.featFrom, n);   // positions from n on are recomputed with their features
  }

  /** Bench only (needs opts.timestamps): GPU microseconds per kind of dispatch for one forward of n rows at the
   * current length, each dispatch in its own timed pass. The length does not change. */
  profile(n = 1) { return this.eng.locked(() => profileOps(this, n)); }

  destroy() {
    if (this.destroyed) return;
    this.destroyed = true;
    this.mem.destroy();
    this.ts?.set.destroy();
    this.eng.models.delete(this);
  }

  // ---- checks

  usable() {
    if (this.destroyed) throw new Error('model destroyed');
    if (this.eng.state.lost) throw new Error(`device lost: ${this.eng.state.lost}`);
  }

  checkStart(what, startPos, n) {
    if (startPos !== this.length) throw new Error(`${what}: start_pos ${startPos} must equal length ${this.length}`);
    if (startPos + n > this.config.seq_len) throw new Error(`${what}: ${startPos} + ${n} tokens exceed seq_len ${this.config.seq_len}`);
  }

  tokenIds(what, tokens) {
    const n = tokens?.length;
    if (!Number.isInteger(n) || n < 1) throw new Error(`${what}: tokens must be a non-empty sequence`);
    const tok = new Uint32Array(n);
    const vocab = this.config.vocab_size;
    for (let i = 0; i < n; i++) {
      const t = Number(tokens[i]);
      if (!Number.isInteger(t) || t < 0 || t >= vocab) throw new Error(`${what}: token ${tokens[i]} at ${i} is outside 0..${vocab - 1}`);
      tok[i] = t;
    }
    return tok;
  }

  // ---- the four kinds of submission

  async forwardNow(tokens, startPos, nOut) {
    this.usable();
    const tok = this.tokenIds('forward', tokens);
    const n = tok.length;
    this.checkStart('forward', startPos, n);
    nOut = nOut ?? n;
    if (!Number.isInteger(nOut) || nOut < 1 || nOut > n) throw new Error(`forward: n_out ${nOut} must be in 1..${n}`);
    await this.ensureOut(nOut);
    this.device.queue.writeBuffer(this.bufs.tokens, 0, tok);
    const sub = new Submission(this);
    sub.pass(this, { n, startPos, nOut });
    sub.read(this.bufs.logits, 0, nOut * this.config.vocab_size * 4);
    const out = await this.submit(sub, n <= this.plan.maxRows);
    this.length = startPos + n;
    return new Float32Array(out);
  }

  /** decodeAhead; `then` > 0 also submits the next `then` passes (a continuation: pass 0 fed ids[n-1] at
   * start_pos + n), so the GPU works on them while the decode loop confirms these ids. The next decodeAhead(ids[n-1],
   * start_pos + n, then, pick, rows) takes its result (and submits ITS continuation before waiting for it: the GPU
   * always has the next run queued); any other call, or a truncate, drops it (its passes only wrote KV positions past
   * the committed length and its own readback buffer). A fresh run's continuation is submitted after its readback,
   * so the first tokens come back as soon as without one. `stop`: token ids that end an answer (EOS): no
   * continuation after a run that picked one (submitted before the readback, it cannot know: such a continuation is
   * dropped by the next call). */
  async aheadNow(token, startPos, n, pick, rows, then, stop) {
    this.usable();
    const [tok] = this.tokenIds('decodeAhead', [token]);
    if (!Number.isInteger(n) || n < 1 || n > MAX_PASSES) throw new Error(`decodeAhead: n ${n} must be in 1..${MAX_PASSES}`);
    if (!Number.isInteger(then) || then < 0 || then > MAX_PASSES) throw new Error(`decodeAhead: then ${then} must be in 0..${MAX_PASSES}`);
    this.checkStart('decodeAhead', startPos, n);
    const p = checkPick(pick);
    const next = this.nextRun(then, startPos + n + then, this.config.seq_len);
    const wantOf = (last, pos, r) => JSON.stringify([last, pos, r, p, !!rows]);
    const { out, after } = await this.runChained('ahead', wantOf(tok, startPos, n), next, next, async () => {
      await this.ensureOut(Math.max(n, next));
      this.device.queue.writeBuffer(this.bufs.tokens, 0, new Uint32Array([tok]));
      this.setPick(p);
      return { run: this.launch(this.aheadSub(startPos, n, rows, null, 'staging'), next === 0) };
    }, (other) => this.aheadSub(startPos + n, next, rows, n, other));   // (reads back into `other`)
    this.length = startPos + n;
    const ids = new Int32Array(out.bytes, 0, n);
    after(ids, stop, wantOf(ids[n - 1], startPos + n, next));
    return { ids, rows: rows ? new Float32Array(out.bytes, 4 * n, n * this.config.vocab_size) : null };
  }

  /** A decodeAhead submission of n passes at startPos.. reading ids (n,) then rows (n, vocab) back into the staging
   * buffer named `staging`; `from` (a continuation): its first token is the pick of the previous run's last pass, at
   * tokens[from], copied to tokens[0] through ids[0] (a copy cannot stay inside one buffer). Pre-encoded for the
   * next continuation, which reads back into the other staging buffer. */
  aheadSub(startPos, n, rows, from, staging) {
    const sub = new Submission(this, staging);
    if (from !== null) {
      sub.copy(this.bufs.tokens, 4 * from, this.bufs.ids, 0, 4);
      sub.copy(this.bufs.ids, 0, this.bufs.tokens, 0, 4);
      sub.continuation();
    }
    for (let i = 0; i < n; i++) sub.pass(this, { n: 1, startPos: startPos + i, nOut: 1, tokBase: i, outBase: i }, 'tokens');
    sub.read(this.bufs.tokens, 4, 4 * n);                                        // ids (n,): tokens[1..n]
    if (rows) sub.read(this.bufs.logits, 0, n * this.config.vocab_size * 4);   // rows (n, vocab)
    return sub;
  }

  /** After a run read back (decodeAhead, ngramChain): the continuation submitted before its ids were known is
   * named by `want` (the next call that takes it), or dropped if the run picked a `stop` id (the answer ends there); a
   * fresh run with a continuation to make (`next` > 0) submits it now through `follow(want)`, unless it stopped. */
  afterRun(picked, stop, want, next, continued, follow) {
    const stopped = !!(stop && picked.some((t) => stop.includes(t)));
    if (this.ahead && this.ahead.want === null) {
      if (stopped) this.ahead.stale = true;           // the answer ends in this run: the next call drops it
      else this.ahead.want = want;
    } else if (next > 0 && !continued && !stopped) follow(want, true);
  }

  /** A launched run's result; if it failed, the continuation submitted after it is waited for (its readback buffer
   * must be free before anything else runs) before the error is thrown. */
  async ran(run) {
    try {
      return await run;
    } catch (e) {
      await this.settleAhead();
      throw e;
    }
  }

  /** Wait for a dropped (or unread) continuation: its readback buffer must be free before anything else runs. */
  async settleAhead() {
    const c = this.ahead;
    if (!c) return;
    this.ahead = null;
    try { await c.run; } catch { /* its error (a lost device) is the next submission's to report */ }
  }

  async verifyNow(tokens, startPos, pick, rows) {
    this.usable();
    const tok = this.tokenIds('verify', tokens);
    const n = tok.length;
    this.checkStart('verify', startPos, n);
    const p = checkPick(pick);
    await this.ensureOut(n);
    this.device.queue.writeBuffer(this.bufs.tokens, 0, tok);
    this.setPick(p);
    const sub = new Submission(this);
    sub.pass(this, { n, startPos, nOut: n }, 'ids');
    const V = this.config.vocab_size;
    sub.read(this.bufs.ids, 0, 4 * n);                                          // ids (n,)
    if (rows) sub.read(this.bufs.logits, 0, n * V * 4);                         // rows (n, vocab)
    const out = await this.submit(sub, true);
    this.length = startPos + n;
    return { ids: new Int32Array(out, 0, n), rows: rows ? new Float32Array(out, 4 * n, n * V) : null };
  }

  /** ngramChain: `rounds` rounds of the n-gram drafter in one submission (shaders/chain.wgsl opens and closes them
   * between the verify passes); `then` > 0 also submits the next chain of `then` rounds from where this one ends
   * (its history and length stay on the GPU), as decodeAhead's continuation does. */
  async chainNow(seq, startPos, rounds, k, pick, ngram, then, stop) {
    this.usable();
    const hist = this.tokenIds('ngramChain', seq);
    this.checkChain('ngramChain', rounds, k, then);
    const [lo, hiN] = checkNgram('ngramChain: ngram', ngram);
    if (hist.length !== startPos + 1) throw new Error(`ngramChain: seq holds ${hist.length} tokens; start_pos ${startPos} must be its last token's position`);
    const W = k + 1;
    this.checkStart('ngramChain', startPos, rounds * W);
    const p = checkPick(pick);
    const next = this.nextRun(then, startPos + (rounds + then) * W, this.config.seq_len);
    const key = (last, pos, r) => JSON.stringify([last, pos, r, k, p, lo, hiN]);
    const params = (r) => this.device.queue.writeBuffer(this.bufs.chain_params, 0, this.eng.kernels.chain.pack('params',
      { k, rounds: r, min_ngram: lo, max_ngram: hiN, seq_len: this.config.seq_len,
        slot_words: this.stepDirect ? this.slotBytes / 4 : 0 }));
    const { out, after } = await this.runChained('ngram', key(hist[startPos], startPos, rounds), next, next * W, async () => {
      await this.ensureOut(Math.max(rounds, next) * W);
      const q = this.device.queue;
      q.writeBuffer(this.bufs.chain_hist, 0, hist);
      q.writeBuffer(this.bufs.chain_state, 0, new Uint32Array([hist.length, 0, 0, 0]));
      this.setPick(p);
      params(rounds);
      return { run: this.launch(this.chainSub(rounds, k, 'staging', false, startPos + rounds * W), next === 0) };
    }, (other) => this.chainSub(next, k, other, true, startPos + (rounds + next) * W), params);
    const res = parseChain(out.bytes, rounds, k);
    this.length = startPos + res.advance;
    after(res.appended, stop, key(res.appended[res.appended.length - 1], this.length, next));
    return { counts: Int32Array.from(res.counts), accepted: Int32Array.from(res.accepted),
      proposals: Int32Array.from(res.proposals.flat()), ids: Int32Array.from(res.ids.flat()) };
  }

  /** A chain call's rounds, k and then (ngramChain, specChain). */
  checkChain(what, rounds, k, then) {
    for (const [name, v, hi] of [['rounds', rounds, MAX_PASSES], ['k', k, this.chainMaxK], ['then', then, MAX_PASSES]]) {
      const lo = name === 'then' ? 0 : 1;
      if (!Number.isInteger(v) || v < lo || v > hi) throw new Error(`${what}: ${name} ${v} must be in ${lo}..${hi}`);
    }
  }

  /** How far a call's continuation goes: `then`, or 0 where it would end past `maxLen` (its end: the position after
   * its last), where continuations are off (plan.aheadThen false, for A/B benches) or with bench timestamps (one
   * submission at a time). */
  nextRun(then, end, maxLen) {
    return end <= maxLen && this.plan.aheadThen && !this.ts ? then : 0;
  }

  /** What decodeAhead, ngramChain and specChain share (tag 'ahead' | 'ngram' | 'spec'): this call's run is the
   * continuation the call before submitted if that one is this call (same tag and `want`; room made for the next
   * one's `rowsNext` rows after it), else what fresh() launches (resolving to {run} once submitted; reading back into
   * 'staging') once any dropped
   * continuation is done. This call's own continuation of `next` (> 0: passes or rounds), contOf(the other staging
   * buffer), is encoded while the GPU runs this one, and submitted (params(next) written first, if given) before
   * waiting for this run when this run was itself a continuation, else after its readback, by after(picked, stop,
   * want of the next call) (afterRun). Returns {out: the readback {bytes, stats}, after}. */
  async runChained(tag, want, next, rowsNext, fresh, contOf, params = null) {
    const c = this.ahead;
    const continued = !!(c && !c.stale && c.tag === tag && c.want === want);
    let run;
    let staging = 'staging';
    if (continued) {
      this.ahead = null;
      run = c.run;                                    // submitted by the call before: its passes may be done already
      staging = c.staging;
      if (rowsNext > this.outCap) {                   // (room for the continuation: after this run's readback)
        await run.catch(() => {});
        await this.ensureOut(rowsNext);
      }
    } else {
      await this.settleAhead();
      // fresh() resolves to {run: the launched run's promise} once it is submitted, not read back: its continuation's
      // commands are encoded below while the GPU runs it (an async fresh() returning the promise itself resolved
      // only after the readback, and the encode waited for it: bench/h200/results/2026-12-06d, calls 10-11)
      ({ run } = await fresh());
    }
    const other = otherStaging(staging);
    const contSub = next > 0 ? contOf(other) : null;
    // a continuation submitted now, behind this run (the call before submitted it: the GPU is busy), of at most
    // plan.contSplitsMaxPasses passes, is encoded as plan.contSplits command buffers (1: splitting lets only an idle
    // GPU start early, and each further buffer costs GPU time); one submitted after this run's readback (a fresh
    // run's) finds the GPU idle and keeps the plan's splits, or takes plan.contSplitsFresh where set (options.js)
    if (contSub && continued && contSub.passes <= this.plan.contSplitsMaxPasses) contSub.splits = this.plan.contSplits || null;
    if (contSub && !continued && this.plan.contSplitsFresh) contSub.splits = this.plan.contSplitsFresh;
    if (contSub && !continued && !this.pres.has(contSub.key())) {
      // encode the continuation while the GPU runs this one, so that it is submitted as soon as this is read back
      // (H200: a chain's first continuation encoded after the readback left the GPU idle for it, 1.5-3 ms)
      this.putPre({ ...this.encode(contSub, this.bufs[other]), key: contSub.key(), pre: true });
    }
    const follow = (w, late = false) => {             // the continuation (late: after a fresh run's readback)
      params?.(next);                                 // (queued after this run's commands: it reads its own)
      // late, the next continuation's pre-encoding is put off (plan.preDefer) until that shape is taken or the
      // thread is idle, not done before this call returns: the next (continued) call encodes it, if need be, while
      // the GPU runs this continuation
      const cont = this.launch(contSub, late && this.plan.preDefer ? 'defer' : true);
      cont.catch(() => {});                           // dropped unread: its failure is the next call's to see
      this.ahead = { run: cont, stale: false, staging: other, want: w, tag };
    };
    if (next > 0 && continued) follow(null);          // (its first token is known once this run is read back)
    if (continued) this.refillPre();                  // (the GPU is busy with this run and the next)
    const out = await this.ran(run);
    this.stats = { ...out.stats, continued };         // continued: submitted by the call before
    return { out, after: (picked, stop, w) => this.afterRun(picked, stop, w, next, continued, follow) };
  }

  /** A chain's submission: per round the chain kernel (closes the last round, opens this one; its Step written into
   * the round's slot r, or with chainStepDirect false copied there), the verify pass (grid of k + 1 rows, 1 + c
   * computed; its Step the kernel's; row-parallel with
   * plan.chainRowwise, so that a round with few proposals costs about what its rows cost), picks into ids; the kernel once more
   * (closes the last round); reads back rec (rounds, k + 2) then ids (rounds, k + 1). end: the position after the
   * last any of its passes may reach (this run's start + its rounds' k + 1 rows, after the runs before it). */
  chainSub(rounds, k, staging, cont, end) {
    const sub = new Submission(this, staging);
    const W = k + 1;
    const stepBytes = this.stepKernel.uniformBytes('step');
    for (let r = 0; r < rounds; r++) {
      sub.run(this.chainOps, 1, 0, 'chain');
      const slot = sub.steps.get(this)?.length ?? 0;
      if (!this.stepDirect) sub.copy(this.bufs.chain_slot, 0, this.stepBuf, slot * this.slotBytes, stepBytes);
      else if (slot !== r) throw new Error(`ngramChain: round ${r}'s pass has step slot ${slot}; the chain kernel writes slot ${r}`);
      sub.pass(this, { n: W, startPos: 0, nOut: W, tokBase: r * W, outBase: r * W, posEnd: end }, 'ids', this.plan.chainRowwise, true);
    }
    sub.run(this.chainOps, 1, 0, 'chain');
    sub.read(this.bufs.chain_rec, 0, 4 * rounds * (k + 2));                    // rec (rounds, k + 2)
    sub.read(this.bufs.ids, 0, 4 * rounds * W);                                 // ids (rounds, k + 1)
    if (cont) sub.continuation();
    return sub;
  }

  /** specChain: `rounds` greedy rounds of `draft` (a draft model or head of this engine) in one submission
   * (shaders/draft_chain.wgsl opens and closes them between the verify passes). seq: every token so far, its last at
   * start_pos = seq.length - 1 = this.length not yet in the cache; the draft holds draftStart positions and is fed
   * seq[draftStart ..] (1 to k + 1 tokens) in the first round. Afterwards this model's length is where the grown
   * sequence's last token goes and the draft's what its update after the last round keeps. Returns the rounds as
   * ngramChain does ({counts (all k), accepted, proposals, ids}) and draftLength. restart: each round feeds the draft
   * from the round before it's first position (what a draft head needs; py/exactspec/backend.py spec_chain).
   * `then` > 0 also submits the next chain of `then` rounds from where this one ends (history, lengths and the draft's
   * input stay on the GPU), taken by the next specChain(draft, grown seq, its draft start, then, k, pick, restart) as
   * ngramChain's continuations are; `stop` ids: none after a chain that appended one. copy: [min_ngram, max_ngram]
   * (a draft head's copies: each round's n-gram lookup on the GPU replaces the draft's first proposals), or null. */
  async specChainNow(draft, seq, draftStart, rounds, k, pick, restart, then, stop, copy) {
    this.usable();
    if (!(draft instanceof EngineModel) || draft.eng !== this.eng || draft === this) throw new Error('specChain: the draft must be another model of the same engine');
    draft.usable();
    if (draft.champion && draft.champion !== this) throw new Error('specChain: this draft head reads the features of another champion');
    if (draft.config.vocab_size !== this.config.vocab_size) throw new Error(`specChain: draft vocabulary ${draft.config.vocab_size} differs from ${this.config.vocab_size}`);
    const hist = this.tokenIds('specChain', seq);
    const startPos = hist.length - 1;
    this.checkChain('specChain', rounds, k, then);
    const f = startPos + 1 - draftStart;
    if (!Number.isInteger(draftStart) || f < 1 || f > k + 1) throw new Error(`specChain: the draft is fed seq[${draftStart}..${startPos}], ${f} tokens; 1 to k + 1 = ${k + 1} may be`);
    if (typeof restart !== 'boolean') throw new Error(`specChain: restart ${JSON.stringify(restart)} must be true or false`);
    if (draft.isHead && !restart) throw new Error('specChain: a draft head\'s rounds restart (its drafted positions are made again from the champion\'s features)');
    const cp = copy ? checkNgram('specChain: copy', copy) : null;   // [min_ngram, max_ngram] of each round's copies
    const p = checkPick(pick);
    if (p.temperature !== 0) throw new Error('specChain: greedy picks only (the rounds close on the picks)');
    const W = k + 1;
    this.checkStart('specChain', startPos, rounds * W);
    draft.checkStart('specChain draft', draftStart, f - 1 + rounds * W);
    if (Math.max(rounds, then) * (2 * k + 1) > draft.config.seq_len + 1) throw new Error(`specChain: ${Math.max(rounds, then)} rounds of ${k} exceed the draft's token list`);
    if (draft.slotBytes !== this.slotBytes) throw new Error('specChain: the draft\'s step slots differ from the champion\'s');
    if (W > draft.plan.maxRows) throw new Error(`specChain: k + 1 = ${W} rows exceed the draft's chunk of ${draft.plan.maxRows}`);
    const next = this.nextRun(then, startPos + (rounds + then) * W, Math.min(this.config.seq_len, draft.config.seq_len));
    const key = (last, pos, dStart, r) => JSON.stringify([draft.id, draft.gen, last, pos, dStart, r, k, restart, cp]);
    const params = (r) => this.device.queue.writeBuffer(this.bufs.dchain_params, 0, this.eng.kernels.draft_chain.pack('params',
      { k, rounds: r, slot_words: this.slotBytes / 4, restart: restart ? 1 : 0 }));
    const want = key(hist[startPos], startPos, draftStart, rounds);
    const { out, after } = await this.runChained('spec', want, next, next * W, async () => {
      await draft.prepare?.();
      if (draft.isHead) draft.passesFor(f, draftStart, startPos);    // (its first input reads kept features: checked)
      await draft.ensureOut(1);
      await this.ensureOut(Math.max(rounds, next) * W);
      const q = this.device.queue;
      q.writeBuffer(this.bufs.chain_hist, 0, hist);
      q.writeBuffer(this.bufs.chain_state, 0, new Uint32Array([hist.length, 0, draftStart, 0]));
      params(rounds);
      if (cp) q.writeBuffer(this.bufs.copy_params, 0, this.eng.kernels.chain_copy.pack('params',
        { k, rounds, min_ngram: cp[0], max_ngram: cp[1], seq_len: this.config.seq_len, slot_words: 0 }));
      draft.setPick(p);
      this.setPick(p);
      return { run: this.launch(this.specChainSub(draft, rounds, k, 'staging', false, !!cp, startPos + rounds * W), next === 0) };
    }, (other) => this.specChainSub(draft, next, k, other, true, !!cp, startPos + (rounds + next) * W), params);
    const res = parseChain(out.bytes, rounds, k, 'specChain');
    const st = new Uint32Array(out.bytes, 4 * rounds * (2 * k + 3), 4);
    if (res.counts.some((x) => x !== k) || st[0] !== hist.length + res.advance) throw new Error('specChain: the GPU\'s records disagree with its history length');
    this.length = startPos + res.advance;
    draft.length = st[2];
    if (draft.isHead) draft.ringPos.fill(-1);        // (its predicted features: re-made by the next round's passes)
    after(res.appended, stop, key(res.appended[res.appended.length - 1], this.length, st[2], next));
    return { counts: Int32Array.from(res.counts), accepted: Int32Array.from(res.accepted),
      proposals: Int32Array.from(res.proposals.flat()), ids: Int32Array.from(res.ids.flat()), draftLength: st[2] };
  }

  /** A specChain's submission: per round the draft_chain kernel (closes the last round, opens this one), its Steps
   * copied into the draft's and this model's slots and the draft's input into its tokens, the draft's k passes (the
   * first on a grid of k + 1 rows, f computed), the proposals copied into this model's tokens (copy: then the n-gram
   * lookup's copies over the first ones, chain.wgsl COPY), the verify pass; the kernel once more (closes the last
   * round); reads back rec (rounds, k + 2), ids (rounds, k + 1), state (4,). end: as chainSub's (the draft's passes
   * stay before it too: they are fed and propose no further than the verify's rows). */
  specChainSub(draft, rounds, k, staging, cont, copy, end) {
    const sub = new Submission(this, staging);
    const W = k + 1;
    const stepBytes = this.stepKernel.uniformBytes('step');
    const rowwise = this.plan.chainRowwise;
    const extra = draft.isHead ? { src_len: 0 } : null;
    for (let r = 0; r < rounds; r++) {
      const bd = r * (2 * k + 1);
      sub.run(this.draftChainOps, 1, 0, 'draft_chain');
      const ds = sub.steps.get(draft)?.length ?? 0;
      const vs = sub.steps.get(this)?.length ?? 0;
      sub.copy(this.bufs.chain_slots, 0, draft.stepBuf, ds * this.slotBytes, (k - 1) * this.slotBytes + stepBytes);
      sub.copy(this.bufs.chain_slots, k * this.slotBytes, this.stepBuf, vs * this.slotBytes, stepBytes);
      sub.copy(this.bufs.chain_feed, 0, draft.bufs.tokens, 4 * bd, 4 * W);
      sub.pass(draft, { n: W, startPos: 0, nOut: 1, tokBase: bd, outBase: 0, extra, posEnd: end }, 'tokens', rowwise, true);
      for (let i = 1; i < k; i++) sub.pass(draft, { n: 1, startPos: 0, nOut: 1, tokBase: bd + k + i, outBase: 0, extra, posEnd: end }, 'tokens');
      sub.copy(draft.bufs.tokens, 4 * (bd + k + 1), this.bufs.tokens, 4 * (r * W + 1), 4 * k);
      if (copy) sub.run(this.copyOps, 1, 0, 'chain_copy');     // a head's copies replace its first proposals
      sub.pass(this, { n: W, startPos: 0, nOut: W, tokBase: r * W, outBase: r * W, posEnd: end }, 'ids', rowwise);
    }
    sub.run(this.draftChainOps, 1, 0, 'draft_chain');
    sub.read(this.bufs.chain_rec, 0, 4 * rounds * (k + 2));                    // rec (rounds, k + 2)
    sub.read(this.bufs.ids, 0, 4 * rounds * W);                                 // ids (rounds, k + 1)
    sub.read(this.bufs.chain_state, 0, 16);                                     // state (4,): L, 0, D, 0
    if (cont) sub.continuation();
    return sub;
  }

  async roundNow(draft, feed, draftStart, k, token, startPos, pick, rows, copy) {
    this.usable();
    if (!(draft instanceof EngineModel) || draft.eng !== this.eng || draft === this) throw new Error('specRound: the draft must be another model of the same engine');
    draft.usable();
    if (draft.champion && draft.champion !== this) throw new Error('specRound: this draft head reads the features of another champion');
    await draft.prepare?.();
    if (draft.config.vocab_size !== this.config.vocab_size) throw new Error(`specRound: draft vocabulary ${draft.config.vocab_size} differs from ${this.config.vocab_size}`);
    const fed = draft.tokenIds('specRound feed', feed);
    const f = fed.length;
    const [tok] = this.tokenIds('specRound', [token]);
    if (!Number.isInteger(k) || k < 1 || k > MAX_PASSES) throw new Error(`specRound: k ${k} must be in 1..${MAX_PASSES}`);
    if (draftStart + f - 1 !== startPos) throw new Error(`specRound: the feed ends at ${draftStart + f - 1}, not at start_pos ${startPos}`);
    draft.checkStart('specRound draft', draftStart, f + k - 1);
    this.checkStart('specRound', startPos, k + 1);
    const p = checkPick(pick);
    const cp = copy && copy.length ? this.tokenIds('specRound copy', copy) : null;   // (c,) the first proposals
    if (cp && cp.length > k) throw new Error(`specRound: ${cp.length} copied proposals exceed k = ${k}`);
    await draft.ensureOut(draft.roundRows(k));
    await this.ensureOut(k + 1);
    const q = this.device.queue;
    q.writeBuffer(draft.bufs.tokens, 0, fed);
    q.writeBuffer(this.bufs.tokens, 0, new Uint32Array([tok]));
    if (cp) q.writeBuffer(this.bufs.copy_ids, 0, cp);
    draft.setPick(p);
    this.setPick(p);
    const sub = new Submission(this);
    const done = draft.draftPasses(sub, f, draftStart, k, startPos);              // proposals -> draft tokens[f..]
    sub.copy(draft.bufs.tokens, 4 * f, this.bufs.tokens, 4, 4 * k);                // [token, proposals...]
    if (cp) sub.copy(this.bufs.copy_ids, 0, this.bufs.tokens, 4, 4 * cp.length);   // the copies replace the first
    sub.pass(this, { n: k + 1, startPos, nOut: k + 1 }, 'ids');
    const V = this.config.vocab_size;
    sub.read(draft.bufs.tokens, 4 * f, 4 * k);                                  // proposals (k,)
    sub.read(this.bufs.ids, 0, 4 * (k + 1));                                    // ids (k + 1,)
    if (rows) sub.read(this.bufs.logits, 0, (k + 1) * V * 4);                   // rows (k + 1, vocab)
    const out = await this.submit(sub, true);
    done?.();
    draft.length = draftStart + f + k - 1;
    this.length = startPos + k + 1;
    return { proposals: new Int32Array(out, 0, k), ids: new Int32Array(out, 4 * k, k + 1),
      rows: rows ? new Float32Array(out, 4 * (2 * k + 1), (k + 1) * V) : null };
  }

  /** Logits rows a specRound's draft passes need. */
  roundRows(k) { return k; }

  /** A specRound's draft passes (this model as the draft): `feed` (f tokens) at draftStart picks proposal 0 into
   * tokens[f], pass i > 0 feeds tokens[f + i - 1] and picks into tokens[f + i]. Returns what to do once the
   * submission succeeded (nothing here; a draft head commits its feature bookkeeping). */
  draftPasses(sub, f, draftStart, k) {
    sub.pass(this, { n: f, startPos: draftStart, nOut: 1 }, 'tokens');
    for (let i = 1; i < k; i++) sub.pass(this, { n: 1, startPos: draftStart + f + i - 1, nOut: 1, tokBase: f + i - 1, outBase: i }, 'tokens');
    return null;
  }

  setPick(p) {
    const words = this.eng.kernels.pick.pack('params', pickParams(p, this.config.vocab_size, this.pickGroups));
    this.device.queue.writeBuffer(this.bufs.pick_params, 0, words);
  }

  /** Write the step slots, submit (pre-encoded commands when the shape repeats), wait for the readback; returns a
   * copy of the bytes read back (this.stats: the submission's). preEncode: encode the same shape again while the GPU
   * runs. */
  async submit(sub, preEncode) {
    const { bytes, stats } = await this.launch(sub, preEncode);
    this.stats = stats;
    return bytes;
  }

  /** The commands pre-encoded for a submission of this key (taken: a command buffer is submitted once), or null. */
  takePre(key) {
    this.flushPre(key);
    const c = this.pres.get(key);
    if (!c) return null;
    this.pres.delete(key);
    return c;
  }

  /** Encode again the fresh run whose pre-encoded commands launch() took without replacing them (this.refill),
   * unless the model's commands changed since (gen) or that shape is pre-encoded already. */
  refillPre() {
    const r = this.refill;
    this.refill = null;
    if (!r || r.gen !== this.gen || this.pres.has(r.sub.key())) return;
    this.putPre({ ...this.encode(r.sub, this.bufs[r.sub.staging]), key: r.sub.key(), pre: true });
  }

  /** Put off pre-encoding the commands of `key` (make() encodes them) to a later task of this thread, or to the
   * moment that shape is taken (takePre), whichever comes first; skipped if the model's commands changed by then. */
  deferPre(key, make) {
    this.flushPre();                                  // (one at a time)
    const d = { key, make, gen: this.gen };
    this.deferred = d;
    setTimeout(() => {
      if (this.deferred !== d) return;
      try { this.flushPre(); } catch { /* a lost device (flushPre let go of it first): the next submission's to report */ }
    }, 0);
  }

  /** Do the put-off pre-encoding now (key: only if it is that shape's). */
  flushPre(key = null) {
    const d = this.deferred;
    if (!d || (key !== null && d.key !== key)) return;
    this.deferred = null;
    if (this.destroyed || d.gen !== this.gen || this.pres.has(d.key)) return;
    this.putPre({ ...d.make(), key: d.key, pre: true });
  }

  /** Keep pre-encoded commands for their key: the plan.preKeep most recent shapes (a decode loop alternates a dozen
   * or so: an answer's first round, its verify blocks, chains and their continuations, runs ahead; each is ready when
   * it comes again, the next answer's first run included). */
  putPre(cmd) {
    this.plan.trace?.({ t: performance.now(), ev: 'pre', model: this.id, dispatches: cmd.dispatches });
    this.pres.delete(cmd.key);
    this.pres.set(cmd.key, cmd);
    while (this.pres.size > this.plan.preKeep) this.pres.delete(this.pres.keys().next().value);
  }

  /** submit's work: everything up to the queue submission happens before the first await (so a caller may launch
   * another submission before awaiting this one); resolves to {bytes, stats}. */
  async launch(sub, preEncode) {
    const q = this.device.queue;
    const tEnc = performance.now();
    for (const [m, steps] of sub.steps) {   // step slots are slotBytes apart (the dynamic offset alignment)
      if (steps.length > m.maxSlots) throw new Error(`a submission of ${steps.length} chunks exceeds ${m.maxSlots}`);
      const words = new Uint32Array((steps.length * m.slotBytes) / 4);
      steps.forEach((st, i) => words.set(m.stepKernel.pack('step', st), (i * m.slotBytes) / 4));
      q.writeBuffer(m.stepBuf, 0, words);
    }
    const key = sub.key();
    const staging = this.bufs[sub.staging];
    const encode = (into) => this.encode(sub, into);
    const cmd = this.takePre(key) ?? { ...encode(staging), key };
    const tSub = performance.now();
    for (const cb of cmd.cbs) q.submit([cb]);
    const st = { submit_ms: performance.now() - tSub, encode_ms: performance.now() - tEnc, dispatches: cmd.dispatches,
      command_buffers: cmd.cbs.length, chunks: sub.chunks, far_chunks: sub.farChunks, passes: sub.passes,
      pre_encoded: cmd.pre === true, gpu_ms: null };
    this.plan.trace?.({ t: performance.now(), ev: 'submit', model: this.id, dispatches: cmd.dispatches, pre: st.pre_encoded,
      submit_ms: st.submit_ms });
    const bytes = sub.readBytes;
    if (bytes > staging.size) throw new Error(`readback of ${bytes} bytes exceeds the staging buffer`);
    const map = this.mapped(staging, bytes);   // (asks for the map now, before any later submission)
    if (sub.fence && this.plan.mapFence) {
      // Dawn ties a map to the serial of the NEXT submission: without this tiny one (a 4-byte copy) a continuation's
      // readback would wait for the continuation submitted after it too (on the H200, a run whose continuation was
      // submitted right after it came back only when both were done: 17.8 vs 7.2 ms to the first tokens)
      this.fence ??= [this.mem.create('fence_src', 16), this.mem.create('fence_dst', 16)];   // (4,) each
      const enc = this.device.createCommandEncoder();
      enc.copyBufferToBuffer(this.fence[0], 0, this.fence[1], 0, 4);
      q.submit([enc.finish()]);
    }
    // While the GPU runs, encode the next submission of the same shape (the decode loop repeats shapes; positions
    // and tokens travel in buffers written at submit time, not in the commands).
    // (sub.preStaging: the same shape reading back into another staging buffer, a continuation's next one)
    const pre = sub.preStaging ?? sub.staging;
    if (preEncode === 'defer') this.deferPre(sub.key(pre), () => encode(this.bufs[pre]));
    else if (preEncode) this.putPre({ ...encode(this.bufs[pre]), key: sub.key(pre), pre: true });
    // a fresh run that took pre-encoded commands and has a continuation to encode now (not preEncode): encode its
    // shape again later, while a continued call waits for the GPU (refillPre), so that the next fresh run of that
    // shape (the next answer's first run) comes pre-encoded too
    else if (cmd.pre && !sub.fence && this.plan.preFirst) this.refill = { sub, gen: this.gen };
    await map;
    this.plan.trace?.({ t: performance.now(), ev: 'mapped', model: this.id });
    st.wait_ms = performance.now() - tEnc - st.encode_ms;
    const out = staging.getMappedRange(0, bytes).slice(0);
    staging.unmap();
    if (this.ts) {
      await this.ts.read.mapAsync(GPUMapMode.READ);
      const t = new BigUint64Array(this.ts.read.getMappedRange());
      st.gpu_ms = Number(t[1] - t[0]) / 1e6;
      this.ts.read.unmap();
    }
    if (this.eng.state.error) throw new Error(`gpu error: ${this.eng.state.error}`);
    return { bytes: out, stats: st };
  }

  /** The command buffers of `sub`, reading back into the buffer `into` ({cbs, dispatches}). */
  encode(sub, into) {
    return encodeSubmission(this.device, sub.items, sub.reads, into,
      { splits: sub.splits ?? this.plan.splits + (sub.passes - 1) * this.plan.passSplits, ts: this.ts });
  }

  /** Map a buffer for reading; a lost device rejects with "device lost: ..." (never hangs). */
  async mapped(buf, bytes) {
    const { state, lostPromise } = this.eng;
    try {
      await Promise.race([buf.mapAsync(GPUMapMode.READ, 0, bytes), lostPromise.then((m) => { throw new Error(`device lost: ${m}`); })]);
    } catch (e) {
      // a destroyed/lost device rejects the map before `device.lost` may have settled: give it a moment
      const m = state.lost ?? await Promise.race([lostPromise, new Promise((r) => setTimeout(() => r(null), 500))]);
      if (m) throw new Error(`device lost: ${m}`);
      throw e;
    }
  }
}

/** A chain's readback (rec (rounds, k + 2): c, a, proposals; then ids (rounds, k + 1)) as per-round lists, with the
 * tokens it appended (each round's accepted proposals and the pick after them) and how far it moved the length. The
 * acceptance is computed again here by the kernel's rule and must equal the kernel's. */
function parseChain(bytes, rounds, k, what = 'ngramChain') {
  const u = new Int32Array(bytes);
  const W = k + 1;
  const RW = k + 2;
  const counts = [];
  const accepted = [];
  const proposals = [];
  const ids = [];
  const appended = [];
  for (let r = 0; r < rounds; r++) {
    const c = u[r * RW];
    const props = Array.from(u.subarray(r * RW + 2, r * RW + 2 + c));
    const picks = Array.from(u.subarray(rounds * RW + r * W, rounds * RW + r * W + c + 1));
    let a = c;
    for (let i = 0; i < c; i++) if (picks[i] !== props[i]) { a = i; break; }
    if (c < 0 || c > k || a !== u[r * RW + 1]) throw new Error(`${what}: round ${r}: the GPU's record (c ${c}, a ${u[r * RW + 1]}) disagrees with its picks (a ${a})`);
    counts.push(c);
    accepted.push(a);
    proposals.push(props);
    ids.push(picks);
    appended.push(...props.slice(0, a), picks[a]);
  }
  return { counts, accepted, proposals, ids, appended, advance: appended.length };
}

/** An n-gram lookup's [min, max] match lengths (ngramChain's ngram, specChain's copy), checked: 1 <= min <= max <= 16
 * (chain.wgsl's search). */
function checkNgram(what, pair) {
  const [lo, hi] = pair ? Array.from(pair, Number) : [];
  if (!pair || pair.length !== 2 || !Number.isInteger(lo) || !Number.isInteger(hi) || lo < 1 || hi < lo || hi > 16) {
    throw new Error(`${what} ${JSON.stringify(pair ? Array.from(pair) : pair)} must be [min, max] with 1 <= min <= max <= 16`);
  }
  return [lo, hi];
}

/** The other of the two staging buffers (a continuation reads back into the one its predecessor does not use). */
const otherStaging = (name) => (name === 'staging' ? 'staging2' : 'staging');

/** One submission's work: passes of one or two models (their chunks, step slots and ops), copies, readbacks. */
export class Submission {
  /** staging: the owner's readback buffer by name ('staging' | 'staging2'). */
  constructor(owner, staging = 'staging') {
    this.owner = owner;
    this.staging = staging;
    this.items = [];
    this.reads = [];
    this.readBytes = 0;
    this.steps = new Map();   // model -> the Step of each of its slots, in slot order
    this.shape = [];
    this.passes = 0;
    this.chunks = 0;
    this.farChunks = 0;   // chunks that ran the key blocks' layers (attnBlock)
    this.splits = null;   // command buffers, where not the plan's (a continuation: contSplits)
  }

  /** A pass of `model` (see passChunks); pick: null, or the pick ops ('tokens' | 'ids') after each chunk's head;
   * rowwise: every op row-parallel where it can be (op.rowSelect), for a pass whose rows the GPU decides; sparse: the
   * GPU decides how many of its rows are live (a chain round's; the ops' select(rows, sparse): graph.js attnO's grid,
   * the qkv matmul's variant with qkvRowsDense). */
  pass(model, p, pick = null, rowwise = false, sparse = false) {
    if (!this.steps.has(model)) this.steps.set(model, []);
    const steps = this.steps.get(model);
    for (const c of passChunks(p, model.plan.maxRows)) {
      const offset = steps.length * model.slotBytes;
      steps.push(c.step);
      // the key blocks' layers (attnBlock) for a chunk that may reach position attnBlock; p.posEnd: the GPU writes
      // the Steps (a chain's passes), and no row of the pass goes past position posEnd - 1
      const end = p.posEnd ?? c.step.start_pos + c.rows;
      if (!Number.isInteger(end)) throw new Error(`a pass's position bound ${end} must be an integer`);
      const far = model.usesBlocks(end);
      this.items.push({ ops: far ? model.opsFar : model.ops, rows: c.rows, offset, rowwise, sparse });
      if (c.outRows > 0) this.items.push({ ops: model.headOps, rows: c.outRows, offset, rowwise });
      if (c.outRows > 0 && pick) this.items.push({ ops: model.pickOps[pick], rows: c.outRows, offset });
      this.shape.push(`${model.id}.${model.gen}:${c.rows}:${c.outRows}:${pick}${rowwise ? ':row' : ''}${sparse ? ':sparse' : ''}${far ? ':far' : ''}`);
      this.chunks++;
      if (far) this.farChunks++;
    }
    this.passes++;
  }

  /** Mark this submission a continuation (decodeAhead's, a chain's): it reads back into its own staging buffer while
   * its successor's commands are pre-encoded for the other (preStaging), and its readback must not wait for its
   * successor (fence: launch). (Its command buffers: runChained.) */
  continuation() {
    this.preStaging = otherStaging(this.staging);
    this.fence = true;
  }

  /** One-off ops (the chain kernel) for `rows` rows with the step slot at byte `offset`. */
  run(ops, rows, offset, label) {
    this.items.push({ ops, rows, offset });
    this.shape.push(`${label}:${rows}@${offset}`);
  }

  copy(src, srcOffset, dst, dstOffset, size) {
    this.items.push({ copy: [src, srcOffset, dst, dstOffset, size] });
    this.shape.push(`copy ${src.label} ${srcOffset} ${dst.label} ${dstOffset} ${size}`);
  }

  read(src, offset, size) {
    this.reads.push([src, offset, size]);
    this.readBytes += size;
  }

  /** Commands depend only on this: the chunk shapes, copies, readbacks and the buffers they use. */
  key(staging = this.staging) {
    return `${this.shape.join('|')}|${this.reads.map(([s, o, n]) => `${s.label}@${o}+${n}`).join(',')}>${staging}|${this.owner.gen}` +
      (this.splits ? `|s${this.splits}` : '');
  }
}
