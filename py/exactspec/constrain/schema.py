"""JSON mode requests: `response_format` and the supported JSON Schema subset, checked BEFORE generation.

    spec = parse_response_format({"type": "json_schema", "schema": {...}})   # -> a node spec, or None for free text
    spec = parse_schema({...})                                               # raises SchemaError naming the problem

Supported (anything else is refused with a SchemaError that names every unsupported keyword and where it is):
- type: "object" | "array" | "string" | "integer" | "number" | "boolean" | "null", or a list of them
- object: properties, required, additionalProperties (true/false; the grammar never writes undeclared keys)
- array: items (one schema), minItems, maxItems
- string: minLength, maxLength (characters, as JSON Schema counts them)
- enum, const (any JSON values); annotations (title, description, default, examples, $schema, $id, $comment)
- a schema without "type" is typed by its keywords (properties -> object, items -> array, ...) or is any JSON value.

Node specs are plain tuples, the input of exactspec.constrain.grammar.Grammar:
    ("object", [(key, spec, required), ...])   properties in the schema's order
    ("any_object",)                            any keys, any values (response_format json_object)
    ("array", item_spec, min_items, max_items | None)
    ("string", min_length, max_length | None)
    ("literal", [value, ...])                  enum / const / true / false / null
    ("number", integer: bool)
    ("union", [spec, ...])                     a type list (alternatives start with different bytes)
    ("any",)                                   any JSON value
"""
from __future__ import annotations

import json
import math

TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
ANNOTATIONS = frozenset(("title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
                         "readOnly", "writeOnly"))
KEYWORDS = {
    "object": frozenset(("properties", "required", "additionalProperties")),
    "array": frozenset(("items", "minItems", "maxItems")),
    "string": frozenset(("minLength", "maxLength")),
}
COMMON = frozenset(("type", "enum", "const")) | ANNOTATIONS
SUPPORTED = COMMON | frozenset().union(*KEYWORDS.values())
MAX_SCHEMA_CHARS = 1 << 16
MAX_DEPTH = 32
MAX_COUNT = 1 << 16          # minItems / maxItems / minLength / maxLength above this are refused (no answer fits)


class SchemaError(ValueError):
    """A response_format or JSON schema that JSON mode cannot serve; the message names the problem."""


def parse_response_format(rf) -> tuple | None:
    """The node spec of a request's `response_format`, or None for plain text.

    Accepted: None, {"type": "text"}, {"type": "json_object"} (any JSON object), {"type": "json_schema", "schema": S}
    with S an object or its JSON text, and OpenAI's nested {"type": "json_schema", "json_schema": {"schema": S, ...}}.
    """
    if rf is None:
        return None
    if isinstance(rf, str):
        try:
            rf = json.loads(rf)
        except json.JSONDecodeError as e:
            raise SchemaError(f"response_format: not valid JSON ({e})") from None
    if not isinstance(rf, dict):
        raise SchemaError("response_format: must be an object like {\"type\": \"json_schema\", \"schema\": {...}}")
    kind = rf.get("type")
    unknown = sorted(set(rf) - {"type", "schema", "json_schema"})
    if unknown:
        raise SchemaError(f"response_format: unknown field(s) {', '.join(map(repr, unknown))} "
                          "(expected type and schema)")
    if kind == "text":
        return None
    if kind == "json_object":
        if rf.get("schema") is not None or rf.get("json_schema") is not None:
            raise SchemaError("response_format: type 'json_object' takes no schema (use type 'json_schema')")
        return ("any_object",)
    if kind != "json_schema":
        raise SchemaError(f"response_format.type must be 'json_schema', 'json_object' or 'text', not {kind!r}")
    schema = rf.get("schema")
    nested = rf.get("json_schema")
    if schema is None and isinstance(nested, dict):
        extra = sorted(set(nested) - {"schema", "name", "strict", "description"})
        if extra:
            raise SchemaError(f"response_format.json_schema: unknown field(s) {', '.join(map(repr, extra))}")
        schema = nested.get("schema")
    if schema is None:
        raise SchemaError("response_format: type 'json_schema' needs a schema")
    return parse_schema(schema)


