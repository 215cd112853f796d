"""Bad rollout messages that know why they are bad.

Each generator takes a valid message and breaks exactly one thing, and returns the frames
with the `Reason` the decoder must give (None: the message is valid and must be accepted).
Choices come from a `Source`, so the same catalogue is driven by hypothesis (shrinkable
examples) and by a seeded numpy generator (thousands of messages, fast).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgpack
import numpy as np
from hypothesis import strategies as st

from benchmarks.messages.factory import make_batch, wire
from ppomq.proto import Reason, RolloutSpec
from ppomq.proto.rollout_types import ALLOWED_DTYPES, MAX_HEADER_BYTES, ROLLOUT_MINOR


class Source(Protocol):
    def int(self, lo: int, hi: int) -> int: ...  # inclusive
    def choice(self, items: Sequence[Any]) -> Any: ...
    def bytes(self, n: int) -> bytes: ...


class RngSource:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def int(self, lo: int, hi: int) -> int:
        return int(self.rng.integers(lo, hi, endpoint=True))

    def choice(self, items: Sequence[Any]) -> Any:
        return items[int(self.rng.integers(0, len(items)))]

    def bytes(self, n: int) -> bytes:
        return self.rng.bytes(n)


class HypothesisSource:
    """Each choice is one integer draw whatever its bounds, so that draws never depend on
    state outside hypothesis (frame lengths vary with the random batch and its seq)."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def _draw(self) -> int:
        return self.data.draw(st.integers(0, 2**32 - 1))

    def int(self, lo: int, hi: int) -> int:
        return lo + self._draw() % (hi - lo + 1)

    def choice(self, items: Sequence[Any]) -> Any:
        return items[self._draw() % len(items)]

    def bytes(self, n: int) -> bytes:
        return np.random.default_rng(self._draw()).bytes(n)


@dataclass
class Generator:
    """Makes messages for one spec; remembers the last accepted seq of the 'good' actor."""

    spec: RolloutSpec
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    seq: int = 0
    last_good: int | None = None

    def base(self) -> tuple[list[bytes], dict[str, Any]]:
        """A fresh valid message with an unused seq, and its decoded header."""
        self.seq += 1
        frames = wire(make_batch(self.spec, self.rng, seq=self.seq, actor_id="good"))
        return frames, msgpack.unpackb(frames[0])

    def make(self, src: Source) -> tuple[list[bytes], Reason | None, str]:
        name = src.choice(list(MUTATIONS))
        frames, reason = MUTATIONS[name](self, src)
        if reason is None:
            self.last_good = msgpack.unpackb(frames[0])["seq"]
        return frames, reason, name


def _pack(header: dict[str, Any]) -> bytes:
    return msgpack.packb(header, use_bin_type=True)


def _table_index(header: dict[str, Any], src: Source) -> int:
    return src.int(0, len(header["arrays"]) - 1)


