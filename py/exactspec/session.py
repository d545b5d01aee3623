"""The worker's Python side: load models, generate with streaming and cancel, describe loaded models.

Runs unchanged in CPython (tests) and in Pyodide (app/worker.js). No `js` import here: the worker passes plain
callables (`emit`) and, for the WebGPU engine, backends already wrapped by `exactspec.bridge.JsBackend`.
Everything crossing the JS boundary is a JSON string (no proxies to leak).

    s = Session(backend_name="cpu")
    s.load("smollm2", "/models/smollm2/model.gguf", role="champion")
    out = await s.generate_json(json.dumps({"prompt": "Hi", "chat": True, "max_new_tokens": 8}), emit)
    s.cancel()        # from another task: generate stops at its last committed token
"""
from __future__ import annotations

import asyncio
import inspect
import json
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from .backend import PassThrough

MAX_PROMPT_CHARS = 1 << 20


class SessionError(ValueError):
    """A request the session cannot serve (no model loaded, bad parameter, ...); the message says why."""


@dataclass
class LoadedModel:
    name: str
    path: str
    role: str
    backend: Any                    # Backend protocol
    tokenizer: Any | None
    chat_template: str | None
    config: Any                     # ModelConfig
    summary: dict = field(default_factory=dict)
    backend_name: str = "cpu"       # 'webgpu' | 'cpu'
    cache: Any = None               # TrackedCache(YieldingBackend(backend)): kept across turns for prefix reuse
    json_vocab: Any = None          # exactspec.constrain.TokenVocab, built at the first JSON-mode request
    json_splits: dict = field(default_factory=dict)   # how this champion splits forced tokens (learned, proposals only)


class YieldingBackend(PassThrough):
    """Wraps a Backend so that each forward first yields to the event loop.

    In the browser the worker's message handler (cancel, list, ...) can only run while Python awaits; a numpy
    forward never awaits, so without this a running generate would never see a cancel request.
    """

    def __init__(self, inner):
        self.inner = inner
        self.config = inner.config

    @property
    def length(self) -> int:
        return self.inner.length

    def truncate(self, n: int) -> None:
        self.inner.truncate(n)

    def forward(self, tokens, start_pos, n_out=None):
        async def run():
            await asyncio.sleep(0)
            r = self.inner.forward(tokens, start_pos, n_out)
            if inspect.isawaitable(r):
                r = await r
            return r                # (n_out, vocab) float32
        return run()

    # the batched step (exactspec.backend), passed through when the inner backend offers it (PassThrough: ahead_max,
    # k_limit, offers)
    @property
    def wrapped(self):
        return self.inner

    async def decode_ahead(self, token, start_pos, n, pick, rows=True, then=0, stop=()):
        await asyncio.sleep(0)
        r = self.inner.decode_ahead(token, start_pos, n, pick, rows, then=then, stop=stop)
        return (await r) if inspect.isawaitable(r) else r

    async def spec_round(self, draft, feed, draft_start, k, token, start_pos, pick, rows=True, copy=()):
        from .backend import base_of
        await asyncio.sleep(0)
        r = self.inner.spec_round(base_of(draft, YieldingBackend), feed, draft_start, k, token, start_pos, pick, rows,
                                  copy=copy)
        return (await r) if inspect.isawaitable(r) else r

    async def verify(self, tokens, start_pos, pick, rows=False):
        await asyncio.sleep(0)
        r = self.inner.verify(tokens, start_pos, pick, rows)
        return (await r) if inspect.isawaitable(r) else r

    async def ngram_chain(self, seq, start_pos, rounds, k, pick, min_ngram, max_ngram, then=0, stop=()):
        await asyncio.sleep(0)
        r = self.inner.ngram_chain(seq, start_pos, rounds, k, pick, min_ngram, max_ngram, then=then, stop=stop)
        return (await r) if inspect.isawaitable(r) else r

    async def spec_chain(self, draft, seq, draft_start, rounds, k, pick, restart=False, then=0, stop=(), copy=None):
        from .backend import base_of
        await asyncio.sleep(0)
        r = self.inner.spec_chain(base_of(draft, YieldingBackend), seq, draft_start, rounds, k, pick, restart,
                                  then=then, stop=stop, copy=copy)
        return (await r) if inspect.isawaitable(r) else r


def inspect_model(path: str, gguf=None) -> dict:
    """Validate a stored model without loading weights: a GGUF file (header, tensor extents, config, tokenizer) or a
    Hugging Face folder (config.json, safetensors headers, tokenizer.json). Returns a JSON-able summary; raises a
    ValueError subclass naming the problem. gguf: the file already parsed (formats.GGUFFile), else it is parsed."""
    if os.path.isdir(path):
        return _inspect_hf(path)
    from .formats.gguf import GGUFFile
    g = gguf if gguf is not None else GGUFFile(path)            # raises FormatError on a truncated/corrupt file
    md = g.metadata
    from .drafters.head import HEAD_ARCH, head_config_of
    if md.get("general.architecture") == HEAD_ARCH:             # a draft head: it runs on a champion's features
        hc = head_config_of(g)
        return {"format": "gguf", "kind": "head", "arch": HEAD_ARCH, "model_name": md.get("general.name"),
                "config": hc.to_json(), "champion_sha256": hc.champion_sha256, "n_tensors": len(g.tensors),
                "has_tokenizer": False, "has_chat_template": False, "file_size": g.file_size}
    cfg = g.config()
    has_tok = "tokenizer.ggml.tokens" in md
    return {
        "format": "gguf", "kind": "model", "arch": md.get("general.architecture"), "model_name": md.get("general.name"),
        "config": cfg.to_json(), "n_tensors": len(g.tensors), "has_tokenizer": has_tok,
        "has_chat_template": isinstance(md.get("tokenizer.chat_template"), str),
        "file_size": g.file_size,
    }


