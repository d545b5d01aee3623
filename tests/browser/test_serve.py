"""CPython-side tests of the browser runtime: build.py's serve pieces (Pyodide layout with lock-checked wheels,
exactspec wheel, HTTP server headers) and the worker's Python side (session.py, bridge.JsBackend)."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import shutil
import threading
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import pytest

import build
from exactspec.micro import micro_config, write_micro_gguf


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    p = tmp_path_factory.mktemp("serve") / "m.gguf"
    write_micro_gguf(p, micro_config(), seed=1)
    return p


@pytest.fixture(scope="module")
def plain_server(micro):
    build.setup_pyodide()
    srv = build.make_server(0, [{"name": "m", "path": micro, "size": micro.stat().st_size,
                                 "sha256": hashlib.sha256(micro.read_bytes()).hexdigest(), "role": "champion"}])
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def run(coro):
    """asyncio.run in a fresh thread: the Playwright fixtures keep an event loop running in this one."""
    box = {}

    def target():
        try:
            box["v"] = asyncio.run(coro)
        except BaseException as e:  # re-raised in the caller
            box["e"] = e
    t = threading.Thread(target=target)
    t.start()
    t.join()
    if "e" in box:
        raise box["e"]
    return box["v"]


def fetch(url, method="GET"):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_server_mime_cache_csp(plain_server):
    base = plain_server
    st, h, body = fetch(base + "/manifest.json")
    assert st == 200
    man = json.loads(body)
    cases = {
        "/": "text/html",
        man["pyodide"] + "pyodide.mjs": "text/javascript",
        man["pyodide"] + "pyodide.asm.wasm": "application/wasm",
        man["wheel"]: "application/zip",
        "/models/m.gguf": "application/octet-stream",
        "/app/worker.js": "text/javascript",
    }
    for path, ctype in cases.items():
        st, h, _ = fetch(base + path, "HEAD")
        assert st == 200, path
        assert h["Content-Type"].startswith(ctype), (path, h["Content-Type"])
        csp = h["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "connect-src 'self'" in csp
        assert "http" not in csp                                     # no other origin allowed
    assert "immutable" in fetch(base + man["pyodide"] + "pyodide.asm.wasm", "HEAD")[1]["Cache-Control"]
    assert "max-age=31536000" in fetch(base + man["wheel"], "HEAD")[1]["Cache-Control"]
    assert fetch(base + "/app/main.js", "HEAD")[1]["Cache-Control"] == "no-cache"
    assert fetch(base + "/models/m.gguf", "HEAD")[1]["Cache-Control"] == "no-store"
    # revalidation: an unchanged file answers 304 with no body
    st, h, _ = fetch(base + "/app/main.js")
    req = urllib.request.Request(base + "/app/main.js", headers={"If-None-Match": h["ETag"]})
    try:
        urllib.request.urlopen(req, timeout=30)
        raise AssertionError("expected 304")
    except urllib.error.HTTPError as e:
        assert e.code == 304
    m = man["models"][0]
    assert m["url"] == "/models/m.gguf" and len(m["sha256"]) == 64 and m["role"] == "champion"


@pytest.mark.parametrize("path", ["/app/../build.py", "/app/%2e%2e/build.py", "/node_modules/pyodide/package.json",
                                  "/static/../pyproject.toml", "/.git/HEAD", "/models/../build.py", "/app/",
                                  "/models/other.gguf", "/app/.hidden"])
def test_server_refuses_outside_paths(plain_server, path):
    st, _, _ = fetch(plain_server + path)
    assert st == 404


def test_setup_pyodide_refuses_lock_mismatch(tmp_path):
    npm = tmp_path / "npm"
    shutil.copytree(build.ROOT / "node_modules" / "pyodide", npm)
    lock = json.loads((npm / "pyodide-lock.json").read_text())
    lock["packages"]["micropip"]["sha256"] = "0" * 64
    (npm / "pyodide-lock.json").write_text(json.dumps(lock))
    dest = tmp_path / "out"
    with pytest.raises(build.SetupError, match="sha256"):
        build.setup_pyodide(npm_dir=npm, dest=dest)
    assert not (dest / lock["packages"]["micropip"]["file_name"]).exists()
    # the untouched lock works, and each wheel matches it
    good = build.setup_pyodide()
    real = json.loads((build.ROOT / "node_modules" / "pyodide" / "pyodide-lock.json").read_text())
    for pkg in ("numpy", "micropip", "packaging"):
        e = real["packages"][pkg]
        assert build.sha256_file(good / e["file_name"]) == e["sha256"]


def test_exactspec_wheel_is_valid_and_deterministic():
    w1 = build.build_exactspec_wheel()
    w2 = build.build_exactspec_wheel()
    assert w1 == w2 and w1.parent.parent == build.WHEELS
    with zipfile.ZipFile(w1) as z:
        names = z.namelist()
        assert "exactspec/session.py" in names and "exactspec/bridge.py" in names
        assert "exactspec/formats/gguf.py" in names
        assert not any(n.startswith(("exactspec_train/", "exactspec/train/")) for n in names)
        record = z.read("exactspec-0.1.0.dist-info/RECORD").decode().splitlines()
        for line in record:
            arc, digest, size = line.rsplit(",", 2)
            if not digest:
                continue
            data = z.read(arc)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={want}" and int(size) == len(data), arc
        assert "Root-Is-Purelib: true" in z.read("exactspec-0.1.0.dist-info/WHEEL").decode()
    assert w1.parent.name == hashlib.sha256(b"".join(
        n.encode() + b"\0" + hashlib.sha256(d).digest() for n, d in _entries(w1))).hexdigest()[:16]


def _entries(wheel: Path):
    with zipfile.ZipFile(wheel) as z:
        return [(n, z.read(n)) for n in z.namelist()]


# ---- session.py and bridge.py in CPython ------------------------------------------------------------------------
class FakeJsModel:
    """Shaped like the WebGPU engine's model: async forward -> flat float32 buffer, sync truncate, length."""

    def __init__(self, ref):
        self.ref = ref
        self.config = ref.config.to_json()
        self.calls = 0

    @property
    def length(self):
        return self.ref.length

    def truncate(self, n):
        self.ref.truncate(n)

    def forward(self, tokens, start_pos, n_out):
        self.calls += 1
        out = self.ref.forward(list(tokens), start_pos, n_out).ravel()     # (n_out * vocab,)

        async def later():
            await asyncio.sleep(0)
            return memoryview(out.tobytes()).cast("f").tolist()
        return later()


