"""The shipped draft: its file, its manifest, exactness beside the champion, and the contamination boundary."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from exactspec.chat import encode_chat
from exactspec.decode import GenerateConfig, generate
from exactspec.formats.gguf import GGUFFile
from exactspec.reference import ReferenceModel
from exactspec.tokenizer import Tokenizer
from exactspec_train import data as D
from exactspec_train.accept import simulate_rounds

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "static" / "models"
CHAMPION = MODELS / "smollm2-135m-instruct-q4_1.gguf"
CHAMPION_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"   # DESIGN.md
MANIFEST = MODELS / "draft-smollm2.manifest.json"
WORKLOAD = ROOT / "tests" / "data" / "workload.jsonl"
SAMPLE_IDS = ("chat-04", "json-01", "rep-01")      # a small sample of the workload (bench: all of it)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


@pytest.fixture(scope="module")
def manifest() -> dict:
    return json.loads(MANIFEST.read_text())


@pytest.fixture(scope="module")
def draft_path(manifest) -> Path:
    return MODELS / manifest["draft"]["file"]


@pytest.fixture(scope="module")
def champion_path() -> Path:
    if not CHAMPION.exists():
        pytest.skip("champion not set up (python build.py setup)")
    return CHAMPION


def test_workload_is_preregistered_shape():
    items = D.load_workload(WORKLOAD)
    strata = {}
    for it in items:
        strata.setdefault(it["stratum"], []).append(it)
        assert it["max_new_tokens"] > 0 and D.workload_messages(it)[-1]["role"] == "user"
    assert set(strata) == {"casual_chat", "ambiguity", "source_conflict", "untrusted_memory", "summaries",
                           "rewrites", "json_extraction", "repetitive", "multilingual", "long_context",
                           "adversarial"}
    assert min(len(v) for v in strata.values()) >= 12
    assert len({it["id"] for it in items}) == len(items)


def test_manifest_matches_draft_champion_and_workload(manifest, draft_path):
    assert draft_path.exists() and draft_path.name.startswith("draft-smollm2")
    assert draft_path.stat().st_size <= 16_000_000
    assert manifest["draft"]["sha256"] == sha256(draft_path)
    assert manifest["draft"]["bytes"] == draft_path.stat().st_size
    assert manifest["champion"]["sha256"] == CHAMPION_SHA256
    if CHAMPION.exists():
        assert sha256(CHAMPION) == manifest["champion"]["sha256"]
    assert manifest["workload"]["sha256"] == sha256(WORKLOAD)
    for src in manifest["training_sources"]:
        for key in ("package", "version", "license", "sha256"):
            assert src.get(key), f"training source lacks {key}: {src}"
    assert manifest["train"]["seed"] is not None and manifest["train"]["kd"]["steps_done"] > 0


def test_draft_loads_with_the_champions_vocabulary(manifest, draft_path, champion_path):
    g = GGUFFile(draft_path)
    cfg = g.config()
    assert cfg.to_json() == manifest["draft"]["config"]
    champ = GGUFFile(champion_path)
    assert cfg.vocab_size == champ.config().vocab_size
    assert g.metadata["tokenizer.ggml.tokens"] == champ.metadata["tokenizer.ggml.tokens"]
    assert g.metadata["tokenizer.ggml.merges"] == champ.metadata["tokenizer.ggml.merges"]
    m = ReferenceModel.from_file(draft_path, max_len=64)
    logits = m.forward([1, 4093, 198, 19556, 2, 198, 1, 520, 9531, 198], 0)     # (10, vocab)
    assert logits.shape == (10, cfg.vocab_size) and np.isfinite(logits).all()


@pytest.fixture(scope="module")
def models(draft_path, champion_path):
    return (ReferenceModel.from_file(champion_path, max_len=512), ReferenceModel.from_file(draft_path, max_len=512),
            Tokenizer.from_gguf(champion_path))


@pytest.mark.parametrize("wid", SAMPLE_IDS)
def test_greedy_speculation_with_the_draft_equals_champion_alone(models, wid):
    champ, draft, tok = models
    item = next(it for it in D.load_workload(WORKLOAD) if it["id"] == wid)
    prompt = encode_chat(tok, D.workload_messages(item))
    alone = generate(champ, prompt, GenerateConfig(max_new_tokens=16, k=0, adaptive=False), eos_ids=[2])
    spec = generate(champ, prompt, GenerateConfig(max_new_tokens=16, k=4, drafter="model", adaptive=False), draft=draft, eos_ids=[2])
    assert spec.token_ids == alone.token_ids
    assert spec.stats["proposed"] > 0 and spec.stats["target_passes"] < len(alone.token_ids) + 1
    # the simulator the bench uses reproduces the loop's counters exactly (teacher-forced draft over the answer)
    y = alone.token_ids + ([2] if alone.finish_reason == "eos" else [])
    draft.truncate(0)
    q = draft.forward(prompt + y[:-1], 0, len(y))                             # (N, vocab)
    sim = simulate_rounds(np.argmax(q, -1) == np.asarray(y), 4, 16, alone.finish_reason == "eos")
    assert sim["tau"] == pytest.approx(spec.stats["tau"])
    assert sim["acceptance_by_position"] == pytest.approx(spec.stats["acceptance_by_position"])


def test_coupled_sampling_with_the_draft_equals_champion_alone(models):
    champ, draft, tok = models
    prompt = encode_chat(tok, [{"role": "user", "content": "Name three colours of autumn leaves."}])
    cfg = dict(max_new_tokens=12, temperature=0.7, seed=11, mode="coupled", adaptive=False)
    alone = generate(champ, prompt, GenerateConfig(k=0, **cfg), eos_ids=[2])
    spec = generate(champ, prompt, GenerateConfig(k=3, drafter="model", **cfg), draft=draft, eos_ids=[2])
    assert spec.token_ids == alone.token_ids


def test_simulate_rounds_by_hand():
    m = np.array([1, 1, 0, 1, 1, 1, 1, 0, 0], dtype=bool)
    r = simulate_rounds(m, 2)
    # rounds: [1,1]+bonus -> t=3; [1,1]+bonus -> t=6; [1]+correction(pos 7) -> t=8; then one token remains, so
    # (like exactspec.decode: k_cap = remaining - 1) the last round proposes nothing and emits the champion's token
    assert r["rounds"] == 4 and r["emitted"] == 9
    assert r["tau"] == pytest.approx(9 / 4)
    assert r["acceptance_by_position"] == pytest.approx([3 / 3, 2 / 3])
    r = simulate_rounds(m, 2, max_new=100, ends_with_eos=True)   # the last position is an EOS: not counted
    assert r["rounds"] == 4 and r["emitted"] == 8 and r["acceptance_by_position"] == pytest.approx([3 / 4, 2 / 4])
    with pytest.raises(ValueError):
        simulate_rounds(m, 0)


def test_contamination_check_refuses_workload_prompts():
    items = D.load_workload(WORKLOAD)
    idx = D.WorkloadIndex(items)
    victim = next(it for it in items if it["id"] == "sum-03")
    text = D.workload_messages(victim)[-1]["content"]
    # embedded in other text, with changed case and whitespace: still refused
    dirty = "Some chat log.\n\n" + text.upper().replace(" ", "\n  ") + "\nthe end"
    with pytest.raises(D.ContaminationError, match="sum-03"):
        idx.check(["a clean sentence about the sea.", dirty])
    kept, dropped = idx.filter_clean(["clean one", dirty, "clean two"])
    assert kept == ["clean one", "clean two"] and dropped == 1
    # a long workload prompt is caught by its opening even when the rest differs
    long_item = next(it for it in items if it["stratum"] == "long_context")
    opening = D.workload_messages(long_item)[-1]["content"][:400]
    assert idx.hits("prefix " + opening + " and then something else") == [long_item["id"]]
    # a system prompt of the workload counts too
    sys_item = next(it for it in items if D.workload_messages(it)[0]["role"] == "system")
    assert idx.hits("x " + D.workload_messages(sys_item)[0]["content"] + " y")
    assert idx.hits("nothing from the workload here") == []


def test_training_prompt_builder_is_clean_and_seeded():
    idx = D.WorkloadIndex.from_file(WORKLOAD)
    chats = [["hi, what did you do today?", "went to the park"], ["do you like rain?", "sometimes", "why?"]]
    quotes = ["A bird in the hand is worth two in the bush.", "Time flies like an arrow."]
    docs = ["The os module provides a portable way of using operating system dependent functionality. " * 3]
    a = D.teacher_prompts(5, 300, chats, quotes, docs, n_long=3)
    b = D.teacher_prompts(5, 300, chats, quotes, docs, n_long=3)
    assert a == b and len(a) == 303
    idx.check([m["content"] for msgs in a for m in msgs], "teacher prompt")      # raises if contaminated
    with pytest.raises(D.ContaminationError):
        idx.check([m["content"] for msgs in a for m in msgs] +
                  [D.workload_messages(D.load_workload(WORKLOAD)[0])[-1]["content"]], "teacher prompt")
    # tasks whose answers copy (copy_share): none by default, the prompts made before unchanged; about the share asked
    # for, clean too, and the text to copy inside them
    assert a == D.teacher_prompts(5, 300, chats, quotes, docs, n_long=3, copy_share=0.0)
    c = D.teacher_prompts(5, 300, chats, quotes, docs, n_long=3, copy_share=0.25)
    copies = [msgs[-1]["content"] for msgs in c[:300] if any(msgs[-1]["content"].startswith(t.split("{")[0])
                                                             for t in D._COPY_TASKS)]
    assert 45 <= len(copies) <= 105 and c == D.teacher_prompts(5, 300, chats, quotes, docs, n_long=3, copy_share=0.25)
    assert any(q in x for x in copies for q in quotes)
    idx.check([m["content"] for msgs in c for m in msgs], "teacher prompt")
    # workload-like kinds (structured_share): none by default (above), about the share asked for of the other
    # prompts, each of the six kinds, clean, seeded; with copy tasks beside them the copy tasks come first
    e = D.teacher_prompts(5, 600, chats, quotes, docs, n_long=3, structured_share=0.3)
    assert e == D.teacher_prompts(5, 600, chats, quotes, docs, n_long=3, structured_share=0.3)
    firsts = {"Notice 1 (": 0, "You help one user.": 1, "Answer with one JSON object": 2, "Shipping log.": 3,
              "When a request could mean": 4}
    found = {}
    for msgs in e[:600]:
        kind = next((v for k, v in firsts.items() if msgs[0]["content"].startswith(k)), None)
        if kind is None and any(msgs[-1]["content"].startswith(t) for t in ("Write this string in reverse",
                                "Spell out this code", "Copy this exactly, then", "How many characters does")):
            kind = 5
        if kind is not None:
            found[kind] = found.get(kind, 0) + 1
    assert set(found) == set(range(6)) and 130 <= sum(found.values()) <= 230, found
    idx.check([m["content"] for msgs in e for m in msgs], "teacher prompt")
    f = D.teacher_prompts(5, 300, chats, quotes, docs, n_long=3, copy_share=0.25, structured_share=0.3)
    f_copies = [m for m in f[:300] if any(m[-1]["content"].startswith(t.split("{")[0]) for t in D._COPY_TASKS)]
    f_ledgers = [m for m in f[:300] if m[0]["content"].startswith("Shipping log.")]
    assert 45 <= len(f_copies) <= 105 and f_ledgers
    long_ledger = next(msgs for msgs in e if msgs[0]["content"].startswith("Shipping log."))
    assert long_ledger[0]["content"].count("\nLine ") >= 29


def test_torch_model_matches_reference_on_the_draft(draft_path):
    torch = pytest.importorskip("torch")
    from exactspec_train.model import TorchLlama
    ids = [1, 4093, 198, 19556, 30, 2, 198, 1, 520, 9531, 198, 19556]
    ref = ReferenceModel.from_file(draft_path, max_len=64).forward(ids, 0)      # (12, vocab)
    m = TorchLlama.from_gguf(draft_path).eval()
    with torch.no_grad():
        out = m(torch.tensor([ids]))[0].numpy()                                  # (12, vocab)
        cache = m.new_cache(1, 16)
        km = torch.ones(1, 16, dtype=torch.bool)
        a = m(torch.tensor([ids[:7]]), pos=torch.arange(7)[None], cache=cache, key_mask=km)
        b = m(torch.tensor([ids[7:]]), pos=torch.arange(7, 12)[None], cache=cache, key_mask=km)
    np.testing.assert_allclose(out, ref, atol=2e-3, rtol=0)
    np.testing.assert_allclose(torch.cat([a, b], 1)[0].numpy(), out, atol=1e-4, rtol=0)


def test_teacher_batched_generation_equals_plain_greedy_decoding():
    """Left-padded, KV-cached batch generation (the champion's answers on the GPU) == one-by-one greedy decoding
    without a cache, on a random micro llama (CPU)."""
    torch = pytest.importorskip("torch")
    from exactspec.backend import ModelConfig
    from exactspec_train.model import TorchLlama
    from exactspec_train.teacher import generate_all
    cfg = ModelConfig(dim=64, hidden_dim=128, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, vocab_size=97,
                      seq_len=128, rope_theta=1e4)
    m = TorchLlama(cfg)
    m.init_random(3, std=0.3)
    m.eval()
    prompts = [[5, 9, 2, 7], [11], [3, 3, 3, 3, 3, 3, 3], [1, 2]]
    for order in ("sorted", "shuffled"):
        got = generate_all(m, prompts, [0.0] * 4, 6, eos=96, seed=0, device="cpu", token_budget=20, max_batch=3,
                           log=lambda *_: None, order=order, dtype=torch.float32)
        for p, g in zip(prompts, got):
            seq = list(p)
            want = []
            with torch.no_grad():
                for _ in range(6):
                    t = int(m(torch.tensor([seq]))[0, -1].argmax())
                    want.append(t)
                    seq.append(t)
                    if t == 96:
                        break
            assert g == want


def test_pack_rows_carries_token_weights_in_the_same_order():
    seqs = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
    wts = [[0.5, 0.5, 1.0], [0.25, 1.0], [0.0, 1.0, 1.0, 1.0]]
    rows = D.pack_rows(seqs, 4, 99, seed=3)                                    # (n_rows, 4)
    rows2, w = D.pack_rows(seqs, 4, 99, seed=3, weights=wts)                   # (n_rows, 4) x2
    assert np.array_equal(rows, rows2) and w.shape == rows.shape
    lookup = {t: x for s, ws in zip(seqs, wts) for t, x in zip(s, ws)} | {99: 1.0}
    assert all(w[i, j] == lookup[int(rows[i, j])] for i in range(rows.shape[0]) for j in range(rows.shape[1]))
    with pytest.raises(ValueError, match="weights"):
        D.pack_rows(seqs, 4, 99, seed=3, weights=[[1.0]] * 3)


def test_weighted_kd_loss_is_the_weighted_mean_of_per_token_kl():
    torch = pytest.importorskip("torch")
    from exactspec_train.distill import kd_loss
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(6, 11, generator=g), torch.randn(6, 11, generator=g)     # (N, vocab)
    lt, ls = torch.log_softmax(t, -1), torch.log_softmax(s, -1)
    kl = (lt.exp() * (lt - ls)).sum(-1)                                         # (N,)
    w = torch.tensor([1.0, 0.0, 0.3, 1.0, 0.0, 2.0])
    assert torch.allclose(kd_loss(s, t), kl.mean(), atol=1e-6)
    assert torch.allclose(kd_loss(s, t, chunk=4, weight=w), (kl * w).sum() / w.sum(), atol=1e-6)
