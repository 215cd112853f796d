"""The learner's `actors` hash in Redis (what `ppomq status` reads) follows its actors.

write_status rewrites only the rows that changed since its last write (up to --max-actors
rows, and a write after every update), so each change must still reach Redis: a row whose
actor sent again, a new actor, and an actor the learner stopped tracking (its field gone).
"""

from __future__ import annotations

import json

from ppomq.core.signals import WarmStop

from .test_loop import _sample, _setup


def _hash(redis, loop) -> dict[str, dict]:
    return {k.decode(): json.loads(v) for k, v in redis.hgetall(loop.publisher.keys.actors).items()}


def test_the_actors_hash_follows_every_change_and_every_actor_dropped(tmp_path, redis_url):
    loop, batches, runner, inference, redis = _setup(
        tmp_path, redis_url, actors=1, max_staleness=0, max_actors=2
    )
    batches.put(_sample(runner, inference, "honest", 5, 0))
    assert loop.step(WarmStop())
    assert set(_hash(redis, loop)) == {"honest"}

    batches.put(_sample(runner, inference, "made-up-0", 0, 0))  # stale: refused
    batches.put(_sample(runner, inference, "honest", 6, 1))
    assert loop.step(WarmStop())
    rows = _hash(redis, loop)
    assert set(rows) == {"honest", "made-up-0"}
    assert rows["honest"]["batches"] == 2 and rows["honest"]["ledger"]["accepted"] == 2
    assert rows["made-up-0"]["ledger"]["stale"] == 1

    # Over --max-actors 2 the learner drops the older made-up id: its field goes too.
    batches.put(_sample(runner, inference, "made-up-1", 0, 0))
    batches.put(_sample(runner, inference, "honest", 7, 2))
    assert loop.step(WarmStop())
    rows = _hash(redis, loop)
    assert set(rows) == set(loop.admission.ledger.actors) == {"honest", "made-up-1"}
    assert rows["honest"]["batches"] == 3 and rows["honest"]["ledger"]["accepted"] == 3
