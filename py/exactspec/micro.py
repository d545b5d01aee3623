"""Deterministic random-initialised llama micro-models for tests (and for chatting with the page without the champion).

micro_config(**overrides)       a small ModelConfig (vocab 300, dim 64, 2 layers, 4 heads / 2 kv heads, ...)
tiny_config(**overrides)        the tokenizer-less variant (vocab 100) for exhaustive token-level tests
micro_weights(config, seed)     GGUF-named float32 weights in HF order, scaled so logits are far from flat
micro_model(config, seed)       a ReferenceModel over those weights
write_micro_gguf(path, config, seed, tensor_type)   a GGUF file (F32/F16/Q8_0/Q4_0/Q4_1 matrices) with, when the
                                vocab allows it, a real byte-level BPE tokenizer (gpt2 model, smollm pre-tokenizer,
                                the 256 byte tokens, deterministic merges, ChatML specials and template)
Everything is a pure function of (config, seed): no global RNG.
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from .backend import ModelConfig
from .tokenizer import bytes_to_unicode

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")   # ids 0, 1, 2 as in SmolLM2
BOS_ID, EOS_ID = 1, 2
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
# The first merges of SmolLM2's BPE (a valid merge order: each side exists before it is used).
BASE_MERGES = (
    "Ġ t", "Ġ a", "i n", "h e", "Ġ Ġ", "r e", "o n", "e r", "Ġt he", "a t", "Ġ s", "Ġ o", "e n", "Ġ c", "e s",
    "Ġ w", "n d", "i t", "o r", "i s", "a l", "Ġ p", "in g", "Ġ f", "a n", "e d", "Ġ b", "o u", "a r", "Ġ in",
    "Ġo f", "Ġ m", "Ġa nd", "i on", "i c", "Ġ d", "Ġt o", "ĠĠ ĠĠ", "l e", "r o", "a s", "en t", "Ġ h", "Ġt h",
    "c t", "Ġ e", "Ġ re", "e l", "o m", "i l", "s t", "Ġ l", "Ġ n", "e t", "i m", "v e", "o l", "at ion", "Ġ g",
    "i d", "Ġ T", "s e", "Ġ is", "u r", "u t", "r a", "l y", "c e", "o t", "c h", "o w", "i g", "Ġb e", "Ġ u",
    "Ġf or", "Ġs t", "Ġ y", "Ġ A", "v er")
MIN_TOKENIZER_VOCAB = len(SPECIAL_TOKENS) + 256


def micro_config(**overrides) -> ModelConfig:
    base = dict(dim=64, hidden_dim=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, vocab_size=300,
                seq_len=256, rope_theta=10000.0, rope_dim=16, norm_eps=1e-5, tied_embeddings=True, arch="llama")
    base.update(overrides)
    if "head_dim" not in overrides and ("dim" in overrides or "n_heads" in overrides):
        base["head_dim"] = base["dim"] // base["n_heads"]
    if "rope_dim" not in overrides:
        base["rope_dim"] = base["head_dim"]
    return ModelConfig(**base)


def tiny_config(**overrides) -> ModelConfig:
    """Tokenizer-less micro-model (vocab 100) for exhaustive token-level tests."""
    return micro_config(**{"vocab_size": 100, **overrides})


def micro_weights(config: ModelConfig, seed: int) -> dict[str, np.ndarray]:
    """GGUF-named float32 weights in HF order (Q/K not permuted), deterministic in (config, seed)."""
    c = config
    rng = np.random.default_rng(np.random.SeedSequence([0x6D696372, int(seed)]))   # "micr", seed

    def lin(out_f: int, in_f: int, gain: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((out_f, in_f)) * (gain / np.sqrt(in_f))).astype(np.float32)  # (out, in)

    def norm(d: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(d)).astype(np.float32)                             # (d,)

    qd, kd = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    # embedding rows of norm ~ 3 -> tied logits std ~ 3: peaked but not one-hot distributions
    w = {"token_embd.weight": (rng.standard_normal((c.vocab_size, c.dim)) * (3.0 / np.sqrt(c.dim))).astype(np.float32)}
    for i in range(c.n_layers):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = norm(c.dim)
        w[p + "attn_q.weight"] = lin(qd, c.dim, 2.0)
        w[p + "attn_k.weight"] = lin(kd, c.dim, 2.0)
        w[p + "attn_v.weight"] = lin(kd, c.dim)
        w[p + "attn_output.weight"] = lin(c.dim, qd)
        w[p + "ffn_norm.weight"] = norm(c.dim)
        w[p + "ffn_gate.weight"] = lin(c.hidden_dim, c.dim)
        w[p + "ffn_up.weight"] = lin(c.hidden_dim, c.dim)
        w[p + "ffn_down.weight"] = lin(c.dim, c.hidden_dim)
    w["output_norm.weight"] = norm(c.dim)
    if not c.tied_embeddings:
        w["output.weight"] = lin(c.vocab_size, c.dim, 3.0)
    return w


def micro_model(config: ModelConfig, seed: int, max_len: int | None = None):
    from .reference import ReferenceModel
    return ReferenceModel.from_weights(config, micro_weights(config, seed), max_len=max_len)


def micro_tokenizer(vocab_size: int) -> dict:
    """GGUF tokenizer.* metadata of exactly `vocab_size` tokens: specials, 256 bytes, then merges."""
    if vocab_size < MIN_TOKENIZER_VOCAB:
        raise ValueError(f"a byte-level tokenizer needs vocab_size >= {MIN_TOKENIZER_VOCAB}, got {vocab_size}")
    tokens = list(SPECIAL_TOKENS) + list(bytes_to_unicode().values())
    have = set(tokens)
    merges: list[str] = []
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    extra = (f"{a} {b}" for a in letters for b in letters)
    candidates = list(BASE_MERGES)
    while len(tokens) < vocab_size:
        if candidates:
            m = candidates.pop(0)
        else:
            m = next(extra, None)
            if m is None:
                raise ValueError(f"vocab_size {vocab_size} is too large for the micro tokenizer")
        a, b = m.split(" ")
        if a not in have or b not in have or a + b in have:
            if m in BASE_MERGES:
                raise AssertionError(f"invalid base merge {m!r}")
            continue
        merges.append(m)
        tokens.append(a + b)
        have.add(a + b)
    types = [3] * len(SPECIAL_TOKENS) + [1] * (len(tokens) - len(SPECIAL_TOKENS))
    from .formats import GGUFValue
    from .formats.gguf import T_INT32, T_UINT32
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": GGUFValue(T_INT32, types, array=True),
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": GGUFValue(T_UINT32, BOS_ID),
        "tokenizer.ggml.eos_token_id": GGUFValue(T_UINT32, EOS_ID),
        "tokenizer.ggml.unknown_token_id": GGUFValue(T_UINT32, 0),
        "tokenizer.ggml.padding_token_id": GGUFValue(T_UINT32, EOS_ID),
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.ggml.add_space_prefix": False,
        "tokenizer.chat_template": CHATML_TEMPLATE,
    }


SPM_SPECIALS = ("<unk>", "<s>", "</s>")      # ids 0, 1, 2 as in Llama-2
SPM_CHARS = "\u2581" + "".join(chr(c) for c in range(0x21, 0x7F)) + "\n"
MIN_SPM_VOCAB = len(SPM_SPECIALS) + 256 + len(SPM_CHARS)


def micro_spm_tokenizer(vocab_size: int) -> dict:
    """GGUF tokenizer.* metadata of a SentencePiece-style micro vocabulary (model 'llama', as Llama-2's): <unk> <s>
    </s>, the 256 byte-fallback tokens <0xXX>, '▁' and printable ASCII, then merges (SmolLM2's first merges in
    '▁' spelling, then letter pairs) up to exactly `vocab_size` tokens. Another vocabulary than
    micro_tokenizer's over the same text: the micro pair for bridge tests (exactspec.vocab)."""
    if vocab_size < MIN_SPM_VOCAB:
        raise ValueError(f"a SentencePiece-style micro tokenizer needs vocab_size >= {MIN_SPM_VOCAB}, got {vocab_size}")
    tokens = list(SPM_SPECIALS) + [f"<0x{b:02X}>" for b in range(256)] + list(SPM_CHARS)
    types = [2, 3, 3] + [6] * 256 + [1] * len(SPM_CHARS)
    have = set(tokens)
    merges: list[str] = []
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    candidates = [m.replace("\u0120", "\u2581") for m in BASE_MERGES] + [f"{a} {b}" for a in letters for b in letters]
    for m in candidates:
        if len(tokens) >= vocab_size:
            break
        a, b = m.split(" ")
        if a in have and b in have and a + b not in have:
            merges.append(m)
            tokens.append(a + b)
            types.append(1)
            have.add(a + b)
    if len(tokens) < vocab_size:
        raise ValueError(f"vocab_size {vocab_size} is too large for the SentencePiece-style micro tokenizer")
    from .formats import GGUFValue
    from .formats.gguf import T_FLOAT32, T_INT32, T_UINT32
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": GGUFValue(T_FLOAT32, [0.0] * (len(tokens) - len(merges)) +
                                           [-1.0 - r for r in range(len(merges))], array=True),
        "tokenizer.ggml.token_type": GGUFValue(T_INT32, types, array=True),
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": GGUFValue(T_UINT32, 1),
        "tokenizer.ggml.eos_token_id": GGUFValue(T_UINT32, 2),
        "tokenizer.ggml.unknown_token_id": GGUFValue(T_UINT32, 0),
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_space_prefix": True,
    }


