// graph.js — the forward pass as a list of ops (one compute dispatch each) run per chunk of rows, in the order of
// py/exactspec/reference.py's forward. Three variants (engine option fuse): plain (5 dispatches per layer), fused
// 'attn' (4) and fused true (3); then the head (logits of the rows asked for) and the batched step's picks.
//
// An op is {label, kind, bindGroup, select(rows) -> {pipeline, grid: [x, y, z]}}: the pipeline (weight tile of 1, 4
// or 8 chunk rows) and the workgroup grid for a chunk of `rows` rows. Buffers are named ('resid', 'q', ...: the
// model's activations, see model.js) or given (weights, a layer's KV cache). Kernel parameters and bindings are
// passed by the names the WGSL declares (kernels.js).

import { MODE } from './kernels.js';
import { attnBlocks } from './options.js';

// ---- the three forwards --------------------------------------------------------------------------------------

/** fuse false: reference.py's forward, one kernel per step. */
async function plainForward(g, W) {
  await g.embed(W.emb, { out: 'resid' });                                                 // x = token_embd[tokens]
  for (const [i, L] of W.layers.entries()) {
    await g.matmul(`blk.${i}.qkv`, L.qkv, { x: 'resid', gamma: L.attnNorm, out: 'q', kv: L.kv, mode: 'qkv' }); // q|k|v = rmsnorm(x) @ W_qkv, RoPE; k, v -> KV
    await g.attention(`blk.${i}.attention`, { kv: L.kv, out: 'att' });                  // att = softmax(q K^T / sqrt(head_dim)) V
    await g.matmul(`blk.${i}.attn_output`, [L.o], { x: 'att', out: 'resid', mode: 'add' });                   // x += att @ W_o
    await g.matmul(`blk.${i}.ffn_gate_up`, [L.gateUp], { x: 'resid', gamma: L.ffnNorm, out: 'hidden', mode: 'swiglu' }); // h = silu(g) * u
    await g.matmul(`blk.${i}.ffn_down`, [L.down], { x: 'hidden', out: 'resid', mode: 'add' });                 // x += h @ W_down
  }
  return { x: 'resid', parts: null };                                                    // logits = rmsnorm(x) @ W_out
}

const other = (r) => (r === 'resid' ? 'resid2' : 'resid');   // the residual ping-pong pair

/** fuse 'attn': attention + its O projection in one kernel, leaving per-head partials P_attn (split-K over heads)
 * that the gate/up matmul's prologue adds to the residual (and writes to the other residual buffer). */
async function fusedAttnForward(g, W) {
  await g.embed(W.emb, { out: 'resid' });                                                 // x = token_embd[tokens]
  let r = 'resid';
  for (const [i, L] of W.layers.entries()) {
    await g.matmul(`blk.${i}.qkv`, L.qkv, { x: r, gamma: L.attnNorm, out: 'q', kv: L.kv, mode: 'qkv' });     // q|k|v, RoPE, KV
    await g.attnO(`blk.${i}.attn_o`, L.o, { kv: L.kv });                                 // P_attn[h] = att_h @ W_o[:, h]
    await g.matmulPro(`blk.${i}.ffn_gate_up`, [L.gateUp], { r_in: r, parts: 'p_attn', r_out: other(r), gamma: L.ffnNorm,
      out: 'hidden', mode: 'swiglu' });                                                   // x = r + sum_h P_attn[h]; h = silu(g) * u
    r = other(r);
    await g.matmul(`blk.${i}.ffn_down`, [L.down], { x: 'hidden', out: r, mode: 'add' });  // x += h @ W_down
  }
  return { x: r, parts: null };
}

/** fuse true: 3 dispatches per layer; each kernel's prologue adds the split-K partials the previous one left. With
 * plan.fuseQkvAttn a chunk of ONE row (a decode pass) runs qkv and attention + O projection as one dispatch
 * (attention.wgsl QKV): 2 per layer; chunks of more rows run the two as before. */
