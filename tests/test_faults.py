"""The decode loop's part of the fault matrix (issue 12), in CPython: every fault kind that reaches the loop, at every
phase it applies to, for greedy and coupled sampling, with a draft model and the n-gram drafter. Each faulty answer
must equal a clean run's byte for byte, its streamed chunks must concatenate to its text (nothing doubled, nothing
lost), and its result must say what happened (notices, recovery, the receipt). The page's side (worker restarts,
device loss on SwiftShader, OPFS faults) is tests/browser/test_fault_matrix.py.

The host's kinds are simulated here as the page's host would act: device_lost makes the backends fail like a lost
WebGPU device and `recover` reloads the models on a fresh (CPU) backend; worker_killed ends the session mid-answer
(WorkerKilled) and a new session resumes from the committed ids the "page" received, as app/supervisor.js does.
"""
from __future__ import annotations

import asyncio
import json
import re

import pytest

from exactspec.faults import (APPLIES, KINDS, PHASES, FaultError, FaultPlan, InjectedFault, WorkerKilled,
                              check_fault, parse_faults)
from exactspec.micro import micro_config, write_micro_gguf
from exactspec.session import Session

PROMPT = "Tell me a story about the sea."
MAX_NEW = 28
MODES = {"greedy": {"temperature": 0.0}, "coupled": {"temperature": 0.8, "top_k": 40, "seed": 1234}}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults")
    champ, draft = d / "champ.gguf", d / "draft.gguf"
    write_micro_gguf(champ, micro_config(), seed=1)
    write_micro_gguf(draft, micro_config(n_layers=1), seed=7)
    return {"champion": str(champ), "draft": str(draft)}


class Lost:
    """A backend whose device can be lost: after `lose()` every call fails as a lost WebGPU device does."""

    def __init__(self, inner, flag):
        self.inner, self.flag, self.config = inner, flag, inner.config

    def _alive(self):
        if self.flag["lost"]:
            raise RuntimeError("device lost: destroyed: injected")

    @property
    def length(self):
        return self.inner.length

    def forward(self, tokens, start_pos, n_out=None):
        self._alive()
        return self.inner.forward(tokens, start_pos, n_out)

    def truncate(self, n):
        self._alive()
        self.inner.truncate(n)


def _session(files, lost_flag=None):
    s = Session()
    if lost_flag is None:
        s.load("champ", files["champion"])
        s.load("draft", files["draft"], role="draft")
    else:
        from exactspec.reference import ReferenceModel
        s.load("champ", files["champion"], backend=Lost(ReferenceModel.from_file(files["champion"]), lost_flag),
               backend_name="webgpu")
        s.load("draft", files["draft"], role="draft",
               backend=Lost(ReferenceModel.from_file(files["draft"]), lost_flag), backend_name="webgpu")
    return s


def _req(mode, drafter, **kw):
    return {"prompt": PROMPT, "chat": True, "max_new_tokens": MAX_NEW, "drafter": drafter, "k": 3,
            "adaptive": False, **MODES[mode], **kw}


def _run(s, req, **kw):
    chunks = []
    out = asyncio.run(s.generate(req, lambda j: chunks.append(json.loads(j)), **kw))
    return out, chunks


@pytest.fixture(scope="module")
def clean(files):
    """The clean answers (no fault) per mode, with and without speculation (they are equal: exactness)."""
    s = _session(files)
    out = {}
    for mode in MODES:
        a, _ = _run(s, _req(mode, "none"))
        b, _ = _run(s, _req(mode, "model"))
        assert a["text"] == b["text"] and a["token_ids"] == b["token_ids"]
        assert len(a["token_ids"]) >= 8, a
        out[mode] = a
    return out


def _same(out, chunks, ref):
    assert out["token_ids"] == ref["token_ids"]
    assert out["text"] == ref["text"]
    assert "".join(c["text"] for c in chunks) == out["text"]            # nothing shown twice, nothing lost
    assert [i for c in chunks for i in c["token_ids"]] == out["token_ids"]


# ---- the table and the syntax --------------------------------------------------------------------------------------------
def test_fault_specs_are_checked():
    assert parse_faults("exception@verify:2, draft_only@draft,worker_killed@load") == [
        {"kind": "exception", "phase": "verify", "round": 2}, {"kind": "draft_only", "phase": "draft", "round": 1},
        {"kind": "worker_killed", "phase": "load", "round": 1}]
    for bad, match in (("nope@verify", "kind"), ("exception@later", "phase"), ("gpu_alloc@verify", "does not apply"),
                       ("exception@load", "does not apply"), ("exception@verify:x", "round"),
                       ("exception@verify:0", "round")):
        with pytest.raises(FaultError, match=match):
            parse_faults(bad)
    assert set(APPLIES) == set(KINDS) and all(set(v) <= set(PHASES) for v in APPLIES.values())


