"""Speculation changes nothing, on real llama forwards: micro-models (fast) and SmolLM2 (the champion)."""
from pathlib import Path

import numpy as np
import pytest

from exactspec.decode import GenerateConfig, generate
from exactspec.micro import micro_model, tiny_config

ROOT = Path(__file__).resolve().parents[1]
CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"


def gen(model, prompt, draft=None, **kw):
    return generate(model, prompt, GenerateConfig(**{"adaptive": False, **kw}), draft=draft)


@pytest.fixture(scope="module")
def micro():
    cfg = tiny_config()
    return cfg, micro_model(cfg, 1), micro_model(cfg, 1), micro_model(cfg, 2)


@pytest.mark.parametrize("temperature,top_p", [(0.0, 1.0), (0.6, 1.0), (1.0, 0.9), (1.5, 0.7)])
def test_micro_coupled_speculative_equals_plain(micro, temperature, top_p):
    cfg, champ, self_draft, other_draft = micro
    rng = np.random.default_rng(3)
    for seed in range(3):
        prompt = rng.integers(0, cfg.vocab_size, size=int(rng.integers(1, 9))).tolist()
        base = gen(champ, prompt, max_new_tokens=20, temperature=temperature, top_p=top_p, seed=seed)
        for drafter, draft in (("model", self_draft), ("model", other_draft), ("ngram", None)):
            for k in (1, 4, 8):
                res = gen(champ, prompt, draft=draft, max_new_tokens=20, temperature=temperature, top_p=top_p,
                          seed=seed, k=k, drafter=drafter)
                assert res.token_ids == base.token_ids, (drafter, k, seed)
                if draft is self_draft:
                    assert all(a == 1.0 for a in res.stats["acceptance_by_position"] if a), res.stats


def test_micro_kv_lengths_track_committed_prefix(micro):
    cfg, champ, _, other = micro
    lengths = []
    prompt = [5, 6, 7]
    committed = [len(prompt)]

    def on_tokens(toks):
        committed[0] += len(toks)
        lengths.append((committed[0], champ.length, other.length))

    generate(champ, prompt, GenerateConfig(max_new_tokens=25, k=4, drafter="model"), draft=other, on_tokens=on_tokens)
    assert lengths and all(c_len == c - 1 and d_len <= c - 1 for c, c_len, d_len in lengths)


# ---------------------------------------------------------------------------------------------------- SmolLM2
smollm = pytest.mark.skipif(not CHAMPION.exists(), reason="run `python build.py setup` to fetch the champion")


@pytest.fixture(scope="module")
def champion():
    from exactspec.reference import ReferenceModel
    from exactspec.tokenizer import Tokenizer
    from exactspec.chat import encode_chat
    model = ReferenceModel.from_file(CHAMPION, max_len=256)
    tok = Tokenizer.from_gguf(CHAMPION)
    prompts = [encode_chat(tok, [{"role": "user", "content": c}]) for c in (
        "Repeat after me: the cat sat on the mat, the cat sat on the mat.",
        "Write a haiku about autumn.",
    )]
    return model, tok, prompts


N_SMOL = 12


@smollm
@pytest.mark.slow
def test_smollm2_greedy_speculation_equals_champion(champion):
    from exactspec.reference import ReferenceModel
    from exactspec.micro import micro_config
    model, tok, prompts = champion
    self_draft = ReferenceModel.from_file(CHAMPION, max_len=256)
    rand_draft = micro_model(micro_config(vocab_size=model.config.vocab_size, dim=32, n_heads=2, n_kv_heads=1,
                                          hidden_dim=64, n_layers=1, seq_len=256), 9)
    for prompt in prompts:
        base = gen(model, prompt, max_new_tokens=N_SMOL)
        assert len(base.token_ids) > 0
        r = gen(model, prompt, draft=rand_draft, max_new_tokens=N_SMOL, k=3, drafter="model")
        assert r.token_ids == base.token_ids
        assert r.stats["tau"] < 1.5  # a random draft is (almost) never accepted, yet the answer is the same
        r = gen(model, prompt, draft=self_draft, max_new_tokens=N_SMOL, k=3, drafter="model")
        assert r.token_ids == base.token_ids
        assert r.stats["acceptance_by_position"] == [1.0] * 3 and r.stats["tau"] == pytest.approx(4.0)
        r = gen(model, prompt, max_new_tokens=N_SMOL, k=4, drafter="ngram")
        assert r.token_ids == base.token_ids


@smollm
@pytest.mark.slow
def test_smollm2_coupled_sampled_speculation_equals_champion(champion):
    model, tok, prompts = champion
    for seed, (t, p) in enumerate([(0.7, 0.9), (1.0, 1.0)]):
        base = gen(model, prompts[0], max_new_tokens=N_SMOL, temperature=t, top_p=p, seed=seed)
        r = gen(model, prompts[0], max_new_tokens=N_SMOL, temperature=t, top_p=p, seed=seed, k=4, drafter="ngram")
        assert r.token_ids == base.token_ids