def write_micro_gguf(path: str | os.PathLike, config: ModelConfig | None = None, seed: int = 0,
                     tensor_type: str = "F32", with_tokenizer: bool | str | None = None,
                     types: dict[str, str] | None = None) -> ModelConfig:
    """Write the micro-model (config, seed) as GGUF; returns the config. Matrices in `tensor_type`, or per tensor name
    in `types` (F32, F16, Q8_0, Q4_0, Q4_1; quantised types need dims that are multiples of 32), norms F32.
    with_tokenizer: None -> include the byte-level one when vocab_size >= 259; 'spm' -> the SentencePiece-style
    one (micro_spm_tokenizer); a dict -> those tokenizer.* keys as given."""
    from .formats import gguf_metadata_for_config, write_gguf
    config = config or micro_config()
    if with_tokenizer is None:
        with_tokenizer = config.vocab_size >= MIN_TOKENIZER_VOCAB
    md = gguf_metadata_for_config(config, name=f"exactspec-micro-seed{seed}")
    if isinstance(with_tokenizer, dict):
        md.update(with_tokenizer)
    elif with_tokenizer == "spm":
        md.update(micro_spm_tokenizer(config.vocab_size))
    elif with_tokenizer:
        md.update(micro_tokenizer(config.vocab_size))
    write_gguf(path, md, micro_weights(config, seed), tensor_type=tensor_type, types=types)
    return config


def with_overrides(config: ModelConfig, **kw) -> ModelConfig:
    return dataclasses.replace(config, **kw)
