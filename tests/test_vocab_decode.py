"""The decode loop with a draft on another vocabulary (exactspec.vocab): greedy and coupled answers identical to the
champion alone through every bridge that applies; rejection mode exact in distribution with tli (the verifier gets the
q the proposal was drawn from, in champion ids) and slem (point masses); the draft sees exactly the committed text."""
import numpy as np
import pytest

from bench.montecarlo import exact_joint_law, joint_law_counts, pooled_chisquare_p
from exactspec.decode import GenerateConfig, generate
from exactspec.drafters import make_drafter
from exactspec.drafters.model import ModelDrafter
from exactspec.micro import micro_config, micro_model, micro_spm_tokenizer, micro_tokenizer
from exactspec.sampling import SamplingParams, probs_from_scaled, scaled_logits
from exactspec.tokenizer import Tokenizer
from exactspec.vocab import BridgeError, BridgedDrafter, DraftView, Intersection
from vocab_toys import OracleDraft, real_tokenizer

PROMPT = ("<|im_start|>user\nIt's 12:45 \u2014 write `def f(x): return x**2` and say \u3053\u3093\u306b\u3061\u306f "
          "\U0001F642 twice.<|im_end|>\n<|im_start|>assistant\n")
# (draft tokenizer, bridges that apply): a permuted SmolLM2 is the remap pair
CASES = [("llama2", ("tli", "slem")), ("llama3", ("tli", "slem")), ("qwen3", ("tli", "slem")),
         ("smollm2-permuted", ("remap", "tli", "slem"))]
SETTINGS = [dict(temperature=0.0), dict(temperature=0.9, top_k=40, seed=5), dict(temperature=1.2, top_p=0.9, seed=8)]


@pytest.fixture(scope="module")
def smol():
    return real_tokenizer("smollm2")


@pytest.fixture(scope="module")
def champion():
    """A micro-model on SmolLM2's 49,152-token vocabulary: its answers are arbitrary token soup (partial UTF-8,
    special tokens, odd merges), a harsh test of every boundary."""
    return micro_model(micro_config(vocab_size=49152, seq_len=512), seed=1)


def run(champion, prompt, tok, draft=None, dtok=None, **kw):
    cfg = GenerateConfig(**{"adaptive": False, "max_new_tokens": 32, **kw})
    return generate(champion, prompt, cfg, draft=draft, tokenizer=tok, draft_tokenizer=dtok)


@pytest.mark.parametrize("dname,bridges", CASES)
def test_greedy_and_coupled_identical_through_every_bridge(smol, champion, dname, bridges):
    dtok = real_tokenizer(dname)
    prompt = smol.encode(PROMPT)
    random_draft = micro_model(micro_config(vocab_size=dtok.vocab_size, seq_len=1024, n_layers=1), seed=2)
    for s in (SETTINGS if dname == "llama2" else SETTINGS[:2]):
        base = run(champion, prompt, smol, drafter="none", k=0, **s)
        view = DraftView(smol, dtok).ids(prompt + base.token_ids)
        for bridge in bridges:
            for k in ((2, 4) if s is SETTINGS[0] else (4,)):
                oracle = OracleDraft(dtok, view, wrong=0.15, seed=k)
                res = run(champion, prompt, smol, oracle, dtok, drafter="model", k=k, bridge=bridge, **s)
                assert res.token_ids == base.token_ids, (dname, bridge, k, s)
                assert res.stats["bridge"] == bridge
                # the bridge really proposes: a draft that writes the answer (15% of positions wrong) is accepted
                assert res.stats["tau"] > 1.2, (dname, bridge, k, s, res.stats)
            if s is SETTINGS[0] or dname == "llama2":
                res = run(champion, prompt, smol, random_draft, dtok, drafter="model", k=3, bridge=bridge, **s)
                assert res.token_ids == base.token_ids, (dname, bridge, "random draft", s)
                random_draft.truncate(0)


