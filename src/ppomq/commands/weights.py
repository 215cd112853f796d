"""`ppomq weights list|show|diff|export|verify|protect|unprotect`: a run's weight versions.

Reads Redis through the weight store; `protect`/`unprotect` are the only writes. Every
verb takes --redis-url, --run-id (or PPOMQ_REDIS_URL, PPOMQ_RUN_ID) and --json, or
--run-dir RUN: the Redis of that `ppomq train` run while it runs, after it (read-only) a
private copy of the Redis data it kept in RUN/redis/, started and removed by the command.
Told neither a run dir nor a Redis URL, a verb reads the newest run dir under runs/ and says
so in its first line.
Exit codes: 0 ok, 1 verification failed, 2 usage, 3 no such run or version, 4 Redis
unreachable or refused us.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ppomq.core.errors import NotFoundError, UsageError, UserError
from ppomq.core.settings import CommonSettings, RedisSettings, load_settings
from ppomq.reports.tables import print_table

if TYPE_CHECKING:
    import numpy as np

    from ppomq.core.store.run_redis import RunRedis
    from ppomq.core.store.weight_store import WeightStore
    from ppomq.proto.weights_blob import WeightsHeader

LATEST = "latest"
ALL = "all"


# --- arguments ---------------------------------------------------------------------------


def _version(text: str) -> int | str:
    if text == LATEST:
        return LATEST
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a version (an integer or 'latest')"
        ) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"version {value} is negative")
    return value


def _version_or_all(text: str) -> int | str:
    return ALL if text == ALL else _version(text)


def _common_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    info_url = RedisSettings.model_fields["redis_url"]
    info_run = CommonSettings.model_fields["run_id"]
    common.add_argument(
        "--redis-url",
        default=argparse.SUPPRESS,
        help=f"{info_url.description} [env PPOMQ_REDIS_URL]; with neither it nor --run-dir: "
        f"the newest run dir under runs/, else {info_url.default}",
    )
    common.add_argument(
        "--run-id",
        default=argparse.SUPPRESS,
        help=f"{info_run.description} [env PPOMQ_RUN_ID; default: {info_run.default}]",
    )
    common.add_argument(
        "--run-dir",
        default=argparse.SUPPRESS,
        metavar="RUN",
        help="A `ppomq train` run dir: its Redis while it runs, after it (read-only) a copy "
        "of the Redis data it kept in RUN/redis/; its run id unless --run-id. --redis-url "
        "only fills in a password settings.json left out. Default: with no --redis-url, the "
        "newest run dir under runs/ (of --run-id, if given), named in the first line.",
    )
    common.add_argument("--json", action="store_true", help="Print one JSON document.")
    return common


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "weights",
        help="List, inspect, compare, export, verify and protect a run's weight versions.",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=type(parser))
    common = _common_parser()

    def verb(name: str, helptext: str, func: Callable[[argparse.Namespace], int]) -> Any:
        p = verbs.add_parser(name, parents=[common], help=helptext, description=helptext)
        p.set_defaults(func=func)
        return p

    verb("list", "Versions stored for the run (marks latest and protected).", cmd_list)
    p = verb("show", "Header and per-tensor name/shape/dtype/L2 norm of version V.", cmd_show)
    p.add_argument("version", metavar="V", type=_version, help="a version number or 'latest'")
    p = verb("diff", "Per-tensor L2 distance and relative change from V1 to V2.", cmd_diff)
    p.add_argument("v1", metavar="V1", type=_version)
    p.add_argument("v2", metavar="V2", type=_version)
    p = verb("export", "Write version V as a torch.load-able file.", cmd_export)
    p.add_argument("version", metavar="V", type=_version)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="file to write (.pt)")
    p = verb(
        "verify", "Recompute the sha256 of version V (or 'all') against its header.", cmd_verify
    )
    p.add_argument("version", metavar="V", type=_version_or_all)
    p = verb("protect", "Exempt version V from retention (needs write access).", cmd_protect)
    p.add_argument("version", metavar="V", type=_version)
    p = verb("unprotect", "Let retention delete version V again.", cmd_unprotect)
    p.add_argument("version", metavar="V", type=_version)

    def no_verb(_args: argparse.Namespace) -> int:
        raise UsageError(
            "ppomq weights: choose a verb: list, show, diff, export, verify, protect, unprotect "
            "(see ppomq weights --help)"
        )

    parser.set_defaults(func=no_verb)


# --- plumbing ----------------------------------------------------------------------------


class _Session:
    """Settings, Redis client and store for one verb; Redis failures become exit 4.
    What it opens (a client, with --run-dir maybe a private server) `stack` closes."""

    def __init__(self, args: argparse.Namespace, stack: contextlib.ExitStack) -> None:
        from ppomq.core.errors import RedisUnavailableError
        from ppomq.core.store.connect import connect_redis, redis_errors
        from ppomq.core.store.run_redis import no_run_found, open_run_redis, run_dir_to_read
        from ppomq.core.store.weight_store import WeightStore

        flags = vars(args)
        self.run: RunRedis | None = None
        run_dir, told_nothing = run_dir_to_read(
            Path(flags["run_dir"]) if "run_dir" in flags else None,
            flags.get("redis_url"),
            flags.get("run_id"),
            as_json=args.json,
        )
        if run_dir is not None:
            self.run = stack.enter_context(
                open_run_redis(
                    run_dir, redis_url=flags.get("redis_url"), run_id=flags.get("run_id")
                )
            )
            self.redis_url, self.run_id = self.run.url, self.run.run_id
        else:
            self.redis_url = load_settings(
                RedisSettings, {k: flags[k] for k in ("redis_url",) if k in flags}
            ).redis_url
            self.run_id = load_settings(
                CommonSettings, {k: flags[k] for k in ("run_id",) if k in flags}
            ).run_id
        self.as_json: bool = args.json
        self.errors = lambda: redis_errors(self.redis_url)
        try:
            self.client = connect_redis(self.redis_url)
        except RedisUnavailableError:
            if told_nothing and run_dir is None:
                raise no_run_found(self.redis_url) from None
            raise
        stack.callback(self.client.close)
        self.store: WeightStore = WeightStore(self.client, self.run_id)

    def resolve(self, version: int | str) -> int:
        if version != LATEST:
            return int(version)
        latest = self.store.latest_version()
        if latest is None:
            raise NotFoundError(f"run {self.run_id!r} has no versions yet")
        return latest


def _run(args: argparse.Namespace, body: Callable[[_Session], int]) -> int:
    with contextlib.ExitStack() as stack:
        session = _Session(args, stack)
        with session.errors():
            session.store.require_run()
            return body(session)


def _emit_json(doc: Any) -> None:
    json.dump(doc, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _time(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _num(x: float) -> str:
    return f"{x:.6g}"


def _l2(arr: np.ndarray) -> float:
    import numpy as np

    # float64 so that big float16/float32 tensors do not overflow or lose the sum.
    return float(np.linalg.norm(arr.astype(np.float64, copy=False).ravel()))


def _header_summary(header: WeightsHeader) -> dict[str, Any]:
    return {
        "version": header.version,
        "created_ns": header.created_ns,
        "created": _time(header.created_ns).replace(" ", "T") + "Z",
        "learner_step": header.learner_step,
        "env_steps": header.env_steps,
        "num_tensors": len(header.tensors),
        "num_params": sum(math.prod(t.shape) for t in header.tensors),
        "blob_size": header.blob_size,
        "sha256": header.sha256,
        "model": header.model,
        "extra": header.extra,
    }


# --- verbs -------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    def body(s: _Session) -> int:
        rows = s.store.list_versions()
        latest = s.store.latest_version()
        if s.as_json:
            versions = []
            for r in rows:
                doc = _header_summary(r.header) if r.header else {"version": r.version}
                doc.update(protected=r.protected, latest=r.latest, error=r.error)
                versions.append(doc)
            _emit_json({"run_id": s.run_id, "latest": latest, "versions": versions})
            return 0
        print(f"run {s.run_id}: {len(rows)} version(s), latest {latest}")
        table = []
        for r in rows:
            flags = ",".join(
                f for f, on in (("latest", r.latest), ("protected", r.protected)) if on
            )
            h = r.header
            if h is None:
                table.append([r.version, "?", "?", "?", "?", "?", "?", f"{flags} ({r.error})"])
                continue
            table.append(
                [
                    h.version,
                    _time(h.created_ns),
                    h.learner_step,
                    h.env_steps,
                    sum(math.prod(t.shape) for t in h.tensors),
                    _size(h.blob_size),
                    h.sha256[:12],
                    flags,
                ]
            )
        headers = ["VERSION", "CREATED (UTC)", "LEARNER_STEP", "ENV_STEPS", "PARAMS", "SIZE"]
        print_table([*headers, "SHA256", "FLAGS"], table, right={0, 2, 3, 4, 5})
        return 0

    return _run(args, body)


def cmd_show(args: argparse.Namespace) -> int:
    from ppomq.proto.weights_blob import unpack_tensors

    def body(s: _Session) -> int:
        version = s.resolve(args.version)
        header, blob = s.store.fetch(version)
        arrays = unpack_tensors(header, blob)
        tensors = [
            {
                "name": t.name,
                "shape": list(t.shape),
                "dtype": t.dtype,
                "numel": math.prod(t.shape),
                "l2_norm": _l2(arrays[t.name]),
            }
            for t in header.tensors
        ]
        protected = version in s.store.protected_versions()
        latest = s.store.latest_version() == version
        if s.as_json:
            doc = {"run_id": s.run_id, **_header_summary(header)}
            doc.update(protected=protected, latest=latest, tensors=tensors)
            _emit_json(doc)
            return 0
        flags = [f for f, on in (("latest", latest), ("protected", protected)) if on]
        print(f"version       {version}" + (f" ({', '.join(flags)})" if flags else ""))
        print(f"run           {s.run_id}")
        print(f"created       {_time(header.created_ns)} UTC")
        print(f"learner_step  {header.learner_step}")
        print(f"env_steps     {header.env_steps}")
        print(f"model         {json.dumps(header.model, sort_keys=True)}")
        if header.extra:
            print(f"extra         {json.dumps(header.extra, sort_keys=True)}")
        print(f"blob          {_size(header.blob_size)}, sha256 {header.sha256}")
        print()
        rows = [
            [t["name"], "x".join(map(str, t["shape"])) or "scalar", t["dtype"], t["numel"],
             _num(t["l2_norm"])]
            for t in tensors
        ]  # fmt: skip
        total = sum(t["numel"] for t in tensors)
        rows.append(
            ["total", "", "", total, _num(math.sqrt(sum(t["l2_norm"] ** 2 for t in tensors)))]
        )
        print_table(["TENSOR", "SHAPE", "DTYPE", "NUMEL", "L2_NORM"], rows, right={3, 4})
        return 0

    return _run(args, body)


def cmd_diff(args: argparse.Namespace) -> int:
    import numpy as np

    from ppomq.proto.weights_blob import unpack_tensors

    def body(s: _Session) -> int:
        v1, v2 = s.resolve(args.v1), s.resolve(args.v2)
        h1, b1 = s.store.fetch(v1)
        h2, b2 = s.store.fetch(v2)
        a1, a2 = unpack_tensors(h1, b1), unpack_tensors(h2, b2)
        rows: list[dict[str, Any]] = []
        sq_dist = sq_norm = 0.0
        for name in [*a1, *(n for n in a2 if n not in a1)]:
            x, y = a1.get(name), a2.get(name)
            row: dict[str, Any] = {"name": name}
            if x is None or y is None:
                row["status"] = f"only in {v1 if y is None else v2}"
            elif x.shape != y.shape:
                row["status"] = f"shape {list(x.shape)} -> {list(y.shape)}"
            else:
                d = y.astype(np.float64) - x.astype(np.float64)
                dist, base = _l2(d), _l2(x)
                sq_dist += dist**2
                sq_norm += base**2
                row.update(
                    status="ok",
                    shape=list(x.shape),
                    l2_distance=dist,
                    # Undefined against an all-zero tensor (e.g. a fresh bias): None, not inf.
                    rel_change=dist / base if base > 0 else (0.0 if dist == 0 else None),
                )
            rows.append(row)
        total_dist = math.sqrt(sq_dist)
        total_rel = total_dist / math.sqrt(sq_norm) if sq_norm > 0 else None
        if s.as_json:
            _emit_json(
                {
                    "run_id": s.run_id,
                    "v1": v1,
                    "v2": v2,
                    "tensors": rows,
                    "total": {"l2_distance": total_dist, "rel_change": total_rel},
                }
            )
            return 0
        print(f"run {s.run_id}: version {v1} -> {v2}")
        table = []
        for r in rows:
            if r["status"] != "ok":
                table.append([r["name"], "", "", "", r["status"]])
                continue
            rel = "n/a" if r["rel_change"] is None else f"{100 * r['rel_change']:.4g}%"
            shape = "x".join(map(str, r["shape"])) or "scalar"
            table.append([r["name"], shape, _num(r["l2_distance"]), rel, ""])
        rel = "n/a" if total_rel is None else f"{100 * total_rel:.4g}%"
        table.append(["total", "", _num(total_dist), rel, ""])
        print_table(["TENSOR", "SHAPE", "L2_DISTANCE", "REL_CHANGE", "NOTE"], table, right={2, 3})
        return 0

    return _run(args, body)


def cmd_export(args: argparse.Namespace) -> int:
    def body(s: _Session) -> int:
        from ppomq.core.store.torch_io import export_torch
        from ppomq.proto.errors import DecodeError

        version = s.resolve(args.version)
        try:
            header, blob = s.store.fetch(version, verify=True)
        except DecodeError as exc:
            raise UserError(
                f"version {version} failed verification ({exc}); not exported"
            ) from None
        try:
            path = export_torch(args.output, header, blob, s.run_id)
        except OSError as exc:
            raise UserError(f"cannot write {args.output}: {exc.strerror or exc}") from None
        doc = {
            "path": str(path),
            "run_id": s.run_id,
            "version": version,
            "num_tensors": len(header.tensors),
            "sha256": header.sha256,
        }
        if s.as_json:
            _emit_json(doc)
        else:
            print(
                f"wrote {path}: run {s.run_id} version {version}, {len(header.tensors)} tensors "
                f"(torch.load(path) -> {{'state_dict', 'metadata'}})"
            )
        return 0

    return _run(args, body)


def cmd_verify(args: argparse.Namespace) -> int:
    def body(s: _Session) -> int:
        if args.version == ALL:
            versions = [r.version for r in s.store.list_versions()]
        else:
            versions = [s.resolve(args.version)]
        results = [s.store.verify(v) for v in versions]
        failed = [r for r in results if not r.ok]
        if s.as_json:
            _emit_json(
                {
                    "run_id": s.run_id,
                    "ok": not failed,
                    "results": [
                        {
                            "version": r.version,
                            "ok": r.ok,
                            "expected_sha256": r.expected_sha256,
                            "actual_sha256": r.actual_sha256,
                            "reason": r.reason,
                        }
                        for r in results
                    ],
                }
            )
        else:
            for r in results:
                if r.ok:
                    print(f"version {r.version}: ok (sha256 {r.expected_sha256})")
                else:
                    print(f"version {r.version}: FAILED: {r.reason}")
        if failed:
            raise UserError(
                f"{len(failed)} of {len(results)} version(s) failed verification: "
                + ", ".join(str(r.version) for r in failed)
            )
        return 0

    return _run(args, body)


def _protect(args: argparse.Namespace, on: bool) -> int:
    def body(s: _Session) -> int:
        if s.run is not None:
            # A finished run's data is a copy here: a write to it would be thrown away.
            s.run.require_writable("protect" if on else "unprotect")
        version = s.resolve(args.version)
        changed = s.store.protect(version) if on else s.store.unprotect(version)
        if s.as_json:
            _emit_json(
                {"run_id": s.run_id, "version": version, "protected": on, "changed": changed}
            )
        elif on:
            state = "protected" if changed else "was already protected"
            print(f"run {s.run_id} version {version}: {state}")
        else:
            state = (
                "no longer protected (retention may delete it at the next publish)"
                if changed
                else "was not protected"
            )
            print(f"run {s.run_id} version {version}: {state}")
        return 0

    return _run(args, body)


def cmd_protect(args: argparse.Namespace) -> int:
    return _protect(args, True)


def cmd_unprotect(args: argparse.Namespace) -> int:
    return _protect(args, False)
