"""Secrets in settings: what of them may be written down (settings files, logs, errors).

A setting that holds a secret is typed as one (`SecretUrl`, or pydantic's `Secret[...]`):
pydantic then shows it redacted wherever it is printed or dumped to JSON, and only
`.get_secret_value()` gives it whole, to the Redis client and to children's `PPOMQ_*`
variables (`settings_env`), which no `ps` command line shows.
"""

from __future__ import annotations

import re
from typing import Any, get_args, get_origin
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pydantic import BaseModel, Secret

REDACTED = "***"
# Query parameters that carry a secret (redis-py reads `?password=`).
_SECRET_QUERY = frozenset({"password", "pass", "passwd", "secret", "token", "key"})
# user:password@ in any scheme://, wherever it stands in a text (a flag, a log line).
_URL_PASSWORD = re.compile(r"(?P<pre>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)[^\s/]*(?=@)")
_QUERY_SECRET = re.compile(
    r"(?P<pre>[?&](?:" + "|".join(sorted(_SECRET_QUERY)) + r")=)[^&#\s]*", re.IGNORECASE
)


def redact_url(url: str | Secret[str]) -> str:
    """`url` with any password (user:password@, ?password=) replaced by `***`, safe to
    print, log and write to disk."""
    if isinstance(url, Secret):
        url = url.get_secret_value()
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<unparsable url>"
    if parts.password is not None:
        user = parts.username or ""
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"  # an IPv6 literal keeps its brackets
        netloc = f"{user}:{REDACTED}@{host}" + (f":{port}" if port else "")
        parts = parts._replace(netloc=netloc)
    if parts.query:
        query = parse_qsl(parts.query, keep_blank_values=True)
        if any(k.lower() in _SECRET_QUERY for k, _ in query):
            hidden = [(k, REDACTED if k.lower() in _SECRET_QUERY else v) for k, v in query]
            parts = parts._replace(query=urlencode(hidden, safe="*"))
    return urlunsplit(parts)


def redact_text(text: str) -> str:
    """`text` with the password of every URL in it (scheme://user:password@...) hidden."""
    if "://" not in text:
        return text
    text = _URL_PASSWORD.sub(rf"\g<pre>{REDACTED}", text)
    return _QUERY_SECRET.sub(rf"\g<pre>{REDACTED}", text)


class SecretUrl(Secret[str]):
    """A URL that may carry user:password@: shown (str, repr, JSON) with its password as
    `***` and the rest as it is, so that a recorded URL still says where it pointed."""

    def _display(self) -> str:
        return redact_url(self.get_secret_value())


def plain(value: Any) -> Any:
    """`value` whole: a secret's own value, anything else as it is."""
    return value.get_secret_value() if isinstance(value, Secret) else value


def shown(value: Any) -> Any:
    """`value` as it may be written down: a secret as pydantic displays it, any URL
    password in a text hidden."""
    if isinstance(value, list | tuple):
        return [shown(v) for v in value]
    if isinstance(value, Secret):
        return str(value)
    return redact_text(value) if isinstance(value, str) else value


def settings_snapshot(settings: BaseModel, **extra: Any) -> dict[str, Any]:
    """JSON-ready dict of every field (what a run dir records), with secrets redacted;
    `extra` (values the caller settled, e.g. the URL of the Redis it started) goes in first."""
    doc = {**settings.model_dump(mode="json"), **extra}
    return {name: shown(value) for name, value in doc.items()}


def is_secret_field(name: str, base: type[BaseModel]) -> bool:
    """Whether a field `name` of `base` or of any model derived from it is typed as a secret
    (also inside `X | None`)."""
    models = [base]
    while models:
        model = models.pop()
        models.extend(model.__subclasses__())
        info = model.model_fields.get(name)
        if info is None:
            continue
        annotation = info.annotation
        if any(isinstance(t, type) and issubclass(t, Secret) for t in _types_in(annotation)):
            return True
    return False


def _types_in(annotation: Any) -> list[Any]:
    """`annotation`, its generic origin (Secret of Secret[int]) and its arguments, nested."""
    inner = [t for arg in get_args(annotation) for t in _types_in(arg)]
    return [annotation, get_origin(annotation), *inner]