def _inspect_hf(folder: str) -> dict:
    from .formats.layout import load_json
    from .formats.quant import FormatError
    from .formats.safetensors import hf_tensor_table
    if not os.path.isfile(os.path.join(folder, "config.json")):
        raise FormatError("a Hugging Face folder needs config.json")
    if not any(n.endswith(".safetensors") for n in os.listdir(folder)):
        raise FormatError("a Hugging Face folder needs at least one .safetensors file")
    cfg, table = hf_tensor_table(folder)      # config.json, every shard's header, the tensors checked
    size = sum(os.path.getsize(os.path.join(folder, n)) for n in os.listdir(folder) if n.endswith(".safetensors"))
    has_tok = os.path.isfile(os.path.join(folder, "tokenizer.json"))
    template = None
    tc = os.path.join(folder, "tokenizer_config.json")
    if os.path.isfile(tc):
        with open(tc, "rb") as f:
            tcfg = load_json(f.read(), "tokenizer_config.json")
        if not isinstance(tcfg, dict):
            raise FormatError("tokenizer_config.json is not a JSON object")
        template = tcfg.get("chat_template")
    return {"format": "hf", "kind": "model", "arch": cfg.arch, "model_name": os.path.basename(folder.rstrip("/")),
            "config": cfg.to_json(), "n_tensors": len(table), "has_tokenizer": has_tok,
            "has_chat_template": isinstance(template, str), "file_size": size}


def fit_tokenizer(tok, config, fmt: str):
    """The tokenizer checked against the model's vocabulary (FormatError if they cannot go together): larger than
    the model is refused; smaller is refused for a GGUF file (its tokenizer and embedding describe one vocabulary),
    and for a Hugging Face folder the embedding's extra rows are padding: ids past the tokenizer decode to nothing
    (as Hugging Face does) instead of failing mid-answer."""
    if tok is None:
        return None
    from .formats.quant import FormatError
    if tok.vocab_size > config.vocab_size:
        raise FormatError(f"the tokenizer has {tok.vocab_size} tokens but the model only {config.vocab_size}")
    if tok.vocab_size < config.vocab_size:
        if fmt == "gguf":
            raise FormatError(f"the file's tokenizer has {tok.vocab_size} tokens but its model's vocabulary is "
                              f"{config.vocab_size}: the model could emit ids no token spells (a GGUF's tokenizer and "
                              "embedding must agree)")
        tok.pad_vocab(config.vocab_size)
    return tok


class _Count:
    """A tokenizer's size only (fit_tokenizer on a tokenizer not built)."""

    def __init__(self, n: int):
        self.vocab_size = n

    def pad_vocab(self, n: int) -> None:
        self.vocab_size = n


def load_model_files(path: str, backend=None, keep_features: bool = False, gguf=None, pool=None):
    """(backend, tokenizer, chat_template, config, summary) for a GGUF file or a Hugging Face folder; backend
    defaults to the numpy ReferenceModel (the CPU fallback; keep_features: it keeps the features a draft head
    reads; pool: its kernel's threads, exactspec.simd.Pool). A GGUF file is parsed once (or not at all: `gguf`,
    formats.GGUFFile of it)."""
    from .tokenizer import Tokenizer
    if os.path.isdir(path):
        summary = _inspect_hf(path)
        tok = Tokenizer.from_tokenizer_json(os.path.join(path, "tokenizer.json")) if summary["has_tokenizer"] else None
        template = getattr(tok, "chat_template", None)
        if backend is None:
            from .reference import ReferenceModel
            backend = ReferenceModel.from_file(path, keep_features=keep_features, pool=pool)
    else:
        from .formats.gguf import GGUFFile
        g = gguf if gguf is not None else GGUFFile(path)
        summary = inspect_model(path, gguf=g)
        template = g.metadata.get("tokenizer.chat_template")
        tok = Tokenizer.from_gguf_metadata(g.metadata) if summary["has_tokenizer"] else None
        if backend is None:
            from .reference import ReferenceModel
            backend = ReferenceModel(g.config(), g.lazy_weights(), keep_features=keep_features, pool=pool)
    tok = fit_tokenizer(tok, backend.config, summary["format"])
    return backend, tok, template if isinstance(template, str) else None, backend.config, summary