def test_auto_bridge_and_errors(smol, champion):
    llama2 = real_tokenizer("llama2")
    d = micro_model(micro_config(vocab_size=llama2.vocab_size, seq_len=256, n_layers=1), seed=3)
    pick = lambda **kw: make_drafter("model", d, smol.vocab_size, tokenizer=smol, draft_tokenizer=llama2, **kw)
    assert pick().bridge == "slem" and pick(mode="greedy").bridge == "slem"
    assert pick(mode="rejection").bridge == "tli"
    assert pick(bridge="tli").bridge == "tli"
    with pytest.raises(BridgeError, match="remap needs the same token strings"):
        pick(bridge="remap")
    perm = real_tokenizer("smollm2-permuted")
    assert make_drafter("model", champion, smol.vocab_size, tokenizer=smol, draft_tokenizer=perm).bridge == "remap"
    same = make_drafter("model", champion, smol.vocab_size, tokenizer=smol, draft_tokenizer=smol)
    assert isinstance(same, ModelDrafter)                      # one vocabulary: no bridge, the batched GPU path
    with pytest.raises(ValueError, match="needs both tokenizers"):
        make_drafter("model", d, smol.vocab_size, bridge="slem")
    with pytest.raises(ValueError, match="must share the champion's tokenizer"):
        make_drafter("model", d, smol.vocab_size)             # no draft tokenizer, other vocab size: refused


def test_the_draft_sees_exactly_the_committed_text(smol, champion, monkeypatch):
    """Before every proposal the draft's cache (kept tokens + what it is fed) spells the committed text: after
    rejections, after proposals it tokenised otherwise, at partial characters."""
    seen = []
    orig = BridgedDrafter.catch_up

    def checked(self, seq):
        out = orig(self, seq)
        if out is not None and hasattr(self, "view"):
            feed, keep = out
            ids = self.draft.tokens[:keep] + feed
            tok = self.view.t
            got = b"".join(tok.token_bytes(i) for i in ids[1 if tok.add_bos else 0:])
            want = b"".join(smol.token_bytes(i) for i in seq)
            assert got[1:] == want if tok.kind == "spm" else got == want
            seen.append(len(seq))
        return out

    monkeypatch.setattr(BridgedDrafter, "catch_up", checked)
    prompt = smol.encode(PROMPT)
    for dname, s in (("llama2", SETTINGS[0]), ("qwen3", SETTINGS[1])):
        dtok = real_tokenizer(dname)
        base = run(champion, prompt, smol, drafter="none", k=0, **s)
        view = DraftView(smol, dtok).ids(prompt + base.token_ids)
        for bridge in ("tli", "slem"):
            res = run(champion, prompt, smol, OracleDraft(dtok, view, wrong=0.3), dtok, drafter="model", k=4,
                      bridge=bridge, **s)
            assert res.token_ids == base.token_ids
    assert len(seen) > 20


def test_the_drafts_context_limit_stops_speculation_not_the_answer(smol, champion):
    llama2 = real_tokenizer("llama2")
    prompt = smol.encode(PROMPT)
    base = run(champion, prompt, smol, drafter="none", k=0)
    view = DraftView(smol, llama2).ids(prompt + base.token_ids)
    short = OracleDraft(llama2, view, seq_len=len(DraftView(smol, llama2).ids(prompt)) + 40)
    res = run(champion, prompt, smol, short, llama2, drafter="model", k=4, bridge="slem")
    assert res.token_ids == base.token_ids
    assert res.stats["bridge_view_full_rounds"] > 0 and res.stats["accepted"] > 0


def test_the_same_draft_across_chat_turns(smol, champion):
    """Turn 2 reuses the draft's cache of turn 1 (its view of the shared prefix) and stays exact."""
    from exactspec.kv import TrackedCache
    llama2 = real_tokenizer("llama2")
    d = TrackedCache(micro_model(micro_config(vocab_size=llama2.vocab_size, seq_len=1024, n_layers=1), seed=4))
    c = TrackedCache(champion)
    p1 = smol.encode(PROMPT)
    r1 = run(c, p1, smol, d, llama2, drafter="model", k=3)
    p2 = p1 + r1.token_ids + smol.encode("<|im_end|>\n<|im_start|>user\nAgain, shorter.<|im_end|>\n"
                                         "<|im_start|>assistant\n")
    reusable = d.common_prefix(DraftView(smol, llama2).ids(p2))
    assert reusable >= len(DraftView(smol, llama2).ids(p1)) - 3      # the whole first turn's view but its tail
    r2 = run(c, p2, smol, d, llama2, drafter="model", k=3)
    assert r2.token_ids == run(champion, p2, smol, drafter="none", k=0).token_ids


