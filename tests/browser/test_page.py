"""The chat page driven in headless Chromium: boot, offline, OPFS store, exactness vs the CPython CLI, speculation
toggle, stop/continue, user imports, broken imports, settings. Most tests force the CPU fallback (`?cpu=1`,
fast and deterministic on this 2-core machine); test_greedy_matches_cli_default_backend runs on whatever the
page picks (WebGPU when the engine and an adapter are present)."""
from __future__ import annotations

import json
import time

import pytest

STAGES = ["runtime", "packages", "gpu", "cpu", "weights", "ready"]


def wait_js(page, expr: str, timeout: float = 120.0):
    """Poll a JS expression until truthy (Playwright's wait_for_function evaluates strings with eval, which the
    page's CSP forbids, as it should)."""
    t_end = time.time() + timeout
    while True:
        v = page.evaluate(f"() => ({expr})")
        if v:
            return v
        if time.time() > t_end:
            raise TimeoutError(f"timed out waiting for {expr}")
        time.sleep(0.05)


def test_boot_stages_offline_and_csp(session, server):
    r = session.open("?cpu=1")
    names = [s["stage"] for s in r["stages"]]
    assert names == STAGES, r["stages"]
    assert all("error" not in s for s in r["stages"])
    assert r["backend"] == "cpu"
    assert r["active"]["champion"] == "micro-chat"
    # every stage was reported as events too, start and done, in order
    events = session.js("exactspec.stages.map((e) => [e.stage, e.state])")
    done = [s for s, st in events if st == "done"]
    assert done == STAGES
    # nothing left the origin: page and worker requests all hit the test server
    assert session.requests, "no request recorded"
    foreign = [u for u in session.requests if not (u.startswith(server + "/") or u.startswith("data:")
                                                  or u.startswith("blob:"))]
    assert foreign == [], foreign
    assert any("/static/pyodide/" in u and u.endswith(".wasm") for u in session.requests)
    assert any(u.endswith(".whl") and "exactspec" in u for u in session.requests)
    # CSP on the page
    csp = session.response.headers.get("content-security-policy", "")
    assert "connect-src 'self'" in csp and "default-src 'self'" in csp
    assert session.page.locator("#status").inner_text().startswith("Ready")
    assert session.errors == []


def test_first_visit_imports_reload_requests_no_weights_delete(session):
    session.open()
    first = session.model_requests()
    assert any(u.endswith("/models/micro-chat.gguf") for u in first), first
    models = session.js("exactspec.listModels()")
    assert [m["name"] for m in models] == ["micro-chat"]
    assert models[0]["sha256"] and models[0]["size"] > 0
    session.requests.clear()
    r = session.reload()
    assert r["active"]["champion"] == "micro-chat"
    assert session.model_requests() == []           # weights come from OPFS only
    assert not any(u.endswith(".gguf") for u in session.requests)
    out = session.generate(prompt="Hi", max_new_tokens=4)
    assert len(out["token_ids"]) == 4
    # delete: gone from the list and from OPFS; a reload imports it again
    assert session.js("exactspec.deleteModel('micro-chat')") == {"deleted": True}
    assert session.js("exactspec.listModels()") == []
    assert session.js("""async () => {
        const root = await navigator.storage.getDirectory();
        const d = await (await root.getDirectoryHandle('exactspec')).getDirectoryHandle('models');
        const names = []; for await (const [n] of d.entries()) names.push(n); return names; }""") == []
    session.requests.clear()
    session.reload()
    assert any(u.endswith("/models/micro-chat.gguf") for u in session.model_requests())