async function fusedForward(g, W) {
  await g.embed(W.emb, { out: 'resid' });                                                 // x = token_embd[tokens]
  let r = 'resid';
  const merge = g.plan.fuseQkvAttn;
  for (const [i, L] of W.layers.entries()) {
    if (merge) {                                                                          // one row: x, q|k|v, P_attn in one
      await g.qkvAttn(`blk.${i}.qkv_attn`, L, i === 0 ? { r_in: r, parts: null, r_out: null } : { r_in: r, parts: 'p_ffn', r_out: other(r) });
    }
    await g.multiRowOnly(merge, async () => {
      if (i === 0) await g.matmul('blk.0.qkv', L.qkv, { x: r, gamma: L.attnNorm, out: 'q', kv: L.kv, mode: 'qkv' });
      else {                                                                              // x = r + sum_s P_ffn[s]; q|k|v
        await g.matmulPro(`blk.${i}.qkv`, L.qkv, { r_in: r, parts: 'p_ffn', r_out: other(r), gamma: L.attnNorm, out: 'q', kv: L.kv, mode: 'qkv',
          pairs: g.plan.fuseQkvPairs, rows: { wg: g.plan.fuseMatmulWgRows, pairs: g.plan.fuseQkvPairsRows,
            from: g.plan.qkvRowsMin, to: g.plan.qkvRowsMax, dense: g.plan.qkvRowsDense } });
      }
      await g.attnO(`blk.${i}.attn_o`, L.o, { kv: L.kv });                               // P_attn[h] = att_h @ W_o[:, h]
    });
    if (i > 0) r = other(r);
    await g.ffn(`blk.${i}.ffn`, L, { r_in: r, r_out: other(r) });                        // x = r + sum_h P_attn[h];
    r = other(r);                                                                         // P_ffn[s] = swiglu slice s @ W_down[:, s]
  }
  return { x: r, parts: 'p_ffn' };                                                        // the head's prologue adds P_ffn
}

export const FORWARDS = { false: plainForward, attn: fusedAttnForward, true: fusedForward };

// ---- the op builder ------------------------------------------------------------------------------------------

/** An op's kind: its label without the layer ('qkv', 'ffn', 'logits', ...). */
const kindOf = (label) => label.replace(/^blk\.\d+\./, '');

/** The kinds of op whose kernel, bindings or grid plan.attnBlock changes (attnO, ffn); the layers' other ops are the
 * same with and without it (model.js builds them once). */
export const BLOCK_KINDS = new Set(['attn_o', 'ffn']);

/** The weight tile (chunk rows per weight decode) a dispatch of `rows` rows runs: 1, 4 or 8, as the op has them
 * (tiles {t1, t4, t8}): 1 row, up to 4, or from t8From (options.js tile8Rows, >= 5) the 8-row one. */
export const tileFor = (tiles, rows, t8From) => (rows >= t8From ? tiles.t8 : rows === 1 ? tiles.t1 : tiles.t4);

/** The plain matmul's tiles under the plan's tile1 / tile8 (4 rows where a 1- or 8-row pipeline is off). */
export const matmulTiles = ({ tile1, tile8 }) => ({ t4: 4, t8: tile8 ? 8 : 4, t1: tile1 ? 1 : 4 });

export class GraphBuilder {
  /** ctx: {kernels, plan (engine options, see options.js), cfg, buffer(name) -> GPUBuffer, uniform(label, words) ->
   * GPUBuffer, step: the step buffer, wgMem, nSlices (fused FFN slices), pickGroups, kvNew (fuseQkvAttn: the float
   * offset in 'scores' of a one-row pass's k, v, model.js), only (optional: a Set of kinds, the ops of every other kind
   * are not made: model.js builds the key blocks' layers so, taking the rest from the layers without them)}; ops are
   * appended to `list` (default this.ops). */
  constructor(ctx) {
    Object.assign(this, ctx);
    this.ops = [];
    const { cfg } = ctx;
    this.dims = { qDim: cfg.n_heads * cfg.head_dim, kvDim: cfg.n_kv_heads * cfg.head_dim, ropeDim: cfg.rope_dim || cfg.head_dim };
  }

