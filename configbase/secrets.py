"""Secrets in configuration: plain values where they are used, masked everywhere else.

Every ``SecretStr`` of a settings tree is found by walking it (:func:`secrets_in`), so a
secret field added anywhere is masked in logs without being listed; a URL (:class:`SecretUrl`)
keeps everything but its password readable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from pydantic import BaseModel, SecretStr


def secret_value(secret: SecretStr | None) -> str | None:
    """The plain value of an optional secret; empty strings count as unset."""
    if secret is None:
        return None
    value = secret.get_secret_value()
    return value or None


def secrets_in(value: object) -> list[str]:
    """The plain value of every set secret inside ``value``, found by walking the schema.

    Every ``SecretStr`` counts, at any depth: in a model's fields, in dicts and in lists (a
    provider's ``apiKey`` under ``models.providers``). A field added to the schema as a
    SecretStr is therefore masked in logs without being listed anywhere.
    """
    if isinstance(value, SecretUrl):  # only its password is secret
        return value.secret_parts()
    if isinstance(value, SecretStr):
        plain = value.get_secret_value()
        return [plain] if plain else []
    if isinstance(value, BaseModel):
        items: list[object] = [getattr(value, name) for name in type(value).model_fields]
    elif isinstance(value, Mapping):
        items = list(value.values())
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        return []
    return [secret for item in items for secret in secrets_in(item)]


class SecretUrl(SecretStr):
    """A URL whose password is a secret (``scheme://user:password@host/…`` or a
    ``password=`` query parameter): shown and logged with only the password masked, so an
    operator still sees which server and database it names."""

    def password(self) -> str | None:
        """The plain password the URL carries, or None."""
        return url_password(self.get_secret_value())

    def secret_parts(self) -> list[str]:
        """The password as written in the URL and as decoded (they differ when escaped)."""
        url = self.get_secret_value()
        try:
            written = urlsplit(url).password
        except ValueError:
            written = None
        return sorted({p for p in (self.password(), written) if p})

    def masked(self) -> str:
        """The URL with its password replaced by ``********``."""
        return redact_url(self.get_secret_value())

    def _display(self) -> str:
        return self.masked()


#: What a masked password reads as.
URL_MASK = "********"


def url_password(url: str) -> str | None:
    """The password in ``url``'s userinfo or its ``password`` query parameter, or None."""
    try:
        parts = urlsplit(url)
        userinfo = parts.password
    except ValueError:  # an unparseable port: no password can be told apart safely
        return None
    if userinfo:
        return unquote(userinfo)
    values = parse_qs(parts.query).get("password")
    return values[0] if values else None


def redact_url(url: str) -> str:
    """``url`` with its password masked (userinfo and ``password=``); other parts kept."""
    try:
        parts = urlsplit(url)
        has_password = parts.password is not None
    except ValueError:
        return URL_MASK
    netloc = parts.netloc
    if has_password:
        userinfo, _, host = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{URL_MASK}@{host}"
    query = re.sub(r"(^|&)(password=)[^&]*", rf"\g<1>\g<2>{URL_MASK}", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