class Session:
    """Models and generation state of one worker."""

    def __init__(self, backend_name: str = "cpu", clock: Callable[[], float] | None = None):
        self.backend_name = backend_name
        self.models: dict[str, LoadedModel] = {}
        self.champion: str | None = None
        self.draft: str | None = None       # the draft model
        self.head: str | None = None        # the draft head (loaded with role 'draft', kept beside the draft model)
        self._cancel = False
        self._busy = False
        self._clock = clock
        self._pool = None                   # exactspec.simd.Pool: the CPU kernel's threads (set_cpu_pool)
        self._cont: dict | None = None      # state for `continue`: ids so far and the live stream decoder
        self._parsed: dict = {}             # path -> ((size, mtime_ns), formats.GGUFFile): one parse per file
        self._recovering = False            # a device recovery reloads the models while an answer is running
        self._constraints: dict = {}        # (champion, schema) -> exactspec.constrain.Constraint (its mask caches)
        self._sched: dict = {}              # (champion, draft, head, backend) -> the adaptive scheduler's memory

    def _sched_memory(self, draft) -> dict:
        """The scheduler's memory between answers (exactspec.schedule: round times, acceptance) for these models on
        this backend; decode keys it further by drafter and setting. No draft in this run: the n-gram drafter's."""
        m = self.models[self.champion]
        key = (self.champion, self.draft if draft is not None else None, self.head if draft is not None else None,
               m.backend_name)
        return self._sched.setdefault(key, {})

    # -- models -----------------------------------------------------------------------------------------------
    def _gguf(self, path: str):
        """The parsed GGUF file at `path` (formats.GGUFFile), or None for a folder / another format: parsed once while
        the file stays the same (describe, inspect and load of one model share it)."""
        if os.path.isdir(path):
            return None
        try:
            st = os.stat(path)
            with open(path, "rb") as f:
                if f.read(4) != b"GGUF":
                    return None
        except OSError:
            return None
        key = (st.st_size, st.st_mtime_ns)
        hit = self._parsed.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        from .formats.gguf import GGUFFile
        g = GGUFFile(path)
        self._parsed.pop(path, None)
        self._parsed[path] = (key, g)
        while len(self._parsed) > 4:
            self._parsed.pop(next(iter(self._parsed)))
        return g

    def inspect(self, path: str) -> str:
        """inspect_model's summary JSON, after checking the tokenizer too (an import refuses a file whose tokenizer
        cannot work with its model: an unsupported kind, fewer tokens than the vocabulary, ...)."""
        g = self._gguf(path)
        summary = inspect_model(path, gguf=g)
        if summary.get("kind") == "model" and summary.get("has_tokenizer"):
            from .backend import ModelConfig
            from .tokenizer import Tokenizer, gguf_tokenizer_args
            cfg = ModelConfig(**summary["config"])
            if g is not None:          # the cheap checks (no tables): SmolLM2's are built at load
                n = len(gguf_tokenizer_args(g.metadata)["tokens"])
                fit_tokenizer(_Count(n), cfg, "gguf")
            else:
                fit_tokenizer(Tokenizer.from_tokenizer_json(os.path.join(path, "tokenizer.json")), cfg, "hf")
        # every weight finite (read once, not dequantised): a NaN/Inf weight is refused here, not at a load
        from .formats.layout import check_finite
        if g is not None:
            check_finite(path, [(t.name, t.type_name, t.offset, t.nbytes) for t in g.tensors.values()])
        elif summary.get("format") == "hf":
            from .formats.safetensors import hf_tensor_table
            by_file: dict = {}
            for gname, (fp, _n, dtype, _shape, off, nbytes) in hf_tensor_table(path)[1].items():
                by_file.setdefault(fp, []).append((gname, dtype, off, nbytes))
            for fp, ts in by_file.items():
                check_finite(fp, ts)
        return json.dumps(summary)

    def describe(self, path: str) -> str:
        """formats.describe() JSON (tensor offsets, config; a GGUF file or a Hugging Face folder) for the WebGPU engine."""
        g = self._gguf(path)
        if g is not None:
            d = g.describe()
            from .drafters.head import HEAD_ARCH
            if d.get("config") is None and g.metadata.get("general.architecture") != HEAD_ARCH:
                g.config()               # a file the reader refuses: say why (formats.layout) instead of "no config"
            return json.dumps(d)
        from .formats import describe
        return json.dumps(describe(path))

    def load(self, name: str, path: str, role: str = "champion", backend=None, backend_name: str | None = None) -> str:
        if role not in ("champion", "draft"):
            raise SessionError(f"role must be 'champion' or 'draft', not {role!r}")
        if self._busy and not self._recovering:
            raise SessionError("cannot load a model while an answer is being generated: stop it first")
        from .drafters.head import HEAD_ARCH
        slot = role                 # 'champion' | 'draft' | 'head': a draft head has its own slot
        parsed = self._gguf(path)
        if parsed is not None and parsed.metadata.get("general.architecture") == HEAD_ARCH:
            if role != "draft":
                raise SessionError(f"{name} is a draft head: it can only be loaded as the draft")
            be, tok, template, cfg, summary = self._load_head(path, backend)
            slot = "head"
        else:
            # a CPU champion keeps its features: a draft head may read them
            be, tok, template, cfg, summary = load_model_files(path, backend, keep_features=role == "champion",
                                                               gguf=parsed, pool=self._pool)
        if role == "champion" and tok is None:
            raise SessionError(f"{name}: the model has no tokenizer (GGUF tokenizer.ggml.* or tokenizer.json): "
                               "it can only be a draft")
        if backend_name is None:
            backend_name = "cpu" if backend is None else self.backend_name
        from .kv import TrackedCache
        # one model per role (their KV caches are separate): free the role's previous model, and take this name
        # out of the other role if it held it
        prev = {"champion": self.champion, "draft": self.draft, "head": self.head}[slot]
        # the same champion file again (e.g. reloaded on the CPU after the GPU was lost): the last answer stays
        # continuable, since its token ids mean the same to this model
        same_champion = role == "champion" and prev == name and name in self.models and self.models[name].path == path
        if prev is not None and prev != name:
            self.models.pop(prev, None)
        if slot != "draft" and self.draft == name:
            self.draft = None
        if slot != "head" and self.head == name:
            self.head = None
        if role == "draft" and self.champion == name:
            self.champion = None
            self._cont = None
        self.models[name] = LoadedModel(name, path, role, be, tok, template, cfg, summary, backend_name,
                                        TrackedCache(YieldingBackend(be)))
        if role == "champion":
            self.champion = name
            self._constraints = {k: v for k, v in self._constraints.items() if k[0] != name}
            if not same_champion:
                self._cont = None
        elif slot == "head":
            self.head = name
        else:
            self.draft = name
        return json.dumps({"name": name, "role": role, "config": cfg.to_json(), "summary": summary})

    def champion_sha256(self) -> str:
        """sha256 of the champion's file (hashed once per load; a head names the champion it was made for)."""
        m = self._champion()
        if "sha256" not in m.summary:
            from .formats.quant import FormatError
            if not os.path.isfile(m.path):
                raise FormatError(f"{m.name} is a folder, not one file: it has no sha256 a draft head can name")
            from .formats import sha256_file
            m.summary["sha256"] = sha256_file(m.path)
        return m.summary["sha256"]

    def _load_head(self, path: str, backend=None):
        """A draft head for the loaded champion: the numpy HeadModel on the champion's features, or `backend`
        (a device's head, exactspec.bridge.JsHead: bound here to the champion, whose cache is then computed again,
        since a device champion keeps its features only from then on). Refuses a head made for another champion,
        naming both sha256s."""
        from .drafters.head import HeadError, HeadModel, check_champion, head_config_of, read_head_gguf
        if not self.champion or self.champion not in self.models:
            raise SessionError("a draft head reads the champion's features: load the champion first")
        champ = self.models[self.champion]
        summary = inspect_model(path)
        try:
            if backend is not None:
                from .formats.gguf import GGUFFile
                check_champion(head_config_of(GGUFFile(path)), champ.config, self.champion_sha256())
                backend.bind(champ.backend)
                champ.cache.invalidate()
                be = backend
            else:
                if not hasattr(champ.backend, "feature_rows"):
                    raise HeadError(f"the champion runs on the {champ.backend_name} backend: a draft head on the CPU "
                                    "reads the features of a CPU champion")
                hc, w, ids = read_head_gguf(path)
                check_champion(hc, champ.config, self.champion_sha256())
                be = HeadModel(champ.backend, hc, w, ids)
        except (HeadError, ValueError) as e:
            raise SessionError(f"draft head: {e}") from None
        summary["bound_to"] = champ.path
        return be, None, None, be.config, summary

    def _draft_for(self, drafter: str):
        """The loaded draft's cache for `drafter` ('model' or 'head'), a head re-bound to the current champion."""
        what = "draft head" if drafter == "head" else "draft model"
        slot = self.head if drafter == "head" else self.draft
        lm = self.models.get(slot) if slot else None
        if lm is None:
            raise SessionError(f"drafter {drafter!r} needs a {what}: load one or pick n-gram / none")
        kind = lm.summary.get("kind", "model")
        if kind != drafter:
            raise SessionError(f"drafter {drafter!r} needs a {what}, but the loaded draft {lm.name} is a "
                               f"{'draft head' if kind == 'head' else 'draft model'}: pick drafter {kind!r}")
        if kind == "head":
            champ = self._champion()
            if getattr(lm.backend, "source", champ.backend) is not champ.backend:   # the champion was reloaded
                from .drafters.head import HeadError, check_champion
                try:
                    check_champion(lm.backend.head_config, champ.config, self.champion_sha256())
                    lm.backend.bind(champ.backend)
                except (HeadError, ValueError) as e:
                    raise SessionError(f"draft head: {e}") from None
                lm.cache.invalidate()
                if getattr(lm.backend, "device", False):     # a device champion keeps its features from now on
                    champ.cache.invalidate()
                lm.summary["bound_to"] = champ.path
        return lm.cache

    def unload(self, name: str) -> None:
        self.models.pop(name, None)
        if self.champion == name:
            self.champion = None
            self._cont = None
        if self.draft == name:
            self.draft = None
        if self.head == name:
            self.head = None

    def bridge_info(self) -> str:
        """How the loaded draft meets the champion's vocabulary (exactspec.vocab): null without both; else
        {draft, same, remap, shared, differences, auto: {coupled, rejection}} (a draft file without a tokenizer is
        taken to share the champion's)."""
        c, d = self.models.get(self.champion or ""), self.models.get(self.draft or "")
        if c is None or d is None or c.tokenizer is None:
            return "null"
        if d.tokenizer is None:
            return json.dumps({"draft": d.name, "same": True, "remap": False, "shared": None, "auto":
                               {"coupled": "none", "rejection": "none"},
                               "differences": ["the draft's file carries no tokenizer: taken to be the champion's"]})
        from .vocab import bridge_pair, context_difference
        info = bridge_pair(c.tokenizer, d.tokenizer).compat.to_json()
        ctx = context_difference(c.config, d.config)     # the one difference of the models, not their vocabularies
        if ctx:
            info["differences"].append(ctx)
        return json.dumps({"draft": d.name, **info})

    def memory_json(self) -> str:
        """Per role, the bytes its model holds where Python can see them (exactspec.memory(); the bench matrix):
        {role: {"name", "backend", "weights", "kv", "features", "scratch", "total"}}. The numpy reference reports its
        arrays and its matrix kernel ("kernel"); a draft head its device-style figure (weights as stored + KV +
        scratch); a model on the WebGPU engine only its backend here (app/core.js adds the engine's buffers)."""
        out = {}
        for role, name in (("champion", self.champion), ("draft", self.draft)):
            m = self.models.get(name or "")
            if m is None:
                continue
            be = m.backend
            rep = {"backend": m.backend_name}
            if isinstance(getattr(be, "kernel", None), str):     # the numpy reference's matrix kernel ("simd" in Pyodide)
                rep["kernel"] = be.kernel
                rep["threads"] = int(getattr(be, "threads", 1))
            if hasattr(be, "memory"):
                rep.update(be.memory())
            elif hasattr(be, "memory_bytes"):
                mb = be.memory_bytes()
                rep.update({k: mb.get(k) for k in ("weights", "kv", "scratch", "total")})
            out[role] = rep
        return json.dumps(out)

    def loaded(self) -> str:
        return json.dumps([{"name": m.name, "role": m.role, "config": m.config.to_json()}
                           for m in self.models.values()])

    def set_cpu_pool(self, host) -> int:
        """The browser's CPU kernel threads (app/cpu_pool.js; None: none) for the CPU models loaded from now on;
        returns how many threads multiply their matrices."""
        from .simd import Pool
        self._pool = Pool(host) if host is not None else None
        return self._pool.threads if self._pool is not None else 1

    # -- generation ---------------------------------------------------------------------------------------------
    def cancel(self) -> bool:
        was = self._busy
        self._cancel = True
        return was

    def prompt_ids(self, req: dict) -> list[int]:
        m = self._champion()
        tok = m.tokenizer
        if req.get("continue"):
            if not self._cont:
                raise SessionError("nothing to continue: generate an answer first")
            return list(self._cont["ids"])
        if req.get("prompt_ids") is not None:
            ids = [int(i) for i in req["prompt_ids"]]
            if any(i < 0 or i >= m.config.vocab_size for i in ids):
                raise SessionError(f"prompt_ids: ids must be in [0, {m.config.vocab_size})")
            return ids
        chat = req.get("chat")
        prompt = req.get("prompt")
        if isinstance(chat, list):
            messages = [{"role": str(x["role"]), "content": str(x["content"])} for x in chat]
        elif chat:
            if not isinstance(prompt, str):
                raise SessionError("prompt: a string is required")
            messages = [{"role": "user", "content": prompt}]
        else:
            messages = None
        if messages is not None:
            from .chat import encode_chat
            if not m.chat_template:
                raise SessionError(f"{m.name} has no chat template: send chat=false with a raw prompt")
            if sum(len(x["content"]) for x in messages) > MAX_PROMPT_CHARS:
                raise SessionError("chat: too long")
            ids = encode_chat(tok, messages, template=m.chat_template, add_generation_prompt=True)
        else:
            if not isinstance(prompt, str):
                raise SessionError("prompt: a string is required")
            if len(prompt) > MAX_PROMPT_CHARS:
                raise SessionError(f"prompt: too long ({len(prompt)} characters)")
            ids = tok.encode(prompt)
        if not ids:
            raise SessionError("prompt: empty after tokenisation")
        return ids

    def fit_prompt(self, req: dict, budget: int) -> tuple[list[int], int]:
        """(prompt ids, messages left out): a chat whose prompt leaves fewer than `budget` tokens of the context free
        leaves out its oldest turns (whole ones: the kept part starts at a user message; a first system message
        and the last message always stay) until it fits; a last message that does not fit alone is an error."""
        m = self._champion()
        ids = self.prompt_ids(req)
        chat, n_ctx = req.get("chat"), m.config.seq_len
        if req.get("continue") or not isinstance(chat, list) or len(ids) + budget <= n_ctx:
            return ids, 0
        head = 1 if chat and chat[0].get("role") == "system" else 0
        cuts = [i for i in range(head + 1, len(chat) - 1) if chat[i].get("role") == "user"] + [len(chat) - 1]

        def kept(i):         # the prompt of the system message (if any) and chat[i:]
            return self.prompt_ids({**req, "chat": chat[:head] + chat[i:]})
        best = (cuts[-1], kept(cuts[-1]))
        if len(best[1]) + budget > n_ctx:
            raise SessionError(f"the message is too long for the context: its prompt ({len(best[1])} tokens) + "
                               f"max_new_tokens ({budget}) exceed the context length {n_ctx}: shorten it or lower "
                               f"max_new_tokens")
        lo, hi = 0, len(cuts) - 1            # the fewest turns left out: binary search on cuts (best: cuts[hi]'s)
        while lo < hi:
            mid = (lo + hi) // 2
            got = kept(cuts[mid])
            if len(got) + budget > n_ctx:
                lo = mid + 1
            else:
                hi, best = mid, (cuts[mid], got)
        return best[1], best[0] - head

    def _champion(self) -> LoadedModel:
        if not self.champion or self.champion not in self.models:
            raise SessionError("no model loaded")
        return self.models[self.champion]

    def gen_config(self, req: dict):
        """The request's settings (exactspec.settings: defaults, limits, the speculation-off rule) as a config."""
        from .decode import GenerateConfig
        from .settings import SettingsError, normalise
        try:
            s = normalise(req)
            s.pop("speculation")
            cfg = GenerateConfig(**s)
            cfg.validate()
        except (SettingsError, ValueError) as e:
            raise SessionError(str(e)) from None
        return cfg

    def json_mode(self, req: dict, m: LoadedModel):
        """(response_format, Constraint, grammar state) of a request (a continued answer keeps the format it was
        started with), or (None, None, None)."""
        from .constrain import Constraint, Grammar, SchemaError, TokenVocab, parse_response_format
        rf = self._cont.get("response_format") if (req.get("continue") and self._cont) else req.get("response_format")
        try:
            spec = parse_response_format(rf)
        except SchemaError as e:
            raise SessionError(f"JSON mode: {e}") from None
        if spec is None:
            return None, None, None
        key = (m.name, repr(spec))
        c = self._constraints.pop(key, None)
        if c is None:
            if m.json_vocab is None:
                m.json_vocab = TokenVocab.from_tokenizer(m.tokenizer, m.config.vocab_size)
            try:
                c = Constraint(Grammar(spec), m.json_vocab)
            except SchemaError as e:
                raise SessionError(f"JSON mode: {e}") from None
        self._constraints[key] = c                  # most recent last; a few schemas keep their mask caches
        while len(self._constraints) > 4:
            self._constraints.pop(next(iter(self._constraints)))
        state = c.start
        if req.get("continue") and self._cont:
            for t in self._cont["answer"]:
                state = c.advance(state, t) if state is not None else None
            if state is None:
                raise SessionError("continue: the answer so far is not valid JSON for its schema: regenerate it")
        return rf, c, state

    async def generate(self, req: dict, emit: Callable[[str], Any] | None = None, fault_host=None, recover=None,
                       on_fault=None) -> dict:
        """req: {prompt | chat | prompt_ids | continue, max_new_tokens, temperature, top_k, top_p, seed, drafter, k,
        mode, speculation, grammar_draft, response_format, faults?, resume?}. emit(json) gets {text, token_ids} deltas
        of newly committed tokens. response_format (JSON mode): {type: 'json_object'} or {type: 'json_schema', schema}.

        Recovery, always from the last committed token (exactspec.faults): a failure of the draft or an exception in
        the loop's own code finishes the answer with the champion alone (speculation off for the rest of it, a
        notice); a lost GPU device is handed to `recover(json) -> json` (the host: a new device, else the CPU
        fallback, the models reloaded) and the answer goes on there. faults: armed fault specs (exactspec.faults;
        fault_host(kind, phase, round) acts on the host's kinds, on_fault(json) is told of each as it fires).
        resume: {answer, stream, budget?} — the answer's ids committed before the worker running it was lost (the
        page restarts a worker and resumes: the prompt is req's chat / prompt followed by `answer`; `stream` are the
        ids the live text decoder had taken since its last reset; `budget` the max_new_tokens the answer's first
        request kept free, so that a chat too long for the context leaves out the same turns, default len(answer)
        + max_new_tokens). A chat too long for the context leaves out its oldest turns (fit_prompt; the result's
        dropped_messages and a notice say how many). The result carries a privacy-safe `receipt`
        (exactspec.receipts)."""
        from .decode import generate_async
        from .faults import FaultError, FaultPlan
        if self._busy:
            raise SessionError("a generation is already running: stop it first")
        m = self._champion()
        cfg = self.gen_config(req)
        resume = self._resume_of(req, m)
        rf, constraint, gstate = self.json_mode(req, m)
        cfg.response_format = rf
        # the tokens the answer may take, which the prompt must leave free (a resume: its answer's, as when it began)
        budget = cfg.max_new_tokens if not resume else (resume.get("budget") or len(resume["answer"]) + cfg.max_new_tokens)
        ids, dropped = self.fit_prompt(req, budget)
        prior = resume["answer"] if resume else []           # ids of this answer committed before this request
        if resume:
            ids = ids + prior
            if constraint is not None:
                for t in prior:
                    gstate = constraint.advance(gstate, t) if gstate is not None else None
                if gstate is None:
                    raise SessionError("resume: the answer so far is not valid JSON for its schema")
        room = m.config.seq_len - len(ids)            # tokens the context still holds after the prompt
        clamped = None                                # (a Continue / resume writes what fits: its answer so far is
        if req.get("continue") or resume:             #  part of the prompt, so max_new_tokens alone can overflow)
            if room < 1:
                raise SessionError(f"the context ({m.config.seq_len} tokens) is full: this answer cannot go on; "
                                   f"start a new chat")
            if cfg.max_new_tokens > room:
                clamped = (cfg.max_new_tokens, room)
                cfg = replace(cfg, max_new_tokens=room)
        elif len(ids) + cfg.max_new_tokens > m.config.seq_len:
            raise SessionError(f"prompt ({len(ids)} tokens) + max_new_tokens ({cfg.max_new_tokens}) exceeds the "
                               f"context length {m.config.seq_len}")
        try:
            plan = FaultPlan(req.get("faults") or (), host=fault_host,
                             on_fire=(lambda rec: on_fault(json.dumps(rec))) if on_fault is not None else None)
        except FaultError as e:
            raise SessionError(str(e)) from None
        draft = self._draft_for(cfg.drafter) if cfg.drafter in ("model", "head") else None
        dtok = self.models[self.draft].tokenizer if cfg.drafter == "model" else None
        cont = bool(req.get("continue") and self._cont)
        if resume:
            stream = m.tokenizer.stream(skip_special=True)
            for t in resume["stream"]:
                stream.push(t)                       # (already shown before the worker was lost)
        else:
            stream = self._cont["stream"] if cont else m.tokenizer.stream(skip_special=True)
        parts: list[str] = []

        def on_tokens(new_ids):
            new_ids = [int(i) for i in new_ids]
            text = "".join(stream.push(i) for i in new_ids)
            parts.append(text)
            if emit is not None:
                emit(json.dumps({"text": text, "token_ids": new_ids}))

        import time
        clock = self._clock or time.perf_counter
        t_req = clock()
        self._busy = True
        self._cancel = False
        out_ids: list[int] = []
        results, recovery, notices = [], [], []
        run_cfg, run_draft, run_dtok, g_now = cfg, draft, dtok, gstate
        counts = {"device": 0, "retry": 0}
        try:
            while True:
                try:
                    res = await generate_async(m.cache, ids + out_ids, run_cfg, draft=run_draft,
                                               tokenizer=m.tokenizer, draft_tokenizer=run_dtok,
                                               on_tokens=on_tokens, should_cancel=lambda: self._cancel,
                                               constraint=constraint, grammar_state=g_now, faults=plan,
                                               json_splits=m.json_splits,
                                               sched_memory=self._sched_memory(run_draft),
                                               **({"clock": self._clock} if self._clock else {}))
                except ValueError as e:
                    if not results:   # refused before any token (a bridge that cannot join the tokenizers, ...)
                        raise SessionError(("JSON mode: " if rf is not None else "") + str(e)) from None
                    raise
                results.append(res)
                out_ids += [int(i) for i in res.token_ids]
                if constraint is not None:
                    for t in res.token_ids:
                        g_now = constraint.advance(g_now, t) if g_now is not None else None
                if res.finish_reason != "error":
                    break
                left = cfg.max_new_tokens - len(out_ids)
                step = await self._recover_step(res, run_cfg, recover, counts, plan, len(prior) + len(out_ids))
                if step is None:
                    break
                recovery.append(step["record"])
                notices.append(step["notice"])
                m = self._champion()                 # (a device recovery reloaded the models)
                if step["speculation_off"]:
                    run_cfg = _no_speculation(run_cfg)
                    run_draft = run_dtok = None
                    if step["record"]["cause"] == "draft_only" or res.failed == "draft":
                        lm = self.models.get(self.draft) if self.draft else None
                        if lm is not None and lm.cache is not None:
                            lm.cache.invalidate()    # the failed draft re-syncs from scratch next time
                elif run_cfg.drafter in ("model", "head"):
                    try:
                        run_draft = self._draft_for(run_cfg.drafter)
                    except SessionError:             # the draft did not come back on the new backend
                        run_cfg, run_draft, run_dtok = _no_speculation(run_cfg), None, None
                        notices.append("the draft could not be reloaded: the answer goes on without speculation")
                if left <= 0:
                    results.append(type(res)([], "length", {}, text=""))
                    break
                run_cfg = replace(run_cfg, max_new_tokens=left)
        finally:
            self._busy = False
            self._cancel = False
            self._recovering = False
        last = results[-1]
        answer = (self._cont["answer"] if cont else []) + prior + out_ids
        if last.finish_reason in ("cancelled", "error"):
            tail = ""                 # keep partial UTF-8 in the decoder: `continue` completes it
            self._cont = {"ids": ids + out_ids, "stream": stream}
        else:
            tail = stream.flush()
            self._cont = {"ids": ids + out_ids, "stream": m.tokenizer.stream(skip_special=True)}
        self._cont.update(answer=answer, response_format=rf)
        if tail:
            parts.append(tail)
            if emit is not None:
                emit(json.dumps({"text": tail, "token_ids": []}))
        stats = _merge_stats([r.stats for r in results if r.stats], len(out_ids), clock() - t_req) \
            if len(results) > 1 else dict(last.stats)
        stats = {k: _jsonable(v) for k, v in stats.items()}
        stats["backend"] = m.backend_name
        stats["attempts"] = len([r for r in results if r.stats])
        stats["dropped_messages"] = dropped
        out = {"text": "".join(parts), "token_ids": out_ids, "finish_reason": last.finish_reason,
               "prompt_tokens": len(ids) - len(prior), "stats": stats}
        if last.finish_reason == "error":
            out["error"] = str(last.error or "the backend failed")
            out["failed"] = last.failed
        if dropped:
            out["dropped_messages"] = dropped
            notices.insert(0, f"The conversation is longer than the context ({m.config.seq_len} tokens, {budget} of them "
                              f"kept for the answer): its {dropped} oldest message{'s' if dropped > 1 else ''} "
                              f"{'were' if dropped > 1 else 'was'} left out of this answer.")
        if clamped is not None:
            notices.insert(0, f"The context ({m.config.seq_len} tokens) had room for {clamped[1]} more tokens, fewer "
                              f"than max_new_tokens ({clamped[0]}): this part of the answer stopped there.")
        if recovery or plan.fired:
            out["recovery"] = recovery
            out["faults_fired"] = plan.fired
        if recovery or plan.fired or notices:
            out["notices"] = notices
        out["receipt"] = self._receipt(req, cfg, stats, last, len(ids) - len(prior), plan.fired, recovery,
                                       continued=cont, resumed=bool(resume))
        return out

    def _resume_of(self, req: dict, m) -> dict | None:
        r = req.get("resume")
        if r is None:
            return None
        if req.get("continue"):
            raise SessionError("resume: send the base request's prompt or chat, not continue")
        if not isinstance(r, dict):
            raise SessionError("resume: an object {answer, stream} is required")
        out = {}
        b = r.get("budget")
        if b is not None:
            if isinstance(b, bool) or not isinstance(b, int) or b < 1:
                raise SessionError("resume.budget: a whole number of tokens >= 1 is required")
            out["budget"] = b
        for k in ("answer", "stream"):
            v = r.get(k, [])
            if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int) or
                                              not 0 <= i < m.config.vocab_size for i in v):
                raise SessionError(f"resume.{k}: token ids in [0, {m.config.vocab_size}) are required")
            out[k] = [int(i) for i in v]
        return out

    async def _recover_step(self, res, run_cfg, recover, counts, plan, at_token: int) -> dict | None:
        """How the answer goes on after `res` ended in an error (None: it cannot; the answer ends there)."""
        import re
        err = res.error or ""
        new = plan.fired[counts.get("seen", 0):]            # the faults fired since the last recovery: the cause
        counts["seen"] = len(plan.fired)
        fired = new[-1]["kind"] if new else None
        lost = bool(re.search(r"device lost|gpu error|device was lost", err, re.I))
        if lost and recover is not None and counts["device"] < 2:
            counts["device"] += 1
            self._recovering = True
            try:
                got = recover(json.dumps({"error": err}))
                if inspect.isawaitable(got):
                    got = await got
                info = json.loads(got) if isinstance(got, str) else dict(got or {})
            finally:
                self._recovering = False
            if not info.get("ok"):
                return None
            how = info.get("how") if info.get("how") in ("new_device", "cpu_fallback") else "cpu_fallback"
            backend = "webgpu" if how == "new_device" else "cpu"
            notice = ("The GPU device was lost mid-answer: continued on a new GPU device from the last committed "
                      "token." if how == "new_device" else
                      "The GPU device was lost mid-answer: switched to the CPU fallback and continued from the last "
                      "committed token.")
            return {"record": {"cause": fired or "backend_error", "action": how, "at_token": at_token,
                               "backend": backend}, "notice": notice, "speculation_off": False}
        if lost:
            return None
        spec_on = run_cfg.drafter != "none" or (run_cfg.response_format is not None and run_cfg.grammar_draft)
        if res.failed == "draft" and spec_on:
            what = "the draft's backend failed"
        elif res.failed in ("loop", "round") and counts["retry"] < 1:
            counts["retry"] += 1
            what = "an exception in the decode loop" if res.failed == "loop" else "the speculative round failed"
        else:
            return None
        return {"record": {"cause": fired or ("backend_error" if res.failed != "loop" else "loop_error"),
                           "action": "speculation_off", "at_token": at_token,
                           "backend": self._champion().backend_name},
                "notice": f"{what[0].upper() + what[1:]} mid-answer: finished the answer with the champion alone "
                          "(speculation off for the rest of it), from the last committed token.",
                "speculation_off": True}

    def set_artifact(self, name: str, info_json: str) -> None:
        """What a host knows of a loaded model's files ({sha256, bytes, files: [{sha256, bytes}]}: the page's OPFS
        store hashed them at import), kept for receipts (and a draft head's champion check) instead of re-hashing."""
        lm = self.models.get(name)
        if lm is None:
            raise SessionError(f"no model named {name} is loaded")
        info = json.loads(info_json)
        art = {"sha256": info.get("sha256"), "bytes": info.get("bytes"), "files": info.get("files") or []}
        lm.summary["artifact"] = art
        if lm.summary.get("format") == "gguf" and isinstance(art["sha256"], str):
            lm.summary["sha256"] = art["sha256"]

    def _artifact(self, lm) -> dict | None:
        if lm is None:
            return None
        art = lm.summary.get("artifact")
        if art is None:                        # hash the files once (CPython; the page passes what OPFS knows)
            from .receipts import artifact_of
            art = artifact_of(lm.path)
            lm.summary["artifact"] = art
        return {**art, "format": lm.summary.get("format", "gguf"), "kind": lm.summary.get("kind", "model")}

    def _receipt(self, req, cfg, stats, last, prompt_tokens, fired, recovery, continued, resumed) -> dict:
        from .receipts import make_receipt, tokenizer_sha256
        from .settings import normalise
        m = self._champion()
        d = self.models.get(self.draft) if self.draft and cfg.drafter in ("model", "head") else None
        if m.tokenizer is not None and "tokenizer_sha256" not in m.summary:
            m.summary["tokenizer_sha256"] = tokenizer_sha256(m.tokenizer)
        s = normalise(req)
        s["response_format"] = cfg.response_format
        return make_receipt(
            settings=s, stats=stats, finish_reason=last.finish_reason, failed=last.failed, seed=cfg.seed,
            prompt_tokens=prompt_tokens, champion=self._artifact(m), draft=self._artifact(d),
            tokenizer={"sha256": m.summary.get("tokenizer_sha256"), "vocab_size": m.tokenizer.vocab_size}
            if m.tokenizer is not None else None,
            backend={"champion": m.backend_name, "draft": d.backend_name if d is not None else None},
            faults=fired, recovery=recovery, memory={"rss_peak_bytes": _rss_peak()},
            policy={"continued": continued, "resumed": resumed, "bridge_used": stats.get("bridge"),
                    "speculation_off_after_fault": any(r["action"] == "speculation_off" for r in recovery)})

    async def generate_json(self, req_json: str, emit: Callable[[str], Any] | None = None, fault_host=None,
                            recover=None, on_fault=None) -> str:
        req = json.loads(req_json)
        if not isinstance(req, dict):
            raise SessionError("generate: the request must be an object")
        return json.dumps(await self.generate(req, emit, fault_host=fault_host, recover=recover, on_fault=on_fault))


