"""JSON mode in the page (CPU fallback, micro chat model): the settings panel's toggle and schema box (errors shown
next to the box, the message kept; the setting remembered), the answer equals the CLI's `--json-schema` answer, and
the API's response_format json_object equals `--json-object`."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from test_page import _ui_answer, wait_js

jsonschema = pytest.importorskip("jsonschema")
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "n": {"type": "integer"},
                                           "ok": {"type": "boolean"}}, "required": ["name", "n", "ok"],
          "additionalProperties": False}


def cli_json(model, prompt: str, *flags) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "py"))
    r = subprocess.run([sys.executable, "-m", "exactspec", "generate", "--model", str(model), "--prompt", prompt,
                        "--chat", "--max-new-tokens", "60", "--json", *flags], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_json_mode_panel_equals_cli(session, models_dir, tmp_path):
    session.open("?cpu=1")
    page = session.page
    page.locator("#max_new_tokens").fill("60")
    # keyboard: the toggle takes Space, Tab goes on to the schema box
    page.focus("#json_mode")
    page.keyboard.press("Space")
    assert page.locator("#json_mode").is_checked()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "json_schema"
    err = page.locator("#json-schema-error")
    page.keyboard.type('{"type": "object",')                           # not JSON yet: said at once
    assert err.is_visible() and "not valid JSON" in err.inner_text()
    page.fill("#json_schema", json.dumps({"type": "object", "properties": {"d": {"type": "string",
                                                                                 "pattern": "^[0-9]+$"}}}))
    assert not err.is_visible()
    # the worker's Python refuses the keyword before generating; the message goes back to the box
    page.fill("#prompt", "Describe a cat.")
    page.press("#prompt", "Enter")
    wait_js(page, "!document.querySelector('#json-schema-error').hidden")
    assert "'pattern' at /properties/d" in err.inner_text()
    assert page.locator("#prompt").input_value() == "Describe a cat."
    assert page.locator(".msg").count() == 0
    page.fill("#json_schema", json.dumps(SCHEMA))
    assert not err.is_visible()
    answer = _ui_answer(page, "Describe a cat.")
    jsonschema.validate(json.loads(answer), SCHEMA)
    f = tmp_path / "schema.json"
    f.write_text(json.dumps(SCHEMA))
    want = cli_json(models_dir["micro-chat"], "Describe a cat.", "--json-schema", str(f))
    assert answer == want["text"]
    forced = page.locator("#m-forced").inner_text()
    assert forced != "–" and int(forced.split("/")[1]) > 0            # default settings: n-gram + forcing
    # remembered across reloads
    session.reload()
    assert page.locator("#json_mode").is_checked()
    assert json.loads(page.locator("#json_schema").input_value()) == SCHEMA
    # the API: any JSON object
    got = session.generate(prompt="Describe a cat.", chat=True, max_new_tokens=60,
                           response_format={"type": "json_object"})
    assert got["token_ids"] == cli_json(models_dir["micro-chat"], "Describe a cat.", "--json-object")["token_ids"]
    assert isinstance(json.loads(got["text"]), dict)
    assert session.errors == []


def test_json_mode_default_backend_equals_cli(session, models_dir, tmp_path):
    """The page's JSON mode on its default backend (WebGPU where there is an adapter: the masks and forced runs in
    Pyodide, the logits from the WGSL engine) gives the CLI's answers, greedy and coupled-sampled."""
    r = session.open("")
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"},
                                               "tag": {"enum": ["red", "green"]}},
              "required": ["ok", "n", "tag"], "additionalProperties": False}
    f = tmp_path / "schema.json"
    f.write_text(json.dumps(schema))
    rf = {"type": "json_schema", "schema": schema}
    for sampled in ({}, {"temperature": 0.9, "seed": 7}):
        flags = [x for k, v in sampled.items() for x in (f"--{k}", str(v))]
        want = cli_json(models_dir["micro-chat"], "Describe a cat.", "--json-schema", str(f), *flags)
        got = session.generate(prompt="Describe a cat.", chat=True, max_new_tokens=60, response_format=rf, **sampled)
        assert got["token_ids"] == want["token_ids"], (r["backend"], sampled)
        jsonschema.validate(json.loads(got["text"]), schema)
        assert got["stats"]["backend"] == r["backend"] and got["stats"]["forced_proposed"] > 0
    assert session.errors == []
