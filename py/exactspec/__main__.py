"""Command line: `python -m exactspec generate ...` on the numpy reference backend.

    python -m exactspec generate --model static/models/smollm2-135m-instruct-q4_1.gguf --prompt "Hi!" --chat \\
        --drafter ngram --k 4 --max-new-tokens 48 --json
"""
from __future__ import annotations

import argparse
import json
import sys


def _load(path: str, max_len: int | None, keep_features: bool = False, threads: int = 1):
    """(ReferenceModel, tokenizer or None) of a GGUF file (parsed once) or a Hugging Face folder, the tokenizer
    checked against the model's vocabulary (session.fit_tokenizer); threads: its matrix kernel's."""
    import os
    from .reference import ReferenceModel
    from .session import fit_tokenizer
    from .tokenizer import Tokenizer
    with open(path, "rb") if os.path.isfile(path) else open(os.devnull, "rb") as f:
        gguf = f.read(4) == b"GGUF"
    if gguf:
        from .formats.gguf import GGUFFile
        g = GGUFFile(path)
        model = ReferenceModel(g.config(), g.lazy_weights(), max_len=max_len, keep_features=keep_features,
                               threads=threads)
        tok = Tokenizer.from_gguf_metadata(g.metadata) if "tokenizer.ggml.tokens" in g.metadata else None
        return model, fit_tokenizer(tok, model.config, "gguf")
    model = ReferenceModel.from_file(path, max_len=max_len, keep_features=keep_features, threads=threads)
    folder = path if os.path.isdir(path) else os.path.dirname(path) or "."
    tj = os.path.join(folder, "tokenizer.json")
    tok = Tokenizer.from_tokenizer_json(tj) if os.path.isfile(tj) else None
    return model, fit_tokenizer(tok, model.config, "hf")


def prompt_ids(tokenizer, prompt: str, chat: bool, system: str | None = None) -> list[int]:
    if not chat:
        return tokenizer.encode(prompt)
    from .chat import encode_chat

    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return encode_chat(tokenizer, messages)


