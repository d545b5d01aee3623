"""Engine models (app/gpu/engine.js under Node + Dawn, tests/gpu/engine_server.mjs) as JS model objects for CPython:
EngineProcess(spec).load(name, path, description) returns an object with the JS model's interface (config, length,
aheadMax, chainRounds, forward, truncate, decodeAhead, specRound, verify, ngramChain) that `exactspec.bridge.JsBackend` wraps as it wraps the real JS
object in Pyodide — so the decode loop runs end to end on the engine in CPython."""
from __future__ import annotations

import base64
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from dawn_harness import BACKEND, ENV, ROOT

SERVER = ROOT / "tests" / "gpu" / "engine_server.mjs"


def _f32(b64):
    return None if b64 is None else np.frombuffer(base64.b64decode(b64), dtype=np.float32).copy()


class EngineProcess:
    def __init__(self, **spec):
        self._dir = tempfile.TemporaryDirectory()
        sp = Path(self._dir.name) / "spec.json"
        sp.write_text(json.dumps({"backend": BACKEND, **spec}))
        self.proc = subprocess.Popen(["node", str(SERVER), str(sp)], cwd=ROOT, env=ENV, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def call(self, cmd, **kw):
        self.proc.stdin.write(json.dumps({"cmd": cmd, **kw}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"engine server exited (rc={self.proc.poll()})")
        out = json.loads(line)
        if "error" in out:
            raise RuntimeError(out["error"])
        return out

    def load(self, name, path, description, seq_len=None):
        r = self.call("load", name=name, model=str(path), description=description, seq_len=seq_len)
        return EngineModelProxy(self, name, r)

    def load_head(self, name, path, description, champion, **opts):
        """A draft head on the engine model `champion` (a proxy): engine.loadHead."""
        r = self.call("load_head", name=name, model=str(path), description=description, champion=champion.name,
                      opts=opts)
        p = EngineModelProxy(self, name, r)
        p.headConfig, p.memory = r["head_config"], r["memory"]
        return p

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self._dir.cleanup()


def _ints(a):
    return [int(x) for x in np.asarray(a).reshape(-1)]


class EngineModelProxy:
    """The JS model object's interface (app/gpu/engine.js), over the server."""

    def __init__(self, proc: EngineProcess, name: str, loaded: dict):
        self.proc, self.name = proc, name
        self.config = loaded["config"]
        self.length = loaded["length"]
        self.aheadMax = loaded["aheadMax"]
        self.chainRounds = loaded.get("chainRounds", 0) or 0
        self.chainMaxK = loaded.get("chainMaxK", 0) or 0
        if not self.chainRounds:
            self.ngramChain = None                      # not offered (as the engine's model object)
            self.specChain = None
        self.calls = {"forward": 0, "decodeAhead": 0, "specRound": 0, "verify": 0}

    def _call(self, cmd, **kw):
        self.calls[cmd] = self.calls.get(cmd, 0) + 1
        r = self.proc.call(cmd, name=self.name, **kw)
        self.length = r["length"]
        return r

    def forward(self, tokens, start_pos, n_out):
        return _f32(self._call("forward", tokens=_ints(tokens), start_pos=int(start_pos), n_out=int(n_out))["rows"])

    def truncate(self, n):
        self._call("truncate", n=int(n))

    def bind(self, champion):
        self._call("bind", champion=champion.name)

    def decodeAhead(self, token, start_pos, n, pick, rows, then=0, stop=()):
        r = self._call("decodeAhead", token=int(token), start_pos=int(start_pos), n=int(n), pick=dict(pick), rows=bool(rows),
                       then=int(then), stop=_ints(stop))
        self.calls["continued"] = self.calls.get("continued", 0) + bool(r.get("continued"))   # taken from a continuation
        return {"ids": np.asarray(r["ids"], np.int32), "rows": _f32(r["rows"])}

    def verify(self, tokens, start_pos, pick, rows):
        r = self._call("verify", tokens=_ints(tokens), start_pos=int(start_pos), pick=dict(pick), rows=bool(rows))
        return {"ids": np.asarray(r["ids"], np.int32), "rows": _f32(r["rows"])}

    def ngramChain(self, seq, start_pos, rounds, k, pick, ngram, then=0, stop=()):
        r = self._call("ngramChain", seq=_ints(seq), start_pos=int(start_pos), rounds=int(rounds), k=int(k),
                       pick=dict(pick), ngram=_ints(ngram), then=int(then), stop=_ints(stop))
        self.calls["continued"] = self.calls.get("continued", 0) + bool(r.get("continued"))
        self.far_chunks = r.get("far_chunks")   # chunks of the run's submission on the key blocks' layers (attnBlock)
        return {k_: np.asarray(r[k_], np.int32) for k_ in ("counts", "accepted", "proposals", "ids")}

    def specChain(self, draft, seq, draft_start, rounds, k, pick, restart=False, then=0, stop=(), copy=None):
        r = self._call("specChain", draft=draft.name, seq=_ints(seq), draft_start=int(draft_start), rounds=int(rounds),
                       k=int(k), pick=dict(pick), restart=bool(restart), then=int(then), stop=_ints(stop),
                       copy=None if copy is None else _ints(copy))
        draft.length = r["draft_length"]
        self.calls["continued"] = self.calls.get("continued", 0) + bool(r.get("continued"))
        self.far_chunks = r.get("far_chunks")   # (both models' passes of the run's submission)
        return {k_: np.asarray(r[k_], np.int32) for k_ in ("counts", "accepted", "proposals", "ids")}

    def specRound(self, draft, feed, draft_start, k, token, start_pos, pick, rows, copy=None):
        r = self._call("specRound", draft=draft.name, feed=_ints(feed), draft_start=int(draft_start), k=int(k),
                       token=int(token), start_pos=int(start_pos), pick=dict(pick), rows=bool(rows),
                       copy=None if copy is None else _ints(copy))
        draft.length = r["draft_length"]
        return {"proposals": np.asarray(r["proposals"], np.int32), "ids": np.asarray(r["ids"], np.int32),
                "rows": _f32(r["rows"])}
