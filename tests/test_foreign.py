"""The foreign draft's training path on the CPU with tiny sizes: foreign_prep (the corpora in the draft's view, both
tokenizers as GGUF), foreign_run (starts on the corpora, takes gen.npz when it appears, exports a GGUF that carries
the Llama-2 tokenizer and runs as a bridged draft beside the champion), the manifest; and the page's model list."""
import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from exactspec.tokenizer import Tokenizer
from exactspec_train import data as D
from vocab_toys import GGUF, NODE, real_tokenizer

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = ROOT / "tests" / "data" / "workload.jsonl"
LLAMA2_JSON = NODE / "tokenizer-llama2" / "models" / "tokenizer.json"
TEXTS = ["The cat sat on the mat. It's 12:30 \u2014 time for tea \U0001F375.", "def f(x):\n    return x ** 2\n",
         "Les ch\u00e2teaux de la Loire sont magnifiques; \u6771\u4eac\u306f\u5927\u304d\u3044\u3002"] * 6


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A tiny stand-in for exactspec_train.prep's output, then foreign_prep on it."""
    from exactspec_train import foreign_prep
    smol = real_tokenizer("smollm2")
    src = tmp_path_factory.mktemp("prep")
    seqs = [smol.encode(t) for t in TEXTS]
    rows = D.pack_rows(seqs, 64, smol.id_of("<|endoftext|>"), 1)
    np.save(src / "corpus.npy", rows)
    prompts = [smol.encode(D.render_chatml([{"role": "user", "content": t}])) for t in TEXTS[:4]]
    np.save(src / "prompt_ids.npy", np.asarray([t for p in prompts for t in p], dtype=np.uint16))
    np.save(src / "prompt_off.npy", np.cumsum([0] + [len(p) for p in prompts]).astype(np.int64))
    (src / "prep.json").write_text(json.dumps({
        "seed": 1, "stats": {}, "n_prompts": 4, "corpus_sha256": D.sha256_file(src / "corpus.npy"),
        "prompts_sha256": "test", "workload_sha256": D.sha256_file(WORKLOAD), "champion_sha256": D.sha256_file(GGUF),
        "sources": [dict(s) for s in D.SOURCES.values()]}))
    out = tmp_path_factory.mktemp("data")
    assert foreign_prep.main(["--data", str(src), "--champion", str(GGUF), "--draft-tokenizer", str(LLAMA2_JSON),
                              "--workload", str(WORKLOAD), "--out", str(out), "--seq-len", "64",
                              "--workers", "1"]) == 0
    return src, out, prompts


def test_foreign_prep_writes_the_corpora_in_the_drafts_view(prepared):
    src, out, _ = prepared
    info = json.loads((out / "foreign_prep.json").read_text())
    ltok = Tokenizer.from_gguf(out / "draft_tok.gguf")
    assert ltok.kind == "spm" and ltok.vocab_size == 32000 and ltok.add_bos
    assert Tokenizer.from_gguf(out / "champion_tok.gguf").encode(TEXTS[0]) == real_tokenizer("smollm2").encode(TEXTS[0])
    rows = np.load(out / "corpus.npy")
    assert rows.shape[1] == 64 and info["corpus_rows"] == rows.shape[0]
    text = ltok.decode([int(t) for t in rows.reshape(-1)], skip_special=True)
    assert "The cat sat on the mat" in text and "\u6771\u4eac" in text and "return x ** 2" in text
    assert 1.0 < info["draft_per_champion_token"] < 2.0
    assert info["files"]["corpus.npy"] == D.sha256_file(out / "corpus.npy")


