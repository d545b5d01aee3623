"""A draft head on the champion's own features (EAGLE-style), its GGUF layout and its drafter.

The head is a draft-shaped backend (exactspec.backend's protocol: forward, truncate, length). At head position q it
takes the token x_q and a feature f_{q-1}: the champion's final hidden state (the residual after its last layer,
before the output norm) at position q-1 when the champion holds that position at the time of the pass, else the
head's own predicted feature at q-1 (zeros at q = 0). Then

    x_in = W_fc_feat . rmsnorm(f_{q-1}, w_feat_norm) + W_fc_emb . rmsnorm(E[x_q], w_emb_norm)       (dim,)
    f_q  = one Llama decoder layer (attention over the head's own KV cache, optionally a sliding window) on x_in
    logits for x_{q+1} = E_out . rmsnorm(f_q, w_out_norm)

E is the champion's token embedding, w_out_norm its output norm and E_out its (tied) LM head: the champion's own
tensors, shared, not copied. With a vocabulary subset (FR-Spec) E_out holds only the subset's rows; every token
outside it gets logit -inf, so it is never proposed. f_q is kept by position (the next position may read it).

With this indexing the head slots into ModelDrafter and the batched step unchanged. One rule differs: positions
the head computed from PREDICTED features must be recomputed from the true ones once the champion has them, so
after a round `HeadDrafter.update` truncates the head to min(committed_len - 1, L), L = len(seq) at the round's
start (positions >= L used predicted features).

GGUF layout (general.architecture = "exactspec-head"; written by `write_head_gguf`, read by `read_head_gguf`,
`head_config_of` for the metadata alone):
  metadata  exactspec.head.format_version u32 = 1
            exactspec.head.champion_sha256 string: sha256 of the champion GGUF the head was trained on
            exactspec.head.{embedding_length, feed_forward_length, attention.head_count, attention.head_count_kv,
            attention.key_length, context_length, vocab_size} u32 (vocab_size: the champion's),
            exactspec.head.{rope.freq_base, attention.layer_norm_rms_epsilon} f32,
            exactspec.head.attention.window u32 (0: the whole prefix), exactspec.head.vocab_subset u32 (0: full
            vocabulary, else the number of ids in head.vocab_ids), exactspec.head.training string (JSON, optional)
  tensors   head.feat_norm.weight (dim,) F32, head.emb_norm.weight (dim,) F32,
            head.fc_feat.weight, head.fc_emb.weight (dim, dim),
            blk.0.{attn_norm, ffn_norm}.weight (dim,) F32, blk.0.attn_q.weight (n_heads*head_dim, dim),
            blk.0.attn_k.weight / attn_v.weight (n_kv_heads*head_dim, dim), blk.0.attn_output.weight (dim, n_heads*
            head_dim), blk.0.ffn_gate.weight / ffn_up.weight (hidden_dim, dim), blk.0.ffn_down.weight (dim,
            hidden_dim) — matrices F16 or Q8_0; Q/K rows in Hugging Face (rotate-half) order, NOT llama.cpp's
            permuted order (describe() reports qk_permuted false); RoPE over the full head_dim at absolute positions,
            head.vocab_ids (n,) F32 (only with a subset): ascending token ids, exact integers (< 2**24).
  Shapes are numpy order (out, in), as everywhere in exactspec.formats.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from ..backend import ModelConfig, with_copy
from .ngram import NgramDrafter
from .model import ModelDrafter

HEAD_ARCH = "exactspec-head"
FORMAT_VERSION = 1
K = "exactspec.head."
LAYER_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                 "ffn_down")


@dataclass(frozen=True)
class HeadConfig:
    """The head's dimensions (the champion's width), its attention window and vocabulary subset size."""

    dim: int
    hidden_dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int          # the champion's vocabulary
    seq_len: int             # the champion's context
    rope_theta: float
    norm_eps: float
    window: int = 0          # 0: attend to the whole prefix
    vocab_subset: int = 0    # 0: the full vocabulary; else the number of ids in head.vocab_ids
    champion_sha256: str = ""

    @classmethod
    def for_champion(cls, c: ModelConfig, champion_sha256: str = "", **over) -> "HeadConfig":
        base = dict(dim=c.dim, hidden_dim=c.hidden_dim, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads,
                    head_dim=c.head_dim, vocab_size=c.vocab_size, seq_len=c.seq_len, rope_theta=c.rope_theta,
                    norm_eps=c.norm_eps, champion_sha256=champion_sha256)
        base.update(over)
        return cls(**base)

    def layer_config(self, vocab_rows: int) -> ModelConfig:
        """The one decoder layer as a ReferenceModel config whose output rows are `vocab_rows`."""
        return ModelConfig(dim=self.dim, hidden_dim=self.hidden_dim, n_layers=1, n_heads=self.n_heads,
                           n_kv_heads=self.n_kv_heads, head_dim=self.head_dim, vocab_size=vocab_rows,
                           seq_len=self.seq_len, rope_theta=self.rope_theta, rope_dim=self.head_dim,
                           norm_eps=self.norm_eps, tied_embeddings=True, arch="llama")

    def to_json(self) -> dict:
        return asdict(self)

    def tensor_shapes(self) -> dict:
        d, qd, kd, h = self.dim, self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim, self.hidden_dim
        s = {"head.feat_norm.weight": (d,), "head.emb_norm.weight": (d,), "head.fc_feat.weight": (d, d),
             "head.fc_emb.weight": (d, d), "blk.0.attn_norm.weight": (d,), "blk.0.attn_q.weight": (qd, d),
             "blk.0.attn_k.weight": (kd, d), "blk.0.attn_v.weight": (kd, d), "blk.0.attn_output.weight": (d, qd),
             "blk.0.ffn_norm.weight": (d,), "blk.0.ffn_gate.weight": (h, d), "blk.0.ffn_up.weight": (h, d),
             "blk.0.ffn_down.weight": (d, h)}
        if self.vocab_subset:
            s["head.vocab_ids"] = (self.vocab_subset,)
        return s

    def n_params(self) -> int:
        return sum(int(np.prod(s)) for n, s in self.tensor_shapes().items() if n != "head.vocab_ids")


class HeadError(ValueError):
    """A head file that is malformed or made for another champion; the message says which."""


# -- GGUF ----------------------------------------------------------------------------------------------------------
def head_metadata(cfg: HeadConfig, name: str = "exactspec-head", training: dict | None = None) -> dict:
    from ..formats.gguf import GGUFValue, T_FLOAT32, T_UINT32
    u = lambda v: GGUFValue(T_UINT32, int(v))            # noqa: E731
    md = {"general.architecture": HEAD_ARCH, "general.name": name,
          K + "format_version": u(FORMAT_VERSION), K + "champion_sha256": cfg.champion_sha256,
          K + "embedding_length": u(cfg.dim), K + "feed_forward_length": u(cfg.hidden_dim),
          K + "attention.head_count": u(cfg.n_heads), K + "attention.head_count_kv": u(cfg.n_kv_heads),
          K + "attention.key_length": u(cfg.head_dim), K + "context_length": u(cfg.seq_len),
          K + "vocab_size": u(cfg.vocab_size), K + "rope.freq_base": GGUFValue(T_FLOAT32, cfg.rope_theta),
          K + "attention.layer_norm_rms_epsilon": GGUFValue(T_FLOAT32, cfg.norm_eps),
          K + "attention.window": u(cfg.window), K + "vocab_subset": u(cfg.vocab_subset)}
    if training is not None:
        md[K + "training"] = json.dumps(training, sort_keys=True)
    return md


def write_head_gguf(path, cfg: HeadConfig, weights: Mapping[str, np.ndarray], tensor_type: str = "Q8_0",
                    name: str = "exactspec-head", training: dict | None = None, vocab_ids=None) -> None:
    """Write a head: `weights` under the names of HeadConfig.tensor_shapes() (vocab_ids given separately, ascending
    token ids of the subset, or None for the full vocabulary)."""
    from ..formats.gguf import write_gguf
    if vocab_ids is not None:
        cfg = replace(cfg, vocab_subset=len(vocab_ids))
    shapes = cfg.tensor_shapes()
    tensors = {}
    for n, shape in shapes.items():
        if n == "head.vocab_ids":
            tensors[n] = _check_ids(np.asarray(vocab_ids), cfg.vocab_size).astype(np.float32)
            continue
        w = np.asarray(weights[n], dtype=np.float32)
        if tuple(w.shape) != shape:
            raise HeadError(f"head tensor {n} has shape {tuple(w.shape)}, expected {shape}")
        tensors[n] = w
    write_gguf(path, head_metadata(cfg, name, training), tensors, tensor_type=tensor_type)


def _check_ids(ids: np.ndarray, vocab_size: int) -> np.ndarray:
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.size == 0 or not np.all(np.isfinite(ids)) or not np.all(ids == np.round(ids)):
        raise HeadError("head.vocab_ids must be a non-empty list of integer token ids")
    ids = ids.astype(np.int64)
    if ids[0] < 0 or ids[-1] >= vocab_size or np.any(np.diff(ids) <= 0):
        raise HeadError(f"head.vocab_ids must be strictly ascending token ids in 0..{vocab_size - 1}")
    return ids


def is_head_gguf(path) -> bool:
    from ..formats.gguf import GGUFFile
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                return False
    except OSError:
        return False
    return GGUFFile(path).metadata.get("general.architecture") == HEAD_ARCH


def read_head_gguf(path) -> tuple[HeadConfig, dict, np.ndarray | None]:
    """(config, float32 weights by name, vocab_ids or None) of a head file; HeadError / FormatError on a bad one."""
    from ..formats.gguf import GGUFFile
    g = GGUFFile(path)
    cfg = head_config_of(g)
    shapes = cfg.tensor_shapes()
    weights = {}
    for n, shape in shapes.items():
        w = np.ascontiguousarray(g.tensor(n, unpermute=False), dtype=np.float32)
        if not np.all(np.isfinite(w)):
            raise HeadError(f"head tensor {n} has non-finite values")
        weights[n] = w
    ids = _check_ids(weights.pop("head.vocab_ids"), cfg.vocab_size) if cfg.vocab_subset else None
    return cfg, weights, ids


def head_config_of(g) -> HeadConfig:
    """The HeadConfig of a parsed GGUFFile (metadata and tensor shapes checked; no tensor data read)."""
    md = g.metadata
    if md.get("general.architecture") != HEAD_ARCH:
        raise HeadError(f"{g.path!r} is not a draft head (general.architecture "
                        f"{md.get('general.architecture')!r}, expected {HEAD_ARCH!r})")
    if md.get(K + "format_version") != FORMAT_VERSION:
        raise HeadError(f"head format version {md.get(K + 'format_version')!r} is not supported ({FORMAT_VERSION})")

    def num(key, kind=int):
        v = md.get(K + key)
        if v is None or isinstance(v, (bool, str, list)):
            raise HeadError(f"head metadata lacks {K + key}")
        return kind(v)
    try:
        cfg = HeadConfig(dim=num("embedding_length"), hidden_dim=num("feed_forward_length"),
                         n_heads=num("attention.head_count"), n_kv_heads=num("attention.head_count_kv"),
                         head_dim=num("attention.key_length"), vocab_size=num("vocab_size"),
                         seq_len=num("context_length"),
                         rope_theta=float(str(np.float32(num("rope.freq_base", float)))),
                         norm_eps=float(str(np.float32(num("attention.layer_norm_rms_epsilon", float)))),
                         window=num("attention.window"), vocab_subset=num("vocab_subset"),
                         champion_sha256=str(md.get(K + "champion_sha256", "")))
    except (TypeError, ValueError) as e:
        if isinstance(e, HeadError):
            raise
        raise HeadError(f"bad head metadata: {e}") from None
    shapes = cfg.tensor_shapes()
    missing = [n for n in shapes if n not in g.tensors]
    if missing:
        raise HeadError(f"head file lacks tensors {missing}")
    for n, shape in shapes.items():
        if tuple(g.tensors[n].shape) != shape:
            raise HeadError(f"head tensor {n} has shape {tuple(g.tensors[n].shape)}, expected {shape}")
    return cfg


def check_champion(cfg: HeadConfig, champion_config: ModelConfig, champion_sha256: str | None) -> None:
    """Refuse a head made for another champion (by sha256 when both are known, and by shape always)."""
    if champion_sha256 and cfg.champion_sha256 and champion_sha256 != cfg.champion_sha256:
        raise HeadError(f"this draft head was made for the champion with sha256 {cfg.champion_sha256}, but the "
                        f"loaded champion's sha256 is {champion_sha256}: load the head trained for this champion")
    c = champion_config
    if (cfg.dim, cfg.vocab_size) != (c.dim, c.vocab_size):
        raise HeadError(f"the head (dim {cfg.dim}, vocab {cfg.vocab_size}) does not fit the champion (dim {c.dim}, "
                        f"vocab {c.vocab_size})")


# -- the numpy reference head -------------------------------------------------------------------------------------
class HeadModel:
    """Backend protocol on numpy float32, reading the features a champion ReferenceModel keeps (keep_features=True).

    Batch-invariant like the reference: every matrix product is the reference's row-at-a-time matvec, the decoder
    layer is a one-layer ReferenceModel (fed the head's input rows), so a position's row does not depend on how
    the positions were chunked.
    """

    def __init__(self, champion, cfg: HeadConfig, weights: Mapping[str, np.ndarray], vocab_ids=None,
                 max_len: int | None = None):
        from ..reference import ReferenceModel
        check_champion(cfg, champion.config, None)
        self.head_config = cfg
        self.source = None
        ids = None if vocab_ids is None else _check_ids(np.asarray(vocab_ids), cfg.vocab_size)
        self.vocab_ids = ids                                                   # (n_subset,) or None
        # the LM head: the champion's tied one as it multiplies it (shared, not copied), or the subset's rows
        share = ids is None and champion.config.tied_embeddings
        lw = {"output_norm.weight": champion.out_norm}
        if not share:
            lw["token_embd.weight"] = champion.embed if ids is None else champion.embed_rows(ids)   # (rows, dim)
        lw.update({f"blk.0.{t}.weight": weights[f"blk.0.{t}.weight"] for t in LAYER_TENSORS})
        self.layer = ReferenceModel(cfg.layer_config(cfg.vocab_size if ids is None else len(ids)), lw,
                                    max_len=champion.max_len if max_len is None else max_len, keep_features=True,
                                    window=cfg.window, kernel=champion.kernel, block_bytes=champion.block_bytes,
                                    shared_head=champion.head_blocks if share else None,
                                    pool=getattr(champion, "pool", None))
        self.config = replace(self.layer.config, vocab_size=cfg.vocab_size)   # what a drafter sees
        self.embed_rows = champion.embed_rows                                  # ids (n,) -> (n, dim), shared
        f32 = lambda n: np.ascontiguousarray(weights[n], dtype=np.float32)  # noqa: E731
        self.feat_norm, self.emb_norm = f32("head.feat_norm.weight"), f32("head.emb_norm.weight")   # (dim,)
        self.fc_feat = self.layer.blocked(weights["head.fc_feat.weight"])                          # (dim, dim)
        self.fc_emb = self.layer.blocked(weights["head.fc_emb.weight"])                            # (dim, dim)
        self.bind(champion)

    @classmethod
    def from_file(cls, path, champion, champion_sha256: str | None = None, max_len: int | None = None):
        cfg, w, ids = read_head_gguf(path)
        check_champion(cfg, champion.config, champion_sha256)
        return cls(champion, cfg, w, ids, max_len=max_len)

    def bind(self, champion) -> None:
        """Read features from `champion` (a ReferenceModel with keep_features=True) from now on; forgets the KV."""
        try:
            champion.feature_rows(0, 0)
        except (AttributeError, ValueError):
            raise HeadError("the champion does not keep its features: load it with keep_features=True") from None
        check_champion(self.head_config, champion.config, None)
        self.source = champion
        self.layer.truncate(0)

    # -- Backend protocol ------------------------------------------------------------------------------------------
    @property
    def length(self) -> int:
        return self.layer.length

    def truncate(self, n: int) -> None:
        self.layer.truncate(n)

    def _features_in(self, start_pos: int, n: int) -> np.ndarray:
        """(n, dim): f_{q-1} for q = start_pos .. start_pos+n-1: zeros at q = 0, the champion's feature where the
        champion holds position q-1, else the head's own predicted one (which must exist: see forward)."""
        src = self.source
        f = np.zeros((n, self.config.dim), np.float32)                        # (n, dim)
        first, stop = max(start_pos - 1, 0), start_pos - 1 + n                 # positions read: first..stop-1
        mid = max(first, min(stop, src.length))                                # champion rows first..mid-1
        if mid > first:
            f[first - start_pos + 1: mid - start_pos + 1] = src.feature_rows(first, mid)
        for p in range(mid, stop):                                             # past the champion: predicted
            if p >= self.layer.length:
                raise HeadError(f"head position {p + 1} needs the predicted feature of {p}, not computed yet")
            f[p - start_pos + 1] = self.layer.feature_rows(p, p + 1)[0]
        return f

    def forward(self, tokens: Sequence[int], start_pos: int, n_out: int | None = None) -> np.ndarray:
        """tokens (n,) at start_pos.. -> logits float32 (n_out, vocab_size) of the last n_out positions."""
        toks = np.asarray(tokens, dtype=np.int64).reshape(-1)                 # (n,)
        n = toks.shape[0]
        V = self.config.vocab_size
        n_out = n if n_out is None else int(n_out)
        if n == 0 or not 0 <= n_out <= n:
            raise ValueError(f"forward needs >= 1 token and 0 <= n_out <= n (got {n}, {n_out})")
        if start_pos != self.layer.length:
            raise ValueError(f"forward at start_pos {start_pos} but the head holds {self.layer.length} positions")
        if toks.min() < 0 or toks.max() >= V:
            raise ValueError(f"token id outside 0..{V - 1}")
        # rows 0..cut-1 read the champion's features (or, row 0, the head's last one); each row after them reads
        # the predicted feature of the row before it, so it needs a pass of its own
        cut = max(1, self.source.length - start_pos + 1)
        outs, s = [], 0
        while s < n:
            e = min(n, cut) if s == 0 else s + 1
            outs.append(self._pass(toks[s:e], start_pos + s, min(e - s, max(0, n_out - (n - e)))))
            s = e
        return np.concatenate(outs) if len(outs) > 1 else outs[0]             # (n_out, vocab)

    def _pass(self, toks: np.ndarray, start_pos: int, n_out: int) -> np.ndarray:
        n = toks.shape[0]
        L = self.layer
        f = L._rmsnorm(self._features_in(start_pos, n), self.feat_norm)      # (n, dim)
        e = L._rmsnorm(self.embed_rows(toks), self.emb_norm)                 # (n, dim)
        a = np.empty((n, self.config.dim), np.float32)                         # (n, dim)
        b = np.empty((n, self.config.dim), np.float32)                         # (n, dim)
        L._matvec(self.fc_feat, np.ascontiguousarray(f), a)
        L._matvec(self.fc_emb, np.ascontiguousarray(e), b)
        rows = L.forward(toks, start_pos, n_out, embeds=a + b)                # (n_out, rows of the LM head)
        if self.vocab_ids is None:
            return rows
        out = np.full((n_out, self.config.vocab_size), -np.inf, np.float32)  # (n_out, vocab)
        out[:, self.vocab_ids] = rows
        return out

    def predicted_features(self, start: int, stop: int) -> np.ndarray:
        """(stop - start, dim): the head's output features f_q for positions start..stop-1 (tests, benches)."""
        return self.layer.feature_rows(start, stop)

    def memory_bytes(self) -> dict:
        """The head's own memory as a device would hold it (weights as stored + KV + scratch), for the 10% rule."""
        c = self.head_config
        return head_memory(c, self.layer.max_len)


def head_memory(c: HeadConfig, context: int, weight_bytes: float | None = None) -> dict:
    """Bytes: weights (Q8_0 matrices, F32 norms, F32 vocab ids unless weight_bytes given), the head's KV at
    `context` positions (f32; a window bounds it), scratch (its input rows, features, one logits row)."""
    shapes = c.tensor_shapes()
    if weight_bytes is None:
        weight_bytes = sum((np.prod(s) * 34 / 32 if len(s) == 2 else np.prod(s) * 4) for s in shapes.values())
    kv_pos = min(context, c.window) if c.window else context
    kv = 2 * c.n_kv_heads * c.head_dim * 4 * kv_pos
    rows = c.vocab_subset or c.vocab_size
    scratch = 4 * (rows + 8 * c.dim + 2 * c.hidden_dim + c.n_heads * max(kv_pos, 1))
    return {"weights": int(weight_bytes), "kv": int(kv), "scratch": int(scratch),
            "total": int(weight_bytes + kv + scratch), "context": int(context)}


def random_head_weights(cfg: HeadConfig, seed: int, feature_scale: float = 1.0) -> dict:
    """Deterministic random head weights (tests, smoke runs): a pure function of (cfg, seed)."""
    rng = np.random.default_rng(np.random.SeedSequence([0x68656164, int(seed)]))   # "head", seed
    w = {}
    for n, shape in cfg.tensor_shapes().items():
        if n == "head.vocab_ids":
            continue
        if len(shape) == 1:
            w[n] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            gain = feature_scale if n == "head.fc_feat.weight" else 1.0
            w[n] = (rng.standard_normal(shape) * (gain / np.sqrt(shape[1]))).astype(np.float32)
    return w


# -- the drafter ---------------------------------------------------------------------------------------------------
class HeadDrafter(ModelDrafter):
    """ModelDrafter over a head; after a round it drops what the head computed from predicted features.

    copy (the setting head_copy): where the n-gram drafter's lookup finds a copy in the sequence (prompt and answer so
    far: drafters.ngram, min 2, max 3 tokens), its c proposals replace the head's first c (greedy and coupled; the
    head's passes are the same either way: each is fed its own proposal before it). Rejection mode keeps the head's
    proposals (its tail was drawn from q given the head's own prefix, not the copy's). Over the 136 workload prompts
    (bench/results/head/combined_sim.txt) this lifts greedy tau at k = 4 from 1.70 to 2.13."""

    name = "head"
    restarts = True    # spec_chain: each round re-makes the positions the round before drafted from predicted features

    def __init__(self, draft, copy: bool = False, **kw):
        super().__init__(draft, **kw)
        self.round_start: int | None = None
        self.copy = NgramDrafter() if copy else None

    def copy_of(self, seq, k: int) -> list[int]:
        """The proposals that replace the head's first ones in a round of k from `seq` ([] without copy)."""
        return self.copy.lookup(seq, k) if self.copy is not None and k > 0 else []

    async def propose(self, seq, k, pick):
        proposals, q = await super().propose(seq, k, pick)
        if q is None and proposals:
            proposals = with_copy(self.copy_of(seq, len(proposals)), proposals)
        return proposals, q

    def catch_up(self, seq):
        self.round_start = len(seq)     # positions >= this one will use predicted features in this round
        return super().catch_up(seq)

    def chain_round(self, t0: int) -> None:
        self.round_start = t0

    def update(self, committed_len: int) -> None:
        keep = min(self.draft.length, committed_len - 1)
        if self.round_start is not None:
            keep = min(keep, self.round_start)
        if keep < self.draft.length:
            self.draft.truncate(max(0, keep))