  buf(b) { return typeof b === 'string' ? this.buffer(b) : b; }

  /** Whether ops of this label are not made (ctx.only names the kinds that are). */
  skips(label) { return this.only != null && !this.only.has(kindOf(label)); }

  /** The tiles a kernel staging `extraPerRow` more floats per row than x in workgroup memory can run (fused). */
  stagedTiles(extraPerRow) {
    const fits = (t) => t * (this.cfg.dim + extraPerRow) * 4 <= this.wgMem;
    const t4 = fits(4) ? 4 : 1;
    return { t4, t8: this.plan.tile8 && fits(8) ? 8 : t4, t1: this.plan.tile1 ? 1 : t4 };
  }

  /** An op whose pipeline depends on the tile its row count picks (tiles: {t1, t4, t8}; make(tile) -> pipeline;
   * grid(rows, tile) -> [x, y, z] with z = 1: one workgroup loops over the tiles). Kinds in plan.rowTiles run
   * dispatches of up to rowTilesMax rows row-parallel instead: 1-row tiles, every row its own workgroup, rowGrid(rows).
   * op.rowSelect(rows): that row-parallel dispatch for any kind (an n-gram chain's pass whose rows the GPU decides:
   * model.js chainRowwise); subgroup kernels only (matmul.wgsl's workgroups each walk every row). */
  async tiled(label, bindGroup, tiles, make, grid, rowGrid, multi = null) {
    const row = this.plan.rowTiles.has(kindOf(label));
    const pipes = {};
    for (const t of new Set([tiles.t1, tiles.t4, tiles.t8, ...(row ? [1] : [])])) pipes[t] = await make(t);
    // multi {make, grid, rowGrid}: the pipelines and grids of dispatches of more than one row (their own workgroup
    // size / row pairs: the same arithmetic per row, so the same bits)
    // (multi.from / multi.to: only for dispatches of that many rows; null or absent: from 2, no upper bound;
    // multi.dense: not in a pass whose rows the GPU decides, select's `sparse`)
    const pipesM = {};
    if (multi) for (const t of new Set([tiles.t4, tiles.t8, ...(row ? [1] : [])])) pipesM[t] = await multi.make(t);
    const max = row ? this.plan.rowTilesMax : 0;
    const one = pipes[1] ?? pipes[tiles.t1];
    const inM = (rows, sparse) => multi && rows >= (multi.from ?? 2) && rows <= (multi.to ?? Infinity) && !(multi.dense && sparse);
    return this.push({ label, bindGroup, select: (rows, sparse = false) => {
      const [P, G, RG] = inM(rows, sparse) ? [pipesM, multi.grid, multi.rowGrid] : [pipes, grid, rowGrid];
      if (rows <= max) return { pipeline: P[1], grid: RG(rows) };
      const t = tileFor(tiles, rows, this.plan.tile8Rows);
      return { pipeline: P[t], grid: G(rows, t) };
    }, rowSelect: this.plan.sgKernel ? (rows) => ({ pipeline: one, grid: rowGrid(rows) }) : undefined });
  }

  /** Run make (which pushes ops); with `on`, the ops it pushed have no dispatch for a chunk of one row (their
   * select gives null: the one-row op pushed before them does their work). */
  async multiRowOnly(on, make) {
    const list = this.list ?? this.ops;
    const from = list.length;
    await make();
    if (!on) return;
    for (const op of list.slice(from)) {
      const all = op.select;
      op.select = (rows, sparse) => (rows === 1 ? null : all(rows, sparse));
      const rs = op.rowSelect;
      if (rs) op.rowSelect = (rows) => (rows === 1 ? null : rs(rows));
    }
  }

