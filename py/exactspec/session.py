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
from dataclasses import dataclass, field
from typing import Any, Callable

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


class YieldingBackend:
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

    # the batched step (exactspec.backend), passed through when the inner backend offers it
    @property
    def ahead_max(self) -> int:
        return int(getattr(self.inner, "ahead_max", 0) or 0)

    @property
    def k_limit(self) -> int:
        return int(getattr(self.inner, "k_limit", 0) or 0)

    def offers(self, method: str) -> bool:
        from .backend import offers
        return offers(self.inner, method)

    async def decode_ahead(self, token, start_pos, n, pick, rows=True):
        await asyncio.sleep(0)
        r = self.inner.decode_ahead(token, start_pos, n, pick, rows)
        return (await r) if inspect.isawaitable(r) else r

    async def spec_round(self, draft, feed, draft_start, k, token, start_pos, pick, rows=True):
        from .backend import base_of
        await asyncio.sleep(0)
        r = self.inner.spec_round(base_of(draft, YieldingBackend), feed, draft_start, k, token, start_pos, pick, rows)
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


def load_model_files(path: str, backend=None, keep_features: bool = False, gguf=None):
    """(backend, tokenizer, chat_template, config, summary) for a GGUF file or a Hugging Face folder; backend
    defaults to the numpy ReferenceModel (the CPU fallback; keep_features: it keeps the features a draft head
    reads). A GGUF file is parsed once (or not at all: `gguf`, formats.GGUFFile of it)."""
    from .tokenizer import Tokenizer
    if os.path.isdir(path):
        summary = _inspect_hf(path)
        tok = Tokenizer.from_tokenizer_json(os.path.join(path, "tokenizer.json")) if summary["has_tokenizer"] else None
        template = getattr(tok, "chat_template", None)
        if backend is None:
            from .reference import ReferenceModel
            backend = ReferenceModel.from_file(path, keep_features=keep_features)
    else:
        from .formats.gguf import GGUFFile
        g = gguf if gguf is not None else GGUFFile(path)
        summary = inspect_model(path, gguf=g)
        template = g.metadata.get("tokenizer.chat_template")
        tok = Tokenizer.from_gguf_metadata(g.metadata) if summary["has_tokenizer"] else None
        if backend is None:
            from .reference import ReferenceModel
            backend = ReferenceModel(g.config(), g.lazy_weights(), keep_features=keep_features)
    tok = fit_tokenizer(tok, backend.config, summary["format"])
    return backend, tok, template if isinstance(template, str) else None, backend.config, summary


