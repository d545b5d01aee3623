// head.js — a draft head on the engine (engine.loadHead; py/exactspec/drafters/head.py is the numpy reference and
// holds the GGUF layout): one Llama decoder layer at the champion's width over
//     x_in = W_fc . [rmsnorm(f_{q-1}) * feat_norm | rmsnorm(E[x_q]) * emb_norm]          (fc_feat | fc_emb, one matmul)
// then the champion's output norm and its tied LM head (all or a vocabulary subset of its rows, -inf elsewhere).
// f_{q-1} is the champion's kept feature (model option features, shaders/residual.wgsl FEATURES) when the champion
// holds position q-1 at the pass (q-1 < src_len, the champion's length then), else the head's own predicted feature
// (kept by position in a ring of RING_ROWS rows; app/gpu/head.js checks it is there): HeadModel._features_in's rule.
// A forward is split into passes as HeadModel.forward splits it (a row past the champion reads the feature its
// predecessor predicts, so it needs a pass of its own); all passes go in ONE submission with one readback.
// Shared with the champion, not copied: token_embd (the embedding gather and the LM head), output_norm, the RoPE
// table (when the head's RoPE is the champion's), the features buffer. Its own: the layer's weights, fc, the two
// input norms, the subset's ids, its KV cache (full context: positions past the window are not read), scratch.
//
// Kernels (shaders/, compiled at the first loadHead): embed (the champion's, for E[x_q]), head_in (source select +
// the two rmsnorms), matmul (fc, qkv + RoPE + KV write, o, gate/up + SwiGLU, down: the engine's layer ops from
// graph.js), head_attention (attention.wgsl with define WINDOW: the head's window), head_out (the predicted feature
// to the ring + rmsnorm for the LM head), then the LM head:
//   vocabulary subset, headVocab 'indexed' (default): head_logits.wgsl over the subset's ids, reading the champion's
//     embedding rows in place; the logits buffer holds -inf everywhere else (filled once).
//   vocabulary subset, headVocab 'masked': the full LM head (matmul over all rows), then vocab_mask.wgsl (-inf
//     outside the subset). Measured slower (README "The draft head on the engine"); kept for the comparison.
//   full vocabulary: the full LM head.
// 12 dispatches per pass (with the two of the batched step's pick). Batch invariant: every kernel's arithmetic for a
// row depends only on that row and its absolute position (tested bitwise against other chunkings).

import { GraphBuilder } from './graph.js';
import { compileKernels, headKernelFiles, WTYPE_IDS } from './kernels.js';
import { EngineModel, Submission } from './model.js';
import { qkPermutation, readVector, repackRows, rowBytes, tensorOf, typeInfo, uploadLinear } from './weights.js';

export const RING_ROWS = 128;          // predicted features kept (by position % RING_ROWS)
const HEAD_ARCH = 'exactspec-head';
const K = 'exactspec.head.';
const VOCAB_MODES = ['indexed', 'masked'];

/** The head's config from its description: `description.head` (HeadConfig.to_json()) or the GGUF metadata. */
export function headConfigOf(description) {
  if (description?.head) return { ...description.head };
  const md = description?.metadata ?? {};
  if (md['general.architecture'] !== HEAD_ARCH) {
    throw new Error(`not a draft head (general.architecture ${JSON.stringify(md['general.architecture'])}, expected ${JSON.stringify(HEAD_ARCH)})`);
  }
  const num = (key) => {
    const v = md[K + key];
    if (typeof v !== 'number') throw new Error(`head metadata lacks ${K + key}`);
    return v;
  };
  return { dim: num('embedding_length'), hidden_dim: num('feed_forward_length'), n_heads: num('attention.head_count'),
    n_kv_heads: num('attention.head_count_kv'), head_dim: num('attention.key_length'), vocab_size: num('vocab_size'),
    seq_len: num('context_length'), rope_theta: num('rope.freq_base'), norm_eps: num('attention.layer_norm_rms_epsilon'),
    window: num('attention.window'), vocab_subset: num('vocab_subset'), champion_sha256: String(md[K + 'champion_sha256'] ?? '') };
}

