"""What every settings module shares: the `PPOMQ_` prefix and the base of every group."""

from __future__ import annotations

from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "PPOMQ_"


class SettingsGroup(BaseSettings):
    """Base of every settings group, so that all of them read `PPOMQ_*` the same way."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", validate_default=True, frozen=True
    )
