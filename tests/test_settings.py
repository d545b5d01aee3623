"""One source for each rule: the settings' defaults, limits, modes and drafters live in exactspec.settings; the page
reads them from static/rules.js (written by the build) and its validator agrees with Python's on every case."""
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from exactspec import settings as S
from exactspec.decode import GenerateConfig

ROOT = Path(__file__).resolve().parents[1]

CASES = [
    {},
    {"k": 0}, {"k": 16}, {"k": 17}, {"k": -1}, {"k": 2.5}, {"k": "3"}, {"k": ""}, {"k": "x"}, {"k": None},
    {"temperature": 0}, {"temperature": 10}, {"temperature": 10.5}, {"temperature": "0.7"}, {"temperature": "nan"},
    {"temperature": float("inf")},
    {"top_p": 0}, {"top_p": 1e-9}, {"top_p": 1}, {"top_p": 1.01},
    {"top_k": 1_000_000}, {"top_k": 1_000_001},
    {"seed": 2 ** 53 - 1}, {"seed": 2 ** 64}, {"seed": -3},
    {"max_new_tokens": 0}, {"max_new_tokens": 8192}, {"max_new_tokens": 8193},
    {"drafter": "model"}, {"drafter": "beam"}, {"mode": "rejection"}, {"mode": "greedy"},
    {"speculation": False}, {"speculation": "yes"}, {"adaptive": 0},
    {"drafter": "head"}, {"k_schedule": "additive"}, {"k_schedule": "grow"}, {"draft_stop": 0.4},
    {"draft_stop": "0.25"}, {"draft_stop": 1}, {"draft_stop": 1.5}, {"draft_stop": -0.1},
    {"bridge": "slem"}, {"bridge": "remap"}, {"bridge": "fast"}, {"bridge": None},
]


def py_validate(case):
    try:
        return {"ok": True, "value": S.check(case)}
    except S.SettingsError as e:
        return {"ok": False, "error": str(e)}


def test_generate_config_defaults_are_the_settings_defaults():
    cfg = GenerateConfig()
    for name in ("max_new_tokens", "temperature", "top_k", "top_p", "seed", "mode", "k", "drafter", "adaptive",
                 "bridge"):
        assert getattr(cfg, name) == S.DEFAULTS[name]
    with pytest.raises(ValueError, match="k: must be between 0 and 16"):
        GenerateConfig(k=17).validate()
    with pytest.raises(ValueError, match="seed"):
        GenerateConfig(seed=2 ** 64).validate()


def test_speculation_off_rule():
    for req in ({"speculation": False}, {"drafter": "none"}, {"k": 0}):
        s = S.normalise(req)
        assert (s["drafter"], s["k"], s["speculation"], s["adaptive"]) == ("none", 0, False, False)
    s = S.normalise({"drafter": "model", "k": 3})
    assert (s["drafter"], s["k"], s["speculation"]) == ("model", 3, True)


def test_rules_js_is_written_from_python():
    text = (ROOT / "static" / "rules.js").read_text()
    assert text == S.rules_js(), "static/rules.js is stale: run `python build.py setup`"


@pytest.mark.skipif(shutil.which("node") is None, reason="needs node")
def test_page_validator_agrees_with_python():
    script = (
        "import { validateSettings, DEFAULT_SETTINGS, DRAFTERS, MODES } from './app/protocol.js';\n"
        "const cases = JSON.parse(process.argv[1]);\n"
        "console.log(JSON.stringify({defaults: DEFAULT_SETTINGS, drafters: DRAFTERS, modes: MODES,\n"
        "  results: cases.map((c) => validateSettings(c))}));\n"
    )
    # JSON has no inf/nan: the page's form sends strings for those
    js_cases = [{k: (str(v) if isinstance(v, float) and v != v or v in (float("inf"),) else v) for k, v in c.items()}
                for c in CASES]
    r = subprocess.run(["node", "--input-type=module", "-e", script, json.dumps(js_cases)], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["defaults"] == S.DEFAULTS
    assert out["drafters"] == list(S.DRAFTERS) and out["modes"] == list(S.MODES)
    for case, js in zip(js_cases, out["results"]):
        py = py_validate(case)
        assert py["ok"] == js["ok"], (case, py, js)
        if py["ok"]:
            assert py["value"] == js["value"], case
        else:
            assert py["error"] == js["error"], case