# ---------------------------------------------------------------------------------------------------- rejection mode
def _tiny_tok(tokens):
    return Tokenizer(tokens=tokens, merges=[], kind="bytelevel", pre="gpt2")


@pytest.mark.parametrize("k,T", [(1, 0.8), (2, 1.0), (3, 0.6)])
def test_tli_rejection_joint_law_matches_exact_enumeration(k, T):
    """Micro vocabularies: champion {a b c d}, draft {b a x c e a'} (a' spells 'a' too, x and e are draft-only,
    d champion-only). Prefix-dependent p (champion ids) and draft logits (draft ids); the draft's row of each prefix
    goes through Intersection.champion_row and the decode loop's pick (softmax of the scaled row), proposals are
    drawn from that q and the verifier gets it. Rounds run until k+1 tokens are out: the joint law of those tokens
    must be the champion's autoregressive law, enumerated exactly (250k runs, as tests/test_verify.py)."""
    champ = _tiny_tok(["a", "b", "c", "d"])
    draft = _tiny_tok(["b", "a", "x", "c", "e", "a"])
    inter = Intersection(champ, draft, 4, 6)
    assert sorted(zip(inter.c_ids.tolist(), inter.d_ids.tolist())) == [(0, 1), (0, 5), (1, 0), (2, 3)]
    V, Vd = 4, 6
    g = np.random.default_rng(77 + k)
    n_nodes = (V ** (2 * k + 3) - 1) // (V - 1)
    P = g.dirichlet(np.full(V, 0.8), size=n_nodes)               # (nodes, V) champion p(. | prefix)
    P[g.random((n_nodes, V)) < 0.1] = 0.0
    P[P.sum(1) == 0, 2] = 1.0
    P /= P.sum(1, keepdims=True)
    Zd = g.standard_normal((n_nodes, Vd)) * 2.0                  # (nodes, Vd) draft logits given the prefix
    params = SamplingParams(T)
    Q = np.stack([probs_from_scaled(scaled_logits(inter.champion_row(z, V), params)) for z in Zd])  # (nodes, V)
    assert (Q[:, 3] == 0).all() and (Q[:, :3] > 0).all()        # d is outside the intersection: never proposed
    B = 250_000
    counts = joint_law_counts(P, Q, k, B, g)
    exact = exact_joint_law(P, k + 1)
    assert abs(exact.sum() - 1) < 1e-9
    assert counts[exact == 0].sum() == 0, "a sequence with target probability 0 was emitted"
    assert pooled_chisquare_p(counts[exact > 0], exact[exact > 0] * B) > 1e-3


@pytest.fixture(scope="module")
def micro_pair(tmp_path_factory):
    """A micro champion on a byte-level micro vocabulary (300) and a micro draft on a SentencePiece-style one (420)."""
    from exactspec.formats.gguf import GGUFValue
    plain = lambda md: {k: (v.value if isinstance(v, GGUFValue) else v) for k, v in md.items()}
    ctok = Tokenizer.from_gguf_metadata(plain(micro_tokenizer(300)))
    dtok = Tokenizer.from_gguf_metadata(plain(micro_spm_tokenizer(420)))
    champion = micro_model(micro_config(vocab_size=300, seq_len=128), seed=11)
    draft = micro_model(micro_config(vocab_size=420, seq_len=256, n_layers=1), seed=12)
    return ctok, dtok, champion, draft