def response_format(a):
    """--json-schema FILE / --json-object as the API's response_format (None: plain text)."""
    if a.json_schema and a.json_object:
        raise ValueError("give --json-schema FILE or --json-object, not both")
    if a.json_object:
        return {"type": "json_object"}
    if not a.json_schema:
        return None
    try:
        with open(a.json_schema, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise ValueError(f"--json-schema {a.json_schema}: not UTF-8 text ({e})") from None
    from .constrain import parse_schema
    parse_schema(text)                  # refused here, before any model is loaded, if not supported
    return {"type": "json_schema", "schema": json.loads(text)}


def cmd_generate(a) -> int:
    from .decode import GenerateConfig, generate
    from .settings import normalise

    s = normalise({n: getattr(a, n) for n in ("max_new_tokens", "temperature", "top_k", "top_p", "seed", "mode", "k",
                                              "k_schedule", "draft_stop", "drafter", "adaptive", "bridge",
                                              "grammar_draft", "head_copy")})
    s.pop("speculation")
    cfg = GenerateConfig(**s, stop=tuple(a.stop or ()), response_format=response_format(a))
    cfg.validate()
    if a.drafter in ("model", "head") and not a.draft:
        raise ValueError(f"--drafter {a.drafter} needs --draft PATH")
    if a.max_len is not None and a.max_len < 1:
        raise ValueError(f"--max-len {a.max_len} must be at least 1")
    from .simd import THREADS_MAX, default_threads
    threads = default_threads() if a.threads is None else a.threads
    if not 1 <= threads <= THREADS_MAX:
        raise ValueError(f"--threads {threads} must be 1..{THREADS_MAX}")
    champion, tok = _load(a.model, a.max_len, keep_features=a.drafter == "head", threads=threads)
    if tok is None:
        raise ValueError(f"{a.model}: the model has no tokenizer (GGUF tokenizer.ggml.* or tokenizer.json)")
    ids = prompt_ids(tok, a.prompt, a.chat, a.system)
    room = champion.max_len - len(ids)          # KV positions left after the prompt (--max-len, else the context)
    if room < 1:
        raise ValueError(f"the prompt is {len(ids)} tokens but the model's context holds {champion.max_len} "
                         f"positions{' (--max-len)' if a.max_len else ''}: shorten the prompt"
                         + (" or raise --max-len" if a.max_len else ""))
    if cfg.max_new_tokens > room:
        print(f"note: --max-new-tokens {cfg.max_new_tokens} capped at {room}: the KV cache holds "
              f"{champion.max_len} positions and the prompt takes {len(ids)}", file=sys.stderr)
        cfg.max_new_tokens = room
    draft = dtok = None
    if a.drafter == "head":
        import os
        from .drafters.head import HeadModel
        from .formats import FormatError, sha256_file
        if not os.path.isfile(a.model):
            raise FormatError("--drafter head needs the champion as one GGUF file (a head names its sha256)")
        draft = HeadModel.from_file(a.draft, champion, sha256_file(a.model))
    if a.drafter == "model":
        draft, dtok = _load(a.draft, a.max_len, threads=threads)     # another tokenizer: a bridge (--bridge, exactspec.vocab)
    stream = None
    if not a.json:
        stream = tok.stream(skip_special=True)

        def on_tokens(toks):
            for t in toks:
                sys.stdout.write(stream.push(t))
            sys.stdout.flush()
    else:
        on_tokens = None
    res = generate(champion, ids, cfg, draft=draft, tokenizer=tok, draft_tokenizer=dtok, on_tokens=on_tokens)
    text = res.text if res.text is not None else tok.decode(res.token_ids)
    if a.receipt:
        write_receipt(a, cfg, s, res, ids, tok)
    if a.json:
        out = {"text": text, "token_ids": res.token_ids, "finish_reason": res.finish_reason,
               "prompt_tokens": len(ids), "stats": dict(res.stats, backend="cpu-reference")}
        if res.error:
            out["error"] = res.error
        print(json.dumps(out, ensure_ascii=False))
    else:
        sys.stdout.write(stream.flush() + "\n")
        if res.finish_reason == "error":
            print(f"error: {res.error or 'the backend failed'} (the answer ends at its last committed token)",
                  file=sys.stderr)
        s = res.stats
        forced = f", forced {s['forced_accepted']}/{s['forced_proposed']}" if cfg.response_format else ""
        print(f"[{res.finish_reason}] {s['new_tokens']} tokens, tau {s['tau']:.2f}, {s['tokens_per_s']:.1f} tok/s, "
              f"target passes {s['target_passes']}, draft passes {s['draft_passes']}{forced}"
              + (f", bridge {s['bridge']}" if s.get("bridge") else ""), file=sys.stderr)
    return 0 if res.finish_reason != "error" else 3


def write_receipt(a, cfg, settings: dict, res, ids, tok) -> None:
    """--receipt FILE: the answer's privacy-safe receipt (exactspec.receipts; no prompt, output, names or paths)."""
    from .receipts import artifact_of, make_receipt, tokenizer_sha256, validate
    from .session import _rss_peak
    stats = dict(res.stats, attempts=1)
    r = make_receipt(
        settings={**settings, "response_format": cfg.response_format}, stats=stats,
        finish_reason=res.finish_reason, failed=res.failed, seed=cfg.seed, prompt_tokens=len(ids),
        champion=artifact_of(a.model), draft=artifact_of(a.draft, "head" if a.drafter == "head" else "model")
        if a.drafter in ("model", "head") and a.draft else None,
        tokenizer={"sha256": tokenizer_sha256(tok), "vocab_size": tok.vocab_size},
        backend={"champion": "cpu-reference", "draft": "cpu-reference" if a.drafter in ("model", "head") else None},
        memory={"rss_peak_bytes": _rss_peak()}, versions={"engine": "cpu-reference"},
        policy={"bridge_used": res.stats.get("bridge")})
    problems = validate(r)
    if problems:                      # (a bug here, never a user's input)
        raise RuntimeError(f"the receipt does not match its schema: {problems[:3]}")
    with open(a.receipt, "w", encoding="utf-8") as f:
        json.dump(r, f, indent=1)
        f.write("\n")


def cmd_receipt_schema(a) -> int:
    from .receipts import schema_json
    text = schema_json()
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


def main(argv=None) -> int:
    from .settings import BRIDGES, DEFAULTS as D, DRAFTERS, K_SCHEDULES, MODES, SettingsError
    ap = argparse.ArgumentParser(prog="python -m exactspec")
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="generate text on the numpy reference backend")
    g.add_argument("--model", required=True, help="champion: a GGUF file or an HF folder (config.json + safetensors)")
    g.add_argument("--draft", help="draft model path (--drafter model) or draft head path (--drafter head)")
    g.add_argument("--drafter", choices=DRAFTERS, default=D["drafter"])
    g.add_argument("--prompt", required=True)
    g.add_argument("--chat", action="store_true", help="apply the model's chat template to the prompt")
    g.add_argument("--system", help="system message (with --chat)")
    g.add_argument("--max-new-tokens", type=int, default=D["max_new_tokens"])
    g.add_argument("--temperature", type=float, default=D["temperature"])
    g.add_argument("--top-k", type=int, default=D["top_k"])
    g.add_argument("--top-p", type=float, default=D["top_p"])
    g.add_argument("--seed", type=int, default=D["seed"])
    g.add_argument("--mode", choices=MODES, default=D["mode"])
    g.add_argument("--k", type=int, default=D["k"])
    g.add_argument("--k-schedule", choices=K_SCHEDULES, default=D["k_schedule"],
                   help="fixed k, or additive: +1 after a fully accepted round, -1 after a first rejection")
    g.add_argument("--draft-stop", type=float, default=D["draft_stop"],
                   help="confidence stop: the draft halts when its top probability falls below this (0 = off)")
    g.add_argument("--head-copy", action=argparse.BooleanOptionalAction, default=D["head_copy"],
                   help="drafter head: where the n-gram finds a copy in the text, its proposals come first")
    g.add_argument("--bridge", choices=BRIDGES, default=D["bridge"],
                   help="a draft with another tokenizer: auto (from the two tokenizers and the mode), remap, tli, slem")
    g.add_argument("--stop", action="append", help="stop string (repeatable)")
    g.add_argument("--adaptive", action=argparse.BooleanOptionalAction, default=D["adaptive"],
                   help="turn speculation off while it does not pay (default on)")
    g.add_argument("--json-schema", metavar="FILE", help="JSON mode: the answer is JSON valid against this schema")
    g.add_argument("--json-object", action="store_true", help="JSON mode: the answer is a JSON object")
    g.add_argument("--grammar-draft", action=argparse.BooleanOptionalAction, default=D["grammar_draft"],
                   help="JSON mode: the grammar proposes the tokens it forces (default on)")
    g.add_argument("--max-len", type=int, default=None, help="KV cache length to allocate (default: model context)")
    g.add_argument("--threads", type=int, default=None,
                   help="threads for the CPU's matrix products (default: the machine's cores, at most 4; the same "
                        "answer with any number)")
    g.add_argument("--json", action="store_true", help='print {"text", "token_ids", "stats"} as JSON')
    g.add_argument("--receipt", metavar="FILE", help="write the answer's privacy-safe receipt (JSON) to FILE")
    rs = sub.add_parser("receipt-schema", help="print the receipt's JSON schema (py/exactspec/receipt.schema.json)")
    rs.add_argument("--out", help="write it to this file instead")
    a = ap.parse_args(argv)
    if a.cmd == "receipt-schema":
        return cmd_receipt_schema(a)
    try:
        return cmd_generate(a)
    except (SettingsError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
