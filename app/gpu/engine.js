// engine.js — the WebGPU llama engine (hand-written WGSL in shaders/), usable in a page, a worker, or Node + Dawn.
//
// Modules: options.js (createEngine's options -> the plan), kernels.js + signature.js (WGSL kernels, bound by the
// names their WGSL declares), weights.js (tensors -> GPU buffers), graph.js (the forward as a list of ops per layer),
// encode.js (chunks, step slots, command buffers), model.js (the model object), pick.js (the batched step's picks),
// profile.js (bench). Kernels: shaders/*.wgsl, one per file.
//
// API
//   const engine = await createEngine(gpu, opts)
//     gpu   navigator.gpu in a page/worker, or Dawn's `create([...])` result in Node. The engine never reads
//           `navigator` itself.
//     opts  {shaderBase?: URL|string of the folder holding the .wgsl files (default: ../../shaders/ next to this
//            module; the page must serve /shaders/ beside /app/), shaderSource?: async (name) -> WGSL text
//            (overrides shaderBase), adapterOptions?: for requestAdapter, maxRows?: rows per chunk (default 64),
//            subgroups?: matmul_sg.wgsl (default on GPUs whose subgroup size is fixed, off on CPU adapters),
//            lanes?: invocations per weight-row pair in matmul.wgsl (default 32; 1 on CPU adapters such as
//            SwiftShader/llvmpipe), matmulWg?: matmul workgroup size (64), attnWg?: attention workgroup size (256 GPU /
//            64 CPU), timestamps?: GPU time per submission in model.stats.gpu_ms and model.profile() (bench only),
//            trace?: a function given the engine's timeline, {t, ev: 'call' | 'ret' | 'submit' | 'mapped', ...} for
//            each batched call and submission (bench only: bench/h200/trace_summary.py reads it),
//            maxBindingBytes?: cap on one weight binding (tests use it to force splits), tile1?/tile8?: GPU matmul
//            pipelines that decode each weight once for 1 row (dispatches of one row) / 8 rows (dispatches of at
//            least tile8Rows rows) besides the 4-row one (default on where lanes > 1; every row runs the same slot code
//            in all three), tile8Rows?: the fewest rows of a dispatch that takes the 8-row tiles (5; on the fused
//            engine with real subgroups rowTilesMax + 1: verify blocks and chain rounds in tiles of 4), ksplit?:
//            subgroups per weight-row pair in matmul_sg.wgsl (1 default; 2 or 4: each takes an interleaved share of
//            the units, the shares summed in a fixed order; more warps for small matrices),
//            emulatedSubgroups?: (tests) shaderSource serves matmul_sg.wgsl with one-lane subgroups emulated,
//            splits?: command buffers per forward, submitted one by one so the GPU starts while the rest is
//            still being translated (default 4 on GPUs, 1 on CPU adapters), passSplits?: more command buffers per
//            further pass of a batched step (default 1), contSplits?: command buffers of a continuation queued
//            behind the run before it (a decodeAhead's or chain's next run submitted while the GPU runs the one
//            before: nothing to start early; default 1; 0: as any submission) of up to contSplitsMaxPasses? passes
//            (default 4; longer ones keep splits + passSplits), contSplitsFresh?: command buffers of a continuation
//            submitted after a fresh run's readback (default 0: splits + passSplits; 1: the continued calls' shape),
//            aheadThen?: decodeAhead submits the continuation its `then` asks for (default true; false: benches' A/B)
//            preKeep?: submission shapes whose pre-encoded commands are kept (default 16), preFirst?: a fresh run that
//            took its shape's pre-encoded commands has them encoded again by a later continued call, so that the
//            next answer's first run comes pre-encoded too (default true; false: benches' A/B), preDefer?: a fresh
//            run's continuation puts off pre-encoding the next one until that shape is taken or the thread is idle,
//            instead of before the call returns (default true; false: benches' A/B)
//            chainRounds?: rounds of the n-gram drafter one ngramChain, or of a draft one specChain, may run (default
//            4 on GPUs; 0 on CPU adapters: neither offered; also 0 where the model runs fuseQkvAttn), chainRowwise?: a chain's verify passes
//            dispatch every op row-parallel (1-row tiles, a workgroup per row: rows past the GPU's count cost only
//            their launch) instead of the tiles their grid's k + 1 rows pick (default false), chainStepDirect?: the
//            n-gram chain kernel writes each round's Step into its slot of the step buffer itself, the chain's rounds
//            in one compute pass (default true; false: into a buffer of its own, copied into the slot between
//            compute passes, as before: the same Steps either way)
//            mapFence?: a tiny submission after a continuation's readback request (default true): Dawn ties a map to
//            the next submission's serial, so without it that readback also waits for the continuation after it
//            aheadMax?: passes the decode loop may run ahead in one decodeAhead (default 4 on GPUs; 0 on CPU adapters,
//            where a pass costs far more than a round trip and a pass wasted at the end of an answer costs a lot),
//            fuse?: false | 'attn' | true | 'auto' (default 'auto', false with emulatedSubgroups: true where
//            matmul_sg.wgsl runs with ksplit 1, else false, and a model the fused kernels cannot take runs unfused,
//            see model.fused; an explicit true or 'attn' refuses such a model with an error instead): fewer dispatches
//            per forward, only with matmul_sg.wgsl (GPUs with a fixed subgroup size, or emulatedSubgroups) and ksplit
//            1. 'attn': attention + O projection in one kernel (attention.wgsl O_PROJ, per-head split-K partials summed by
//            the gate/up matmul's prologue, matmul_sg.wgsl PRO): 4 * n_layers + 2 dispatches. true: also the FFN in one
//            kernel per slice of hidden units (ffn_sg.wgsl, down-projection partials summed by the next qkv matmul's
//            / the head's prologue): 3 * n_layers + 2. Partials are summed in a fixed order, so forwards stay batch
//            invariant (not bitwise equal to fuse: false: the residual adds are grouped differently).
//            fuseSlice?: hidden units per FFN workgroup (multiple of 32, default 32), fuseWg?: workgroup size of
//            ffn_sg.wgsl (default 512 GPU / 64 CPU adapters), fuseHeadWg?/fuseHeadPairs?: workgroup size (default
//            256 GPU / 64 CPU) and row pairs per subgroup (default 4) of the head's prologue matmul (fuse true),
//            fuseMatmulWg?: workgroup size of the qkv (fuse true) / gate-up (fuse 'attn') prologue matmuls (default
//            256 with fuse true on real subgroups, else matmulWg: fewer, larger workgroups stage x fewer times), fuseQkvPairs?: row pairs per subgroup of the qkv
//            prologue matmul (fuse true; default 1): each workgroup stages x (the residual + every FFN partial) once
//            for 2 * pairs * (workgroup / lanes) weight rows, so more pairs means fewer stagings,
//            fuseWgRows? / fuseMatmulWgRows? / fuseQkvPairsRows?: fuseWg, fuseMatmulWg, fuseQkvPairs for dispatches of more than one row
//            (verify blocks, prefill chunks; default: the one-row values; the same bits, tests/gpu; the H200 measured
//            no gain, README "verify blocks at other workgroup shapes"), qkvRowsMin? / qkvRowsMax?: the qkv's
//            fuseMatmulWgRows / fuseQkvPairsRows only for dispatches of that many rows (default 2 / null: no bound;
//            options.js says what it measured), qkvRowsDense?: and only in passes whose rows are all live, not a
//            chain round's (where the H200 defaults apply: fuseQkvPairsRows 2 for 5-9 rows, dense passes only;
//            elsewhere the one-row values everywhere), lightDown?: dispatches of more than one row whose rows run in their
//            own workgroups (rowTiles) run ffn_sg.wgsl's down projection one row a trip (LIGHT_DOWN; default true on
//            real subgroups: 3% off a verify block on an H100; the same bits),
//            fuseQkvAttn?: (fuse true) a chunk of ONE row (a decode pass, a draft's pass) runs the qkv matmul and
//            attention + O projection as one dispatch (attention.wgsl QKV: each (head, split) workgroup computes its
//            head's q and its kv head's k, v itself): 2 * n_layers + 2 dispatches a pass; the same bits as the two
//            dispatches (tests/gpu). Default false: on an H200 it was slower than the two (README, "WebGPU engine").
//            Needs 10 storage buffers per shader stage; a model it cannot take (q/k/v in several bindings, heads over
//            256 dims, workgroup memory) runs the two dispatches. fuseQkvAttnWg?: its workgroup size (default 1,024
//            within the device's limit; at least attnWg, whose lanes run the attention),
//            fuseTouch?: (fused engine) true, false (default) or a list of kinds ('qkv', 'logits', 'attn',
//            'ffn_gate_up', 'ffn_down'): those kernels (the prologue matmuls, attention + O projection, the FFN's two
//            weights) load the words of their weights before their prologue (lib/touch: loads only, the same bits),
//            Tile and split policies (each gives the default's bits: every row's arithmetic is the same; subgroup
//            matmul only): rowTiles?: op kinds ('qkv', 'attn_output', 'ffn_gate_up', 'ffn_down', 'ffn', 'logits') or
//            'all' (all but 'logits') whose dispatches of <= rowTilesMax? (default 16) rows run every chunk row in
//            its own workgroup with the 1-row tile instead of the 4/8-row tiles, attnSplit?: workgroups
//            per head sharing attention.wgsl's O projection, attnRowsZ?: that kernel's grid (heads, split x blocks,
//            rows) instead of (heads, rows, split x blocks) (ROWS_Z; the same operations) for the passes whose rows
//            the GPU decides (true: chain rounds; 'all': every pass; default true where the H200 defaults apply), headSum?: the fused head's input (r + the FFN
//            partials) summed once by residual.wgsl, then a plain matmul_sg head (defaults: ['qkv', 'ffn'], 3 and
//            true on the fused engine with real subgroups, as measured on an H200; none, 1, false elsewhere),
//            headStage?: with headSum, the head stages that sum in workgroup memory (matmul_sg PRO without partials,
//            fuseHeadWg / fuseHeadPairs; default false), attnBlock?: (fuse true, not with fuseQkvAttn) 0 (off), a
//            power of two >= 16, or 'auto' (the default on the fused engine with real subgroups, 0 elsewhere: 512,
//            as measured on an H100, but 0 for a model whose blocks' partials would not fit a storage binding, where
//            a number is refused): the attention's keys in blocks of that many, fixed by position, each
//            block on its own workgroups, the blocks combined by the FFN's prologue (attention.wgsl BLOCKS); rows
//            before that position get the default's bits, later ones their own (still batch invariant); only a
//            chunk of rows that may reach that position runs the blocks' kernels (model stats far_chunks), compiled
//            at the first model that runs them (where they are rejected: 0 under 'auto', a number refused)}
//   engine.adapterInfo  {vendor, architecture, device, description, isFallbackAdapter, features,
//                        maxStorageBufferBindingSize, subgroupMinSize, subgroupMaxSize, kernels: which variants}
//   engine.plan         the resolved options (options.js)
//   engine.destroy()    destroys the device (and every model)
//   const model = await engine.loadModel(description, readSlice, {seq_len, features})
//     description  formats.describe() (Python): {config: ModelConfig fields (dim, hidden_dim, n_layers, n_heads,
//                  n_kv_heads, head_dim, vocab_size, seq_len, rope_theta, rope_dim, norm_eps, tied_embeddings),
//                  tensors: [{name (GGUF: blk.N.attn_q.weight, ...), ggml_type ('F32'|'F16'|'BF16'|'Q4_0'|'Q4_1'|
//                  'Q8_0'), shape (numpy order), offset (absolute, in its file), nbytes, qk_permuted?, file?}]}.
//                  A Hugging Face folder's description names the safetensors shard each tensor lives in (`file`).
//     readSlice    async (offset, nbytes, file) -> ArrayBuffer of the model file (`file`: the tensor's, undefined
//                  for a single GGUF) — an OPFS slice, an fs read, ...
//     seq_len      KV capacity (default and maximum: config.seq_len).
//     features     keep the final hidden state (residual after the last layer, before the output norm) of every
//                  position computed, by absolute position (seq_len, dim): what a draft head reads (default false).
//   model.config             the description's config (seq_len replaced by the KV capacity)
//   model.length             logical KV length (positions filled)
//   await model.forward(tokens /* Int32Array|number[] */, start_pos /* === length */, n_out /* default n */)
//       -> Float32Array (n_out * vocab_size): logits of the LAST n_out positions, row-major. One queue
//          submission, one readback. Batch-invariant: a position's row is bitwise the same whatever split of
//          forwards (1 token, k+1 verify blocks, prefill chunks, batched steps) produced it.
//   The batched step (py/exactspec/backend.py; one submission, one readback; picks made on the GPU, shaders/pick.wgsl:
//   pick = {temperature: 0 greedy argmax, ties -> lowest id | T > 0: argmax(row / T + Gumbel noise of
//   sampling.Rng(seed) at the picked token's absolute position), seed}):
//   model.aheadMax           how many passes the decode loop may run ahead (opts.aheadMax)
//   await model.decodeAhead(token, start_pos, n, pick, rows, then = 0, stop = null)
//       -> {ids: Int32Array (n), rows: Float32Array (n * vocab) | null}: n one-token passes, pass 0 fed `token` at
//          start_pos, pass i > 0 fed ids[i-1] (the pick on row i-1, written to the token buffer by the GPU); length
//          becomes start_pos + n. then > 0: the next `then` passes (a continuation, fed ids[n-1] at start_pos + n)
//          are submitted before this call waits for its readback, so the GPU has work queued while the caller
//          confirms these ids; decodeAhead(ids[n-1], start_pos + n, then, pick, rows) next returns their result (the
//          same as without the continuation); any other call or a truncate drops them (only KV positions past the
//          committed length were written). stop: token ids (EOS) after which no continuation is submitted.
//   await champion.specRound(draft, feed, draft_start, k, token, start_pos, pick, rows, copy = null)
//       -> {proposals: Int32Array (k), ids: Int32Array (k + 1), rows: Float32Array ((k + 1) * vocab) | null}: the
//          draft (another model of this engine, or a draft head on this champion: engine.loadHead) takes `feed`
//          at draft_start (ending at start_pos) and makes k picks,
//          feeding each back (its length becomes draft_start + feed.length + k - 1); then the champion takes [token,
//          proposals...] at start_pos, reading the proposals on the GPU (its length becomes start_pos + k + 1).
//          copy: up to k ids (a draft head's copies) that replace the first proposals the champion verifies; the
//          returned proposals stay the draft's own picks (what its passes were fed).
//   await model.verify(tokens, start_pos, pick, rows = false)
//       -> {ids: Int32Array (n), rows: Float32Array (n * vocab) | null}: one forward of the n tokens with the pick
//          made on every row (ids[i] from row i); for proposals made on the host (n-gram, bridged drafts), whose
//          verify then reads back n ids instead of n rows. length becomes start_pos + n.
//   model.chainRounds        rounds one ngramChain may run (opts.chainRounds; 0 and ngramChain undefined: not offered)
//   model.chainMaxK          the most proposals a chain's round may verify (its k + 1 rows are one chunk: maxRows - 1)
//   await model.ngramChain(seq, start_pos, rounds, k, pick, [min_ngram, max_ngram], then = 0, stop = null)
//       -> {counts: Int32Array (rounds) c_r, accepted: Int32Array (rounds) a_r, proposals: Int32Array (sum c_r) round
//          after round, ids: Int32Array (sum (c_r + 1)) the picks on each round's rows, round after round}: the n-gram
//          drafter's rounds on the GPU in one submission (shaders/chain.wgsl): seq = every token so far (its last,
//          at start_pos, not yet in the cache); round r looks up proposals in the sequence as it stands (the n-gram
//          rule of py/exactspec/drafters/ngram.py, at most k), verifies [last token, proposals] in one pass with the
//          pick on every row, and appends the proposals its picks accept and the pick after them. length becomes
//          start_pos + the tokens appended. then > 0: the next chain of `then` rounds is submitted from where this
//          one ends (history and length stay on the GPU), taken by the next ngramChain(seq + appended, ...) with the
//          same k, pick and n-gram sizes; any other call or a truncate drops it; none after a chain that appended a
//          `stop` id. Ids only (no rows): the decode loop chains greedy rounds.
//   await champion.specChain(draft, seq, draft_start, rounds, k, pick, restart = false, then = 0, stop = null,
//                            copy = null)
//       -> {counts (all k), accepted, proposals, ids, draftLength}: specRound's greedy rounds, `rounds` of them in one
//          submission (shaders/draft_chain.wgsl opens and closes them between the verify passes, so the GPU never waits
//          for the host within a chain): seq = every token so far (its last, at start_pos, not yet in the cache); the
//          draft holds draft_start positions and is fed seq[draft_start ..] (1 to k + 1 tokens) in the first round,
//          later rounds from what a drafter's update() keeps (restart: a draft head, refused without it, from the
//          round before's first position). Lengths become the grown sequence's less one (champion) and what the
//          draft keeps. then / stop: ngramChain's continuation, taken by the next specChain(draft, grown seq,
//          draftLength, then, k, pick, restart). Offered where ngramChain is (chainRounds, chainMaxK). copy
//          [min_ngram, max_ngram] (a draft head's copies): in each round the n-gram lookup on the sequence as it stands
//          (shaders/chain.wgsl COPY, ngramChain's rule) replaces the draft's first proposals; the returned proposals
//          are the verified ones.
//   model.truncate(n)        O(1): logical KV length := n (0 <= n <= length); nothing is zeroed.
//   await model.enableFeatures()   keep the features from now on (a draft head's bind calls it); positions computed
//                            before have none (model.featFrom: the first position whose features are kept).
//   const head = await engine.loadHead(description, readSlice, champion, {seq_len, headVocab, maxRows, headLanes})
//       a draft head (app/gpu/head.js; GGUF layout: py/exactspec/drafters/head.py) reading `champion`'s features:
//     description  formats.describe() of the head GGUF (its metadata names the head's config; or `head`: a
//                  HeadConfig.to_json() dict). Refused unless dim and vocab_size are the champion's.
//     headVocab    with a vocabulary subset: 'indexed' (default: an LM head over the subset's rows of the
//                  champion's embedding, read in place) | 'masked' (the full LM head, then -inf outside the subset)
//     maxRows      rows per chunk of the head (default min(opts.maxRows, 16): its attention scratch scales with it)
//     The head is a model object (forward, truncate, length, config (vocab_size: the champion's), destroy, stats):
//     forward(tokens, start_pos, n_out) reads the champion's kept feature of position q-1 for each row q with q-1 <
//     champion.length at the call, else its own predicted one (rows past the champion are separate passes of the
//     one submission; a missing predicted feature is an error) — py/exactspec/drafters/head.py's HeadModel rule.
//     As the draft of champion.specRound(head, ...) its k passes run on the GPU in the round's submission (the feed
//     reads the champion's features, each later pass the feature the pass before predicted). head.bind(champion)
//     re-points it at another champion of this engine (enables that champion's features; the caller truncates the
//     head); head.memory() -> {weights, kv, scratch, total, champion_features} bytes on the GPU; head.headConfig.
//   await model.readFeatures(start_pos, n) -> Float32Array (n * dim): the kept features of those positions (< length).
//   model.stats              last submission: {dispatches, command_buffers, chunks, passes, encode_ms, submit_ms,
//                            wait_ms, pre_encoded, gpu_ms}
//   model.weightBytes        bytes of weights on the GPU
//   model.fused              the fused kernels this model runs: false | 'attn' | true (see opts.fuse)
//   await model.profile(n)   bench only (timestamps): GPU microseconds per kind of dispatch for n rows
//   model.destroy()          frees GPU buffers
//   await engine.idle()      waits for a continuation still running from the last answer (the worker's core calls it
//                            before each answer: a chat's next message never finds the GPU busy with the last one)
// Speed notes: one compute pass per forward (embed, then per layer qkv+RoPE+KV write, attention, o+residual,
// gate/up+SwiGLU, down+residual, then the head for the rows asked: 5 * n_layers + 2 dispatches; fuse 'attn':
// 4 * n_layers + 2, fuse true: 3 * n_layers + 2, see opts.fuse), split into `splits` command buffers submitted one
// after another (a small first one, so the GPU starts early; a continuation queued behind a running run is one:
// contSplits, each further buffer costing GPU time); the command buffers for the next submission of the same shape
// are encoded while the GPU runs this one (preKeep shapes kept; an answer's first run's too: preFirst).
// Errors: device loss makes every call reject with an Error whose message starts with "device lost"; other GPU
// errors with "gpu error"; bad arguments/files with a message naming the problem. Calls are serialised (per engine).