/** The head's engine config (a one-layer llama config) for this champion; refuses a head that does not fit it. */
function engineConfig(h, champion, seqLen) {
  const c = champion.config;
  if (h.dim !== c.dim || h.vocab_size !== c.vocab_size) {
    throw new Error(`the head (dim ${h.dim}, vocab ${h.vocab_size}) does not fit the champion (dim ${c.dim}, vocab ${c.vocab_size})`);
  }
  for (const k of ['hidden_dim', 'n_heads', 'n_kv_heads', 'head_dim', 'seq_len']) {
    if (!Number.isInteger(h[k]) || h[k] <= 0) throw new Error(`head config: ${k} must be a positive integer, got ${h[k]}`);
  }
  if (h.n_heads % h.n_kv_heads) throw new Error('head config: n_heads must be a multiple of n_kv_heads');
  if (h.head_dim % 16 || h.head_dim > 256) throw new Error(`head config: head_dim ${h.head_dim} must be a multiple of 16 and <= 256`);
  const window = h.window ?? 0;
  const subset = h.vocab_subset ?? 0;
  if (!Number.isInteger(window) || window < 0) throw new Error(`head config: bad window ${h.window}`);
  if (!Number.isInteger(subset) || subset < 0 || subset > c.vocab_size) throw new Error(`head config: bad vocab_subset ${h.vocab_subset}`);
  const cap = Math.min(seqLen ?? c.seq_len, c.seq_len, h.seq_len);
  if (!Number.isInteger(cap) || cap < 1) throw new Error(`seq_len ${seqLen} must be a positive integer`);
  return { dim: h.dim, hidden_dim: h.hidden_dim, n_layers: 1, n_heads: h.n_heads, n_kv_heads: h.n_kv_heads,
    head_dim: h.head_dim, vocab_size: c.vocab_size, seq_len: cap, rope_theta: h.rope_theta ?? 10000,
    rope_dim: h.head_dim, norm_eps: h.norm_eps ?? 1e-5, tied_embeddings: true, arch: 'llama', window, vocab_subset: subset };
}

