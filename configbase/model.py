"""The base of every configuration model: camelCase keys, unknown keys rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class ConfigModel(BaseModel):
    """Config sections use camelCase keys in files (``stateDir``) and snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        validate_default=True,
        # JSON5 reads Infinity and NaN, TOML inf and nan, and 1e999 overflows to infinity; no
        # setting means any of them, and a run record holding one is not valid JSON.
        allow_inf_nan=False,
        # Each field's docstring is its description: in the JSON Schema editors complete
        # from, and in the generated configuration reference.
        use_attribute_docstrings=True,
    )