@pytest.mark.parametrize("query", ["?cpu=1", ""], ids=["cpu", "default_backend"])
def test_greedy_matches_cli(session, server, models_dir, cli, query):
    r = session.open(query)
    n = 12 if r["backend"] == "cpu" else 6
    prompt = "Tell me about the sea."
    want = cli(models_dir["micro-chat"], prompt, chat=True, max_new_tokens=n)
    got = session.generate(prompt=prompt, chat=True, max_new_tokens=n)
    assert got["token_ids"] == want["token_ids"]
    assert got["text"] == want["text"]
    assert got["stats"]["backend"] == r["backend"]
    if r["backend"] == "cpu":                       # the CPU fallback multiplies with the WebAssembly SIMD kernel
        mem = session.js("exactspec.memory()")
        assert mem["models"]["champion"]["kernel"] == "simd"
        # on the cores of this machine (app/cpu_pool.js; the page is cross-origin isolated): the same bits as the CLI
        cores = session.js("navigator.hardwareConcurrency")
        assert session.js("crossOriginIsolated") is True
        assert mem["models"]["champion"]["threads"] == max(1, min(cores, 4))
        if cores > 1:
            assert mem["cpu_pool"] >= mem["models"]["champion"]["weights"]     # the matrices live in the pool
    for key in ("target_passes", "draft_passes", "tau", "acceptance_by_position", "ttft_ms", "tokens_per_s"):
        assert key in got["stats"], key
    # raw prompt (no chat template) too
    want_raw = cli(models_dir["micro-chat"], "Once upon a time", chat=False, max_new_tokens=n)
    got_raw = session.generate(prompt="Once upon a time", chat=False, max_new_tokens=n)
    assert got_raw["token_ids"] == want_raw["token_ids"]
    # coupled-sampled: the same seed gives the CPython answer too (counter-based RNG, same in Pyodide)
    sampled = dict(temperature=0.9, top_p=0.95, seed=7)
    want_s = cli(models_dir["micro-chat"], prompt, chat=True, max_new_tokens=n, **sampled)
    got_s = session.generate(prompt=prompt, chat=True, max_new_tokens=n, **sampled)
    assert got_s["token_ids"] == want_s["token_ids"] and got_s["token_ids"] != want["token_ids"]
    # offline on this backend too (the WebGPU engine fetches its shaders from this origin)
    assert [u for u in session.requests if not u.startswith(server + "/")] == []
    if r["backend"] == "webgpu":
        assert any("/shaders/" in u and u.endswith(".wgsl") for u in session.requests)


def _ui_answer(page, text: str) -> str:
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")
    wait_js(page, "document.querySelector('#send').disabled === false && "
                           "document.querySelectorAll('.msg.assistant').length > 0 && "
                           "!document.querySelector('.msg.streaming')")
    return page.locator(".msg.assistant").last.inner_text()


def _set_settings(page, **kw):
    """Set the settings panel's controls as a user does (id = the setting's name). A checkbox by the keyboard (focus,
    Space: a toggle that does not depend on where the box is drawn; a mouse click once did not take under the suite's
    load), then its state is checked."""
    for k, v in kw.items():
        el = page.locator(f"#{k}")
        if isinstance(v, bool):
            if el.is_checked() != v:
                el.focus()
                page.keyboard.press("Space")
            assert el.is_checked() == v, f"the {k} checkbox did not become {v}"
        elif el.evaluate("e => e.tagName") == "SELECT":
            el.select_option(str(v))
        else:
            el.fill(str(v))