import { openDevice } from './device.js';
import { createKernels, defaultShaderSource } from './kernels.js';
import { loadHead } from './head.js';
import { loadModel } from './model.js';
import { kernelsInfo, resolvePlan } from './options.js';

export { isCpuAdapter } from './options.js';

export async function createEngine(gpu, opts = {}) {
  const { device, adapterInfo, state, lostPromise } = await openDevice(gpu, opts);
  const shaderSource = opts.shaderSource ?? defaultShaderSource(opts.shaderBase ?? new URL('../../shaders/', import.meta.url));
  let plan;
  let kernels;
  try {
    plan = resolvePlan(opts, adapterInfo, device);
    try {
      kernels = await createKernels(device, shaderSource, { subgroups: plan.subgroups, fuse: !!plan.fuse, qkvAttn: plan.fuseQkvAttn });
    } catch (e) {
      if (!(plan.fuseAuto && plan.fuse)) throw e;
      // fused only by default: an implementation that rejects the fused kernels still gets the unfused engine
      console.warn(`exactspec engine: fused kernels unavailable (${e.message}); running unfused`);
      plan.fuse = false;
      plan.fuseQkvAttn = false;
      plan.attnBlock = 0;
      kernels = await createKernels(device, shaderSource, { subgroups: plan.subgroups, fuse: false });
    }
    adapterInfo.kernels = kernelsInfo(plan);
  } catch (e) {
    device.destroy();
    throw e;
  }
  const maxBinding = device.limits.maxStorageBufferBindingSize;
  let lock = Promise.resolve();
  const eng = { device, kernels, plan, state, lostPromise, maxBinding, models: new Set(), shaderSource,
    weightBinding: Math.min(maxBinding, opts.maxBindingBytes ?? Infinity),
    /** Run fn after every earlier call of any model of this engine (submissions never interleave). */
    locked(fn) {
      const p = lock.then(fn);
      lock = p.catch(() => {});
      return p;
    } };
  return {
    adapterInfo,
    device,
    kernels,
    plan,
    async loadModel(description, readSlice, lopts = {}) {
      const m = await loadModel(eng, description, readSlice, lopts);
      eng.models.add(m);
      return m;
    },
    async loadHead(description, readSlice, champion, lopts = {}) {
      const h = await loadHead(eng, description, readSlice, champion, lopts);
      eng.models.add(h);
      return h;
    },
    /** Wait for work still queued from the last answer (a decodeAhead continuation the answer did not take: it ended
     * on EOS inside the run before it), so that the next answer starts on an idle GPU. */
    idle() {
      return eng.locked(async () => { for (const m of eng.models) await m.settleAhead?.(); });
    },
    destroy() {
      for (const m of [...eng.models]) m.destroy();
      device.destroy();
    },
  };
}