def m_valid(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    return g.base()[0], None


def m_newer_minor_extra_array(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    """A newer minor's unknown header key and unknown array are ignored (still byte-checked)."""
    frames, h = g.base()
    h["schema"] = f"ppomq.rollout/1.{src.int(ROLLOUT_MINOR + 1, 99)}"  # newer than ours
    h["future_field"] = {"anything": [1, 2]}
    dtype = src.choice(sorted(ALLOWED_DTYPES))
    shape = [src.int(0, 4), src.int(1, 3)]
    nbytes = math.prod(shape) * np.dtype(dtype).itemsize
    h["arrays"].append({"name": "future_array", "dtype": dtype, "shape": shape, "note": 1})
    lie = src.choice([0, 0, 1, -1])
    if lie == -1 and nbytes == 0:
        lie = 1
    body = src.bytes(nbytes + lie)
    return [_pack(h), *frames[1:], body], None if lie == 0 else Reason.BYTE_COUNT


def m_too_few_frames(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    # One frame: a ZeroMQ message cannot have none (test_rollout checks [] in process).
    frames, _ = g.base()
    return [src.choice([frames[0], b"", frames[1]])], Reason.FRAME_COUNT


def m_drop_frame(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, _ = g.base()
    del frames[src.int(1, len(frames) - 1)]
    return frames, Reason.FRAME_COUNT


def m_extra_frame(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, _ = g.base()
    for _ in range(src.int(1, 3)):
        frames.insert(src.int(1, len(frames)), src.bytes(src.int(0, 64)))
    return frames, Reason.FRAME_COUNT


def m_oversize(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, _ = g.base()
    room = g.spec.max_bytes - sum(map(len, frames))
    frames.insert(src.int(1, len(frames)), bytes(room + src.int(1, 4096)))
    return frames, Reason.OVERSIZE


def m_oversize_header(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, h = g.base()
    h["padding"] = bytes(MAX_HEADER_BYTES)
    return [_pack(h), *frames[1:]], Reason.OVERSIZE


def m_header_garbage(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, _ = g.base()
    kind = src.choice(["random", "truncated"])
    if kind == "truncated":
        head = frames[0][: src.int(0, len(frames[0]) - 1)]
    else:
        head = src.bytes(src.int(0, 300))
    try:
        doc = msgpack.unpackb(head)
    except Exception:
        return [head, *frames[1:]], Reason.HEADER_NOT_MSGPACK
    if isinstance(doc, dict):  # random bytes that happen to be a map: not this case's job
        return m_header_not_map(g, src)
    return [head, *frames[1:]], Reason.HEADER_INVALID


def m_header_not_map(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, h = g.base()
    doc = src.choice([list(h.items()), 7, "ppomq.rollout/1.0", None, [h], b"\x00" * 3, 1.5])
    return [_pack(doc), *frames[1:]], Reason.HEADER_INVALID


def m_schema(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, h = g.base()
    bad_unknown = [
        None,
        7,
        "",
        "ppomq.rollout",
        "ppomq.rollout/1",
        "ppomq.rollout/1.0\n",
        "PPOMQ.ROLLOUT/1.0",
        "ppomq.weights/1.0",
        "other/1.0",
        "ppomq.rollout/x.0",
        "ppomq.rollout/\u0661.0",
    ]
    bad_major = ["ppomq.rollout/2.0", "ppomq.rollout/0.9", "ppomq.rollout/999999.0"]
    if src.int(0, 1):
        value, reason = src.choice(bad_unknown), Reason.SCHEMA_UNKNOWN
    else:
        value, reason = src.choice(bad_major), Reason.SCHEMA_MAJOR
    if value is None:
        del h["schema"]
    else:
        h["schema"] = value
    return [_pack(h), *frames[1:]], reason


_FIELD_BAD: dict[str, list[Any]] = {
    "run_id": [None, 1, b"run-1", ["run-1"], "x" * 257],
    "actor_id": [None, 1, b"good", "x" * 257],
    "env_id": [None, 2.5, b"Test-v0", "x" * 300],
    "seq": [None, -1, 1.0, True, "1"],
    "policy_version": [None, -5, 2.0, False, [1]],
    "created_ns": [None, -1, 1.5e18, "now"],
    "num_envs": [None, 0, -2, 2.0, True],
    "num_steps": [None, 0, 4.0, "4"],
    "arrays": [None, {}, "obs", 3],
    "episodes": [None, [], "none", 0],
}


def m_field_type(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, h = g.base()
    key = src.choice(sorted(_FIELD_BAD))
    value = src.choice(_FIELD_BAD[key])
    if value is None:
        del h[key]
    else:
        h[key] = value
    return [_pack(h), *frames[1:]], Reason.HEADER_INVALID


def m_episodes(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, h = g.base()
    limit = g.spec.num_steps * (g.spec.num_envs or 1)
    bad = [
        {"returns": [1.0], "lengths": []},
        {"returns": [math.nan], "lengths": [3]},
        {"returns": [math.inf, 1.0], "lengths": [3, 4]},
        {"returns": [1.0], "lengths": [0]},
        {"returns": [1.0], "lengths": [2.0]},
        {"returns": [True], "lengths": [2]},
        {"returns": ["1"], "lengths": [2]},
        {"returns": [1.0], "lengths": [True]},
        {"returns": (1.0,), "lengths": None},
        {"lengths": [1]},
        {},
        {"returns": [0.0] * (limit + 1), "lengths": [1] * (limit + 1)},
    ]
    h["episodes"] = src.choice(bad)
    return [_pack(h), *frames[1:]], Reason.EPISODES_INVALID


def m_run_env(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, h = g.base()
    if src.int(0, 1):
        h["run_id"] = src.choice(["run-2", "", "RUN-1", "run-1 "])
        reason = Reason.RUN_ID
    else:
        h["env_id"] = src.choice(["CartPole-v1", "", "test-v0"])
        reason = Reason.ENV_ID
    return [_pack(h), *frames[1:]], reason


def m_t_n(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, h = g.base()
    key = src.choice(["num_steps", "num_envs"])
    h[key] = src.choice([h[key] + 1, h[key] * 2, 10**9, 2**63])
    return [_pack(h), *frames[1:]], Reason.SHAPE_MISMATCH


def m_entry(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    """Break one entry of the array table (all entries before it stay valid)."""
    frames, h = g.base()
    table = h["arrays"]
    i = _table_index(h, src)
    entry = table[i]
    case = src.choice(
        [
            "not_map",
            "bad_name",
            "duplicate",
            "dtype_not_allowed",
            "dtype_mismatch",
            "shape_malformed",
            "shape_wrong",
            "unknown",
            "missing",
        ]
    )
    if case == "duplicate" and i == 0:
        case = "not_map"
    if case == "not_map":
        table[i] = src.choice([[entry["name"], entry["dtype"], entry["shape"]], "obs", 5, None])
        reason = Reason.HEADER_INVALID
    elif case == "bad_name":
        entry["name"] = src.choice([None, 3, b"obs", "", "n" * 300])
        reason = Reason.HEADER_INVALID
    elif case == "duplicate":
        entry["name"] = table[src.int(0, i - 1)]["name"]
        reason = Reason.DUPLICATE_ARRAY
    elif case == "dtype_not_allowed":
        entry["dtype"] = src.choice(
            ["complex64", "float128", "<f4", "f4", "object", "U8", "", None, 4, "FLOAT32"]
        )
        reason = Reason.DTYPE_NOT_ALLOWED
    elif case == "dtype_mismatch":
        entry["dtype"] = src.choice(sorted(ALLOWED_DTYPES - {entry["dtype"]}))
        reason = Reason.DTYPE_MISMATCH
    elif case == "shape_malformed":
        entry["shape"] = src.choice(
            [
                [-1, *entry["shape"][1:]],
                [2**31, 2],
                [2**40] * 3,
                [1] * 9,
                [4.0, 2],
                [True, 2],
                "4,2",
                None,
                {"0": 4},
                [[4], 2],
            ]
        )
        reason = Reason.SHAPE_MISMATCH
    elif case == "shape_wrong":
        shape = list(entry["shape"])
        j = src.int(0, len(shape) - 1)
        shape[j] = shape[j] + src.int(1, 5)
        entry["shape"] = src.choice([shape, [*shape, 1], shape[:-1], [2**30, 2**30]])
        reason = Reason.SHAPE_MISMATCH
    elif case == "unknown":
        entry["name"] = src.choice(["observations", "obs2", "advantages", "Obs"])
        reason = Reason.UNKNOWN_ARRAY
    else:  # missing: a required array left out, with its frame
        required = [k for k, e in enumerate(table) if e["name"] != "bootstrap_obs"]
        k = src.choice(required)
        del table[k]
        del frames[k + 1]
        reason = Reason.MISSING_ARRAY
    return [_pack(h), *frames[1:]], reason


def m_byte_count(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, _ = g.base()
    i = src.int(1, len(frames) - 1)
    if src.int(0, 1) and frames[i]:
        frames[i] = frames[i][: src.int(0, len(frames[i]) - 1)]  # truncated frame
    else:
        frames[i] = frames[i] + src.bytes(src.int(1, 16))  # a count that lies the other way
    return frames, Reason.BYTE_COUNT


def m_seq(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    if g.last_good is None:
        return m_valid(g, src)
    frames, h = g.base()
    h["seq"] = g.last_good - src.int(0, min(3, g.last_good))
    return [_pack(h), *frames[1:]], Reason.SEQ_NOT_INCREASING


def _poke(frames: list[bytes], h: dict[str, Any], name: str, value: bytes, at: int) -> None:
    i = next(k for k, e in enumerate(h["arrays"]) if e["name"] == name) + 1
    body = bytearray(frames[i])
    body[at * len(value) : (at + 1) * len(value)] = value
    frames[i] = bytes(body)


def m_contents(g: Generator, src: Source) -> tuple[list[bytes], Reason | None]:
    frames, h = g.base()
    t, n = h["num_steps"], h["num_envs"]
    case = src.choice(["non_finite", "bool", "action"])
    if case == "non_finite":
        name = src.choice(["obs", "logp", "values", "rewards", "final_values", "bootstrap_value"])
        size = len(frames[next(k for k, e in enumerate(h["arrays"]) if e["name"] == name) + 1])
        bad = np.array([src.choice([math.nan, math.inf, -math.inf])], "<f4").tobytes()
        _poke(frames, h, name, bad, src.int(0, size // 4 - 1))
        return frames, Reason.NON_FINITE
    if case == "bool":
        name = src.choice(["terminated", "truncated"])
        _poke(frames, h, name, bytes([src.int(2, 255)]), src.int(0, t * n - 1))
        return frames, Reason.INVALID_VALUE
    bad_action = src.choice([-1, g.spec.action.n, 2**62, -(2**63)])
    _poke(frames, h, "actions", np.array([bad_action], "<i8").tobytes(), src.int(0, t * n - 1))
    return frames, Reason.ACTION_OUT_OF_SPACE


MUTATIONS: dict[str, Callable[[Generator, Source], tuple[list[bytes], Reason | None]]] = {
    "valid": m_valid,
    "newer_minor": m_newer_minor_extra_array,
    "too_few_frames": m_too_few_frames,
    "drop_frame": m_drop_frame,
    "extra_frame": m_extra_frame,
    "oversize": m_oversize,
    "oversize_header": m_oversize_header,
    "header_garbage": m_header_garbage,
    "header_not_map": m_header_not_map,
    "schema": m_schema,
    "field_type": m_field_type,
    "episodes": m_episodes,
    "run_env": m_run_env,
    "t_n": m_t_n,
    "entry": m_entry,
    "byte_count": m_byte_count,
    "seq": m_seq,
    "contents": m_contents,
}