@pytest.mark.parametrize("sampled", [False, True], ids=["greedy", "coupled_sampled"])
def test_speculation_toggle_keeps_answer(session, sampled):
    session.open()
    page = session.page
    page.click("#new-chat")
    base = dict(max_new_tokens=24, seed=11, mode="coupled")
    base.update(temperature=0.9, top_k=50, top_p=0.95) if sampled else base.update(temperature=0)
    answers = {}
    stats = {}
    for label, spec in [("off", dict(speculation=False)), ("ngram", dict(speculation=True, drafter="ngram", k=3))]:
        _set_settings(page, **base, **spec)
        page.click("#new-chat")
        answers[label] = _ui_answer(page, "Write a short poem about rivers.")
        stats[label] = {"target": page.locator("#m-target").inner_text(), "tau": page.locator("#m-tau").inner_text(),
                        "bars": page.locator("#m-accept .bar").count()}
    assert answers["off"] == answers["ngram"]
    assert answers["off"]
    assert stats["off"]["bars"] == 0 and stats["ngram"]["bars"] == 3        # acceptance by position, k = 3
    assert float(stats["off"]["tau"]) == 1.0 and int(stats["off"]["target"]) > 0
    # regenerate: same settings and seed -> the same answer again (replacing the last one)
    page.click("#regenerate")
    wait_js(page, "document.querySelector('#send').disabled === false && !document.querySelector('.streaming')")
    assert page.locator(".msg.assistant").count() == 1
    assert page.locator(".msg.assistant").last.inner_text() == answers["ngram"]
    assert page.locator("#metrics").is_visible()
    # the draft model drafter through the API (a micro draft with the same tokenizer)
    session.js("exactspec.importModel({url: '/models/micro-draft.gguf', name: 'micro-draft', role: 'draft'})")
    session.js("exactspec.loadModel('micro-draft', 'draft')")
    p = dict(prompt="Write a short poem about rivers.", chat=True, **base)
    none = session.generate(**p, drafter="none")
    model = session.generate(**p, drafter="model", k=4)
    assert model["token_ids"] == none["token_ids"]
    assert model["stats"]["draft_passes"] > 0
    assert len(model["stats"]["acceptance_by_position"]) == 4
    # the draft head drafter (on the CPU fallback: the numpy head reads the champion's features)
    session.js("exactspec.importModel({url: '/models/micro-head.gguf', name: 'micro-head', role: 'draft'})")
    session.js("exactspec.loadModel('micro-head', 'draft')")
    head = session.generate(**p, drafter="head", k=3)
    assert head["token_ids"] == none["token_ids"]
    assert head["stats"]["drafter"] == "head" and head["stats"]["draft_passes"] > 0


def test_speculation_invariance_default_backend(session):
    """The same invariance on whatever backend the page picks (the WebGPU engine when present): its verify
    passes of k+1 rows must give the very logits of its one-row passes."""
    r = session.open("")
    session.js("exactspec.importModel({url: '/models/micro-draft.gguf', name: 'micro-draft', role: 'draft'})")
    session.js("exactspec.loadModel('micro-draft', 'draft')")
    for sampling in (dict(temperature=0), dict(temperature=0.9, top_k=50, seed=5, mode="coupled")):
        p = dict(prompt="Tell me a story.", chat=True, max_new_tokens=8, **sampling)
        base = session.generate(**p, drafter="none")
        assert base["stats"]["backend"] == r["backend"]
        for spec in (dict(drafter="ngram", k=3), dict(drafter="model", k=4)):
            got = session.generate(**p, **spec)
            assert got["token_ids"] == base["token_ids"], (sampling, spec)


def test_draft_head_on_the_default_backend_matches_cli(session, models_dir, cli):
    """A draft head in the page on whatever backend it picks (WebGPU: the head runs on the engine beside the
    champion, reading its features on the GPU; its k passes inside each round's one submission): the answer and
    the passes are the CLI's (numpy head), greedy and coupled; the draft model stays loaded beside it."""
    r = session.open("")
    session.js("exactspec.importModel({url: '/models/micro-draft.gguf', name: 'micro-draft', role: 'draft'})")
    session.js("exactspec.loadModel('micro-draft', 'draft')")
    session.js("exactspec.importModel({url: '/models/micro-head.gguf', name: 'micro-head', role: 'draft'})")
    out = session.js("exactspec.loadModel('micro-head', 'draft')")
    assert out["backend"] == r["backend"] and out["summary"]["kind"] == "head"
    print(f"[page head] backend {r['backend']}")
    n = 6 if r["backend"] == "webgpu" else 12
    prompt = "Tell me about the sea."
    for sampling in (dict(temperature=0), dict(temperature=0.9, top_p=0.95, seed=7)):
        want = cli(models_dir["micro-chat"], prompt, chat=True, max_new_tokens=n, drafter="head",
                   draft=models_dir["micro-head"], k=3, no_adaptive=None, **sampling)
        got = session.generate(prompt=prompt, chat=True, max_new_tokens=n, drafter="head", k=3, adaptive=False,
                               **sampling)
        assert got["token_ids"] == want["token_ids"] and got["text"] == want["text"], sampling
        assert got["stats"]["backend"] == r["backend"]
        for key in ("target_passes", "draft_passes", "accepted", "acceptance_by_position"):
            assert got["stats"][key] == want["stats"][key], (sampling, key)
        model = session.generate(prompt=prompt, chat=True, max_new_tokens=n, drafter="model", k=2, adaptive=False,
                                 **sampling)
        assert model["token_ids"] == want["token_ids"] and model["stats"]["draft_passes"] > 0


