"""Redaction: what of a setting may be written down (settings files, logs, error messages)."""

from __future__ import annotations

import re
from typing import Any

from pydantic_settings import BaseSettings

from ppomq.core.settings._base import SettingsGroup

_SECRET_NAME = re.compile(r"password|passwd|secret|token|credential|(^|_)(api_)?key$", re.I)


def is_secret(name: str, cls: type[BaseSettings] | None = None) -> bool:
    """Whether setting `name` holds a secret: marked SECRET in `cls` (in any settings
    group when `cls` is None), or named like one."""
    if _SECRET_NAME.search(name):
        return True
    classes = [cls] if cls is not None else SettingsGroup.__subclasses__()
    while classes:
        c = classes.pop()
        info = c.model_fields.get(name)
        extra = info.json_schema_extra if info is not None else None
        if isinstance(extra, dict) and extra.get("secret"):
            return True
        if cls is None:
            classes.extend(c.__subclasses__())
    return False


def redact_value(name: str, value: Any, cls: type[BaseSettings] | None = None) -> Any:
    """`value` of setting `name` as it may be written down: a secret's URL keeps all but its
    password, any other secret is `***`; a URL's password is hidden in every setting."""
    from ppomq.core.store.connect import REDACTED, redact_text, redact_url

    if isinstance(value, list | tuple):
        return [redact_value(name, v, cls) for v in value]
    if value is None or value == "":
        return value
    if is_secret(name, cls):
        return redact_url(value) if isinstance(value, str) and "://" in value else REDACTED
    return redact_text(value) if isinstance(value, str) else value


def redact_settings(values: dict[str, Any], cls: type[BaseSettings]) -> dict[str, Any]:
    """`values` (settings by name) with every secret redacted: what may go on disk or in a log."""
    return {name: redact_value(name, value, cls) for name, value in values.items()}


def settings_snapshot(settings: BaseSettings, **extra: Any) -> dict[str, Any]:
    """JSON-ready dict of every field (what a run dir records), with secrets redacted;
    `extra` (values the caller settled, e.g. the URL of the Redis it started) goes in first."""
    doc = {**settings.model_dump(mode="json"), **extra}
    return redact_settings(doc, type(settings))
