"""`ppomq status`: what a running learner reports: version, SPS, actors, rejects.

The learner writes one `actors` hash field per actor id it has ever heard from, and an
actor id names one process incarnation (a restarted actor reports under a new id), so the
hash keeps every dead actor. Status decides what is live by `last_seen` alone: an actor
not heard from for longer than `--forget-after-s` is hidden from the table and counted on
one line instead, so the table shows the actors that are training now. The table has at
most `--top` rows (actors trained on first, most recent first) under one line of counts
(tracked, live, shown): made-up ids can fill the learner's --max-actors, and a table of
all of them buried the actors that train under a thousand lines.

With --run-dir it reads the run's own Redis while the run runs, and after it a private copy
of what the run persisted in its run dir (ppomq.core.store.run_redis): a finished run's last status;
and the launcher's latest phase from the run's events (ppomq.core.timeline). Told no run
dir and no Redis URL, it reads the newest run dir under runs/ and says so first; finding
none, the default Redis, and with none there one line naming both ways to point it at a run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ppomq.core.errors import NotFoundError, UsageError
from ppomq.reports.bottleneck import status_bottleneck
from ppomq.reports.tables import print_table

DEFAULT_FORGET_AFTER_S = 60.0
# Rows of the actor table by default: the most recently heard. The learner tracks up to
# --max-actors (1024) ids, made-up ones included; a table of them all took seconds to
# print and buried the actors that train.
DEFAULT_TOP = 20


DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def _dash(value: Any) -> Any:
    return "-" if value is None else value


def _actor_row(actor_id: str, raw: bytes, version: int, now: float) -> dict[str, Any] | None:
    """One actor's row, or None when the field cannot be read (a learner of another
    release, a hand-edited key): one bad field must not hide every other actor."""
    try:
        a = json.loads(raw)
        led = a.get("ledger") or {}
        return {
            "actor_id": actor_id,
            "last_seen_s_ago": round(now - float(a["last_seen"]), 1),
            "last_seen_unix": float(a["last_seen"]),
            # None: no batch of this actor got past the door (its ledger row says why).
            "policy_version": None if a["policy_version"] is None else int(a["policy_version"]),
            "policy_age": None
            if a["policy_version"] is None
            else version - int(a["policy_version"]),
            "batches": int(a["batches"]),
            "env_steps": int(a["env_steps"]),
            # The rollout ledger's row (a learner of an older release writes none).
            "sent": led.get("sent"),
            "received": int(led.get("received", 0)),
            "accepted": int(led.get("accepted", 0)),
            "surplus": int(led.get("surplus", 0)),
            "rejected": int(led.get("stale", 0))
            + int(led.get("duplicates", 0))
            + sum(int(n) for n in (led.get("invalid") or {}).values()),
            "lost_in_flight": int(led.get("lost_in_flight", 0)),
            # Its share of time waiting for weights, sent with its last batch (None: an
            # actor of an older release).
            "weights_wait": None if a.get("weights_wait") is None else float(a["weights_wait"]),
        }
    except (ValueError, TypeError, KeyError):
        return None


def read_status(
    redis: Any,
    run_id: str,
    *,
    forget_after_s: float = DEFAULT_FORGET_AFTER_S,
    as_of_last_update: bool = False,
) -> dict[str, Any]:
    """The learner's status, its actors split by `forget_after_s` (0: keep every actor).

    `actors`: the live ones, newest first; `hidden_actors`: those not heard from for more
    than `forget_after_s`, same fields; `unreadable_actors`: ids whose field did not parse.
    `as_of_last_update`: actors' ages count back from the learner's last status rather
    than from now (a run that is over: the actors training at its end, not none)."""
    from ppomq.core.store.keys import RunKeys

    keys = RunKeys(run_id)
    raw = redis.get(keys.stats)
    if raw is None:
        raise NotFoundError(
            f"no status for run {run_id!r}: no learner has reported; check --run-id"
        )
    status = json.loads(raw)
    # `counts_at`: the learner's last write (every second); `updated_at`: its last update.
    last_write = float(status.get("counts_at", status["updated_at"]))
    now = last_write if as_of_last_update else time.time()
    live: list[dict[str, Any]] = []
    hidden: list[dict[str, Any]] = []
    unreadable: list[str] = []
    for key, doc in redis.hgetall(keys.actors).items():
        actor_id = key.decode(errors="replace")
        row = _actor_row(actor_id, doc, int(status["version"]), now)
        if row is None:
            unreadable.append(actor_id)
        elif forget_after_s > 0 and row["last_seen_s_ago"] > forget_after_s:
            hidden.append(row)
        else:
            live.append(row)
    # Actors trained on first, then ids whose every batch was refused (made-up ones among
    # them: they must not push the actors that train out of a short table); each most
    # recently heard from first: ids carry a pid and a random tail, so sorting by id would
    # scatter a restarted actor away from the slot it replaced.
    for rows in (live, hidden):
        rows.sort(key=lambda r: (r["accepted"] == 0, r["last_seen_s_ago"], r["actor_id"]))
    status["actors"] = live
    status["hidden_actors"] = hidden
    status["unreadable_actors"] = sorted(unreadable)
    status["forget_after_s"] = forget_after_s
    status["actors_as_of_unix"] = now  # what `last_seen_s_ago` counts back from
    status["status_age_s"] = round(time.time() - status["updated_at"], 1)
    marker = redis.get(keys.finished)
    # The learner's end-of-run marker ({"version", "env_steps", "unix"}), None while it runs.
    status["finished"] = json.loads(marker) if marker else None
    return status


def _run(args: argparse.Namespace) -> int:
    from ppomq.core.errors import RedisUnavailableError
    from ppomq.core.store.connect import connect_redis, redis_errors
    from ppomq.core.store.run_redis import (
        LIVE,
        PERSISTED,
        no_run_found,
        open_run_redis,
        run_dir_to_read,
    )

    if args.forget_after_s < 0:
        raise UsageError("--forget-after-s must be >= 0 (0 lists every actor ever seen)")
    if args.top < 0:
        raise UsageError("--top must be >= 0 (0 shows no actor rows, --all every one)")
    run_dir, told_nothing = run_dir_to_read(
        Path(args.run_dir) if args.run_dir else None,
        args.redis_url,
        args.run_id,
        as_json=args.json,
    )
    with contextlib.ExitStack() as stack:
        if run_dir is not None:
            run = stack.enter_context(
                open_run_redis(run_dir, redis_url=args.redis_url, run_id=args.run_id)
            )
            url, run_id, source = run.url, run.run_id, run.source
        else:
            url = args.redis_url or os.environ.get("PPOMQ_REDIS_URL", DEFAULT_REDIS_URL)
            run_id = args.run_id or os.environ.get("PPOMQ_RUN_ID", "default")
            source = LIVE
        try:
            redis = connect_redis(url)
        except RedisUnavailableError:
            if told_nothing and run_dir is None:
                raise no_run_found(url) from None
            raise
        stack.callback(redis.close)
        with redis_errors(url):
            status = read_status(
                redis,
                run_id,
                forget_after_s=args.forget_after_s,
                as_of_last_update=source == PERSISTED,
            )
    status["source"] = source
    status["bottleneck"] = asdict(status_bottleneck(status))
    if run_dir is not None:
        from ppomq.core.timeline import current_phase

        status["phase"] = current_phase(run_dir)
    if args.json:
        print(json.dumps(status, sort_keys=True))
        return 0
    ret = status.get("mean_return_20")
    print(
        f"run {run_id}: version {status['version']}, {status['env_steps']:,} env steps, "
        f"{status['sps']:,.0f} SPS, return(20) {'n/a' if ret is None else f'{ret:.1f}'}, "
        f"mode {status['mode']} (max staleness {status['max_staleness']}), "
        f"{learners_words(status)}updated {status['status_age_s']} s ago"
    )
    print(status["bottleneck"]["line"])
    done = status["finished"]
    if done:
        print(f"finished at version {done['version']}, {done['env_steps']:,} env steps")
    if source == PERSISTED:
        print(f"not running: read from the Redis data it persisted in {run_dir}")
    phase = status.get("phase")
    if phase:
        print(f"launcher phase: {phase['phase']}, {time.time() - phase['t']:.1f} s ago")
    print(f"rejects by reason: {status['rejects'] or 'none'}")
    ledger = status.get("ledger")
    if ledger:
        print(
            f"ledger: sent {ledger['sent']:,}, received {ledger['received']:,} (accepted "
            f"{ledger['accepted']:,}, surplus {ledger.get('surplus', 0):,}, rejected "
            f"{ledger['rejected']:,}: stale {ledger['stale']:,}, "
            f"duplicates {ledger['duplicates']:,}, invalid {ledger['invalid'] or 'none'}), "
            f"lost in flight {ledger['lost_in_flight']:,} (actor killed mid-send, partition, "
            "learner restart)"
        )
        # Refusals under no actor (naming none, or beyond what a flood let be attributed):
        # with them, the totals hold every refused message.
        print(f"refused naming no actor: {ledger.get('unattributed') or 'none'}")
    unverified = status.get("episodes_unverified")
    if unverified:
        print(f"episodes not counted (their start was not seen): {unverified:,}")
        print(
            f"actors tracked {ledger['actors_tracked']:,} of at most {status.get('max_actors')}, "
            f"forgotten {ledger['actors_forgotten']:,} (quiet > "
            f"{status.get('forget_actor_after_s')} s), dropped over the cap "
            f"{ledger['actors_dropped_over_cap']:,}"
        )
    recent = status["actors"]
    shown = recent if args.all else recent[: args.top]
    print(_actors_line(status, len(shown), persisted=source == PERSISTED))
    print_table(ACTOR_COLUMNS, actor_cells(shown, time.time()), right=set(range(1, 11)))
    if len(shown) < len(recent):
        print(f"{len(recent) - len(shown):,} more heard from within {args.forget_after_s:g} s "
              "not shown (--top N, --all)")  # fmt: skip
    if status["hidden_actors"]:
        print(
            f"{len(status['hidden_actors'])} actor(s) not heard from for > "
            f"{args.forget_after_s:g} s hidden (--forget-after-s 0 lists them)"
        )
    if status["unreadable_actors"]:
        print(f"unreadable actor entries: {', '.join(status['unreadable_actors'])}")
    return 0


ACTOR_COLUMNS = ["actor", "last seen", "policy v", "age", "batches", "sent", "accepted",
                 "surplus", "rejected", "lost", "weights wait"]  # fmt: skip


def actor_cells(rows: list[dict[str, Any]], now: float) -> list[list[Any]]:
    """The actor table's cells; `last seen` counted back from `now`, whatever the rows'
    `last_seen_s_ago` counts from (a finished run's: its last update)."""
    return [
        [a["actor_id"], _ago(now - a["last_seen_unix"]), _dash(a["policy_version"]),
         _dash(a["policy_age"]), a["batches"], "-" if a["sent"] is None else a["sent"],
         a["accepted"], a["surplus"], a["rejected"], a["lost_in_flight"],
         "-" if a.get("weights_wait") is None else f"{100 * a['weights_wait']:.0f}%"]
        for a in rows
    ]  # fmt: skip


def _ago(seconds: float) -> str:
    """How long ago, counted from now (a finished run's actors too: a figure counted from
    the run's end read as "just now")."""
    if seconds < 120:
        return f"{max(seconds, 0.0):.1f} s ago"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min ago"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.1f} d ago"


def _actors_line(status: dict[str, Any], shown: int, *, persisted: bool) -> str:
    """One line of counts over the actor table: every id the learner tracks, how many
    updates wait for (the learner's own count: an id that only sent refused batches is
    tracked, never live), how many rows follow."""
    tracked = len(status["actors"]) + len(status["hidden_actors"])
    tracked += len(status["unreadable_actors"])
    if persisted:
        return (
            f"{tracked:,} actor(s) tracked, {len(status['actors']):,} training at its end, "
            f"{shown:,} shown"
        )
    # A learner of an older release writes no `live_actors`: those heard from lately.
    live = status.get("live_actors", len(status["actors"]))
    return f"{tracked:,} actor(s) tracked, {live:,} live, {shown:,} shown"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "status",
        help="show a running learner's version, SPS, actors and rejects",
        description="Reads what the learner reports to Redis: version, SPS, per-actor last "
        "seen and policy age, rejected batches by reason, and which side binds: the learner "
        "starved for rollouts (more actors pay) or the actors waiting for its weights (they "
        "do not), with what to change. Actors not heard from for more "
        "than --forget-after-s (dead, or restarted under a new id) are left out of the "
        "table and counted on one line; with --json they are under `hidden_actors`, never "
        "in `actors`. The table shows the --top actors (trained on first, most recent "
        "first) under a line counting those tracked, live and shown.",
    )
    p.add_argument(
        "--redis-url",
        help=f"Redis URL [env PPOMQ_REDIS_URL]; with neither it nor --run-dir: the newest run "
        f"dir under runs/, else {DEFAULT_REDIS_URL}",
    )
    p.add_argument("--run-id", help="run id [env PPOMQ_RUN_ID; default: default]")
    p.add_argument(
        "--run-dir",
        metavar="RUN_DIR",
        help="a `ppomq train` run dir: its Redis while it runs, after it (read-only) a copy "
        "of the Redis data it kept in the run dir; its run id unless --run-id. Default: "
        "with no --redis-url, the newest run dir under runs/ (of --run-id, if given)",
    )
    p.add_argument(
        "--forget-after-s",
        type=float,
        default=DEFAULT_FORGET_AFTER_S,
        metavar="S",
        help="hide actors whose last batch reached the learner more than S seconds ago "
        f"(default {DEFAULT_FORGET_AFTER_S:g}; 0: list every actor the run has seen). "
        "--json lists them under `hidden_actors` instead of `actors`",
    )
    p.add_argument(
        "--top",
        type=int,
        default=DEFAULT_TOP,
        metavar="N",
        help=f"table rows: the N actors heard from most recently (default {DEFAULT_TOP}); "
        "a count line says how many there are",
    )
    p.add_argument(
        "--all", action="store_true", help="a table row for every actor heard from lately"
    )
    p.add_argument(
        "--json", action="store_true", help="print one JSON object (every actor, whatever --top)"
    )
    p.set_defaults(func=_run)


def learners_words(status: dict) -> str:
    """A learner group's size, said when there is one (older statuses have no key)."""
    learners = int(status.get("learners") or 1)
    return f"a group of {learners} learners, " if learners > 1 else ""