def test_stop_mid_answer_then_continue(session):
    session.open()
    prompt = dict(prompt="Count with me please", chat=True, max_new_tokens=200, temperature=0)
    full = session.generate(**prompt)
    assert full["finish_reason"] in ("length", "eos")
    n_full = len(full["token_ids"])
    assert n_full > 20, "the micro-model must answer at length for this test"
    # start, wait for some streamed tokens, cancel
    stopped = session.js("""async (p) => {
        let seen = 0, streamed = '';
        const off = exactspec.on('tokens', (e) => { seen += e.token_ids.length; streamed += e.text;
                                                    if (seen >= 5) exactspec.cancel(); });
        const r = await exactspec.generate(p);
        off();
        return {r, streamed};
    }""", prompt)
    r = stopped["r"]
    assert r["finish_reason"] == "cancelled"
    k = len(r["token_ids"])
    assert 5 <= k < n_full
    assert r["token_ids"] == full["token_ids"][:k]          # ends at the last committed token
    assert stopped["streamed"].startswith(r["text"]) or r["text"] == stopped["streamed"]
    cont = session.js("(p) => exactspec.continue(p)", dict(max_new_tokens=n_full - k, temperature=0))
    assert r["token_ids"] + cont["token_ids"] == full["token_ids"]
    assert r["text"] + cont["text"] == full["text"]


def test_stop_and_continue_buttons(session):
    session.open()
    page = session.page
    _set_settings(page, speculation=False, max_new_tokens=200, temperature=0)
    # press Stop (the real button) from inside the page once a few tokens have streamed: a Playwright round trip
    # is slower than this micro-model's whole answer
    page.evaluate("""() => { let n = 0; const off = exactspec.on('tokens', (e) => {
        n += e.token_ids.length; if (n >= 8) { off(); document.querySelector('#stop').click(); } }); }""")
    page.fill("#prompt", "Count with me please")
    page.press("#prompt", "Enter")
    wait_js(page, "document.querySelector('#send').disabled === false")
    partial = page.locator(".msg.assistant").last.inner_text()
    assert partial
    assert "Stopped" in page.locator("#status").inner_text()
    assert page.locator("#continue").is_enabled()
    partial_tokens = page.locator(".msg.assistant").last.get_attribute("data-tokens")
    page.click("#continue")
    wait_js(page, "document.querySelector('#send').disabled === false && !document.querySelector('.streaming')")
    final = page.locator(".msg.assistant").last.inner_text()
    # (a Continue's prompt holds the answer so far: when Stop came late, 200 more overflowed the micro-model's 256
    #  tokens and the page refused it; now it writes what fits and says so; `seen` shows the page if it recurs)
    seen = {"status": page.locator("#status").inner_text(), "error": page.locator("#error").inner_text(),
            "tokens before / after": (partial_tokens, page.locator(".msg.assistant").last.get_attribute("data-tokens")),
            "receipt": session.js("(() => { const r = exactspec.receipt(); return r && {finish: r.finish_reason, "
                                  "counts: r.counts, recovery: r.recovery, faults: r.faults}; })()")}
    assert final.startswith(partial) and len(final) > len(partial), seen
    n = int(page.locator(".msg.assistant").last.get_attribute("data-tokens"))
    assert n > 200
    full = session.generate(prompt="Count with me please", chat=True, max_new_tokens=n, temperature=0)
    assert final == full["text"]
    # copy puts the answer on the clipboard
    session.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.click("#copy")
    assert page.evaluate("navigator.clipboard.readText()") == final
    # a new message after that works
    page.click("#new-chat")
    assert _ui_answer(page, "Hello")