class Session:
    """Models and generation state of one worker."""

    def __init__(self, backend_name: str = "cpu", clock: Callable[[], float] | None = None):
        self.backend_name = backend_name
        self.models: dict[str, LoadedModel] = {}
        self.champion: str | None = None
        self.draft: str | None = None
        self._cancel = False
        self._busy = False
        self._clock = clock
        self._cont: dict | None = None      # state for `continue`: ids so far and the live stream decoder
        self._parsed: dict = {}             # path -> ((size, mtime_ns), formats.GGUFFile): one parse per file
        self._constraints: dict = {}        # (champion, schema) -> exactspec.constrain.Constraint (its mask caches)

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
            if d.get("config") is None:
                g.config()               # a file the reader refuses: say why (formats.layout) instead of "no config"
            return json.dumps(d)
        from .formats import describe
        return json.dumps(describe(path))

    def load(self, name: str, path: str, role: str = "champion", backend=None, backend_name: str | None = None) -> str:
        if role not in ("champion", "draft"):
            raise SessionError(f"role must be 'champion' or 'draft', not {role!r}")
        if self._busy:
            raise SessionError("cannot load a model while an answer is being generated: stop it first")
        from .drafters.head import HEAD_ARCH
        parsed = self._gguf(path)
        if parsed is not None and parsed.metadata.get("general.architecture") == HEAD_ARCH:
            if role != "draft":
                raise SessionError(f"{name} is a draft head: it can only be loaded as the draft")
            be, tok, template, cfg, summary = self._load_head(path, backend)
        else:
            # a CPU champion keeps its features: a draft head may read them
            be, tok, template, cfg, summary = load_model_files(path, backend, keep_features=role == "champion",
                                                               gguf=parsed)
        if role == "champion" and tok is None:
            raise SessionError(f"{name}: the model has no tokenizer (GGUF tokenizer.ggml.* or tokenizer.json): "
                               "it can only be a draft")
        if backend_name is None:
            backend_name = "cpu" if backend is None else self.backend_name
        from .kv import TrackedCache
        # one model per role (their KV caches are separate): free the role's previous model, and take this name
        # out of the other role if it held it
        prev = self.champion if role == "champion" else self.draft
        # the same champion file again (e.g. reloaded on the CPU after the GPU was lost): the last answer stays
        # continuable, since its token ids mean the same to this model
        same_champion = role == "champion" and prev == name and name in self.models and self.models[name].path == path
        if prev is not None and prev != name:
            self.models.pop(prev, None)
        if role == "champion" and self.draft == name:
            self.draft = None
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
        (a device's head). Refuses a head made for another champion, naming both sha256s."""
        from .drafters.head import HeadError, HeadModel, check_champion, read_head_gguf
        if not self.champion or self.champion not in self.models:
            raise SessionError("a draft head reads the champion's features: load the champion first")
        champ = self.models[self.champion]
        summary = inspect_model(path)
        try:
            hc, w, ids = read_head_gguf(path)
            check_champion(hc, champ.config, self.champion_sha256())
            be = backend if backend is not None else HeadModel(champ.backend, hc, w, ids)
        except (HeadError, ValueError) as e:
            raise SessionError(f"draft head: {e}") from None
        summary["bound_to"] = champ.path
        return be, None, None, be.config, summary

    def _draft_for(self, drafter: str):
        """The loaded draft's cache for `drafter` ('model' or 'head'), a head re-bound to the current champion."""
        what = "draft head" if drafter == "head" else "draft model"
        lm = self.models.get(self.draft) if self.draft else None
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
                lm.summary["bound_to"] = champ.path
        return lm.cache

    def unload(self, name: str) -> None:
        self.models.pop(name, None)
        if self.champion == name:
            self.champion = None
            self._cont = None
        if self.draft == name:
            self.draft = None

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

    def loaded(self) -> str:
        return json.dumps([{"name": m.name, "role": m.role, "config": m.config.to_json()}
                           for m in self.models.values()])

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

    async def generate(self, req: dict, emit: Callable[[str], Any] | None = None) -> dict:
        """req: {prompt | chat | prompt_ids | continue, max_new_tokens, temperature, top_k, top_p, seed, drafter, k,
        mode, speculation, grammar_draft, response_format}. emit(json) gets {text, token_ids} deltas of newly
        committed tokens. response_format (JSON mode): {type: 'json_object'} or {type: 'json_schema', schema}."""
        from .decode import generate_async
        if self._busy:
            raise SessionError("a generation is already running: stop it first")
        m = self._champion()
        cfg = self.gen_config(req)
        rf, constraint, gstate = self.json_mode(req, m)
        cfg.response_format = rf
        ids = self.prompt_ids(req)
        if len(ids) + cfg.max_new_tokens > m.config.seq_len:
            raise SessionError(f"prompt ({len(ids)} tokens) + max_new_tokens ({cfg.max_new_tokens}) exceeds the "
                               f"context length {m.config.seq_len}")
        draft = self._draft_for(cfg.drafter) if cfg.drafter in ("model", "head") else None
        dtok = self.models[self.draft].tokenizer if cfg.drafter == "model" else None
        stream = self._cont["stream"] if (req.get("continue") and self._cont) else \
            m.tokenizer.stream(skip_special=True)
        parts: list[str] = []

        def on_tokens(new_ids):
            new_ids = [int(i) for i in new_ids]
            text = "".join(stream.push(i) for i in new_ids)
            parts.append(text)
            if emit is not None:
                emit(json.dumps({"text": text, "token_ids": new_ids}))

        self._busy = True
        self._cancel = False
        try:
            res = await generate_async(m.cache, ids, cfg, draft=draft, tokenizer=m.tokenizer, draft_tokenizer=dtok,
                                       on_tokens=on_tokens, should_cancel=lambda: self._cancel,
                                       constraint=constraint, grammar_state=gstate,
                                       **({"clock": self._clock} if self._clock else {}))
        except ValueError as e:   # refused before any token (a bridge that cannot join the tokenizers, a schema too big)
            raise SessionError(("JSON mode: " if rf is not None else "") + str(e)) from None
        finally:
            self._busy = False
            self._cancel = False
        out_ids = [int(i) for i in res.token_ids]
        answer = (self._cont["answer"] if (req.get("continue") and self._cont) else []) + out_ids
        if res.finish_reason == "cancelled":
            tail = ""                             # keep partial UTF-8 in the decoder: `continue` completes it
            self._cont = {"ids": ids + out_ids, "stream": stream}
        else:
            tail = stream.flush()
            self._cont = {"ids": ids + out_ids, "stream": m.tokenizer.stream(skip_special=True)}
        self._cont.update(answer=answer, response_format=rf)
        if tail:
            parts.append(tail)
            if emit is not None:
                emit(json.dumps({"text": tail, "token_ids": []}))
        stats = {k: _jsonable(v) for k, v in dict(res.stats).items()}
        stats["backend"] = m.backend_name
        out = {"text": "".join(parts), "token_ids": out_ids, "finish_reason": res.finish_reason,
               "prompt_tokens": len(ids), "stats": stats}
        if res.finish_reason == "error":
            out["error"] = str(res.error or "the backend failed")
        return out

    async def generate_json(self, req_json: str, emit: Callable[[str], Any] | None = None) -> str:
        req = json.loads(req_json)
        if not isinstance(req, dict):
            raise SessionError("generate: the request must be an object")
        return json.dumps(await self.generate(req, emit))


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
