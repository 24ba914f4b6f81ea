"""The configuration schema walked by key: annotations, aliases, suggestions, spellings.

Every other module of the package asks here what a key path means: which model or type sits
at ``models.providers.openai.apiKey``, which alias a snake_case spelling stands for, whether
a value may be a secret. The schema itself is :class:`gateway.settings.HeraldSettings`.
"""

from __future__ import annotations

import re
import types
from difflib import get_close_matches
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from gateway.settings import HeraldSettings

#: A key path into the configuration: names of keys, indices of list items.
KeyPath = tuple[str | int, ...]


def dotted(path: KeyPath) -> str:
    """``models.providers.openai.models[0].id`` for a key path."""
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return text


def undotted(text: str) -> KeyPath:
    """The key path :func:`dotted` wrote as ``text``."""
    return tuple(int(index) if index else name for name, index in _DOTTED_PART.findall(text))


_DOTTED_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def unwrap(annotation: Any) -> tuple[Any, bool]:
    """``annotation`` without ``Annotated`` and ``None``; and whether None was allowed."""
    nullable = False
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            nullable = nullable or len(args) < len(get_args(annotation))
            if len(args) != 1:
                return annotation, nullable
            annotation = args[0]
        else:
            return annotation, nullable


def model_class(annotation: Any) -> type[BaseModel] | None:
    """The model class ``annotation`` stands for (``Optional`` and ``Annotated`` removed)."""
    inner, _ = unwrap(annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def fields_by_alias(model: type[BaseModel]) -> dict[str, tuple[str, FieldInfo]]:
    """alias → (python name, field) for every field of ``model``."""
    return {(info.alias or name): (name, info) for name, info in model.model_fields.items()}


def loose(key: str) -> str:
    """``key`` compared loosely: case, ``_`` and ``-`` ignored (``state_dir`` = ``stateDir``)."""
    return key.replace("_", "").replace("-", "").lower()


def field_alias(model: type[BaseModel], key: str, *, loosely: bool = False) -> str | None:
    """The file key (alias) of the field ``key`` names in ``model``, or None."""
    for alias, (name, _) in fields_by_alias(model).items():
        if key in (alias, name) or (loosely and loose(key) == loose(alias)):
            return alias
    return None


def suggestion(model: type[BaseModel], key: str) -> str:
    """``did you mean 'x'?`` for the closest key of ``model``, else the keys it has."""
    aliases = list(fields_by_alias(model))
    lowered = {alias.lower(): alias for alias in aliases}
    close = get_close_matches(key.lower(), list(lowered), n=1, cutoff=0.6)
    if close:
        return f"did you mean {lowered[close[0]]!r}?"
    return "expected one of: " + ", ".join(aliases)


def child_annotation(annotation: Any, key: str | int) -> Any | None:
    """The annotation of ``annotation[key]``: a model's field, a dict's value, a list's item."""
    inner, _ = unwrap(annotation)
    if (model := model_class(inner)) is not None:
        alias = field_alias(model, key) if isinstance(key, str) else None
        return None if alias is None else fields_by_alias(model)[alias][1].annotation
    origin = get_origin(inner)
    if origin is dict and isinstance(key, str):
        return get_args(inner)[1]
    if origin is list and isinstance(key, int):
        return get_args(inner)[0]
    return None


def annotation_at(path: KeyPath) -> Any | None:
    """The annotation of the setting at ``path`` (aliases, dict keys, list indices)."""
    annotation: Any = HeraldSettings
    for key in path:
        annotation = child_annotation(annotation, key)
        if annotation is None:
            return None
    return annotation


def holds_secret(annotation: Any) -> bool:
    """Whether a value at this annotation is, or directly contains, a secret."""
    inner, _ = unwrap(annotation)
    if _is_secret(inner):
        return True
    if get_origin(inner) in (dict, list):
        return holds_secret(get_args(inner)[-1])
    model = model_class(inner)
    return model is not None and any(
        _is_secret(unwrap(info.annotation)[0]) for info in model.model_fields.values()
    )


def _is_secret(annotation: Any) -> bool:
    """``SecretStr`` or a kind of it (a ``SecretUrl``)."""
    return isinstance(annotation, type) and issubclass(annotation, SecretStr)


def canonical_keys(value: object, annotation: Any) -> object:
    """``value`` with snake_case spellings of model keys renamed to their camelCase alias.

    The file may say ``state_dir``; the environment and CLI say ``stateDir``. One spelling
    lets the layers merge and lets a later layer override an earlier one.
    """
    inner, _ = unwrap(annotation)
    if isinstance(value, dict):
        model = model_class(inner)
        result: dict[str, object] = {}
        for key, item in value.items():
            alias = field_alias(model, key) if model is not None else None
            target = key if alias is None or alias in value else alias
            child = child_annotation(inner, key)
            result[target] = item if child is None else canonical_keys(item, child)
        return result
    if isinstance(value, list) and get_origin(inner) is list:
        item_type = get_args(inner)[0]
        return [canonical_keys(item, item_type) for item in value]
    return value