  push(op) {
    op.kind = kindOf(op.label);
    (this.list ?? this.ops).push(op);
    return op;
  }

  /** Matmul params (matmul.wgsl / matmul_sg.wgsl, also with PRO) of one part of a linear. */
  mmParams(lin, part, outStride, window) {
    const { cfg, dims } = this;
    return { K: lin.K, N: part.N, row0: part.row0, out_stride: outStride, window, q_dim: dims.qDim, kv_dim: dims.kvDim,
      head_dim: cfg.head_dim, rope_dim: dims.ropeDim, seq_len: cfg.seq_len, n_groups: Math.ceil(part.N / 2), eps: cfg.norm_eps ?? 1e-5 };
  }

  /** out (n, N) = [rmsnorm_gamma](x) @ W^T with the mode's epilogue (store / add / swiglu / qkv: RoPE + KV write);
   * outStride: floats per output row (default: the mode's, store = vocab_size). */
  async matmul(label, lins, { x, gamma = null, out, kv = null, mode, window = 0, outStride = null }) {
    if (this.skips(label)) return;
    const K = this.kernels.matmul;
    const { lanes, matmulWg, ksplit } = this.plan;
    outStride ??= { qkv: this.dims.qDim, add: this.cfg.dim, swiglu: this.cfg.hidden_dim, store: this.cfg.vocab_size }[mode];
    const tiles = matmulTiles(this.plan);
    const perWg = matmulWg / (lanes * ksplit);   // row pairs per workgroup
    for (const lin of lins) {
      for (const part of lin.parts) {
        const bg = K.bind(label, { params: this.uniform(label, K.pack('params', this.mmParams(lin, part, outStride, window))),
          step: this.step, w: part.buffer, x: this.buf(x), gamma: this.buf(gamma), rope: mode === 'qkv' ? this.buf('rope') : null,
          out: this.buf(out), kv: this.buf(kv) });
        const grid = wideGrid(Math.ceil(Math.ceil(part.N / 2) / perWg));
        await this.tiled(label, bg, tiles, (t) => K.pipeline({ WG_SIZE: matmulWg, WTYPE: lin.wtype, MODE: MODE[mode],
          NORM: gamma ? 1 : 0, LANES: lanes, TILE: t, KSPLIT: ksplit }), () => grid, (rows) => [grid[0], grid[1], rows]);
      }
    }
  }

