"""An env id the registry does not know is a one-line error that names both ways to give
one: a registered id, or MODULE:EnvId for an env that a module of the user's registers."""

from __future__ import annotations

import pytest

from ppomq.core.envs import check_env_id
from ppomq.core.errors import UsageError


def test_an_unknown_env_id_names_the_module_form_and_a_close_id():
    with pytest.raises(UsageError) as refused:
        check_env_id("CartPol-v1")
    text = str(refused.value)
    assert "\n" not in text
    assert "MODULE:EnvId" in text and "gymnasium.envs.registry" in text
    assert "CartPole-v0" in text or "CartPole-v1" in text  # what was probably meant
