"""The fault matrix in the page (issue 12): every fault kind at every phase it applies to, armed through the shipped
hooks (exactspec.faults.arm, ?faults=kind@phase:round), on the CPU fallback and — for the WebGPU kinds — on
Chromium's SwiftShader. Each faulty answer is compared with a clean run's, byte for byte; its streamed chunks must
concatenate to its text; the fault must be listed as fired, the status line (or the result's notices) must say what
happened, and the receipt must stay privacy-safe. The decode loop's part at Monte Carlo breadth (both sampling modes,
every phase) is tests/test_faults.py. One page per backend for the decode-phase faults (a worker restart happens
inside it); the load-phase faults reopen the page with ?faults=... (OPFS keeps the models)."""
from __future__ import annotations

import base64
import json

import pytest

from conftest import PageSession, write_micro_hf
from test_page import _set_settings, wait_js

PROMPT = "Tell me a story about the sea."
MAXN = 24
SPEC = dict(drafter="model", k=3, adaptive=False)
MODES = {"greedy": dict(temperature=0), "coupled": dict(temperature=0.8, top_k=40, seed=1234, mode="coupled")}
GEN = """(p) => { const chunks = [];
  return exactspec.generate(p, {onToken: (t, ids) => chunks.push([t, ids])}).then((r) => ({r, chunks})); }"""
LOOP_PHASES = {"exception": ["prefill", "draft", "verify", "commit"], "draft_only": ["prefill", "draft", "commit"],
               "worker_killed": ["prefill", "draft", "verify", "commit"]}


def gen(s, mode="greedy", **kw):
    out = s.page.evaluate(GEN, {"prompt": PROMPT, "chat": True, "max_new_tokens": MAXN, **MODES[mode], **SPEC, **kw})
    return out["r"], out["chunks"]


def same(res, chunks, ref):
    assert res["token_ids"] == ref["token_ids"], (res.get("notices"), res.get("error"))
    assert res["text"] == ref["text"]
    assert "".join(c[0] for c in chunks) == res["text"]                   # nothing shown twice, nothing lost
    assert [i for c in chunks for i in c[1]] == res["token_ids"]


def arm(s, spec):
    return s.js("(f) => exactspec.faults.arm(f)", spec)


def fired(s, kind):
    return [f for f in s.js("exactspec.faults.list()")["fired"] if f["kind"] == kind]


def private(s, receipt):
    from test_receipts import assert_private
    assert_private(receipt, PROMPT, "micro-chat", "micro-draft")


def stored(s):
    """Model names in the store and the folders OPFS really holds (a partial import must leave none)."""
    names = sorted(m["name"] for m in s.js("exactspec.listModels()"))
    dirs = s.js("""async () => { const out = [];
      const top = await (await navigator.storage.getDirectory()).getDirectoryHandle('exactspec');
      const models = await top.getDirectoryHandle('models');
      for await (const [name] of models.entries()) out.push(name);
      return out.sort(); }""")
    return names, dirs


@pytest.fixture(scope="module")
def cpu(browser, server):
    s = PageSession(browser, server)
    r = s.open("?cpu=1")
    assert r["backend"] == "cpu" and r["active"]["draft"] is None
    s.js("exactspec.importModel({url: '/models/micro-draft.gguf', name: 'micro-draft', role: 'draft'})")
    s.js("exactspec.loadModel('micro-draft', 'draft')")
    s.clean = {}
    for mode in MODES:
        a, ch = gen(s, mode, drafter="none")
        b, _ = gen(s, mode)
        assert a["token_ids"] == b["token_ids"] and b["stats"]["draft_passes"] > 0 and len(a["token_ids"]) >= 8
        s.clean[mode] = a
    rc = s.js("exactspec.receipt()")               # a clean answer's receipt: the host's facts are in
    assert rc["memory"]["wasm_heap_bytes"] > 0 and rc["versions"]["pyodide"] == "0.27.7"
    threads = s.js("exactspec.memory()")["models"]["champion"].get("threads")
    if threads is not None:                         # on the CPU: its kernel's shared memory when it has threads
        assert (rc["memory"]["cpu_pool_bytes"] or 0) > 0 if threads > 1 else rc["memory"]["cpu_pool_bytes"] is None
    shas = {m["name"]: m["sha256"] for m in s.js("exactspec.listModels()")}
    assert rc["artifacts"]["champion"]["sha256"] == shas["micro-chat"]
    assert rc["artifacts"]["draft"]["sha256"] == shas["micro-draft"]
    yield s
    assert not s.errors, s.errors
    s.close()