def test_import_user_gguf_and_chat(session, models_dir, cli):
    session.open()
    page = session.page
    page.set_input_files("#import-file", str(models_dir["user-model"]))
    wait_js(page, "document.querySelector('#import-status').textContent.startsWith('Imported')")
    names = [m["name"] for m in session.js("exactspec.listModels()")]
    assert "user-model" in names
    page.click("#models li[data-name='user-model'] button:has-text('Use')")
    wait_js(page, "document.querySelector('#status').textContent.startsWith('Ready: user-model')")
    _set_settings(page, speculation=False, temperature=0, max_new_tokens=10)
    ui_text = _ui_answer(page, "Good morning")
    want = cli(models_dir["user-model"], "Good morning", chat=True, max_new_tokens=10)
    assert ui_text == want["text"]
    got = session.generate(prompt="Good morning", max_new_tokens=10)
    assert got["token_ids"] == want["token_ids"]
    # the former champion becomes the draft from the models list; speculation keeps the answer
    page.click("#models li[data-name='micro-chat'] button:has-text('As draft')")
    wait_js(page, "document.querySelector('#status').textContent.startsWith('Draft: micro-chat')")
    spec = session.generate(prompt="Good morning", max_new_tokens=10, drafter="model", k=3)
    assert spec["token_ids"] == want["token_ids"] and spec["stats"]["draft_passes"] > 0
    # drag and drop onto the drop zone imports too
    page.evaluate("""async () => {
        const buf = await (await fetch('/models/micro-draft.gguf')).arrayBuffer();
        const dt = new DataTransfer();
        dt.items.add(new File([buf], 'dropped-model.gguf'));
        document.querySelector('#dropzone').dispatchEvent(new DragEvent('drop', {dataTransfer: dt, bubbles: true}));
    }""")
    wait_js(page, "document.querySelector('#import-status').textContent.startsWith('Imported dropped-model')")
    assert "dropped-model" in [m["name"] for m in session.js("exactspec.listModels()")]


def test_import_hf_folder_and_generate(session, models_dir, cli):
    session.open()
    page = session.page
    page.set_input_files("#import-folder", str(models_dir["hf-model"]))
    wait_js(page, "/^Import(ed| failed)/.test(document.querySelector('#import-status').textContent)")
    assert page.locator("#import-status").inner_text().startswith("Imported hf-model"), \
        page.locator("#import-status").inner_text()
    m = [x for x in session.js("exactspec.listModels()") if x["name"] == "hf-model"][0]
    assert m["format"] == "hf"
    session.js("exactspec.loadModel('hf-model', 'champion')")
    prompt = "The quick brown fox"
    want = cli(models_dir["hf-model"], prompt, chat=False, max_new_tokens=8)
    got = session.generate(prompt=prompt, chat=False, max_new_tokens=8)
    assert got["token_ids"] == want["token_ids"] and got["text"] == want["text"]
    # no chat template in this folder: a chat request says so
    with pytest.raises(Exception, match="chat template"):
        session.generate(prompt=prompt, chat=True, max_new_tokens=2)


def test_truncated_gguf_clear_error_page_stays_usable(session, models_dir):
    session.open()
    page = session.page
    before = session.js("exactspec.listModels()")
    page.set_input_files("#import-file", str(models_dir["broken-model"]))
    wait_js(page, "document.querySelector('#import-status').textContent.startsWith('Import failed')")
    msg = page.locator("#import-status").inner_text()
    assert "truncated" in msg.lower() or "corrupt" in msg.lower(), msg
    assert "broken-model" in msg
    assert session.js("exactspec.listModels()") == before        # nothing half-written left
    names = session.js("""async () => {
        const root = await navigator.storage.getDirectory();
        const d = await (await root.getDirectoryHandle('exactspec')).getDirectoryHandle('models');
        const n = []; for await (const [x] of d.entries()) n.push(x); return n.sort(); }""")
    assert names == ["micro-chat"]
    # an import larger than the free quota is refused before any byte is written
    with pytest.raises(Exception, match="not enough storage"):
        session.js("exactspec.importModel({url: '/models/micro-draft.gguf', name: 'huge', size: 1e15})")
    # a wrong expected sha256 is refused after the download, and the file is removed
    with pytest.raises(Exception, match="sha256"):
        session.js("exactspec.importModel({url: '/models/micro-draft.gguf', name: 'badsum', sha256: '0'.repeat(64)})")
    assert session.js("exactspec.listModels()") == before
    # a foreign URL is refused with a reason, and the page still chats
    with pytest.raises(Exception, match="only this site"):
        session.js("exactspec.importModel({url: 'http://example.com/x.gguf'})")
    assert _ui_answer(page, "Still there?")