def test_jsbackend_matches_reference(micro):
    from exactspec.bridge import JsBackend
    from exactspec.reference import ReferenceModel
    from exactspec.session import Session
    s_ref = Session()
    s_ref.load("m", str(micro))
    fake = FakeJsModel(ReferenceModel.from_file(micro))
    s_js = Session(backend_name="webgpu")
    s_js.load("m", str(micro), backend=JsBackend(fake))
    req = {"prompt": "Hello", "chat": True, "max_new_tokens": 12, "drafter": "ngram", "k": 3}
    a = run(s_ref.generate(req))
    b = run(s_js.generate(req))
    assert a["token_ids"] == b["token_ids"] and a["text"] == b["text"]
    assert b["stats"]["backend"] == "webgpu" and a["stats"]["backend"] == "cpu"
    assert fake.calls > 0
    jb = JsBackend(fake)
    with pytest.raises(ValueError, match="start_pos"):
        jb.forward([1, 2], start_pos=jb.length + 5)
    with pytest.raises(ValueError, match="lacks"):
        JsBackend(type("X", (), {"config": {"dim": 4}})())


def test_session_stream_cancel_continue_errors(micro):
    from exactspec.session import Session, SessionError
    s = Session()
    with pytest.raises(SessionError, match="no model"):
        run(s.generate({"prompt": "x"}))
    s.load("m", str(micro))
    full = run(s.generate({"prompt": "Count", "chat": True, "max_new_tokens": 40}))
    events = []

    def emit(j):
        d = json.loads(j)
        events.append(d)
        if sum(len(e["token_ids"]) for e in events) >= 7:
            s.cancel()
    part = run(s.generate({"prompt": "Count", "chat": True, "max_new_tokens": 40}, emit))
    assert part["finish_reason"] == "cancelled"
    k = len(part["token_ids"])
    assert 7 <= k < 40 and part["token_ids"] == full["token_ids"][:k]
    assert "".join(e["text"] for e in events) == part["text"]
    rest = run(s.generate({"continue": True, "max_new_tokens": 40 - k}))
    assert part["token_ids"] + rest["token_ids"] == full["token_ids"]
    assert part["text"] + rest["text"] == full["text"]
    with pytest.raises(SessionError, match="draft"):
        run(s.generate({"prompt": "x", "drafter": "model", "k": 2}))
    with pytest.raises(SessionError, match="temperature"):
        run(s.generate({"prompt": "x", "temperature": -1}))
    with pytest.raises(SessionError, match="context"):
        run(s.generate({"prompt": "x", "max_new_tokens": 8_000}))
    with pytest.raises(SessionError, match="role"):
        s.load("m2", str(micro), role="judge")