  /** matmul whose x is r_in + parts[0] + ... + parts[npart-1] (matmul_sg.wgsl, PRO); part 0 of the first linear writes
   * that sum to r_out. pairs / wg: row pairs per subgroup and workgroup size (the head's are larger); touch: its kind
   * of fuseTouch ('qkv': the qkv and fuse 'attn' gate/up matmuls, 'logits': the head). */
  async matmulPro(label, lins, { r_in, parts, r_out = null, gamma = null, out, kv = null, mode, window = 0,
    pairs = 1, wg = this.plan.fuseMatmulWg, rows = null, touch = 'qkv' }) {
    if (this.skips(label)) return;
    const K = this.kernels.matmul_pro;
    const { lanes, maxRows } = this.plan;
    const npart = !parts ? 0 : parts === 'p_ffn' ? this.nSlices : this.cfg.n_heads;   // (none: x = r_in, headStage)
    const outStride = { qkv: this.dims.qDim, swiglu: this.cfg.hidden_dim, store: this.cfg.vocab_size }[mode];
    const tiles = this.stagedTiles(0);
    for (const [j, lin] of lins.entries()) {
      for (const [pi, part] of lin.parts.entries()) {
        const writeR = r_out && j === 0 && pi === 0;
        const params = { ...this.mmParams(lin, part, outStride, window), npart, pstride: (maxRows * this.cfg.dim) / 4, write_r: writeR ? 1 : 0 };
        const bg = K.bind(label, { params: this.uniform(label, K.pack('params', params)), step: this.step, w: part.buffer,
          r_in: this.buf(r_in), gamma: this.buf(gamma), rope: mode === 'qkv' ? this.buf('rope') : null, out: this.buf(out),
          kv: this.buf(kv), parts: this.buf(parts), r_out: writeR ? this.buf(r_out) : null });
        const variant = (w, p) => {   // pipelines and grids at workgroup size w, p row pairs per subgroup
          const grid = wideGrid(Math.ceil(Math.ceil(part.N / 2) / ((w / lanes) * p)));
          return { make: (t) => K.pipeline({ WG_SIZE: w, WTYPE: lin.wtype, MODE: MODE[mode], NORM: gamma ? 1 : 0,
            LANES: lanes, TILE: t, KX: lin.K, PAIRS: p, NPART: npart }, this.touch(touch)), grid: () => grid, rowGrid: (n) => [grid[0], grid[1], n] };
        };
        const one = variant(wg, pairs);
        // rows {wg, pairs, from, to, dense}: dispatches of from .. to rows (default: more than one) run that variant,
        // with `dense` only in passes whose rows are all live (the qkv matmul: fuseMatmulWgRows, fuseQkvPairsRows,
        // qkvRowsMin, qkvRowsMax, qkvRowsDense)
        const multi = rows && (rows.wg !== wg || rows.pairs !== pairs)
          ? { ...variant(rows.wg, rows.pairs), from: rows.from, to: rows.to, dense: rows.dense } : null;
        await this.tiled(label, bg, tiles, one.make, one.grid, one.rowGrid, multi);
      }
    }
  }

  /** resid rows = token_embd[tokens[tok0 + t]] (one dispatch per part of the embedding). */
  async embed(emb, { out }) {
    if (this.skips('embed')) return;
    const K = this.kernels.embed;
    for (const part of emb.parts) {
      const bg = K.bind('embed', { params: this.uniform('embed', K.pack('params', { K: this.cfg.dim, N: part.N, row0: part.row0 })),
        step: this.step, w: part.buffer, tokens: this.buf('tokens'), out: this.buf(out) });
      const pipeline = await K.pipeline({ WTYPE: emb.wtype });
      this.push({ label: 'embed', bindGroup: bg, select: (rows) => ({ pipeline, grid: [rows, 1, 1] }) });
    }
  }

  /** The fused kernels' optional override TOUCH for this kind of fuseTouch, and ffn_sg.wgsl's TOUCH_D for kindD (engine
   * option; a kernel file without them, e.g. a pinned revision's, is compiled without). */
  touch(kind, kindD = null) {
    const on = (k) => (this.plan.fuseTouch.has(k) ? 1 : 0);
    return kindD ? { TOUCH: on(kind), TOUCH_D: on(kindD) } : { TOUCH: on(kind) };
  }

  attnParams(extra = {}) {
    const { cfg, dims } = this;
    return { n_heads: cfg.n_heads, n_kv_heads: cfg.n_kv_heads, head_dim: cfg.head_dim, seq_len: cfg.seq_len,
      q_dim: dims.qDim, kv_dim: dims.kvDim, scale: 1 / Math.sqrt(cfg.head_dim), ...extra };
  }

  /** out = causal GQA attention of the chunk's queries (buffer q) over the KV cache: one workgroup per (head, row). */
  async attention(label, { kv, out }) {
    const K = this.kernels.attention;
    const bg = K.bind(label, { params: this.uniform(label, K.pack('params', this.attnParams())), step: this.step,
      q: this.buf('q'), kv: this.buf(kv), scores: this.buf('scores'), out: this.buf(out) });
    const pipeline = await K.pipeline({ WG_SIZE: this.plan.attnWg }, { HD4: this.cfg.head_dim / 4 });
    this.push({ label, bindGroup: bg, select: (rows) => ({ pipeline, grid: [this.cfg.n_heads, rows, 1] }) });
  }