def parse_schema(schema) -> tuple:
    """The node spec of a JSON schema (a dict, a bool, or its JSON text); SchemaError names what is not supported."""
    if isinstance(schema, str):
        if len(schema) > MAX_SCHEMA_CHARS:
            raise SchemaError(f"schema: too long ({len(schema)} characters, at most {MAX_SCHEMA_CHARS})")
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise SchemaError(f"schema: not valid JSON ({e.msg} at line {e.lineno} column {e.colno})") from None
    else:
        try:
            text = json.dumps(schema)
        except (TypeError, ValueError) as e:
            raise SchemaError(f"schema: not JSON data ({e})") from None
        if len(text) > MAX_SCHEMA_CHARS:
            raise SchemaError(f"schema: too long ({len(text)} characters as JSON, at most {MAX_SCHEMA_CHARS})")
    unsupported: list[str] = []
    _collect_unsupported(schema, "", unsupported, 0)
    if unsupported:
        raise SchemaError("unsupported JSON Schema keyword(s): " + ", ".join(unsupported)
                          + ". JSON mode supports: type, properties, required, additionalProperties (true/false), "
                            "items, minItems, maxItems, minLength, maxLength, enum, const")
    return _parse(schema, "")


def _where(path: str) -> str:
    return path or "/"


def _collect_unsupported(s, path: str, out: list, depth: int) -> None:
    """Every keyword outside the subset, with its JSON pointer, anywhere in the schema (reported all at once)."""
    if depth > MAX_DEPTH:
        raise SchemaError(f"schema: nested deeper than {MAX_DEPTH} levels at {_where(path)}")
    if not isinstance(s, dict):
        return
    for key in s:
        if key not in SUPPORTED:
            out.append(f"'{key}' at {_where(path)}")
    props = s.get("properties")
    if isinstance(props, dict):
        for name, sub in props.items():
            _collect_unsupported(sub, f"{path}/properties/{_escape(name)}", out, depth + 1)
    items = s.get("items")
    if isinstance(items, dict):
        _collect_unsupported(items, f"{path}/items", out, depth + 1)
    extra = s.get("additionalProperties")
    if isinstance(extra, dict):
        out.append(f"'additionalProperties' as a schema at {_where(path)} (only true or false)")


def _escape(name: str) -> str:
    return str(name).replace("~", "~0").replace("/", "~1")


def _count(s: dict, key: str, path: str):
    v = s.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise SchemaError(f"{key} at {_where(path)} must be a whole number >= 0, got {v!r}")
    if v > MAX_COUNT:
        raise SchemaError(f"{key} at {_where(path)} is too large ({v}, at most {MAX_COUNT})")
    return v


_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"))


def _type_of(value) -> str:
    if value is None:
        return "null"
    for py_type, name in _JSON_TYPES:   # bool before int: True is an int in Python
        if isinstance(value, py_type):
            return name
    raise SchemaError(f"not a JSON value: {value!r}")


def _matches_type(value, t: str) -> bool:
    vt = _type_of(value)
    if t == "number":
        return vt in ("integer", "number")
    if t == "integer":
        return vt == "integer" or (vt == "number" and float(value).is_integer())
    return vt == t