# ---- CPU fallback: the decode loop's phases -------------------------------------------------------------------------
@pytest.mark.parametrize("kind,phase", [(k, p) for k, ps in LOOP_PHASES.items() for p in ps])
def test_decode_phase_faults_on_cpu(cpu, kind, phase):
    mode = "coupled" if phase == "commit" else "greedy"
    arm(cpu, {"kind": kind, "phase": phase, "round": 2})
    res, chunks = gen(cpu, mode)
    same(res, chunks, cpu.clean[mode])
    assert len(fired(cpu, kind)) >= 1 and not cpu.js("exactspec.faults.list()")["armed"]
    assert fired(cpu, kind)[-1]["recovery"][0]["action"] in ("worker_restarted", "speculation_off")
    actions = [r["action"] for r in res["recovery"]]
    want = "worker_restarted" if kind == "worker_killed" else "speculation_off"
    assert actions[0] == want, res["recovery"]
    notes = " ".join(res["notices"])
    assert ("restarted" in notes) if kind == "worker_killed" else ("champion alone" in notes)
    rc = cpu.js("exactspec.receipt()")
    assert rc["recovery"][0]["action"] == want and rc["faults"][0]["kind"] == kind
    private(cpu, rc)
    if kind == "worker_killed":           # the page is usable as before: the next answer is clean and speculative
        again, ch = gen(cpu, mode)
        same(again, ch, cpu.clean[mode])
        assert again["stats"]["draft_passes"] > 0


def test_worker_killed_mid_answer_in_the_chat_ui(cpu):
    """Through the real UI: the transcript shows the clean answer once, the status line says the worker restarted."""
    page = cpu.page
    page.click("#new-chat")
    _set_settings(page, speculation=True, drafter="model", k=3, temperature=0, max_new_tokens=MAXN, adaptive=False)
    arm(cpu, "worker_killed@verify:4")
    page.fill("#prompt", PROMPT)
    page.press("#prompt", "Enter")
    wait_js(page, "document.querySelector('#send').disabled === false && !document.querySelector('.streaming') && "
                  "document.body.dataset.recovery !== undefined", timeout=300)
    assert page.locator(".msg.assistant").last.inner_text() == cpu.clean["greedy"]["text"].strip() or \
        page.locator(".msg.assistant").last.text_content() == cpu.clean["greedy"]["text"]
    assert "restarted" in page.locator("#status").inner_text()
    assert "worker_restarted" in page.evaluate("document.body.dataset.recovery")
    assert page.locator("#receipt-download").is_enabled()
    with page.expect_download() as dl:
        page.click("#receipt-download")
    rc = json.loads(open(dl.value.path()).read())
    assert rc["recovery"][0]["action"] == "worker_restarted"
    private(cpu, rc)


# ---- CPU fallback: storage faults at load ---------------------------------------------------------------------------
def test_opfs_write_fails_during_an_import(cpu, models_dir):
    before = stored(cpu)
    arm(cpu, {"kind": "opfs_write", "phase": "load"})
    err = cpu.js("""() => exactspec.importModel({url: '/models/micro-head.gguf', name: 'head-copy'})
                          .then(() => 'imported', (e) => e.message)""")
    assert "quota exceeded" in err and "partial file was removed" in err and "intact" in err and " free of " in err
    assert stored(cpu) == before                                          # OPFS as it was: no partial folder
    # through the file picker: the fault fired once, so this import goes through, then is deleted again
    cpu.page.set_input_files("#import-file", str(models_dir["user-model"]))
    wait_js(cpu.page, "document.querySelector('#import-status').textContent.startsWith('Imported')")
    cpu.js("exactspec.deleteModel('user-model')")
    assert stored(cpu) == before and fired(cpu, "opfs_write")


def test_opfs_read_damage_is_detected_and_reimported(cpu):
    arm(cpu, {"kind": "opfs_read", "phase": "load"})
    err = cpu.js("() => exactspec.loadModel('micro-chat', 'champion').then(() => 'loaded', (e) => e.message)")
    assert "damaged" in err and "sha256" in err
    page = cpu.page
    wait_js(page, "!document.querySelector('#reimport-offers').hidden")
    assert "Re-import" in page.locator("#reimport-offers").inner_text()
    page.click("#reimport-offers button.reimport")
    wait_js(page, "document.querySelector('#status').textContent.startsWith('Re-imported')")
    assert cpu.js("exactspec.status()")["active"]["champion"] == "micro-chat"
    res, chunks = gen(cpu)
    same(res, chunks, cpu.clean["greedy"])