  /** P_attn[h] = attention of head h @ W_o[:, head h's columns] (attention.wgsl, O_PROJ). With plan.attnBlock
   * (BLOCKS): per head and key block b, P_attn[h, b] and the block's (max, sum) in attn_ml; grid z = blocks x split.
   * (BLOCK_KINDS: the kinds plan.attnBlock changes, this and ffn.) */
  async attnO(label, o, { kv }) {
    const K = this.kernels[this.plan.attnBlock ? 'attn_o_blocks' : 'attn_o'];
    const { cfg, plan } = this;
    const params = this.attnParams({ dim: cfg.dim, K: this.dims.qDim, pstride: plan.maxRows * cfg.dim });
    const nb = attnBlocks(plan, cfg.seq_len);
    const blocks = plan.attnBlock ? { ml: this.buf('attn_ml') } : {};
    const bg = K.bind(label, { params: this.uniform(label, K.pack('params', params)), step: this.step, q: this.buf('q'),
      kv: this.buf(kv), scores: this.buf('scores'), w: o.parts[0].buffer, pattn: this.buf('p_attn'), ...blocks });
    const z = plan.attnSplit * nb;   // workgroups of a head: its O projection's split (each its own scores row) x blocks
    const consts = { WG_SIZE: plan.attnWg, WTYPE: o.wtype, OU: headUnits(cfg, o.wtype), ...(plan.attnBlock ? { KB: plan.attnBlock, NB: nb } : {}) };
    const hints = { HD4: cfg.head_dim / 4, ...this.touch('attn') };
    const pipeline = await K.pipeline(consts, hints);
    // plan.attnRowsZ: rows in the grid's z (ROWS_Z) for a pass whose rows the GPU decides (select's `sparse`: a chain
    // round's) or, 'all', every pass (a kernel file without ROWS_Z, e.g. a pinned revision's, keeps rows in y)
    const rowsZ = K.sig.overrides.has('ROWS_Z') ? plan.attnRowsZ : false;
    const pipeZ = rowsZ ? await K.pipeline({ ...consts, ROWS_Z: 1 }, hints) : null;
    this.push({ label, bindGroup: bg, select: (rows, sparse = false) => (rowsZ === 'all' || (rowsZ && sparse)
      ? { pipeline: pipeZ, grid: [cfg.n_heads, z, rows] } : { pipeline, grid: [cfg.n_heads, rows, z] }) });
  }

  /** For a chunk of ONE row (select gives null for more): x = r_in + sum_s P_ffn[s] (-> r_out unless null; parts null:
   * x = r_in), q|k|v of that row, attention and P_attn[h] in one dispatch (attention.wgsl QKV + O_PROJ): a workgroup
   * per (head, split z) computes its head's q and its kv head's k, v (the kv group's first head leaves them at kvNew
   * in 'scores', which the layer's FFN copies into the cache: ffn). AW: the attention's own workgroup size; OW:
   * output rows per workgroup of the O projection. */
  async qkvAttn(label, L, { r_in, parts, r_out }) {
    const K = this.kernels.qkv_attn;
    const { cfg, plan, dims } = this;
    const [lin] = L.qkv;
    const z = plan.attnSplit;
    const npart = parts ? this.nSlices : 0;
    const params = this.attnParams({ dim: cfg.dim, KO: dims.qDim, pstride: plan.maxRows * cfg.dim, K: cfg.dim, rope_dim: dims.ropeDim,
      eps: cfg.norm_eps ?? 1e-5, npart, xstride: (plan.maxRows * cfg.dim) / 4, write_r: r_out ? 1 : 0, kvnew: this.kvNew });
    const bg = K.bind(label, { params: this.uniform(label, K.pack('params', params)), step: this.step, w: lin.parts[0].buffer,
      kv: this.buf(L.kv), scores: this.buf('scores'), wo: L.o.parts[0].buffer, pattn: this.buf('p_attn'), r_in: this.buf(r_in),
      parts: parts ? this.buf(parts) : null, r_out: r_out ? this.buf(r_out) : null, gamma: L.attnNorm, rope: this.buf('rope') });
    const pipeline = await K.pipeline({ WG_SIZE: plan.fuseQkvAttnWg, AW: plan.attnWg, OW: Math.min(plan.fuseQkvAttnWg, Math.ceil(cfg.dim / z)),
      WTYPE: lin.wtype, WTYPE_O: L.o.wtype, OU: headUnits(cfg, L.o.wtype), LANES: plan.lanes, KX: cfg.dim, NPART: npart,
      HD4: cfg.head_dim / 4 }, this.touch('attn'));
    this.push({ label, bindGroup: bg, select: (rows) => (rows === 1 ? { pipeline, grid: [cfg.n_heads, 1, z] } : null) });
  }