def test_continue_writes_what_the_context_holds(micro):
    """A Continue's prompt holds the answer so far, so max_new_tokens can overflow the context: it writes what fits
    (the same tokens as one answer to the context's end), says so, and refuses only when nothing fits."""
    from exactspec.session import Session, SessionError
    s = Session()
    s.load("m", str(micro))
    req = {"prompt": "Count with me please", "chat": True}
    n_ctx = s.models["m"].config.seq_len
    head = run(s.generate({**req, "max_new_tokens": 8}))
    room = n_ctx - head["prompt_tokens"]
    full = run(s.generate({**req, "max_new_tokens": room}))
    assert full["finish_reason"] == "length" and len(full["token_ids"]) == room   # (no EOS: the test needs all)
    events = []

    def emit(j):
        events.append(json.loads(j))
        if sum(len(e["token_ids"]) for e in events) >= 40:
            s.cancel()
    part = run(s.generate({**req, "max_new_tokens": 200}, emit))
    assert part["finish_reason"] == "cancelled"
    k = len(part["token_ids"])
    assert k + 200 > room, "the test needs a Continue that overflows the context"
    rest = run(s.generate({"continue": True, "max_new_tokens": 200}))
    assert rest["finish_reason"] == "length" and len(rest["token_ids"]) == room - k
    assert part["token_ids"] + rest["token_ids"] == full["token_ids"]
    assert part["text"] + rest["text"] == full["text"]
    assert any(f"room for {room - k} more tokens" in x for x in rest["notices"]), rest.get("notices")
    assert rest["receipt"]["policy"]["continued"]
    with pytest.raises(SessionError, match=r"context \(\d+ tokens\) is full"):
        run(s.generate({"continue": True, "max_new_tokens": 200}))
    with pytest.raises(SessionError, match="exceeds the context length"):    # a new prompt still must fit whole
        run(s.generate({**req, "max_new_tokens": room + 1}))


