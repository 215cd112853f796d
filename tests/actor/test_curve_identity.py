"""Under CURVE an actor names itself after its key (ppomq.core.transport.curvezmq, proto/ROLLOUT.md
"Authentication"); an actor or learner with a bad key setting stops at start, one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ppomq.actor.identity import new_actor_id
from ppomq.commands.keys import generate
from ppomq.core.transport.curvezmq import actor_id_matches_key, client_from_settings, key_suffix

pytestmark = pytest.mark.timeout(120)


def test_an_actor_id_ends_with_its_key_suffix_only_under_curve(tmp_path: Path):
    generate(tmp_path / "k", 2)
    curve = client_from_settings(
        SimpleNamespace(
            curve_actor_cert=str(tmp_path / "k" / "actors" / "actor-1.key_secret"),
            curve_server_public_cert=str(tmp_path / "k" / "server.key"),
        )
    )
    assert curve is not None
    actor_id = new_actor_id(3, curve)
    suffix = key_suffix(curve.public)
    assert actor_id.startswith("a3-") and actor_id.endswith(suffix)
    assert len(suffix) == 12 and suffix[2:] == suffix[2:].lower()
    assert actor_id_matches_key(actor_id, curve.public)
    assert not new_actor_id(3).endswith(suffix)
    assert "-k" not in new_actor_id(3)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["actor", "--curve-actor-cert", "{k}/missing.key_secret",
          "--curve-server-public-cert", "{k}/server.key"], "{k}/missing.key_secret"),
        (["actor", "--curve-actor-cert", "{k}/actors/actor-0.key_secret",
          "--curve-server-public-cert", "{k}/junk.key"], "{k}/junk.key"),
        (["actor", "--curve-actor-cert", "{k}/actors/actor-0.key_secret"],
         "curve_server_public_cert"),
        (["learner", "--curve-server-cert", "{k}/server.key_secret",
          "--curve-allowed-dir", "{k}/junk.key", "--run-dir", "{k}/run",
          "--rollout-bind", "tcp://127.0.0.1:0", "--redis-url", "redis://127.0.0.1:1/0"],
         "{k}/junk.key"),
    ],
)  # fmt: skip
def test_bad_key_settings_stop_a_service_at_start_with_one_line(tmp_path, argv, needle):
    keys = tmp_path / "k"
    generate(keys, 1)
    (keys / "junk.key").write_text("not a certificate\n")
    args = [a.format(k=keys) for a in argv]
    proc = subprocess.run(
        [sys.executable, "-m", "ppomq.cli", *args], capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ppomq: error:")]
    assert len(errors) == 1 and needle.format(k=keys) in errors[0], proc.stderr
