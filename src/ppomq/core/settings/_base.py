"""What every settings module shares: the `PPOMQ_` prefix, the base of every group, and
the SECRET marker."""

from __future__ import annotations

from typing import Any

from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "PPOMQ_"

# A setting that holds a secret (a password, a key, a URL that may carry user:password@)
# is marked `json_schema_extra=SECRET`: every settings file a run writes, and every error
# message, shows it redacted (`redact_settings`). A name that reads like a secret is
# treated the same even unmarked, and a URL's password is hidden in any other setting.
# Values stay plain `str`: children still get them whole, as PPOMQ_* variables
# (`settings_env`), which no `ps` command line shows.
SECRET: dict[str, Any] = {"secret": True}


class SettingsGroup(BaseSettings):
    """Base of every settings group, so that all of them read `PPOMQ_*` the same way."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", validate_default=True, frozen=True
    )