def test_a_chat_longer_than_the_context_leaves_out_its_oldest_turns(micro):
    """A chat whose prompt leaves fewer than max_new_tokens of the context free leaves out its oldest whole turns
    (the system message and the last message stay), the fewest that make it fit, and says so; a resume leaves out
    the same turns (its budget: the first request's max_new_tokens); a last message too long alone is an error."""
    from exactspec.session import Session, SessionError
    s = Session()
    s.load("m", str(micro))
    n_ctx = s.models["m"].config.seq_len
    turns = [{"role": "system", "content": "Be brief."}]
    for i in range(8):
        turns += [{"role": "user", "content": f"Question {i}: count the letters of abcdefgh"},
                  {"role": "assistant", "content": f"Answer {i}: there are eight letters here."}]
    chat = turns + [{"role": "user", "content": "And now count to ten"}]
    assert len(s.prompt_ids({"chat": chat})) + 40 > n_ctx, "the test needs a chat longer than the context"
    r = run(s.generate({"chat": chat, "max_new_tokens": 40}))
    d = r["dropped_messages"]
    kept = chat[:1] + chat[1 + d:]
    assert d % 2 == 0 and kept[1]["role"] == "user" and kept[-1] == chat[-1]
    assert len(s.prompt_ids({"chat": kept})) + 40 <= n_ctx < len(s.prompt_ids({"chat": chat[:1] + chat[d - 1:]})) + 40
    assert any(f"its {d} oldest messages were left out" in x for x in r["notices"]), r.get("notices")
    assert r["receipt"]["counts"]["dropped_messages"] == d
    same = run(s.generate({"chat": kept, "max_new_tokens": 40}))
    assert r["token_ids"] == same["token_ids"] and "dropped_messages" not in same
    assert r["prompt_tokens"] == same["prompt_tokens"]
    # a resume after 12 tokens (a worker lost): the same turns left out, the rest of the same answer
    part = r["token_ids"][:12]
    for resume in ({"answer": part, "stream": part, "budget": 40}, {"answer": part, "stream": part}):
        rest = run(s.generate({"chat": chat, "max_new_tokens": 28, "resume": resume}))
        assert part + rest["token_ids"] == r["token_ids"] and rest["dropped_messages"] == d
    with pytest.raises(SessionError, match="resume.budget"):
        run(s.generate({"chat": chat, "max_new_tokens": 28, "resume": {"answer": part, "budget": 0}}))
    with pytest.raises(SessionError, match="the message is too long for the context"):
        run(s.generate({"chat": turns[:1] + [{"role": "user", "content": "x " * 400}], "max_new_tokens": 40}))
    short = run(s.generate({"chat": chat[-3:], "max_new_tokens": 40}))      # a chat that fits: nothing left out
    assert "dropped_messages" not in short and not short.get("notices")
    assert short["receipt"]["counts"]["dropped_messages"] == 0


def test_inspect_rejects_truncated_file(micro, tmp_path):
    from exactspec.formats.quant import FormatError
    from exactspec.session import inspect_model
    ok = inspect_model(str(micro))
    assert ok["has_tokenizer"] and ok["config"]["vocab_size"] == 300
    bad = tmp_path / "bad.gguf"
    data = micro.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match="truncated"):
        inspect_model(str(bad))
    (tmp_path / "junk.gguf").write_bytes(b"not a model at all")
    with pytest.raises(FormatError, match="not a GGUF"):
        inspect_model(str(tmp_path / "junk.gguf"))


def test_inspect_hf_folder(tmp_path):
    from conftest import write_micro_hf
    from exactspec.formats.quant import FormatError
    from exactspec.session import Session, inspect_model
    folder = write_micro_hf(tmp_path / "hf", seed=3)
    info = inspect_model(str(folder))
    assert info["format"] == "hf" and info["config"]["vocab_size"] == 32000 and info["has_tokenizer"]
    s = Session()
    s.load("hf", str(folder))
    out = run(s.generate({"prompt": "The quick brown fox", "max_new_tokens": 4}))
    assert len(out["token_ids"]) == 4
    st = folder / "model.safetensors"
    data = st.read_bytes()
    st.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match="outside the data"):
        inspect_model(str(folder))
    st.unlink()
    with pytest.raises(FormatError, match="safetensors"):
        inspect_model(str(folder))