@pytest.mark.parametrize("bridge,which", [("tli", "micro"), ("slem", "oracle")])
def test_rejection_mode_end_to_end_is_the_champions_law(micro_pair, bridge, which):
    """The decode loop in rejection mode with a draft on another vocabulary, many seeds: the first two emitted
    tokens follow the champion's own sampling law (enumerated from its rows), through tli (the draft's restricted q;
    a random micro draft, and an oracle that writes the champion's greedy answer) and slem (point masses)."""
    ctok, dtok, champion, draft = micro_pair
    prompt = ctok.encode("<|im_start|>user\nthe cat<|im_end|>\n<|im_start|>assistant\n")
    T = 0.6
    if which == "oracle":
        greedy = generate(champion, prompt, GenerateConfig(max_new_tokens=8, drafter="none", k=0), tokenizer=ctok,
                          eos_ids=[])
        draft = OracleDraft(dtok, DraftView(ctok, dtok).ids(prompt + greedy.token_ids), wrong=0.0)
    params = SamplingParams(T)
    champion.truncate(0)
    p1 = probs_from_scaled(scaled_logits(champion.forward(prompt, 0)[-1], params))       # (V,)
    top = np.argsort(-p1)[:12]
    exact = {}
    for a in top:
        champion.truncate(len(prompt))
        p2 = probs_from_scaled(scaled_logits(champion.forward([int(a)], len(prompt))[0], params))
        for b in np.nonzero(p2 > 0)[0]:
            exact[(int(a), int(b))] = p1[a] * p2[b]
    champion.truncate(0)
    N = 1200
    counts = {}
    accepted = 0
    for seed in range(N):
        res = generate(champion, prompt, GenerateConfig(max_new_tokens=3, temperature=T, mode="rejection", k=2,
                                                        drafter="model", bridge=bridge, seed=seed, adaptive=False),
                       draft=draft, tokenizer=ctok, draft_tokenizer=dtok, eos_ids=[])
        key = tuple(res.token_ids[:2])
        counts[key] = counts.get(key, 0) + 1
        accepted += res.stats["accepted"]
        assert res.stats["bridge"] == bridge
    assert accepted > (N // 2 if which == "oracle" else 0)
    keys = sorted(exact, key=lambda x: -exact[x])
    e = np.array([exact[x] * N for x in keys] + [N - sum(exact.values()) * N])    # the last cell: everything else
    o = np.array([counts.get(x, 0) for x in keys] + [N - sum(counts.get(x, 0) for x in keys)], dtype=float)
    assert pooled_chisquare_p(o, e) > 1e-3, (o, e)


def test_session_bridges_a_foreign_draft_and_describes_the_pair(tmp_path):
    """The worker's Python side: bridge_info for the page's settings panel, the 'bridge' request field, a clear
    SessionError when the requested bridge cannot join the pair."""
    import asyncio
    import json
    from exactspec.micro import write_micro_gguf
    from exactspec.session import Session, SessionError
    champ, spm, same = tmp_path / "c.gguf", tmp_path / "d.gguf", tmp_path / "s.gguf"
    write_micro_gguf(champ, micro_config(), seed=1)
    write_micro_gguf(spm, micro_config(vocab_size=420, n_layers=1, seq_len=128), seed=2, with_tokenizer="spm")
    write_micro_gguf(same, micro_config(n_layers=1), seed=3)
    s = Session("cpu")
    assert json.loads(s.bridge_info()) is None
    s.load("c", str(champ), "champion")
    s.load("d", str(spm), "draft")
    info = json.loads(s.bridge_info())
    assert info["draft"] == "d" and not info["same"] and info["auto"] == {"coupled": "slem", "rejection": "tli"}
    assert any("SentencePiece" in x for x in info["differences"])
    assert any(x.startswith("context length: champion 256, draft 128") for x in info["differences"])
    req = {"prompt": "the cat", "chat": True, "max_new_tokens": 10, "temperature": 0.8, "seed": 2}
    base = asyncio.run(s.generate({**req, "drafter": "none"}))
    for bridge in ("auto", "tli", "slem"):
        out = asyncio.run(s.generate({**req, "drafter": "model", "k": 3, "bridge": bridge}))
        assert out["token_ids"] == base["token_ids"] and out["stats"]["bridge"] in ("tli", "slem")
    with pytest.raises(SessionError, match="remap needs the same token strings"):
        asyncio.run(s.generate({**req, "drafter": "model", "bridge": "remap"}))
    with pytest.raises(SessionError, match="bridge: must be one of"):
        asyncio.run(s.generate({**req, "drafter": "model", "bridge": "x"}))
    s.load("s", str(same), "draft")
    assert json.loads(s.bridge_info())["same"] is True
    out = asyncio.run(s.generate({**req, "drafter": "model", "k": 3}))
    assert out["token_ids"] == base["token_ids"] and "bridge" not in out["stats"]