  /** x = r_in + sum_h P_attn[h] (-> r_out); P_ffn[s] = (silu(gate) * up over hidden slice s of rmsnorm(x)) @ W_down[:, s]. */
  async ffn(label, L, { r_in, r_out }) {
    const { cfg, plan } = this;
    const copy = plan.fuseQkvAttn;   // ffn_sg.wgsl KVCOPY: a one-row pass's k, v from the scores tail into the cache
    const K = this.kernels[copy ? 'ffn_kv' : plan.attnBlock ? 'ffn_blocks' : 'ffn'];
    const params = { K: cfg.dim, KD: cfg.hidden_dim, dim: cfg.dim, npart: cfg.n_heads, pstride: (plan.maxRows * cfg.dim) / 4,
      write_r: 1, eps: cfg.norm_eps ?? 1e-5,
      ...(copy ? { kv_dim: this.dims.kvDim, seq_len: cfg.seq_len, kvnew: this.kvNew } : {}) };
    const nb = attnBlocks(plan, cfg.seq_len);   // attnBlock: the attention's partials in key blocks (lib/stage BLOCKS)
    const bg = K.bind(label, { params: this.uniform(label, K.pack('params', params)), step: this.step, w: L.gateUp.parts[0].buffer,
      r_in: this.buf(r_in), gamma: L.ffnNorm, parts: this.buf('p_attn'), r_out: this.buf(r_out), wd: L.down.parts[0].buffer,
      pffn: this.buf('p_ffn'), ...(copy ? { scores: this.buf('scores'), kv: L.kv } : {}),
      ...(plan.attnBlock ? { ml: this.buf('attn_ml') } : {}) });
    // one workgroup row per tile of chunk rows
    const make = (wg, light = false) => (t) => K.pipeline({ WG_SIZE: wg, WTYPE: L.gateUp.wtype, WTYPE_D: L.down.wtype, LANES: plan.lanes,
      TILE: t, KX: cfg.dim, SLICE: plan.fuseSlice, NPART: cfg.n_heads, ...(plan.attnBlock ? { KB: plan.attnBlock, NB: nb } : {}) },
      { ...this.touch('ffn_gate_up', 'ffn_down'), ...(light && t === 1 ? { LIGHT_DOWN: 1 } : {}) });
    const grid = (rows, t) => [this.nSlices, Math.ceil(rows / t), 1];
    const rowGrid = (rows) => [this.nSlices, rows, 1];
    // dispatches of more than one row at their own workgroup size (fuseWgRows), and with lightDown those that run every
    // row in its own workgroup (1-row tiles: verify blocks up to rowTilesMax rows; ffn_sg.wgsl LIGHT_DOWN; prefill
    // chunks in tiles of 4 or 8 rows keep two down rows a trip: lightDown was measured on verify blocks only)
    const multi = plan.fuseWgRows !== plan.fuseWg || plan.lightDown ? { make: make(plan.fuseWgRows, plan.lightDown), grid, rowGrid } : null;
    // workgroup memory a row: x, the slice's SwiGLU outputs, and with attnBlock the blocks' (max, sum) / weights
    // (n_heads x blocks x 2)
    const extra = plan.fuseSlice + (plan.attnBlock ? 2 * cfg.n_heads * nb : 0);
    await this.tiled(label, bg, this.stagedTiles(extra), make(plan.fuseWg), grid, rowGrid, multi);
  }