def test_hostile_files_imported_through_the_page_are_refused_and_leave_opfs_as_it_was(cpu, tmp_path):
    """The fuzzer's crafted files (py/bench/_hostile.py) through the page's import: a clear message each, no
    traceback, the store unchanged."""
    import struct
    from bench import _hostile as H
    from exactspec.micro import micro_tokenizer
    cases = {}
    p = H.micro_parts(H.fuzz_config(), 1)
    p.info("blk.0.attn_k.weight").rel = p.info("blk.0.attn_q.weight").rel
    cases["overlap.gguf"] = (p.to_bytes(), "overlap")
    p = H.micro_parts(H.fuzz_config(), 1)
    p.info("blk.0.attn_norm.weight").tid = 2
    cases["norm-q4.gguf"] = (p.to_bytes(), "norm stored as Q4_0")
    p = H.micro_parts(H.fuzz_config(), 1)
    t = p.info("blk.0.ffn_up.weight")
    p.data[t.rel:t.rel + 4] = struct.pack("<f", float("nan"))
    cases["nan.gguf"] = (p.to_bytes(), "non-finite")
    p = H.micro_parts(H.fuzz_config(vocab_size=320), 1, tokenizer=False)
    p.kvs += [H.kv_of(k, v) for k, v in micro_tokenizer(300).items()]
    cases["small-tok.gguf"] = (p.to_bytes(), "300 tokens")
    p = H.micro_parts(H.fuzz_config(), 1)
    p.kv("llama.block_count").value = 3
    cases["layers.gguf"] = (p.to_bytes(), "lacks tensor 'blk.1|declares 3 layers")
    p = H.micro_parts(H.fuzz_config(), 1)
    p.kv("tokenizer.ggml.model").value = "bert"
    cases["bert.gguf"] = (p.to_bytes(), "bert")
    cases["trunc.gguf"] = (H.micro_parts(H.fuzz_config(), 1).to_bytes()[:5000], "truncated|outside")
    folders = {"hf-list": {**H.micro_hf(H.fuzz_config(), 1), "config.json": b"[1, 2]"},
               "hf-deep": {**H.micro_hf(H.fuzz_config(), 1), "config.json": H.deep_json(100_000)},
               "hf-tie": {**H.micro_hf(H.fuzz_config(), 1),
                          "config.json": json.dumps({**H.hf_config(H.fuzz_config()), "tie_word_embeddings": "false"}).encode()}}
    before = stored(cpu)
    enc = lambda b: base64.b64encode(b).decode()
    for name, (blob, match) in cases.items():
        err = cpu.js("""([name, b64]) => { const b = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
            return exactspec.importModel({file: new File([b], name)}).then(() => 'imported', (e) => e.message); }""",
                     [name, enc(blob)])
        assert "is not a usable model" in err or "truncated" in err, (name, err)
        assert __import__("re").search(match, err), (name, err)
        assert "Traceback" not in err and "File \"" not in err, err
    for name, files in folders.items():
        err = cpu.js("""([name, files]) => exactspec.importModel({name, files: files.map(([n, b64]) =>
            new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], n))}).then(() => 'imported', (e) => e.message)""",
                     [name, [[n, enc(b)] for n, b in files.items()]])
        assert "is not a usable model" in err and "config.json" in err and "Traceback" not in err, (name, err)
    assert stored(cpu) == before


# ---- CPU fallback: the load phase, through the URL ------------------------------------------------------------------
def test_worker_killed_while_loading_at_boot(cpu):
    r = cpu.open("?cpu=1&faults=worker_killed@load")     # the first worker dies loading the champion at boot
    assert r["active"]["champion"] == "micro-chat"
    assert fired(cpu, "worker_killed") and cpu.js("exactspec.generation") == 2
    cpu.js("exactspec.loadModel('micro-draft', 'draft')")
    res, chunks = gen(cpu)
    same(res, chunks, cpu.clean["greedy"])


