"""``herald config schema``: a JSON Schema an editor can complete ``herald.json5`` from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyjson5
import pytest

from gateway.cli import main

REPO = Path(__file__).resolve().parents[3]


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with ``$ref`` and a nullable ``anyOf`` followed to the object it means."""
    while True:
        if "$ref" in node:
            node = schema["$defs"][node["$ref"].removeprefix("#/$defs/")]
        elif "anyOf" in node:
            objects = [n for n in node["anyOf"] if n.get("type") != "null"]
            node = objects[0]
        else:
            return node


def walk(schema: dict[str, Any], node: dict[str, Any], data: Any, path: str) -> list[str]:
    """Key paths of ``data`` the schema does not describe."""
    node = resolve(schema, node)
    missing: list[str] = []
    if isinstance(data, dict):
        properties = node.get("properties", {})
        extra = node.get("additionalProperties")
        for key, value in data.items():
            if key in properties:
                missing += walk(schema, properties[key], value, f"{path}.{key}")
            elif isinstance(extra, dict):
                missing += walk(schema, extra, value, f"{path}.{key}")
            else:
                missing.append(f"{path}.{key}")
    elif isinstance(data, list) and "items" in node:
        for item in data:
            missing += walk(schema, node["items"], item, f"{path}[]")
    return missing


def test_the_schema_describes_every_key_of_the_example_config(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["config", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    example = pyjson5.decode((REPO / "config" / "herald.json5").read_text())
    assert walk(schema, schema, example, "") == []
    gateway = resolve(schema, schema["properties"]["gateway"])
    port = gateway["properties"]["port"]
    assert (port["minimum"], port["maximum"], port["default"]) == (1, 65535, 8787)
    # Unknown keys are refused by the loader; the schema says so, for editors to flag them.
    assert gateway["additionalProperties"] is False
    assert walk(schema, schema, {"gateway": {"prot": 1}}, "") == [".gateway.prot"]
