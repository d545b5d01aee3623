"""Losing the GPU mid-answer (a real GPU-process crash, through the DevTools protocol), in the chat UI: the page
recovers (a new device, else the CPU fallback), says so, and finishes the answer from its last committed token with
the champion's own tokens (issue 12; the injected device_lost faults: test_fault_matrix.py). Own module: the crash
hits the whole browser's GPU process.
"""
from __future__ import annotations

import pytest

from test_page import _set_settings, wait_js

PROMPT = "Tell me a long story about a lighthouse."


def test_gpu_lost_mid_answer_recovers_and_finishes_the_same_answer(session):
    """The GPU process crashes mid-answer: the page gets a new device (or, if none comes, switches to the CPU
    fallback), says so on the status line, and finishes the same answer from its last committed token — the champion's
    own answer (the CPU backend is the oracle), the streamed text never doubled."""
    r = session.open("")
    if r["backend"] != "webgpu":
        pytest.skip(f"no WebGPU adapter in this browser ({r.get('reason')})")
    page = session.page
    # 100 new tokens: the micro champion's context (256) holds the prompt and the answer
    _set_settings(page, speculation=False, max_new_tokens=100, temperature=0)
    page.evaluate("() => { window.__n = 0; window.__text = ''; exactspec.on('tokens', (e) => { "
                  "window.__n += e.token_ids.length; window.__text += e.text; }); }")
    page.fill("#prompt", PROMPT)
    page.press("#prompt", "Enter")
    wait_js(page, "window.__n >= 3")
    n_at_crash = page.evaluate("window.__n")
    session.context.browser.new_browser_cdp_session().send("Browser.crashGpuProcess")
    wait_js(page, "document.querySelector('#send').disabled === false && !document.querySelector('.streaming')",
            timeout=300)
    msg = page.locator(".msg.assistant").last
    final, n = msg.text_content(), int(msg.get_attribute("data-tokens"))
    print(f"{n_at_crash} tokens streamed when the GPU process crashed; {n} in the answer")
    assert n > n_at_crash and page.evaluate("window.__text") == final        # one stream, nothing doubled
    status = page.locator("#status").inner_text()
    assert "GPU device was lost" in status and ("new GPU device" in status or "CPU fallback" in status), status
    assert "device_lost" not in page.locator("#error").inner_text()
    full = session.generate(prompt=PROMPT, chat=True, max_new_tokens=n, temperature=0, drafter="none", backend="cpu")
    assert full["stats"]["backend"] == "cpu" and final == full["text"]
    assert not session.errors