  /** After the layers, per chunk: the final residual summed once (x = r + sum_s P_ffn[s] -> 'x_final', when the fused
   * head takes a plain input: plan.headSum) and/or kept by position ('features'). Returns the head's input. */
  async final({ x, parts }, features) {
    const sum = parts && this.plan.headSum;
    if (!sum && !features) return { x, parts };
    const K = this.kernels.residual;
    const { dim } = this.cfg;
    const bg = K.bind('residual', { params: this.uniform('residual', K.pack('params', { dim, pstride: (this.plan.maxRows * dim) / 4 })),
      step: this.step, r_in: this.buf(x), parts: parts ? this.buf(parts) : null, out: sum ? this.buf('x_final') : null,
      features: features ? this.buf('features') : null });
    const pipeline = await K.pipeline({ NPART: parts ? (parts === 'p_ffn' ? this.nSlices : this.cfg.n_heads) : 0, OUT: sum ? 1 : 0,
      FEATURES: features ? 1 : 0 });
    const x4 = Math.ceil(dim / 4 / 64);
    this.push({ label: 'residual', bindGroup: bg, select: (rows) => ({ pipeline, grid: [x4, rows, 1] }) });
    return sum ? { x: 'x_final', parts: null } : { x, parts };
  }

  /** logits rows (step.out_base..) = rmsnorm(x) @ W_out^T for the chunk rows from step.out_lo (window). */
  async head(W, { x, parts }) {
    const o = { gamma: W.outNorm, out: 'logits', mode: 'store', window: 1 };
    if (parts || this.plan.headStage) await this.matmulPro('logits', [W.head], { r_in: x, parts, ...o, pairs: this.plan.fuseHeadPairs, wg: this.plan.fuseHeadWg, touch: 'logits' });
    else await this.matmul('logits', [W.head], { x, ...o });
  }

  /** The two dispatches of the pick kernel for the rows a chunk's head produced; dest 'tokens' | 'ids'. */
  async pick(dest) {
    const K = this.kernels.pick;
    const bg = K.bind(`pick_${dest}`, { params: this.buf('pick_params'), step: this.step, logits: this.buf('logits'),
      part: this.buf('pick_part'), picks: this.buf(dest) });
    const DEST = dest === 'tokens' ? 0 : 1;
    for (const STAGE of [0, 1]) {
      const pipeline = await K.pipeline({ WG_SIZE: this.plan.pickWg, STAGE, DEST });
      const x = STAGE === 0 ? this.pickGroups : 1;
      this.push({ label: 'pick', bindGroup: bg, select: (rows) => ({ pipeline, grid: [x, rows, 1] }) });
    }
  }
}

/** n workgroups as a grid within the 65535-per-dimension limit (the kernels flatten (x, y)). */
function wideGrid(n) {
  const x = Math.min(n, 32768);
  return [x, Math.ceil(n / x), 1];
}

/** attention.wgsl O_PROJ's OU: the most 8-column units of W_o any head's slice takes (whole 32-column blocks when quantised). */
function headUnits(cfg, wtype) {
  const q = [2, 3, 8].includes(wtype);
  let most = 0;
  for (let h = 0; h < cfg.n_heads; h++) {
    const c0 = h * cfg.head_dim;
    const c1 = c0 + cfg.head_dim;
    most = Math.max(most, (q ? Math.ceil(c1 / 32) * 4 : c1 / 8) - (q ? Math.floor(c0 / 32) * 4 : c0 / 8));
  }
  return most;
}
