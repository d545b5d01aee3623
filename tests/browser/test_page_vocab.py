"""A draft on another vocabulary in the page: a micro draft with a SentencePiece-style tokenizer (420 tokens) beside
the micro champion's byte-level one (300), through the page API and the settings panel, on the CPU fallback and on
the default backend (the WebGPU engine runs the draft's passes; the bridge runs in Python)."""
from __future__ import annotations

from test_page import _set_settings, wait_js


def test_foreign_draft_answers_like_the_champion_and_the_panel_names_the_bridge(session):
    r = session.open("")
    page = session.page
    session.js("exactspec.importModel({url: '/models/micro-spm-draft.gguf', name: 'micro-spm-draft', role: 'draft'})")
    got = session.js("exactspec.loadModel('micro-spm-draft', 'draft')")
    assert got["role"] == "draft"
    st = session.js("exactspec.status()")
    b = st["bridge"]
    assert b["draft"] == "micro-spm-draft" and not b["same"] and not b["remap"]
    assert b["auto"] == {"coupled": "slem", "rejection": "tli"} and b["shared"] > 100
    assert any("SentencePiece" in d for d in b["differences"])
    backends = ["cpu"] + (["webgpu"] if r["backend"] == "webgpu" else [])
    for backend in backends:
        for sampling in (dict(temperature=0), dict(temperature=0.9, top_k=50, seed=5, mode="coupled")):
            p = dict(prompt="Tell me about the cat in the hat.", chat=True, max_new_tokens=12, backend=backend,
                     **sampling)
            base = session.generate(**p, drafter="none")
            for bridge in ("auto", "tli", "slem"):
                res = session.generate(**p, drafter="model", k=3, bridge=bridge)
                assert res["token_ids"] == base["token_ids"], (backend, sampling, bridge)
                assert res["stats"]["bridge"] == ("slem" if bridge == "auto" else bridge)
                assert res["stats"]["backend"] == backend and res["stats"]["draft_passes"] > 0
        with_remap = session.page.evaluate("(p) => exactspec.generate(p).then(() => 'ok', (e) => e.message)",
                                           dict(prompt="Hi", chat=True, max_new_tokens=4, drafter="model",
                                                bridge="remap", backend=backend))
        assert "remap needs the same token strings" in with_remap
    # the settings panel: the bridge select and what is in use
    page.click("#new-chat")
    _set_settings(page, speculation=True, drafter="model", k=3, temperature=0, bridge="auto")
    wait_js(page, "document.querySelector('#bridge-info').dataset.bridge === 'slem'")
    assert "SentencePiece" in page.locator("#bridge-info").inner_text()
    _set_settings(page, bridge="tli")
    page.fill("#prompt", "Hello there")
    page.click("#send")
    wait_js(page, "document.querySelector('#send').disabled === false && !document.querySelector('.streaming')")
    wait_js(page, "document.querySelector('#bridge-info').textContent.includes('tli (last answer)')")
    _set_settings(page, drafter="ngram")
    wait_js(page, "document.querySelector('#bridge-info').textContent === ''")
    assert page.locator("#bridge").is_disabled()