def test_draft_only_at_load_goes_on_without_the_draft(cpu):
    r = cpu.open("?cpu=1&draft=micro-draft&faults=draft_only@load")
    assert r["active"]["champion"] == "micro-chat" and r["active"]["draft"] is None
    assert "without speculation" in cpu.page.locator("#status").inner_text()
    res, chunks = gen(cpu)
    same(res, chunks, cpu.clean["greedy"])
    assert res["stats"]["draft_passes"] == 0 and "without speculation" in " ".join(res["notices"])
    assert res["recovery"][0] == {"cause": "draft_only", "action": "draft_dropped", "at_token": 0, "backend": None}
    assert cpu.js("exactspec.receipt()")["recovery"][0]["action"] == "draft_dropped"
    cpu.js("exactspec.loadModel('micro-draft', 'draft')")             # fired once: it loads now
    res, chunks = gen(cpu)
    same(res, chunks, cpu.clean["greedy"])
    assert res["stats"]["draft_passes"] > 0


def test_damaged_stored_file_found_at_boot(cpu):
    """Real damage, not an injected one: a byte of the stored champion changed in OPFS; the next boot's sha256 check
    refuses it and offers a re-import, after which the answer is the clean one."""
    cpu.js("""async () => {
      const top = await (await navigator.storage.getDirectory()).getDirectoryHandle('exactspec');
      const dir = await (await top.getDirectoryHandle('models')).getDirectoryHandle('micro-chat');
      const w = await (await dir.getFileHandle('model.gguf')).createWritable({keepExistingData: true});
      await w.write({type: 'write', position: 4096, data: new Uint8Array([1, 2, 3, 4])});
      await w.close(); }""")
    cpu.open("?cpu=1")
    page = cpu.page
    wait_js(page, "!document.querySelector('#reimport-offers').hidden")
    assert "damaged" in page.locator("#reimport-offers").inner_text()
    page.click("#reimport-offers button.reimport")
    wait_js(page, "document.querySelector('#status').textContent.startsWith('Re-imported')")
    cpu.js("exactspec.loadModel('micro-chat', 'champion')")
    cpu.js("exactspec.loadModel('micro-draft', 'draft')")
    res, chunks = gen(cpu)
    same(res, chunks, cpu.clean["greedy"])


# ---- WebGPU on SwiftShader ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gpu(browser, server):
    s = PageSession(browser, server)
    r = s.open("?draft=micro-draft")
    if r["backend"] != "webgpu":
        s.close()
        pytest.skip(f"no WebGPU adapter in this browser ({r.get('reason')})")
    s.js("exactspec.importModel({url: '/models/micro-draft.gguf', name: 'micro-draft', role: 'draft'})")
    s.js("exactspec.loadModel('micro-draft', 'draft')")
    a, _ = gen(s, drafter="none")
    b, _ = gen(s)
    c, _ = gen(s, drafter="none", backend="cpu")                   # the CPU oracle agrees
    assert a["token_ids"] == b["token_ids"] == c["token_ids"]
    assert a["stats"]["backend"] == "webgpu" and c["stats"]["backend"] == "cpu"
    s.generate(prompt="x", max_new_tokens=1, backend="webgpu")     # back on the GPU
    s.clean = {"greedy": a}
    yield s
    s.close()


@pytest.mark.parametrize("phase", ["prefill", "draft", "verify", "commit"])
def test_device_lost_mid_answer_new_device_or_cpu(gpu, phase):
    arm(gpu, {"kind": "device_lost", "phase": phase, "round": 2})
    res, chunks = gen(gpu, backend="webgpu")
    same(res, chunks, gpu.clean["greedy"])
    rec = res["recovery"][0]
    assert rec["cause"] == "device_lost" and rec["action"] in ("new_device", "cpu_fallback")
    assert "GPU device was lost" in " ".join(res["notices"])
    private(gpu, gpu.js("exactspec.receipt()"))
    if rec["action"] == "cpu_fallback":
        gpu.generate(prompt="x", max_new_tokens=1, backend="webgpu")


@pytest.mark.parametrize("kind,phase", [("exception", "draft"), ("exception", "verify"), ("draft_only", "draft")])
def test_loop_faults_on_webgpu(gpu, kind, phase):
    """The batched round on the device (spec_round: the draft's passes inside it) takes the same recovery."""
    arm(gpu, {"kind": kind, "phase": phase, "round": 2})
    res, chunks = gen(gpu, backend="webgpu")
    same(res, chunks, gpu.clean["greedy"])
    assert res["recovery"][0]["action"] == "speculation_off"