/** W_fc = [fc_feat | fc_emb] as one (dim, 2 * dim) linear: each output row is the two stored rows back to back. */
async function uploadFc(device, readSlice, feat, emb, dim, maxBinding) {
  if (feat.ggml_type !== emb.ggml_type) throw new Error(`head.fc_feat.weight (${feat.ggml_type}) and head.fc_emb.weight (${emb.ggml_type}) must share one type`);
  const type = feat.ggml_type;
  typeInfo(type, 'head.fc');
  if (dim % 32) throw new Error(`head: dim ${dim} must be a multiple of 32`);
  const rb = rowBytes(type, dim);
  const parts = [];
  for (const t of [feat, emb]) {
    if (t.nbytes !== dim * rb.stored) throw new Error(`${t.name}: ${t.nbytes} bytes, expected ${dim} rows x ${rb.stored}`);
    const b = new Uint8Array(await readSlice(t.offset, t.nbytes, t.file));
    if (b.byteLength !== t.nbytes) throw new Error(`${t.name}: short read`);
    parts.push(b);
  }
  const stored = new Uint8Array(2 * dim * rb.stored);
  for (let r = 0; r < dim; r++) {
    stored.set(parts[0].subarray(r * rb.stored, (r + 1) * rb.stored), 2 * r * rb.stored);
    stored.set(parts[1].subarray(r * rb.stored, (r + 1) * rb.stored), (2 * r + 1) * rb.stored);
  }
  const packed = repackRows(stored, type, dim, 2 * dim);
  if (packed.byteLength > maxBinding) throw new Error(`head.fc: ${packed.byteLength} bytes exceed the binding limit`);
  const buffer = device.createBuffer({ label: 'head.fc', size: Math.max(16, packed.byteLength), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(buffer, 0, packed);
  return { type, wtype: WTYPE_IDS[type], K: 2 * dim, rows: dim, parts: [{ buffer, row0: 0, N: dim }], bytes: packed.byteLength };
}

/** The head's own weights (the layer, fc, input norms, subset ids); the champion's shared ones are added by bind. */
async function loadHeadWeights(eng, description, readSlice, cfg, mem) {
  const { device } = eng;
  const { dim, hidden_dim: hidden, n_heads: nH, n_kv_heads: nKV, head_dim: hd } = cfg;
  const T = new Map((description.tensors ?? []).map((t) => [t.name, t]));
  const need = (name, rows, cols) => tensorOf(T, name, rows, cols);
  let bytes = 0;
  const vec = async (name, n = dim) => {
    const b = mem.create(name, n * 4);
    device.queue.writeBuffer(b, 0, await readVector(readSlice, need(name, 1, n), n));
    bytes += n * 4;
    return b;
  };
  const linear = async (srcs, Kin, label, interleave = false) => {
    const l = await uploadLinear(device, readSlice, srcs, Kin, { interleave, maxBinding: eng.weightBinding, label });
    for (const p of l.parts) mem.own(p.buffer);
    bytes += l.bytes;
    return l;
  };
  const p = 'blk.0.';
  const [q, k, v] = [['attn_q', nH], ['attn_k', nKV], ['attn_v', nKV]].map(([n, h]) => need(`${p}${n}.weight`, h * hd, dim));
  for (const t of [q, k]) if (t.qk_permuted === undefined) t.qk_permuted = false;   // a head stores HF order
  const qkvSrc = [{ t: q, rows: nH * hd, perm: qkPermutation(q, hd, hd) }, { t: k, rows: nKV * hd, perm: qkPermutation(k, hd, hd) },
    { t: v, rows: nKV * hd }];
  if (q.ggml_type !== k.ggml_type || k.ggml_type !== v.ggml_type) throw new Error('head: attn_q/k/v must share one type');
  const fc = await uploadFc(device, readSlice, need('head.fc_feat.weight', dim, dim), need('head.fc_emb.weight', dim, dim), dim, eng.weightBinding);
  mem.own(fc.parts[0].buffer);
  bytes += fc.bytes;
  const layer = {
    attnNorm: await vec(p + 'attn_norm.weight'),
    ffnNorm: await vec(p + 'ffn_norm.weight'),
    qkv: [await linear(qkvSrc, dim, p + 'qkv')],
    o: await linear([{ t: need(p + 'attn_output.weight', dim, nH * hd), rows: dim }], nH * hd, p + 'attn_output'),
    gateUp: await linear([{ t: need(p + 'ffn_gate.weight', hidden, dim), rows: hidden },
      { t: need(p + 'ffn_up.weight', hidden, dim), rows: hidden }], dim, p + 'ffn_gate_up', true),
    down: await linear([{ t: need(p + 'ffn_down.weight', dim, hidden), rows: dim }], hidden, p + 'ffn_down'),
  };
  let ids = null;
  if (cfg.vocab_subset) {
    const f = await readVector(readSlice, need('head.vocab_ids', 1, cfg.vocab_subset), cfg.vocab_subset);
    ids = new Uint32Array(f.length);
    for (let i = 0; i < f.length; i++) {
      const id = f[i];
      if (!Number.isInteger(id) || id < 0 || id >= cfg.vocab_size || (i > 0 && id <= ids[i - 1])) {
        throw new Error(`head.vocab_ids must be strictly ascending token ids in 0..${cfg.vocab_size - 1}`);
      }
      ids[i] = id;
    }
    bytes += ids.byteLength;
  }
  return { layers: [layer], fc, featNorm: await vec('head.feat_norm.weight'), embNorm: await vec('head.emb_norm.weight'),
    ids, get bytes() { return bytes; } };
}

/** Compile the head's kernels once per engine (added to engine.kernels). */
async function headKernels(eng) {
  if (!eng.kernels.head_in) {
    const { files, defines } = headKernelFiles();
    eng.headKernels ??= compileKernels(eng.device, eng.shaderSource, files, defines).then((k) => Object.assign(eng.kernels, k));
    await eng.headKernels;
  }
}

/** engine.loadHead (engine.js). */
export async function loadHead(eng, description, readSlice, champion, lopts = {}) {
  if (!(champion instanceof EngineModel) || champion instanceof EngineHead || champion.eng !== eng) {
    throw new Error('loadHead: the champion must be a model of this engine');
  }
  champion.usable();
  const h = headConfigOf(description);
  const cfg = engineConfig(h, champion, lopts.seq_len);
  const vocabMode = lopts.headVocab ?? eng.plan.headVocab ?? 'indexed';
  if (!VOCAB_MODES.includes(vocabMode)) throw new Error(`headVocab ${JSON.stringify(vocabMode)} must be one of ${VOCAB_MODES.join(', ')}`);
  await headKernels(eng);
  const mem = new champion.mem.constructor(eng.device, eng.maxBinding);   // model.js's Memory: the head's own buffers
  try {
    const W = await loadHeadWeights(eng, description, readSlice, cfg, mem);
    W.layers[0].kv = mem.create('blk.0.kv', 2 * cfg.seq_len * cfg.n_kv_heads * cfg.head_dim * 4);   // (2, seq_len, kv_dim)
    const maxRows = lopts.maxRows ?? Math.min(eng.plan.maxRows, 16);
    const plan = { ...eng.plan, fuse: false, maxRows: Math.max(1, Math.min(maxRows, cfg.seq_len, RING_ROWS)),
      headLanes: lopts.headLanes ?? (eng.plan.cpu ? 1 : 8) };
    if (![1, 2, 4, 8, 16, 32].includes(plan.headLanes)) throw new Error(`headLanes ${plan.headLanes} must be 1, 2, 4, 8, 16 or 32`);
    W.vocabMode = cfg.vocab_subset ? vocabMode : 'full';
    const head = new EngineHead(eng, cfg, W, plan, mem, eng.device.limits.maxComputeWorkgroupStorageSize);
    head.headConfig = { ...h };
    head.bind(champion);
    await head.prepare();
    return head;
  } catch (e) {
    mem.destroy();
    throw e;
  }
}

export class EngineHead extends EngineModel {
  constructor(eng, cfg, W, plan, mem, wgMem) {
    super(eng, cfg, W, plan, mem, wgMem, false);
    this.isHead = true;
    this.champion = null;
    this.stepKernel = eng.kernels.head_in;     // its Step names src_len (the other kernels: the same layout)
    this.aheadMax = 0;
    this.ringPos = new Int32Array(RING_ROWS).fill(-1);   // position held by each ring row (-1: none)
    this.needsBuild = true;
    this.vocabMode = W.vocabMode;
    this.weightBytes = W.bytes;
  }

  /** The head's activations (model.js calls it from the constructor). */
  makeBuffers() {
    const { mem, plan } = this;
    const { dim, hidden_dim: hidden, n_heads: nH, head_dim: hd, seq_len: seqLen, window, vocab_size: vocab } = this.config;
    const R = plan.maxRows;
    const span = window ? Math.min(window, seqLen) : seqLen;
    const b = {
      resid: mem.create('resid', R * dim * 4),                   // (max_rows, dim)
      q: mem.create('q', R * nH * hd * 4),                       // (max_rows, q_dim)
      att: mem.create('attn_out', R * nH * hd * 4),              // (max_rows, q_dim)
      hidden: mem.create('hidden', R * hidden * 4),              // (max_rows, hidden_dim)
      scores: mem.create('scores', R * nH * span * 4),           // (max_rows, n_heads, span)
      tokens: mem.create('tokens', (seqLen + 1) * 4),            // (seq_len + 1) token ids of one submission
      ids: mem.create('ids', 16),                                // (unused by a draft: picks go to tokens)
      pick_params: mem.create('pick_params', 32, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST),
      emb: mem.create('emb', R * dim * 4),                       // (max_rows, dim) E[x_q]
      hin: mem.create('hin', R * 2 * dim * 4),                   // (max_rows, 2 dim) the fc's input
      xn: mem.create('xn', R * dim * 4),                         // (max_rows, dim) the LM head's input
      ring: mem.create('ring', RING_ROWS * dim * 4),             // (RING_ROWS, dim) predicted features
    };
    if (this.W.ids) {
      b.vocab_ids = mem.create('vocab_ids', this.W.ids.byteLength);   // (n_subset,)
      mem.device.queue.writeBuffer(b.vocab_ids, 0, this.W.ids);
      if (this.W.vocabMode === 'masked') {
        const words = new Uint32Array(Math.ceil(vocab / 32));   // (vocab / 32) subset bits
        for (const id of this.W.ids) words[id >> 5] |= 1 << (id & 31);
        b.mask = mem.create('mask', words.byteLength);
        mem.device.queue.writeBuffer(b.mask, 0, words);
      }
    }
    return b;
  }

  builder(list) {
    return new HeadGraph({ kernels: this.eng.kernels, plan: this.plan, cfg: this.config, wgMem: this.wgMem,
      nSlices: 0, pickGroups: this.pickGroups, list,
      buffer: (name) => { if (name === null) return null; const b = this.bufs[name]; if (!b) throw new Error(`no buffer ${name}`); return b; },
      uniform: (label, words) => this.mem.uniform(label, words), step: this.stepBuf });
  }

  /** Read the features of `champion` (a model of this engine) from now on: its embedding, output norm, LM head,
   * RoPE table and kept features are shared. The head's KV is not touched (the caller truncates it: the session
   * does). Checked now; the commands are rebuilt at the next call (the champion's features enabled then). */
  bind(champion) {
    if (!(champion instanceof EngineModel) || champion instanceof EngineHead || champion.eng !== this.eng) {
      throw new Error('bind: the champion must be a model of the same engine');
    }
    champion.usable();
    engineConfig(this.headConfig, champion, this.config.seq_len);
    if (champion === this.champion) return;
    this.champion = champion;
    this.needsBuild = true;
  }

  /** Before a submission: the champion keeps its features, and the commands read this champion's buffers. */
  async prepare() {
    if (!this.needsBuild) return;
    const c = this.champion;
    await c.enableFeatures();
    Object.assign(this.W, { emb: c.W.emb, head: c.W.head, outNorm: c.W.outNorm });
    const cc = c.config;
    const shared = (cc.rope_dim || cc.head_dim) === this.config.head_dim && cc.head_dim === this.config.head_dim
      && (cc.rope_theta ?? 10000) === this.config.rope_theta && cc.seq_len >= this.config.seq_len;
    if (this.ownRope && shared) { this.mem.free(this.ownRope); this.ownRope = null; }
    if (shared) this.bufs.rope = c.bufs.rope;
    else {
      this.ownRope ??= ropeTable(this.mem, this.config);
      this.bufs.rope = this.ownRope;
    }
    this.bufs.features = c.bufs.features;
    await this.build();
    this.needsBuild = false;
  }

  async build() {
    const g = this.builder();
    const { W } = this;
    const L = W.layers[0];
    const dim = this.config.dim;
    await g.embed(W.emb, { out: 'emb' });                                                    // e = E[x_q] (shared)
    await g.headIn(W);                                                                        // [rmsnorm(f) | rmsnorm(e)]
    await g.matmul('head.fc', [W.fc], { x: 'hin', out: 'resid', mode: 'store', outStride: dim });   // x = W_fc . [..]
    await g.matmul('blk.0.qkv', L.qkv, { x: 'resid', gamma: L.attnNorm, out: 'q', kv: L.kv, mode: 'qkv' });
    await g.attentionWin('blk.0.attention', { kv: L.kv, out: 'att' });                        // the head's window
    await g.matmul('blk.0.attn_output', [L.o], { x: 'att', out: 'resid', mode: 'add' });
    await g.matmul('blk.0.ffn_gate_up', [L.gateUp], { x: 'resid', gamma: L.ffnNorm, out: 'hidden', mode: 'swiglu' });
    await g.matmul('blk.0.ffn_down', [L.down], { x: 'hidden', out: 'resid', mode: 'add' });
    await g.headOut(W.outNorm);                                                               // f_q -> ring; xn
    this.ops = g.ops;
    this.outCap = 0;
    this.pres.clear();
    await this.ensureOut(1);
  }

  /** Room for `rows` logits rows (exactly: a row is vocab_size floats); the LM head and pick ops. */
  async ensureOut(rows) {
    if (rows <= this.outCap) return;
    const vocab = this.config.vocab_size;
    const cap = rows;
    if (cap * vocab * 4 > this.eng.maxBinding) throw new Error(`n_out ${rows}: logits exceed the binding limit`);
    for (const k of ['logits', 'staging', 'pick_part']) this.mem.free(this.bufs[k]);
    this.bufs.logits = this.mem.create('logits', cap * vocab * 4);                                     // (cap, vocab)
    if (this.vocabMode === 'indexed') {   // only the subset's columns are ever written
      this.device.queue.writeBuffer(this.bufs.logits, 0, new Float32Array(cap * vocab).fill(-Infinity));
    }
    this.bufs.staging = this.mem.create('staging', cap * vocab * 4 + 8 * (cap + 1), GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
    this.bufs.pick_part = this.mem.create('pick_part', cap * this.pickGroups * 8);                     // (cap, groups)
    const head = [];
    const g = this.builder(head);
    if (this.vocabMode === 'indexed') await g.subsetLogits(this.W.emb, this.W.ids);
    else {
      await g.matmul('logits', [this.W.head], { x: 'xn', out: 'logits', mode: 'store', window: 1 });
      if (this.vocabMode === 'masked') await g.vocabMask();
    }
    const picks = { tokens: [], ids: [] };
    await this.builder(picks.tokens).pick('tokens');
    Object.assign(this, { headOps: head, pickOps: picks, outCap: cap });
    this.gen++;
  }

  usable() {
    super.usable();
    if (!this.champion) throw new Error('draft head: no champion bound');
    if (this.champion.destroyed) throw new Error('draft head: its champion was destroyed: bind it to the loaded champion');
  }

  /** The Step fields of this head's passes now (profile). */
  stepExtra() { return { src_len: this.champion.length }; }

  /**
   * The passes of n rows at startPos with the champion holding srcLen positions: HeadModel.forward's split (rows
   * reading the champion's features together, then one pass per row that reads the feature the row before it
   * predicts). Checks every feature read is there; returns {passes: [[s, e)], ring: the ring's positions after}.
   */
  passesFor(n, startPos, srcLen) {
    const cut = Math.max(1, srcLen - startPos + 1);
    const passes = [];
    for (let s = 0; s < n;) {
      const e = s === 0 ? Math.min(n, cut) : s + 1;
      passes.push([s, e]);
      s = e;
    }
    const ring = Int32Array.from(this.ringPos);
    const featFrom = this.champion.featFrom;
    for (const [s, e] of passes) {
      const q0 = startPos + s;
      const pLo = q0 === 0 ? 0 : q0 - 1;       // the feature positions this pass reads: pLo .. pHi - 1
      const pHi = startPos + e - 1;
      if (Math.min(pHi, srcLen) > pLo && pLo < featFrom) {
        throw new Error(`draft head: the champion computed positions ${pLo}..${featFrom - 1} before it kept its features: truncate it and compute them again`);
      }
      for (let p = Math.max(pLo, srcLen); p < pHi; p++) {
        if (ring[p % RING_ROWS] !== p) throw new Error(`head position ${p + 1} needs the predicted feature of ${p}, not computed yet (or no longer kept)`);
      }
      for (let qq = q0; qq < startPos + e; qq++) ring[qq % RING_ROWS] = qq;
    }
    return { passes, ring };
  }

  async forwardNow(tokens, startPos, nOut) {
    this.usable();
    await this.prepare();
    const tok = this.tokenIds('forward', tokens);
    const n = tok.length;
    this.checkStart('forward', startPos, n);
    nOut = nOut ?? n;
    if (!Number.isInteger(nOut) || nOut < 1 || nOut > n) throw new Error(`forward: n_out ${nOut} must be in 1..${n}`);
    const srcLen = this.champion.length;
    const { passes, ring } = this.passesFor(n, startPos, srcLen);
    await this.ensureOut(nOut);
    this.device.queue.writeBuffer(this.bufs.tokens, 0, tok);
    const sub = new Submission(this);
    const first = n - nOut;                    // rows first.. return logits (rows 0.. of the output)
    for (const [s, e] of passes) {
      const o0 = Math.max(s, first);
      sub.pass(this, { n: e - s, startPos: startPos + s, nOut: Math.max(0, e - o0), tokBase: s, outBase: Math.max(0, o0 - first),
        extra: { src_len: srcLen } });
    }
    sub.read(this.bufs.logits, 0, nOut * this.config.vocab_size * 4);
    const out = await this.submit(sub, passes.length === 1 && n <= this.plan.maxRows);
    this.length = startPos + n;
    this.ringPos = ring;
    return new Float32Array(out);
  }

  roundRows() { return 1; }   // each pass's logits row is picked before the next pass: one row is enough

  /** specRound's draft passes (model.js): the feed reads the champion's features (the champion holds startPos
   * positions), each later pass the feature the pass before it predicted; picks feed the next pass on the GPU. */
  draftPasses(sub, f, draftStart, k, startPos) {
    const { passes, ring } = this.passesFor(f + k - 1, draftStart, startPos);
    for (const [s, e] of passes) {
      sub.pass(this, { n: e - s, startPos: draftStart + s, nOut: 1, tokBase: s, outBase: 0, extra: { src_len: startPos } }, 'tokens');
    }
    return () => { this.ringPos = ring; };
  }

  truncate(n) {
    super.truncate(n);
    for (let i = 0; i < RING_ROWS; i++) if (this.ringPos[i] >= n) this.ringPos[i] = -1;
  }

  decodeAhead() { return Promise.reject(new Error('a draft head does not decode ahead: it drafts inside champion.specRound')); }

  specRound() { return Promise.reject(new Error('a draft head is the draft of champion.specRound, not its champion')); }

  specChain() { return Promise.reject(new Error('a draft head is the draft of champion.specChain, not its champion')); }

  readFeatures() { return Promise.reject(new Error('a draft head keeps only its predicted features (its ring)')); }

  /** Bytes on the GPU: the head's own (weights, KV, scratch) and what it makes the champion keep (its features). */
  memory() {
    const kv = this.W.layers[0].kv.size;
    const own = this.mem.buffers.reduce((a, b) => a + b.size, 0);
    const weights = this.weightBytes;
    return { weights, kv, scratch: own - weights - kv, total: own, champion_features: this.champion?.bufs.features?.size ?? 0,
      shared_rope: this.bufs.rope !== this.ownRope };
  }
}

/** (seq_len, head_dim / 2) (cos, sin) of the head's RoPE when it is not the champion's (model.js's table). */
function ropeTable(mem, cfg) {
  const rd = cfg.head_dim;
  const b = mem.create('rope', cfg.seq_len * (rd / 2) * 8);
  const tab = new Float32Array(cfg.seq_len * rd);
  for (let pos = 0; pos < cfg.seq_len; pos++) {
    for (let i = 0; i < rd / 2; i++) {
      const a = pos * Math.pow(cfg.rope_theta, (-2 * i) / rd);
      tab[(pos * (rd / 2) + i) * 2] = Math.cos(a);
      tab[(pos * (rd / 2) + i) * 2 + 1] = Math.sin(a);
    }
  }
  mem.device.queue.writeBuffer(b, 0, tab);
  return b;
}

/** The head's own ops (graph.js's builder plus the head kernels). */
class HeadGraph extends GraphBuilder {
  headParams() { return { dim: this.cfg.dim, ring_rows: RING_ROWS, eps: this.cfg.norm_eps ?? 1e-5 }; }

  /** hin rows = [rmsnorm(f_{pos-1}) * feat_norm | rmsnorm(emb) * emb_norm] (head_in.wgsl). */
  async headIn(W) {
    const K = this.kernels.head_in;
    const bg = K.bind('head_in', { params: this.uniform('head_in', K.pack('params', this.headParams())), step: this.step,
      feat: this.buf('features'), ring: this.buf('ring'), emb: this.buf('emb'), feat_norm: W.featNorm, emb_norm: W.embNorm,
      out: this.buf('hin') });
    const pipeline = await K.pipeline({ WG_SIZE: 64 });
    this.push({ label: 'head_in', bindGroup: bg, select: (rows) => ({ pipeline, grid: [rows, 2, 1] }) });
  }

  /** out = the head's windowed causal attention (attention.wgsl WINDOW): one workgroup per (head, row). */
  async attentionWin(label, { kv, out }) {
    const K = this.kernels.head_attention;
    const { window, seq_len: seqLen } = this.cfg;
    const bg = K.bind(label, { params: this.uniform(label, K.pack('params', this.attnParams({ window, span: window ? Math.min(window, seqLen) : seqLen }))),
      step: this.step, q: this.buf('q'), kv: this.buf(kv), scores: this.buf('scores'), out: this.buf(out) });
    const pipeline = await K.pipeline({ WG_SIZE: this.plan.attnWg }, { HD4: this.cfg.head_dim / 4 });
    this.push({ label, bindGroup: bg, select: (rows) => ({ pipeline, grid: [this.cfg.n_heads, rows, 1] }) });
  }

  /** ring[pos % RING_ROWS] = resid rows; xn = rmsnorm(resid) * out_norm for the rows with logits (head_out.wgsl). */
  async headOut(outNorm) {
    const K = this.kernels.head_out;
    const bg = K.bind('head_out', { params: this.uniform('head_out', K.pack('params', this.headParams())), step: this.step,
      x: this.buf('resid'), out_norm: outNorm, ring: this.buf('ring'), xn: this.buf('xn') });
    const pipeline = await K.pipeline({ WG_SIZE: 64 });
    this.push({ label: 'head_out', bindGroup: bg, select: (rows) => ({ pipeline, grid: [rows, 1, 1] }) });
  }

  /** logits[out row, ids[j]] = E[ids[j]] . xn (head_logits.wgsl): one dispatch per part of the embedding. */
  async subsetLogits(emb, ids) {
    const K = this.kernels.head_logits;
    const lanes = this.plan.headLanes;
    const perWg = 64 / lanes;
    for (const part of emb.parts) {
      let j0 = 0;
      while (j0 < ids.length && ids[j0] < part.row0) j0++;
      let j1 = j0;
      while (j1 < ids.length && ids[j1] < part.row0 + part.N) j1++;
      if (j1 === j0) continue;
      const params = { K: this.cfg.dim, n: j1 - j0, j0, row0: part.row0, vocab: this.cfg.vocab_size };
      const bg = K.bind('logits', { params: this.uniform('logits', K.pack('params', params)), step: this.step, w: part.buffer,
        ids: this.buf('vocab_ids'), xn: this.buf('xn'), out: this.buf('logits') });
      const pipeline = await K.pipeline({ WG_SIZE: 64, WTYPE: emb.wtype, LANES: lanes });
      const n = Math.ceil((j1 - j0) / perWg);
      const grid = [Math.min(n, 32768), Math.ceil(n / 32768), 1];
      this.push({ label: 'logits', bindGroup: bg, select: () => ({ pipeline, grid }) });
    }
  }

  /** -inf outside the subset on the rows the full LM head wrote (vocab_mask.wgsl). */
  async vocabMask() {
    const K = this.kernels.vocab_mask;
    const vocab = this.cfg.vocab_size;
    const bg = K.bind('vocab_mask', { params: this.uniform('vocab_mask', K.pack('params', { vocab, neg_inf: 0xff800000 })), step: this.step,
      mask: this.buf('mask'), out: this.buf('logits') });
    const pipeline = await K.pipeline({ WG_SIZE: 64 });
    this.push({ label: 'vocab_mask', bindGroup: bg, select: (rows) => ({ pipeline, grid: [Math.ceil(vocab / 64), rows, 1] }) });
  }
}