def test_session_second_turn_reuses_prefix_exactly(micro):
    from exactspec.session import Session
    s = Session()
    s.load("m", str(micro))
    t1 = run(s.generate({"chat": [{"role": "user", "content": "Hello"}], "max_new_tokens": 8}))
    chat2 = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": t1["text"]},
             {"role": "user", "content": "And then?"}]
    t2 = run(s.generate({"chat": chat2, "max_new_tokens": 8, "drafter": "ngram", "k": 2}))
    assert t2["stats"]["reused_prefix_tokens"] > 5
    fresh = Session()
    fresh.load("m", str(micro))
    t2_fresh = run(fresh.generate({"chat": chat2, "max_new_tokens": 8}))
    assert t2_fresh["stats"]["reused_prefix_tokens"] == 0
    assert t2["token_ids"] == t2_fresh["token_ids"]


def test_session_backend_fault_keeps_committed_prefix(micro):
    from exactspec.bridge import JsBackend
    from exactspec.reference import ReferenceModel
    from exactspec.session import Session, SessionError

    class Failing(FakeJsModel):
        def forward(self, tokens, start_pos, n_out):
            if self.calls >= 6:
                async def boom():
                    raise RuntimeError("device lost: test")
                return boom()
            return super().forward(tokens, start_pos, n_out)

    ref = Session()
    ref.load("m", str(micro))
    full = run(ref.generate({"prompt": "Hello", "max_new_tokens": 20}))
    s = Session(backend_name="webgpu")
    s.load("m", str(micro), backend=JsBackend(Failing(ReferenceModel.from_file(micro))))
    out = run(s.generate({"prompt": "Hello", "max_new_tokens": 20}))
    assert out["finish_reason"] == "error" and "device lost" in out["error"]
    n = len(out["token_ids"])
    assert 0 < n < 20 and out["token_ids"] == full["token_ids"][:n]
    # the worker's CPU fallback reloads the same file: Continue then finishes the champion's own answer
    s.load("m", str(micro))
    rest = run(s.generate({"continue": True, "max_new_tokens": 20 - n}))
    assert rest["stats"]["backend"] == "cpu" and out["token_ids"] + rest["token_ids"] == full["token_ids"]
    s.load("m2", str(micro))                          # another champion: nothing to continue
    with pytest.raises(SessionError, match="nothing to continue"):
        run(s.generate({"continue": True, "max_new_tokens": 2}))


def test_session_one_model_per_role(micro, tmp_path):
    from exactspec.session import Session, SessionError
    other = tmp_path / "other.gguf"
    write_micro_gguf(other, micro_config(), seed=4)
    s = Session()
    s.load("a", str(micro))
    s.load("b", str(other), role="draft")
    assert (s.champion, s.draft) == ("a", "b")
    s.load("b", str(other), role="champion")          # promote the draft: it leaves the draft role
    assert (s.champion, s.draft) == ("b", None) and set(s.models) == {"b"}   # 'a' freed
    with pytest.raises(SessionError, match="draft"):
        run(s.generate({"prompt": "x", "drafter": "model", "k": 2, "max_new_tokens": 2}))
    s.load("a", str(micro), role="draft")
    out = run(s.generate({"prompt": "x", "drafter": "model", "k": 2, "max_new_tokens": 4}))
    assert out["stats"]["draft_passes"] > 0


def test_default_draft_carries_its_provenance():
    """build.py lists each shipped draft with the champion sha256 its manifest names (the page's 'verified' label),
    the champion's own vocabulary first (the page's default draft), the foreign draft after it."""
    import json
    drafts = [m for m in build.default_models() if m["role"] == "draft"]
    assert [d["name"] for d in drafts] == ["draft-smollm2-kd", "draft-llama2"], "a shipped draft is missing"
    manifests = {"draft-smollm2-kd": "draft-smollm2.manifest.json", "draft-llama2": "draft-llama2.manifest.json"}
    for d in drafts:
        manifest = json.loads((build.MODELS / manifests[d["name"]]).read_text())
        assert d["provenance"] == {"draft_sha256": manifest["draft"]["sha256"],
                                   "champion_sha256": build.CHAMPION["sha256"]}
    assert json.loads((build.MODELS / "draft-llama2.manifest.json").read_text())["draft"]["bridge"]["applies"]