def test_device_lost_while_loading(gpu):
    arm(gpu, {"kind": "device_lost", "phase": "load"})
    out = gpu.js("exactspec.loadModel('micro-draft', 'draft')")
    assert out["backend"] in ("webgpu", "cpu") and fired(gpu, "device_lost")
    res, chunks = gen(gpu)
    same(res, chunks, gpu.clean["greedy"])


def test_gpu_alloc_failure_at_load_drops_the_draft_or_moves_the_champion(gpu):
    arm(gpu, {"kind": "gpu_alloc", "phase": "load"})
    err = gpu.js("() => exactspec.loadModel('micro-draft', 'draft').then(() => 'loaded', (e) => e.message)")
    assert "did not fit in GPU memory" in err and "without speculation" in err
    res, chunks = gen(gpu)                                     # drafter 'model' asked for: the champion alone
    same(res, chunks, gpu.clean["greedy"])
    assert "without speculation" in " ".join(res["notices"]) and res["stats"]["draft_passes"] == 0
    assert res["recovery"][0]["cause"] == "gpu_alloc" and res["recovery"][0]["action"] == "draft_dropped"
    arm(gpu, {"kind": "gpu_alloc", "phase": "load"})
    out = gpu.js("exactspec.loadModel('micro-chat', 'champion')")
    assert out["backend"] == "cpu"
    assert "CPU fallback" in gpu.page.locator("#status").inner_text()
    gpu.js("exactspec.loadModel('micro-draft', 'draft')")
    res, chunks = gen(gpu)
    same(res, chunks, gpu.clean["greedy"])
    assert res["stats"]["backend"] == "cpu"


def long_chat() -> list[dict]:
    """A chat whose prompt leaves fewer than MAXN of the micro-model's 256 tokens free, ending with PROMPT."""
    chat = [{"role": "system", "content": "Be brief."}]
    for i in range(8):
        chat += [{"role": "user", "content": f"Question {i}: count the letters of abcdefgh"},
                 {"role": "assistant", "content": f"Answer {i}: there are eight letters here."}]
    return chat + [{"role": "user", "content": PROMPT}]


def test_worker_killed_in_a_chat_longer_than_the_context(cpu):
    """A chat too long for the context (256 tokens) leaves out its oldest turns; a worker killed mid-answer is
    resumed with the same turns left out (the resume carries the first request's budget): the clean answer."""
    chat = long_chat()
    clean, _ = gen(cpu, chat=chat, prompt=None)
    d = clean["dropped_messages"]
    assert d >= 2 and any("oldest messages were left out" in x for x in clean["notices"])
    arm(cpu, "worker_killed@verify:3")
    res, chunks = gen(cpu, chat=chat, prompt=None)
    same(res, chunks, clean)
    assert res["dropped_messages"] == d and res["recovery"][0]["action"] == "worker_restarted"


def test_worker_killed_while_continuing_a_chat_longer_than_the_context(cpu):
    """Stop, then Continue with more tokens than the context holds, and the worker killed mid-Continue: the new
    worker resumes with the turns the first answer left out (not more: the resume's budget is the first request's
    max_new_tokens) and writes to the context's end, as one clean answer over the same turns does."""
    chat = long_chat()
    first, _ = gen(cpu, chat=chat, prompt=None)
    d, room = first["dropped_messages"], 256 - first["prompt_tokens"]
    ref, _ = gen(cpu, chat=chat[:1] + chat[1 + d:], prompt=None, max_new_tokens=room)
    assert "dropped_messages" not in ref and len(ref["token_ids"]) > 2 * MAXN, "the test needs a long clean answer"
    stopped = cpu.js("""async (p) => { let seen = 0;
        const off = exactspec.on('tokens', (e) => { seen += e.token_ids.length; if (seen >= 5) exactspec.cancel(); });
        const r = await exactspec.generate(p); off(); return r; }""",
                     {"chat": chat, "max_new_tokens": MAXN, **MODES["greedy"], **SPEC})
    assert stopped["finish_reason"] == "cancelled"
    arm(cpu, "worker_killed@verify:2")
    cont = cpu.js("(p) => exactspec.continue(p)", {"max_new_tokens": 200, **MODES["greedy"], **SPEC})
    assert cont["recovery"][0]["action"] == "worker_restarted", cont.get("notices")
    assert stopped["token_ids"] + cont["token_ids"] == ref["token_ids"]
