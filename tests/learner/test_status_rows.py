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


def test_the_status_carries_the_actors_weights_wait_and_the_learners_wait(tmp_path, redis_url):
    """What `ppomq status` and the progress line decide the binding side from: each actor's
    share of time waiting for weights (its last batch's), their mean over the live ones,
    and the learner's share of time waiting for rollouts from its second update on."""
    loop, batches, runner, inference, redis = _setup(tmp_path, redis_url, actors=3)
    for seq in range(2):
        for actor_id, share in (("a0", 0.9), ("a1", 0.5), ("old", None)):
            batch = _sample(runner, inference, actor_id, loop.run.version, seq)
            batch.weights_wait = share
            batches.put(batch)
        assert loop.step(WarmStop())
        status = json.loads(redis.get(loop.publisher.keys.stats))
        if seq == 0:
            assert status["learner_wait_fraction"] is None  # the first update is start-up
    assert 0.0 <= status["learner_wait_fraction"] <= 1.0
    assert status["actors_weights_wait"] == 0.7  # "old" (an older release's actor) sends none
    rows = _hash(redis, loop)
    assert (rows["a0"]["weights_wait"], rows["old"]["weights_wait"]) == (0.9, None)
