"""Losing the GPU mid-answer (a real GPU-process crash, through the DevTools protocol): the answer ends at its last
committed token (exactly what was streamed), the page switches to the CPU fallback and says so, and Continue
finishes the answer there with the champion's own tokens. Own module: the crash hits the whole browser's GPU process.
"""
from __future__ import annotations

import pytest

PROMPT = dict(prompt="Tell me a long story about a lighthouse.", chat=True, temperature=0, drafter="none")


def test_gpu_lost_mid_answer_keeps_committed_text_and_falls_back(session):
    r = session.open("")
    if r["backend"] != "webgpu":
        pytest.skip(f"no WebGPU adapter in this browser ({r.get('reason')})")
    # the champion's own greedy answer, on the CPU backend (the oracle for both halves)
    full = session.generate(**PROMPT, max_new_tokens=60, backend="cpu")["token_ids"]
    session.generate(**PROMPT, max_new_tokens=1, backend="webgpu")          # back on the GPU
    session.js("""() => {
        window.__ids = [];
        window.__ans = exactspec.generate(%s, {onToken: (t, ids) => window.__ids.push(...ids)});
    }""" % ('{"prompt": "Tell me a long story about a lighthouse.", "chat": true, "temperature": 0, '
            '"drafter": "none", "max_new_tokens": 60}'))
    session.page.wait_for_function("window.__ids.length >= 2")
    session.context.browser.new_browser_cdp_session().send("Browser.crashGpuProcess")
    ans = session.js("window.__ans")
    streamed = session.js("window.__ids")
    print(f"streamed {len(streamed)} tokens before the GPU was lost")
    assert ans["finish_reason"] == "error" and "device lost" in ans["error"], ans
    assert ans["fallback"] == "cpu"
    assert ans["token_ids"] == streamed and 2 <= len(streamed) < 60       # nothing lost, nothing unstreamed
    assert streamed == full[:len(streamed)]                                # the GPU part was the champion's own
    st = session.js("exactspec.status()")
    assert st["backend"] == "cpu" and "device lost" in st["gpu_reason"]
    # Continue finishes the same answer on the CPU: the two halves are the champion's whole answer
    rest = session.js("(p) => exactspec.continue(p)", dict(PROMPT, max_new_tokens=60 - len(streamed)))
    assert rest["stats"]["backend"] == "cpu"
    assert streamed + rest["token_ids"] == full
    assert not session.errors
