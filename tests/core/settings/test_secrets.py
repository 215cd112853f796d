"""Nothing secret on disk or in a process list.

A real `ppomq train` against a real redis-server whose user has a password: the password is
in no file of the run dir, in no line the launcher prints, and on no `ps` command line while
the run lasts. The shipped compose file and rendered k8s manifests put no password on any
command line either (a probe's `redis-cli --pass X` would show X in `ps`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import redis
import yaml

from benchmarks.deploy.composefile import REPO, resolve_compose, tool
from ppomq.core.settings import (
    LearnerSettings,
    RedisSettings,
    SecretUrl,
    SettingsGroup,
    TrainSettings,
    format_validation_error,
    is_secret_field,
    redact_text,
    redact_url,
    settings_env,
    settings_snapshot,
)
from ppomq.core.store.connect import hide_secrets_in_title
from tests.support import wait_until

PPOMQ = [sys.executable, "-m", "ppomq.cli"]
SMALL = [
    "--num-envs", "4", "--num-steps", "32", "--batch-samples", "256",
    "--update-epochs", "2", "--eval-episodes", "1", "--no-progress",
]  # fmt: skip


# --------------------------------------------------------------------------- redaction


def test_redact_url_and_text_hide_every_form_of_password():
    assert redact_url("redis://u:pw@h:1/0") == "redis://u:***@h:1/0"
    assert redact_url("redis://:pw@h/0") == "redis://:***@h/0"
    assert redact_url("redis://u:pw@[::1]:6379/0") == "redis://u:***@[::1]:6379/0"
    assert redact_url("redis://h/0?db=1&password=pw") == "redis://h/0?db=1&password=***"
    assert redact_url("redis://u:p@w@h/0") == "redis://u:***@h/0"
    for plain in ("redis://127.0.0.1:6379/0", "redis://u@h/0", "tcp://*:5556", "CartPole-v1"):
        assert redact_url(plain) == plain
    line = "--redis-url=redis://ppomq-learner:pw.1~x@redis:6379/0 and http://a:b@c/d me@host"
    assert redact_text(line) == (
        "--redis-url=redis://ppomq-learner:***@redis:6379/0 and http://a:***@c/d me@host"
    )


def test_settings_snapshot_redacts_but_settings_env_passes_the_secret_on():
    url = "redis://ppomq-learner:pw-123@redis:6379/0"
    s = LearnerSettings(redis_url=url, run_dir="/tmp/x")
    assert settings_snapshot(s)["redis_url"] == "redis://ppomq-learner:***@redis:6379/0"
    assert settings_env(s)["PPOMQ_REDIS_URL"] == url  # children still get it (env, not argv)
    # Values the caller adds are redacted the same way.
    doc = settings_snapshot(TrainSettings(), redis_url=url, other="x http://u:pw-9@h")
    assert "pw-123" not in json.dumps(doc) and "pw-9" not in json.dumps(doc)


def test_a_secret_setting_shows_redacted_everywhere_but_in_its_value():
    url = "redis://ppomq-learner:pw-123@redis:6379/0"
    s = LearnerSettings(redis_url=url, run_dir="/tmp/x")
    assert s.redis_url.get_secret_value() == url
    for text in (str(s.redis_url), repr(s), s.model_dump_json()):
        assert "pw-123" not in text and "redis://ppomq-learner:***@redis:6379/0" in text
    assert TrainSettings().redis_url is None  # optional: no embedded-Redis URL to hide


def test_every_setting_that_can_hold_a_secret_is_typed_as_one():
    """A URL setting may carry user:password@: it is a SecretUrl, so it is redacted
    wherever it is shown. (A new password, token or key setting: type it Secret too.)"""
    assert is_secret_field("redis_url", SettingsGroup)
    assert not is_secret_field("run_id", SettingsGroup)
    groups, seen = list(SettingsGroup.__subclasses__()), set()
    while groups:
        cls = groups.pop()
        groups.extend(cls.__subclasses__())
        for name in cls.model_fields:
            if name.endswith("_url") and name not in seen:
                seen.add(name)
                assert is_secret_field(name, cls), f"{cls.__name__}.{name}: type it SecretUrl"
    assert RedisSettings.model_fields["redis_url"].annotation is SecretUrl


def test_a_bad_secret_setting_is_reported_without_its_value():
    from pydantic import Secret, ValidationError

    class _Probe(RedisSettings):
        api_key: Secret[int] = Secret(0)

    with pytest.raises(ValidationError) as exc:
        _Probe(api_key="s3cret-not-an-int")
    message = format_validation_error(exc.value)
    assert "api_key" in message and "s3cret" not in message and "'***'" in message
    with pytest.raises(ValidationError) as exc:  # a URL password in any other setting
        TrainSettings(env_id=["redis://u:pw-5@h"])  # type: ignore[arg-type]
    assert "pw-5" not in format_validation_error(exc.value)


def test_the_title_of_a_process_started_with_a_password_in_its_arguments_hides_it():
    code = (
        "import sys; from ppomq.core.store.connect import hide_secrets_in_title as h; "
        "assert h(); print(open('/proc/self/cmdline').read())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "--redis-url", "redis://u:pw-title@h/0"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert "pw-title" not in out.stdout and "redis://u:***@h/0" in out.stdout
    assert hide_secrets_in_title(["ppomq", "train", "--actors", "2"]) is False


# --------------------------------------------------------------------------- a real run


def _grep_tree(root: Path, needle: bytes) -> list[str]:
    return [
        str(p.relative_to(root))
        for p in sorted(root.rglob("*"))
        if p.is_file() and needle in p.read_bytes()
    ]


def _ps_hits(needle: str) -> list[str]:
    ps = ["ps", "-eww", "-o", "pid,args"]  # -ww: whole command lines, however long
    out = subprocess.run(ps, capture_output=True, text=True, timeout=30)
    return [line for line in out.stdout.splitlines() if needle in line]


@pytest.mark.slow
def test_a_train_run_with_a_redis_password_leaves_it_nowhere(start_redis, tmp_path):
    password = "pw-" + secrets.token_hex(12)
    # The password is set over the protocol, so that not even the test's server has it on
    # its command line: any `ps` hit below is ppomq's.
    server = start_redis()  # type: ignore[operator]
    admin = redis.Redis.from_url(server.url)
    admin.execute_command("ACL", "SETUSER", "ppomq-secret", "on", f">{password}", "~*", "&*",
                          "+@all")  # fmt: skip
    url = server.url_for("ppomq-secret", password)
    run_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PPOMQ_")}
    # On the command line on purpose (the hard case): the launcher rewrites its own title.
    proc = subprocess.Popen(
        [*PPOMQ, "train", "--redis-url", url, "--run-dir", str(run_dir), "--actors", "2",
         "--total-steps", "0", "--duration-s", "8", "--metrics-port", "0", *SMALL],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    seen: list[str] = []
    titles: set[str] = set()
    try:

        def running() -> None:
            assert proc.poll() is None, proc.communicate()[0]

        wait_until((run_dir / "settings.json").exists, 90, "settings.json", check=running)

        def sampled_until_the_run_ends() -> bool:
            seen.extend(_ps_hits(password))
            with contextlib.suppress(psutil.Error):
                for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True)]:
                    titles.add(" ".join(p.cmdline()))
            return proc.poll() is not None

        # From here on (the launcher has parsed its flags), sample every process on the
        # machine until the run ends: the launcher, the zygote, every service it forked.
        wait_until(sampled_until_the_run_ends, 90, "the run's end", interval_s=0.3)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert seen == [], seen
    assert any("ppomq-secret:***@" in t for t in titles), titles  # the launcher, redacted
    assert any("learner" in t.split() for t in titles), titles  # children were seen too
    assert password not in output
    assert _grep_tree(run_dir, password.encode()) == []
    # What was recorded is the URL without its password, for both settings files.
    for name in ("settings.json", "learner_settings.json"):
        cfg = json.loads((run_dir / name).read_text())
        assert cfg["redis_url"] == redact_url(url) != url, name
    assert any((run_dir / "logs").iterdir()) and any((run_dir / "tb").iterdir())
    # `ppomq status --run-dir` asks for the URL again rather than failing on `***`.
    status = subprocess.run([*PPOMQ, "status", "--run-dir", str(run_dir), "--json"],
                            capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert status.returncode != 0 and "PPOMQ_REDIS_URL" in status.stderr
    assert password not in status.stderr
    status = subprocess.run([*PPOMQ, "status", "--run-dir", str(run_dir), "--json"],
                            capture_output=True, text=True, timeout=60,
                            env={**env, "PPOMQ_REDIS_URL": url})  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert "version" in json.loads(status.stdout)


# --------------------------------------------------------------------------- deployments

# A password on a command line: a URL's user:password@, a `$(VAR)` k8s expands into the
# arguments, or a flag that takes one (redis-cli -a/--pass, redis-server --requirepass).
_ON_COMMAND_LINE = re.compile(
    r"://[^\s:/@]*:[^\s@/]+@|\$\([A-Z_]*(PASSWORD|SECRET|TOKEN|KEY)[A-Z_]*\)"
    r"|(^|\s)(-a|--pass|--requirepass|--masterauth)(\s|=|$)"
)


def _command_lines(node: Any, keys: frozenset[str], found: list[str], inside: bool = False):
    """Every string under one of `keys` (at any depth of a YAML document)."""
    if isinstance(node, dict):
        for k, v in node.items():
            _command_lines(v, keys, found, inside or k in keys)
    elif isinstance(node, list):
        for v in node:
            _command_lines(v, keys, found, inside)
    elif inside and isinstance(node, str):
        found.append(node)
    return found


def test_compose_puts_no_password_on_any_command_line():
    pw = {"REDIS_LEARNER_PASSWORD": "pwL-c0mpose", "REDIS_READER_PASSWORD": "pwR-c0mpose",
          "REDIS_OPERATOR_PASSWORD": "pwO-c0mpose"}  # fmt: skip
    compose = resolve_compose(pw)
    lines = _command_lines(compose, frozenset({"command", "entrypoint", "test"}), [])
    assert any("redis-cli" in line for line in lines)  # the Redis healthcheck was seen
    for line in lines:
        assert not any(p in line for p in pw.values()), line
        assert not _ON_COMMAND_LINE.search(line), line
    probe = " ".join(compose["services"]["redis"]["healthcheck"]["test"])
    assert "REDISCLI_AUTH=" in probe


def test_k8s_manifests_put_no_password_on_any_command_line():
    exe = tool("kubectl")
    if exe is None:
        pytest.skip("kubectl is not installed (pip install -e '.[dev]' brings it)")
    probes = 0
    for overlay in sorted(p.name for p in (REPO / "k8s" / "overlays").iterdir()):
        res = subprocess.run([exe, "kustomize", str(REPO / "k8s" / "overlays" / overlay)],
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert res.returncode == 0, res.stderr
        docs = [d for d in yaml.safe_load_all(res.stdout) if d]
        literals = [
            base64.b64decode(v).decode()
            for d in docs
            if d["kind"] == "Secret"
            for v in (d.get("data") or {}).values()
        ]
        others = [d for d in docs if d["kind"] != "Secret"]
        for line in _command_lines(others, frozenset({"command", "args"}), []):
            assert not any(p and p in line for p in literals), (overlay, line)
            assert not _ON_COMMAND_LINE.search(line), (overlay, line)
            probes += "redis-cli" in line
        # A dev password of the local overlay appears in its Secret and nowhere else.
        text = yaml.safe_dump_all(others)
        assert not any(p and p in text for p in literals), overlay
    assert probes >= 2  # the Redis readiness and liveness probes were checked
