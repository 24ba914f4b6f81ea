"""The package's public names, loaded on first use: each one ``__all__`` lists (the names
the type checker sees imported) is found in the module the package loads it from."""

from __future__ import annotations

import gateway.subagents


def test_every_public_name_loads() -> None:
    missing = [name for name in gateway.subagents.__all__ if not hasattr(gateway.subagents, name)]
    assert missing == []


def test_an_unknown_name_is_an_attribute_error() -> None:
    assert not hasattr(gateway.subagents, "Spawnr")
