"""CURVE on the rollout sockets (ppomq.core.transport.curvezmq): real ZeroMQ sockets over tcp
loopback.

An allowed key gets through and its messages carry that key (ZAP User-Id); no key, an
unknown key, or the wrong server key gets nothing through. Key files that are missing,
half-configured, unreadable or malformed are one-line UsageErrors naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import zmq

from ppomq.commands.keys import generate
from ppomq.core.errors import UsageError
from ppomq.core.transport.curvezmq import (
    CurveClient,
    actor_id_matches_key,
    client_from_settings,
    is_loopback_bind,
    key_suffix,
    sender_key,
    server_from_settings,
)
from ppomq.core.transport.rollouts import RolloutReceiver, RolloutSender
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    out = tmp_path / "keys"
    generate(out, 2)
    return out


def server(keys: Path):
    return server_from_settings(
        SimpleNamespace(
            curve_server_cert=str(keys / "server.key_secret"),
            curve_allowed_dir=str(keys / "allowed"),
            insecure_plaintext=False,
        ),
        bind="tcp://127.0.0.1:5555",
        bind_flag="--rollout-bind",
    )


def client(keys: Path, i: int = 0, server_public: Path | None = None):
    return client_from_settings(
        SimpleNamespace(
            curve_actor_cert=str(keys / "actors" / f"actor-{i}.key_secret"),
            curve_server_public_cert=str(server_public or keys / "server.key"),
        )
    )


def test_an_allowed_key_gets_through_and_its_messages_carry_the_key(keys):
    cc = client(keys, 1)
    with RolloutReceiver("tcp://127.0.0.1:0", curve=server(keys)) as rx:
        assert rx.authenticated
        with RolloutSender(rx.endpoint, curve=cc) as tx:
            assert tx.send([b"header", b"array"], timeout_ms=5000)
            frames = rx.recv(timeout_ms=5000)
    assert frames is not None and [f.bytes for f in frames] == [b"header", b"array"]
    key = sender_key(frames[0])
    assert key == cc.public.decode()
    assert actor_id_matches_key("a1-123-abcdef" + key_suffix(key), key)
    assert not actor_id_matches_key("a1-123-abcdef", key)


def test_a_frame_at_the_size_cap_still_gets_through_encrypted(keys):
    """libzmq checks MAXMSGSIZE against the encrypted frame: one at the cap must arrive,
    not cost its connection; one beyond the allowance is still dropped by ZeroMQ."""
    cap = 1 << 16
    with RolloutReceiver("tcp://127.0.0.1:0", curve=server(keys), max_message_bytes=cap) as rx:
        with RolloutSender(rx.endpoint, curve=client(keys, 1), max_message_bytes=cap) as tx:
            assert tx.send([b"h", b"x" * (cap - 1)], timeout_ms=5000)
            frames = wait_until(lambda: rx.recv(timeout_ms=100), 5, "the message at the cap")
            assert len(frames[1].bytes) == cap - 1
        with RolloutSender(rx.endpoint, curve=client(keys, 1), max_message_bytes=4 * cap) as tx:
            assert tx.send([b"h", b"x" * (2 * cap)], timeout_ms=5000)
            # Then small markers until one gets through (the receiver drops the connection
            # of a peer that sent too much, so the first ones may go with it): the first
            # message the receiver gets is a marker, so the one over the cap never came.
            frames = wait_until(
                lambda: (tx.send([b"marker", b""], timeout_ms=100), rx.recv(timeout_ms=100))[1],
                20,
                "a marker after the message over the cap",
            )
            assert frames[0].bytes == b"marker"


def _refused(rx: RolloutReceiver, tx: RolloutSender) -> None:
    try:
        # IMMEDIATE: nothing queues before a completed handshake, which never comes.
        assert not tx.send([b"header", b"array"], timeout_ms=1000)
        assert rx.recv(timeout_ms=300) is None
    finally:
        tx.close()


def test_no_key_an_unknown_key_or_a_wrong_server_key_get_nothing_through(keys, tmp_path):
    other = tmp_path / "other"
    generate(other, 1)  # a valid pair, not on the allow-list
    with RolloutReceiver("tcp://127.0.0.1:0", curve=server(keys)) as rx:
        _refused(rx, RolloutSender(rx.endpoint))
        _refused(rx, RolloutSender(rx.endpoint, curve=client(other, 0, keys / "server.key")))
        _refused(rx, RolloutSender(rx.endpoint, curve=client(keys, 0, other / "server.key")))
        pub, sec = zmq.curve_keypair()
        _refused(rx, RolloutSender(rx.endpoint, curve=CurveClient(pub, sec, pub)))
        # and the allowed key still gets through afterwards
        with RolloutSender(rx.endpoint, curve=client(keys, 0)) as tx:
            assert tx.send([b"ok"], timeout_ms=5000)
            assert rx.recv(timeout_ms=5000) is not None


def test_without_curve_nothing_changes(keys):
    with RolloutReceiver("tcp://127.0.0.1:0") as rx, RolloutSender(rx.endpoint) as tx:
        assert not rx.authenticated
        assert tx.send([b"x"], timeout_ms=5000)
        frames = rx.recv(timeout_ms=5000)
    assert frames is not None and sender_key(frames[0]) is None


def test_key_generation_writes_private_secrets_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "k"
    written = generate(out, 3)
    secrets = [p for p in written if p.name.endswith(".key_secret")]
    assert len(secrets) == 4  # server + 3 actors
    for p in secrets:
        assert (os.stat(p).st_mode & 0o777) == 0o600, p
    assert sorted(p.name for p in (out / "allowed").iterdir()) == [
        f"actor-{i}.key" for i in range(3)
    ]
    before = (out / "server.key_secret").read_bytes()
    with pytest.raises(UsageError, match="refusing to overwrite"):
        generate(out, 1)
    assert (out / "server.key_secret").read_bytes() == before


def _one_line(exc: pytest.ExceptionInfo[UsageError]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


LOOP = "tcp://127.0.0.1:5556"


def _srv_settings(cert: str, allowed: str, insecure: bool = False) -> SimpleNamespace:
    return SimpleNamespace(
        curve_server_cert=cert, curve_allowed_dir=allowed, insecure_plaintext=insecure
    )


@pytest.mark.parametrize(
    ("endpoint", "loopback"),
    [("tcp://127.0.0.1:5555", True), ("tcp://127.1.2.3:1", True), ("tcp://[::1]:5555", True),
     ("tcp://localhost:5555", True), ("ipc:///tmp/x", True), ("inproc://x", True),
     ("tcp://*:5555", False), ("tcp://0.0.0.0:5555", False), ("tcp://[::]:5555", False),
     ("tcp://10.0.0.7:5555", False), ("tcp://eth0:5555", False), ("tcp://host:1", False),
     ("udp://127.0.0.1:1", False), ("127.0.0.1:5555", False)],
)  # fmt: skip
def test_loopback_is_only_what_no_other_host_can_reach(endpoint, loopback):
    assert is_loopback_bind(endpoint) is loopback


def test_a_bind_beyond_loopback_needs_curve_or_the_explicit_insecure_flag(keys):
    for bind in ("tcp://*:5555", "tcp://0.0.0.0:1", "tcp://10.1.2.3:1"):
        with pytest.raises(UsageError) as e:
            server_from_settings(_srv_settings("", ""), bind=bind, bind_flag="--rollout-bind")
        text = _one_line(e)
        assert f"--rollout-bind {bind} reaches beyond loopback" in text
        assert "--insecure-plaintext" in text and "ppomq keys generate" in text
        insecure = _srv_settings("", "", insecure=True)
        assert server_from_settings(insecure, bind=bind, bind_flag="--bind") is None
        cert, allowed = str(keys / "server.key_secret"), str(keys / "allowed")
        assert server_from_settings(_srv_settings(cert, allowed), bind=bind, bind_flag="--bind")


def test_bad_key_settings_are_one_line_errors_naming_the_file(keys, tmp_path):
    def srv(cert: str, allowed: str) -> None:
        server_from_settings(_srv_settings(cert, allowed), bind=LOOP, bind_flag="--bind")

    def cli(cert: str, pub: str) -> None:
        client_from_settings(SimpleNamespace(curve_actor_cert=cert, curve_server_public_cert=pub))

    assert server_from_settings(_srv_settings("", ""), bind=LOOP, bind_flag="--bind") is None
    assert cli("", "") is None
    allowed = str(keys / "allowed")
    secret = str(keys / "server.key_secret")
    with pytest.raises(UsageError) as e:
        srv(secret, "")
    assert "curve_allowed_dir" in _one_line(e) and "half" in _one_line(e)
    with pytest.raises(UsageError) as e:
        cli("", str(keys / "server.key"))
    assert "curve_actor_cert" in _one_line(e)
    missing = str(tmp_path / "nope.key_secret")
    with pytest.raises(UsageError) as e:
        srv(missing, allowed)
    assert missing in _one_line(e) and "not found" in _one_line(e)
    junk = tmp_path / "junk.key_secret"
    junk.write_text("this is not a certificate\n")
    with pytest.raises(UsageError) as e:
        srv(str(junk), allowed)
    assert str(junk) in _one_line(e)
    bad = tmp_path / "bad.key_secret"  # the right shape, a broken key
    bad.write_text('curve\n    public-key = "short"\n    secret-key = "short"\n')
    with pytest.raises(UsageError) as e:
        cli(str(bad), str(keys / "server.key"))
    assert str(bad) in _one_line(e)
    with pytest.raises(UsageError) as e:  # a public cert where a secret one belongs
        srv(str(keys / "server.key"), allowed)
    assert "no secret key" in _one_line(e)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UsageError) as e:
        srv(secret, str(empty))
    assert str(empty) in _one_line(e)
    if os.geteuid() != 0:  # root reads anything
        unreadable = tmp_path / "locked.key_secret"
        unreadable.write_bytes((keys / "server.key_secret").read_bytes())
        unreadable.chmod(0)
        with pytest.raises(UsageError) as e:
            srv(str(unreadable), allowed)
        assert str(unreadable) in _one_line(e)


def test_a_receiver_closed_and_reopened_at_once_gets_a_fresh_allow_list(keys):
    # The ZAP handler stops with the last CURVE socket of the context and starts again
    # with the next one; libzmq frees its endpoint asynchronously, so this must wait.
    for _ in range(5):
        with RolloutReceiver("tcp://127.0.0.1:0", curve=server(keys)) as rx:
            with RolloutSender(rx.endpoint, curve=client(keys, 0)) as tx:
                assert tx.send([b"x"], timeout_ms=5000)
                assert rx.recv(timeout_ms=5000) is not None
            with RolloutSender(rx.endpoint) as plain:
                assert not plain.send([b"x"], timeout_ms=200)