DAMAGE_JS = """async (name) => {
    const root = await navigator.storage.getDirectory();
    const d = await (await (await root.getDirectoryHandle('exactspec')).getDirectoryHandle('models'))
        .getDirectoryHandle(name);
    const w = await (await d.getFileHandle('model.gguf')).createWritable({keepExistingData: true});
    await w.truncate(1000); await w.close(); }"""


def test_damaged_store_files(session, models_dir):
    session.open()
    # a damaged default model (file cut behind the store's back, meta.json intact) is imported again at boot
    session.js(DAMAGE_JS, "micro-chat")
    session.requests.clear()
    r = session.reload()
    assert r["active"]["champion"] == "micro-chat"
    assert any(u.endswith("/models/micro-chat.gguf") for u in session.model_requests())
    # a damaged user model is refused with the reason; the page stays usable
    session.page.set_input_files("#import-file", str(models_dir["user-model"]))
    wait_js(session.page, "/^Import(ed| failed)/.test(document.querySelector('#import-status').textContent)")
    session.js(DAMAGE_JS, "user-model")
    with pytest.raises(Exception, match="damaged.*1000 bytes"):
        session.js("exactspec.loadModel('user-model', 'champion')")
    assert len(session.generate(prompt="Hi", max_new_tokens=3)["token_ids"]) == 3
    session.page.goto(session.base + "/?cpu=1&model=user-model")
    r = session.ready()
    assert r["active"]["champion"] == "micro-chat"            # fell back to a usable model
    weights = [s for s in r["stages"] if s["stage"] == "weights"][0]
    assert any("user-model" in e and "damaged" in e for e in weights["errors"]), weights
    err = session.page.locator("#error")
    assert err.is_visible() and "user-model" in err.inner_text()


def test_settings_validation_and_persistence(session):
    session.open()
    page = session.page
    assert page.locator("#adaptive").is_checked()                  # default: speculate only while it pays
    _set_settings(page, k=2, temperature=0.5, seed=42, adaptive=False, k_schedule="additive", draft_stop=0.4)
    page.locator("#draft_stop").fill("1.5")
    assert page.locator("#settings-error").is_visible() and "draft_stop" in page.locator("#settings-error").inner_text()
    page.locator("#draft_stop").fill("0.4")
    page.locator("#k").fill("99")
    err = page.locator("#settings-error")
    assert err.is_visible() and "k" in err.inner_text()
    page.locator("#k").fill("3")
    page.locator("#top_p").fill("1.5")
    assert err.is_visible() and "top_p" in err.inner_text()
    page.locator("#top_p").fill("0.9")
    assert not err.is_visible()
    session.reload()
    assert page.locator("#k").input_value() == "3"
    assert page.locator("#seed").input_value() == "42"
    assert page.locator("#top_p").input_value() == "0.9"
    assert not page.locator("#adaptive").is_checked()
    assert page.locator("#k_schedule").input_value() == "additive"
    assert page.locator("#draft_stop").input_value() == "0.4"
    # the API refuses invalid values with a message naming the field
    with pytest.raises(Exception, match="top_p|temperature"):
        session.generate(prompt="x", temperature=-1, max_new_tokens=2)


def test_phone_width_and_keyboard(session):
    session.page.set_viewport_size({"width": 360, "height": 740})
    session.open()
    page = session.page
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    # keyboard: the prompt has focus after boot, Enter sends
    assert page.evaluate("document.activeElement.id") == "prompt"
    page.keyboard.type("Hi")
    page.keyboard.press("Enter")
    wait_js(page, "document.querySelectorAll('.msg.assistant').length === 1 && !document.querySelector('.streaming')")
    # the settings panel opens from a button reachable by Tab
    page.focus("#toggle-side")
    page.keyboard.press("Enter")
    assert page.locator("#settings").is_visible()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