def _no_speculation(cfg):
    """The config with speculation off (the champion alone; JSON mode's grammar-forced drafting off too)."""
    return replace(cfg, drafter="none", k=0, adaptive=False, grammar_draft=False)


def _merge_stats(stats: list[dict], new_tokens: int, elapsed_s: float) -> dict:
    """The stats of one answer made of several runs of the decode loop (recovery): counts added, acceptance and
    rates recomputed from them, the first run's time to first token."""
    out = dict(stats[-1])
    for k in ("target_passes", "prefill_passes", "draft_passes", "rounds", "proposed", "accepted", "submissions",
              "readback_bytes", "ahead_passes", "wasted_passes", "forced_proposed", "forced_accepted",
              "spec_disabled_rounds", "mask_ms", "chain_rounds", "chain_proposed", "device_wait_ms", "row_reads"):
        out[k] = sum(s.get(k, 0) or 0 for s in stats)
    width = max(len(s.get("proposed_at") or []) for s in stats)
    pa = [sum((s.get("proposed_at") or [])[i] if i < len(s.get("proposed_at") or []) else 0 for s in stats)
          for i in range(width)]
    aa = [sum((s.get("accepted_at") or [])[i] if i < len(s.get("accepted_at") or []) else 0 for s in stats)
          for i in range(width)]
    out.update(proposed_at=pa, accepted_at=aa, acceptance_by_position=[a / p if p else 0.0 for a, p in zip(aa, pa)],
               new_tokens=new_tokens, reused_prefix_tokens=stats[0].get("reused_prefix_tokens", 0),
               tau=new_tokens / out["target_passes"] if out["target_passes"] else 0.0,
               elapsed_ms=elapsed_s * 1000.0, tokens_per_s=new_tokens / max(elapsed_s, 1e-9),
               k=stats[0].get("k"), drafter=stats[0].get("drafter"))
    first = next((s for s in stats if s.get("ttft_ms") is not None), None)
    if first is not None:
        before = sum(s.get("elapsed_ms", 0) or 0 for s in stats[: stats.index(first)])
        out["ttft_ms"] = before + first["ttft_ms"]
    return out


def _rss_peak() -> int | None:
    """The process's peak resident memory in bytes (CPython on Linux/macOS); None where there is none (Pyodide)."""
    try:
        import resource
        import sys
        r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(r if sys.platform == "darwin" else r * 1024)
    except (ImportError, OSError, AttributeError):
        return None


def _jsonable(v):
    try:
        import numpy as np
        if isinstance(v, np.generic):
            return v.item()
        if isinstance(v, np.ndarray):
            return v.tolist()
    except ImportError:       # pragma: no cover
        pass
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return None
    return v


def models_dir(name: str) -> str:
    """Where the worker mounts a stored model's files (WORKERFS)."""
    return os.path.join("/models", name)