def test_js_table_is_the_same():
    """app/faults.js spells the same kinds, phases and table (the page arms and checks faults with it)."""
    from pathlib import Path
    src = (Path(__file__).resolve().parents[1] / "app" / "faults.js").read_text()
    m = re.search(r"/\* TABLE \*/(.*?)/\* END TABLE \*/", src, re.S)
    assert m, "app/faults.js lacks its TABLE block"
    table = json.loads(m.group(1))
    assert table == {"kinds": list(KINDS), "phases": list(PHASES), "applies": {k: list(v) for k, v in APPLIES.items()}}


def test_a_fault_fires_once_at_its_round():
    seen = []
    p = FaultPlan([{"kind": "exception", "phase": "verify", "round": 3}], on_fire=seen.append)
    for r in (1, 2):
        p.next_round()
        p.hit("verify")
    p.next_round()
    with pytest.raises(InjectedFault):
        p.hit("verify")
    p.next_round()
    p.hit("verify")                          # fired once
    assert [f["at_round"] for f in seen] == [3] and p.fired == seen
    with pytest.raises(FaultError):
        check_fault({"kind": "exception", "phase": "verify", "round": True})


# ---- exception and draft_only: the champion alone finishes the answer --------------------------------------------------
LOOP_CASES = [(k, ph) for k in ("exception", "draft_only") for ph in APPLIES[k] if ph != "load"]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("kind,phase", LOOP_CASES)
def test_loop_faults_finish_with_the_champion_alone(files, clean, kind, phase, mode):
    s = _session(files)
    fired = []
    out, chunks = _run(s, _req(mode, "model", faults=[{"kind": kind, "phase": phase, "round": 2}]),
                       on_fault=lambda j: fired.append(json.loads(j)))
    _same(out, chunks, clean[mode])
    assert out["finish_reason"] == clean[mode]["finish_reason"]
    assert [f["kind"] for f in fired] == [kind] and fired[0]["phase"] == phase
    assert out["recovery"][0]["action"] == "speculation_off" and out["recovery"][0]["cause"] == kind
    assert "champion alone" in out["notices"][0]
    r = out["receipt"]
    assert r["faults"][0]["kind"] == kind and r["recovery"][0]["action"] == "speculation_off"
    assert r["policy"]["speculation_off_after_fault"] and r["counts"]["attempts"] == 2
    # the next answer is clean again, with speculation
    again, ch = _run(s, _req(mode, "model"))
    _same(again, ch, clean[mode])
    assert again["stats"]["draft_passes"] > 0 and "recovery" not in again


@pytest.mark.parametrize("phase", ["prefill", "draft", "verify", "commit"])
def test_exception_with_the_ngram_drafter_and_without_speculation(files, clean, phase):
    s = _session(files)
    for drafter in ("ngram", "none"):
        if drafter == "none" and phase == "draft":
            continue                           # no draft phase without a drafter
        out, chunks = _run(s, _req("greedy", drafter, faults=[{"kind": "exception", "phase": phase, "round": 2}]))
        _same(out, chunks, clean["greedy"])
        assert out["recovery"][0]["action"] == "speculation_off"


def test_an_exception_that_comes_back_ends_the_answer_at_the_last_committed_token(files, clean):
    """Two exceptions: the first is recovered (champion alone), the second ends the answer; what was streamed is
    exactly the committed prefix of the clean answer."""
    s = _session(files)
    out, chunks = _run(s, _req("greedy", "model", faults=[{"kind": "exception", "phase": "verify", "round": 2},
                                                          {"kind": "exception", "phase": "verify", "round": 5}]))
    assert out["finish_reason"] == "error" and out["failed"] == "loop"
    n = len(out["token_ids"])
    assert 0 < n < len(clean["greedy"]["token_ids"]) and out["token_ids"] == clean["greedy"]["token_ids"][:n]
    assert "".join(c["text"] for c in chunks) == out["text"] and clean["greedy"]["text"].startswith(out["text"])
    cont, ch2 = _run(s, {**_req("greedy", "none"), "continue": True, "max_new_tokens": MAX_NEW - n})
    assert out["text"] + cont["text"] == clean["greedy"]["text"]


