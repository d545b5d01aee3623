"""Losing the GPU mid-answer (a real GPU-process crash, through the DevTools protocol), in the chat UI: the answer
ends at its last committed token (what was streamed), the page says it switched to the CPU fallback, and Continue
finishes the answer there with the champion's own tokens. Own module: the crash hits the whole browser's GPU process.
"""
from __future__ import annotations

import pytest

from test_page import _set_settings, wait_js

PROMPT = "Tell me a long story about a lighthouse."


def test_gpu_lost_mid_answer_keeps_text_falls_back_and_continues(session):
    r = session.open("")
    if r["backend"] != "webgpu":
        pytest.skip(f"no WebGPU adapter in this browser ({r.get('reason')})")
    page = session.page
    # 100 new tokens: the micro champion's context (256) holds the prompt, the lost answer and its continuation
    _set_settings(page, speculation=False, max_new_tokens=100, temperature=0)
    page.evaluate("() => { window.__n = 0; exactspec.on('tokens', (e) => { window.__n += e.token_ids.length; }); }")
    page.fill("#prompt", PROMPT)
    page.press("#prompt", "Enter")
    wait_js(page, "window.__n >= 3")
    session.context.browser.new_browser_cdp_session().send("Browser.crashGpuProcess")
    wait_js(page, "document.querySelector('#send').disabled === false && !document.querySelector('.streaming')")
    msg = page.locator(".msg.assistant").last
    partial, n_partial = msg.inner_text(), int(msg.get_attribute("data-tokens"))
    print(f"{n_partial} tokens streamed before the GPU was lost")
    assert 3 <= n_partial < 100 and partial
    error = page.locator("#error").inner_text()
    assert "failed mid-answer" in error and "device lost" in error and "CPU fallback" in error
    assert "CPU fallback" in page.locator("#status").inner_text()
    st = session.js("exactspec.status()")
    assert st["backend"] == "cpu" and "device lost" in st["gpu_reason"]
    # Continue (the real button) finishes the same answer on the CPU
    assert page.locator("#continue").is_enabled()
    page.click("#continue")
    wait_js(page, "document.querySelector('#send').disabled === false && !document.querySelector('.streaming') && "
                  f"Number([...document.querySelectorAll('.msg.assistant')].pop().dataset.tokens) > {n_partial}")
    final = msg.inner_text()
    n = int(msg.get_attribute("data-tokens"))
    assert final.startswith(partial) and n > n_partial
    # the champion's own answer (the CPU backend is the oracle), for the GPU part and for the whole
    full = session.generate(prompt=PROMPT, chat=True, max_new_tokens=n, temperature=0, drafter="none")
    assert full["stats"]["backend"] == "cpu" and final == full["text"]
    head = session.generate(prompt=PROMPT, chat=True, max_new_tokens=n_partial, temperature=0, drafter="none")
    assert head["text"] == partial
    assert not session.errors