@pytest.mark.slow
def test_smollm2_matches_cli(session, models_dir, cli):
    if "smollm2" not in models_dir:
        pytest.skip("SmolLM2 not placed (python build.py setup)")
    session.open()
    t0 = time.time()
    imp = session.js("exactspec.importModel({url: '/models/smollm2.gguf', name: 'smollm2'})")
    t_import = time.time() - t0
    assert imp["sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    t0 = time.time()
    session.js("exactspec.loadModel('smollm2', 'champion')")
    t_load = time.time() - t0
    prompt = "What is the capital of France?"
    got = session.generate(prompt=prompt, chat=True, max_new_tokens=4)
    want = cli(models_dir["smollm2"], prompt, chat=True, max_new_tokens=4)
    assert got["token_ids"] == want["token_ids"]
    assert got["text"] == want["text"]
    print(json.dumps({"smollm2_import_s": round(t_import, 2), "smollm2_load_s": round(t_load, 2),
                      "cpu_tokens_per_s": got["stats"]["tokens_per_s"], "ttft_ms": got["stats"]["ttft_ms"]}))


def test_draft_provenance_label(session, models_dir):
    """A draft shows as verified only with a provenance manifest that names the active champion."""
    session.open()
    page = session.page
    assert session.js("exactspec.status()")["draft_provenance"] is None
    wait_js(page, "document.querySelector('#draft-provenance').dataset.status === 'none'")
    session.js("exactspec.importModel({url: '/models/micro-draft.gguf', name: 'micro-draft', role: 'draft'})")
    got = session.js("exactspec.loadModel('micro-draft', 'draft')")
    assert got["draft_provenance"]["status"] == "verified"
    # a draft without a manifest: unverified
    page.set_input_files("#import-file", str(models_dir["user-model"]))
    wait_js(page, "document.querySelector('#import-status').textContent.startsWith('Imported')")
    page.click("#models li[data-name='user-model'] button:has-text('As draft')")
    wait_js(page, "document.querySelector('#draft-provenance').dataset.status === 'unverified'")
    assert "unverified" in page.locator("#draft-provenance").inner_text()
    assert session.js("exactspec.status()")["draft_provenance"]["status"] == "unverified"
    # the manifest's draft with another champion: not verified for it
    session.js("exactspec.loadModel('user-model', 'champion')")
    got = session.js("exactspec.loadModel('micro-draft', 'draft')")
    assert got["draft_provenance"]["status"] == "other-champion"


def test_generate_backend_choice(session):
    """generate({backend}) runs on the asked backend, stats.backend says which, and the answer is the same."""
    r = session.open("")
    session.js("exactspec.importModel({url: '/models/micro-draft.gguf', name: 'micro-draft', role: 'draft'})")
    session.js("exactspec.loadModel('micro-draft', 'draft')")
    p = dict(prompt="Name a color.", chat=True, max_new_tokens=8, temperature=0.8, seed=3, drafter="model", k=3)
    cpu = session.generate(**p, backend="cpu")
    assert cpu["stats"]["backend"] == "cpu"
    if r["backend"] == "webgpu":
        gpu = session.generate(**p, backend="webgpu")
        assert gpu["stats"]["backend"] == "webgpu"
        assert gpu["token_ids"] == cpu["token_ids"]
    with pytest.raises(Exception, match="backend must be"):
        session.generate(**p, backend="tpu")


def test_a_chat_longer_than_the_context_in_the_chat_ui(session):
    """In the chat: once the conversation no longer fits the micro-model's 256 tokens with max_new_tokens free, the
    next answer leaves out the oldest turn; the transcript marks it, the status line says so, nothing is removed."""
    session.open()
    page = session.page
    _set_settings(page, speculation=False, max_new_tokens=120, temperature=0)
    for i, text in enumerate(["Count with me please", "And once more"]):
        page.fill("#prompt", text)
        page.press("#prompt", "Enter")
        wait_js(page, f"document.querySelectorAll('.msg.assistant').length === {i + 1} && "
                      "document.querySelector('#send').disabled === false && !document.querySelector('.streaming')")
    msgs = page.locator(".msg")
    assert msgs.count() == 4 and page.locator("#error").inner_text() == ""
    marked = [msgs.nth(i).evaluate("e => e.classList.contains('out-of-context')") for i in range(4)]
    assert marked == [True, True, False, False], marked
    assert "oldest messages were left out" in page.locator("#status").inner_text()
    assert session.js("exactspec.receipt().counts.dropped_messages") == 2
    assert msgs.nth(0).inner_text() == "Count with me please"                  # shown, only not read