# ---- device_lost: a new backend, the same answer -------------------------------------------------------------------------
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("phase", [p for p in APPLIES["device_lost"] if p != "load"])
def test_device_lost_continues_on_the_recovered_backend(files, clean, phase, mode):
    flag = {"lost": False}
    s = _session(files, flag)
    host_calls, recovers = [], []

    def host(kind, ph, rnd):
        host_calls.append((kind, ph, rnd))
        if kind == "device_lost":
            flag["lost"] = True

    def recover(info):
        recovers.append(json.loads(info))
        s.load("champ", files["champion"])               # the CPU fallback: the same file, a fresh backend
        s.load("draft", files["draft"], role="draft")
        return json.dumps({"ok": True, "how": "cpu_fallback"})

    out, chunks = _run(s, _req(mode, "model", faults=[{"kind": "device_lost", "phase": phase, "round": 2}]),
                       fault_host=host, recover=recover)
    _same(out, chunks, clean[mode])
    assert host_calls == [("device_lost", phase, host_calls[0][2])] and "device lost" in recovers[0]["error"]
    assert out["recovery"][0] == {"cause": "device_lost", "action": "cpu_fallback",
                                  "at_token": out["recovery"][0]["at_token"], "backend": "cpu"}
    assert "CPU fallback" in out["notices"][0] and out["stats"]["backend"] == "cpu"
    assert out["receipt"]["backend"]["champion"] == "cpu"


def test_device_lost_without_a_way_to_recover_ends_at_the_committed_prefix(files, clean):
    flag = {"lost": False}
    s = _session(files, flag)
    out, chunks = _run(s, _req("greedy", "model", faults=[{"kind": "device_lost", "phase": "verify", "round": 3}]),
                       fault_host=lambda k, p, r: flag.update(lost=True))
    assert out["finish_reason"] == "error" and "device lost" in out["error"]
    n = len(out["token_ids"])
    assert out["token_ids"] == clean["greedy"]["token_ids"][:n] and "".join(c["text"] for c in chunks) == out["text"]


# ---- worker_killed: a new worker resumes from what the page received -----------------------------------------------------
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("phase", [p for p in APPLIES["worker_killed"] if p != "load"])
def test_worker_killed_resumes_in_a_new_session(files, clean, phase, mode):
    s = _session(files)
    received = []                                       # what the page got before the worker died
    req = _req(mode, "model", faults=[{"kind": "worker_killed", "phase": phase, "round": 3}])
    with pytest.raises(WorkerKilled):
        asyncio.run(s.generate(req, lambda j: received.append(json.loads(j))))
    got = [i for c in received for i in c["token_ids"]]
    text = "".join(c["text"] for c in received)
    assert got == clean[mode]["token_ids"][:len(got)]
    s2 = _session(files)                                # a fresh worker: models reloaded from storage
    rest, chunks = _run(s2, {**_req(mode, "model"), "max_new_tokens": MAX_NEW - len(got),
                             "resume": {"answer": got, "stream": got}})
    assert got + rest["token_ids"] == clean[mode]["token_ids"]
    assert text + rest["text"] == clean[mode]["text"] == text + "".join(c["text"] for c in chunks)
    assert rest["receipt"]["policy"]["resumed"]


def test_resume_is_checked(files):
    s = _session(files)
    for bad in ({"answer": [-1]}, {"answer": [10 ** 9]}, {"answer": "x"}, []):
        with pytest.raises(Exception, match="resume"):
            asyncio.run(s.generate({**_req("greedy", "none"), "resume": bad}))


def test_cancel_and_clean_answers_unchanged(files, clean):
    s = _session(files)
    out, chunks = _run(s, _req("greedy", "ngram"))
    _same(out, chunks, clean["greedy"])
    assert "recovery" not in out and out["receipt"]["faults"] == [] and out["stats"]["attempts"] == 1


def test_js_parser_agrees_with_python():
    """app/faults.js parses and refuses the URL syntax as exactspec.faults does (node runs the page's module)."""
    import shutil
    import subprocess
    from pathlib import Path
    node = shutil.which("node")
    if node is None:
        pytest.skip("node missing")
    specs = ["exception@verify:2, draft_only@draft,worker_killed@load", "device_lost@commit:7", "",
             "nope@verify", "exception@later", "gpu_alloc@verify", "exception@load", "exception@verify:x",
             "exception@verify:0", "opfs_write@load:3"]
    faults_js = (Path(__file__).resolve().parents[1] / "app" / "faults.js").as_uri()
    script = (f"const m = await import({json.dumps(faults_js)}); const out = [];"
              f"for (const s of {json.dumps(specs)}) {{ try {{ out.push(m.parseFaults(s)); }}"
              " catch (e) { out.push(e instanceof m.FaultError ? 'refused' : 'crash: ' + e.message); } }"
              "console.log(JSON.stringify(out));")
    r = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    for spec, js in zip(specs, got):
        try:
            py = parse_faults(spec)
        except FaultError:
            py = "refused"
        assert js == py, (spec, js, py)