def _parse(s, path: str) -> tuple:
    if s is True or s == {}:
        return ("any",)
    if s is False:
        raise SchemaError(f"schema at {_where(path)} is false: no value is valid")
    if not isinstance(s, dict):
        raise SchemaError(f"schema at {_where(path)} must be an object or a boolean, got {type(s).__name__}")
    types = s.get("type")
    if types is None:
        types = None
    elif isinstance(types, str):
        types = [types]
    elif isinstance(types, list) and types and all(isinstance(t, str) for t in types):
        if len(set(types)) != len(types):
            raise SchemaError(f"type at {_where(path)} lists a type twice: {types}")
    else:
        raise SchemaError(f"type at {_where(path)} must be a type name or a non-empty list of them, got {types!r}")
    if types is not None:
        bad = [t for t in types if t not in TYPES]
        if bad:
            raise SchemaError(f"type at {_where(path)}: unknown type(s) {bad} (known: {', '.join(TYPES)})")
    if "enum" in s or "const" in s:
        return _literals(s, types, path)
    if types is None:        # typed by its keywords, or any value
        inferred = [t for t, kws in KEYWORDS.items() if kws & set(s)]
        if len(inferred) > 1:
            raise SchemaError(f"schema at {_where(path)} mixes keywords of {' and '.join(inferred)} without a "
                              "type: give \"type\"")
        if not inferred:
            return ("any",)
        types = inferred
    if "integer" in types and "number" in types:
        types = [t for t in types if t != "integer"]      # number already allows every integer
    alts = [_typed(s, t, path) for t in types]
    return alts[0] if len(alts) == 1 else ("union", alts)


def _literals(s: dict, types, path: str) -> tuple:
    if "enum" in s and "const" in s:
        raise SchemaError(f"schema at {_where(path)} has both enum and const: give one")
    if "const" in s:
        values = [s["const"]]
    else:
        values = s["enum"]
        if not isinstance(values, list) or not values:
            raise SchemaError(f"enum at {_where(path)} must be a non-empty list")
    out = []
    for v in values:
        try:
            json.dumps(v, allow_nan=False)
        except (TypeError, ValueError):
            raise SchemaError(f"enum/const value {v!r} at {_where(path)} is not JSON (NaN and Infinity are not)") \
                from None
        if types is not None and not any(_matches_type(v, t) for t in types):
            raise SchemaError(f"enum/const value {json.dumps(v)} at {_where(path)} does not match type "
                              f"{' or '.join(types)}")
        if isinstance(v, float) and not math.isfinite(v):
            raise SchemaError(f"enum/const value {v!r} at {_where(path)} is not finite")
        out.append(v)
    return ("literal", out)


def _typed(s: dict, t: str, path: str) -> tuple:
    if t == "object":
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise SchemaError(f"properties at {_where(path)} must be an object")
        required = s.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaError(f"required at {_where(path)} must be a list of property names")
        if len(set(required)) != len(required):
            raise SchemaError(f"required at {_where(path)} names a property twice")
        missing = [r for r in required if r not in props]
        if missing:
            raise SchemaError(f"required at {_where(path)} names {missing} but properties does not define "
                              f"{'it' if len(missing) == 1 else 'them'}")
        extra = s.get("additionalProperties", True)
        if not isinstance(extra, bool):
            raise SchemaError(f"additionalProperties at {_where(path)} must be true or false")
        if not props:
            # no declared properties: with additionalProperties false only {} is valid; otherwise any object
            return ("object", []) if extra is False else ("any_object",)
        return ("object", [(name, _parse(sub, f"{path}/properties/{_escape(name)}"), name in required)
                           for name, sub in props.items()])
    if t == "array":
        items = s.get("items", True)
        if isinstance(items, list):
            raise SchemaError(f"items at {_where(path)}: a list of schemas (tuple validation) is not supported")
        lo = _count(s, "minItems", path) or 0
        hi = _count(s, "maxItems", path)
        if hi is not None and hi < lo:
            raise SchemaError(f"at {_where(path)}: maxItems {hi} < minItems {lo}")
        item = _parse(items, f"{path}/items")
        return ("array", item, lo, hi)
    if t == "string":
        lo = _count(s, "minLength", path) or 0
        hi = _count(s, "maxLength", path)
        if hi is not None and hi < lo:
            raise SchemaError(f"at {_where(path)}: maxLength {hi} < minLength {lo}")
        return ("string", lo, hi)
    if t in ("integer", "number"):
        return ("number", t == "integer")
    if t == "boolean":
        return ("literal", [True, False])
    return ("literal", [None])