def test_foreign_run_trains_exports_and_the_draft_runs_bridged(prepared, tmp_path):
    pytest.importorskip("torch")
    from exactspec.decode import GenerateConfig, generate
    from exactspec.session import load_model_files
    from exactspec_train import foreign_manifest, foreign_run
    _src, data, prompts = prepared
    smol = real_tokenizer("smollm2")
    answers = [smol.encode("Sure. " + t + "<|im_end|>") for t in TEXTS[:4]]
    gen = tmp_path / "gen.npz"

    def write_gen_later():                     # the head job writes gen.npz while this one already trains
        time.sleep(6)
        np.savez(tmp_path / "gen.tmp.npz", ids=np.asarray([t for a in answers for t in a], dtype=np.uint16),
                 off=np.cumsum([0] + [len(a) for a in answers]).astype(np.int64), done=np.ones(4, bool),
                 refused=np.array([False, False, False, True]),
                 prompt_ids=np.load(data / "prompt_ids.npy"), prompt_off=np.load(data / "prompt_off.npy"))
        (tmp_path / "gen.tmp.npz").rename(gen)

    th = threading.Thread(target=write_gen_later)
    th.start()
    out = tmp_path / "out"
    assert foreign_run.main(["--budget-s", "45", "--gen", str(gen), "--data", str(data), "--out", str(out),
                             "--workload", str(WORKLOAD), "--tiny", "--workers", "1", "--gen-wait-s", "25"]) == 0
    th.join()
    run = json.loads((out / "run.json").read_text())
    assert run["gen"]["status"] == "ok" and run["gen"]["answers"] == 3          # the refused one is not trained on
    assert run["gen"]["prompts_paired_from"] == "gen.npz" and run["gen"]["joined_at_step"] >= 0
    assert run["steps"] > 0 and run["total_s"] < 45 + 15
    path = out / "draft_llama2.gguf"
    assert run["gguf_sha256"] == D.sha256_file(path)
    backend, dtok, _tpl, cfg, _s = load_model_files(str(path))
    assert dtok.kind == "spm" and dtok.encode("Hello world") == real_tokenizer("llama2").encode("Hello world")
    assert cfg.vocab_size == 32000
    champion, ctok, *_ = load_model_files(str(GGUF))
    prompt = ctok.encode(D.render_chatml([{"role": "user", "content": "Say hi."}]))
    base = generate(champion, prompt, GenerateConfig(max_new_tokens=6, drafter="none", k=0), tokenizer=ctok)
    res = generate(champion, prompt, GenerateConfig(max_new_tokens=6, drafter="model", k=3, adaptive=False),
                   draft=backend, tokenizer=ctok, draft_tokenizer=dtok)
    assert res.token_ids == base.token_ids and res.stats["bridge"] == "slem"
    m = foreign_manifest.build(path, GGUF, WORKLOAD, json.loads((data / "foreign_prep.json").read_text()), run, None)
    assert m["draft"]["sha256"] == run["gguf_sha256"] and m["draft"]["bridge"]["auto"]["rejection"] == "tli"
    assert "Llama 2 Community License" in m["draft"]["tokenizer"]["vocabulary_license"]


def test_page_lists_the_champions_own_draft_first(tmp_path, monkeypatch):
    """The page loads the first listed draft by default: a foreign draft (its manifest names a bridge) comes after."""
    from exactspec_build import server
    for name, bridge in (("draft-aaa-foreign.gguf", {"applies": ["slem"]}), ("draft-zzz-same.gguf", None)):
        (tmp_path / name).write_bytes(name.encode())
        (tmp_path / name.replace(".gguf", ".manifest.json")).write_text(json.dumps({
            "draft": {"file": name, "sha256": D.sha256_file(tmp_path / name), **({"bridge": bridge} if bridge else {})},
            "champion": {"sha256": "c"}}))
    monkeypatch.setattr(server, "MODELS", tmp_path)
    names = [m["name"] for m in server.default_models() if m["role"] == "draft"]
    assert names == ["draft-zzz-same", "draft-aaa-foreign"]


def test_foreign_run_converts_the_answers_in_a_pool(prepared, tmp_path):
    """With many answers and several workers the helper process converts them in a pool of its own (a daemonic
    helper could not: on the H200 that lost the answers, and the draft trained on the corpora alone); the run then
    stops at its epoch cap rather than cycling the rows until the budget ends."""
    pytest.importorskip("torch")
    from exactspec_train import foreign_run
    _src, data, _prompts = prepared
    smol = real_tokenizer("smollm2")
    answers = [smol.encode(f"Answer {i}: " + TEXTS[i % len(TEXTS)] + "<|im_end|>") for i in range(70)]
    gen = tmp_path / "gen.npz"
    np.savez(gen, ids=np.asarray([t for a in answers for t in a], dtype=np.uint16),
             off=np.cumsum([0] + [len(a) for a in answers]).astype(np.int64), done=np.ones(70, bool),
             refused=np.zeros(70, bool))
    out = tmp_path / "out"
    assert foreign_run.main(["--budget-s", "120", "--gen", str(gen), "--data", str(data), "--out", str(out),
                             "--workload", str(WORKLOAD), "--tiny", "--workers", "2", "--gen-wait-s", "30",
                             "--max-epochs", "0.5", "--corpus-epochs-first", "0.25"]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["gen"]["status"] == "ok" and run["gen"]["answers"] == 70
    assert run["epochs"] <= 0.6 and "epoch cap" in (out / "log.txt").read_text()
