"""Provider-friendly JSON Schema from a parameters model.

Pydantic's schema is valid but noisy for model providers: ``title`` on every node, ``$defs``
with ``$ref`` (some providers reject references), ``anyOf [X, null]`` for optional fields
(Gemini and strict OpenAI modes dislike it) and ``default: null``. This module inlines the
definitions, drops the noise and closes every object with ``additionalProperties: false``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from gateway.tools.errors import ToolDefinitionError

_NULL = {"type": "null"}
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")


def parameters_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema of ``model`` as sent to providers: an inlined ``object`` schema.

    Raises :class:`ToolDefinitionError` for a recursive model (it cannot be inlined).
    """
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: dict[str, Any] = raw.pop("$defs", {})
    schema = _clean(raw, defs, ())
    # The tool's own description travels beside the schema; a docstring here would repeat it.
    schema.pop("description", None)
    schema["type"] = "object"
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    return schema


def _clean(node: dict[str, Any], defs: dict[str, Any], stack: tuple[str, ...]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name in stack or name not in defs:
            raise ToolDefinitionError(f"cannot inline schema reference {ref!r}")
        merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
        return _clean(merged, defs, (*stack, name))

    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title":
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {prop: _clean(sub, defs, stack) for prop, sub in value.items()}
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            out[key] = [_clean(sub, defs, stack) for sub in value]
        elif isinstance(value, dict) and key != "default" and key != "examples":
            out[key] = _clean(value, defs, stack)
        else:
            out[key] = value

    if "default" in out and out["default"] is None:
        del out["default"]
    out = _collapse(out, "anyOf")
    out = _collapse(out, "allOf")
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    return out


def _collapse(node: dict[str, Any], key: str) -> dict[str, Any]:
    """``anyOf [X, null]`` (an optional field) or ``allOf [X]`` becomes X with the siblings."""
    options = node.get(key)
    if not isinstance(options, list):
        return node
    kept = [o for o in options if o != _NULL] if key == "anyOf" else options
    if len(kept) != 1:
        return node
    siblings = {k: v for k, v in node.items() if k != key}
    return {**kept[0], **siblings}
