"""Which learner rank an actor sends to: index mod W over the published endpoints."""

from ppomq.actor.routing import rollout_endpoint


def test_without_a_group_the_actor_sends_to_its_learner_addr():
    assert rollout_endpoint({}, 3, "tcp://l:5555") == ("tcp://l:5555", None)
    assert rollout_endpoint({"learners": []}, 3, "tcp://l:5555") == ("tcp://l:5555", None)


def test_actors_are_spread_over_the_ranks_by_index():
    group = {"learners": ["tcp://a:1", "tcp://b:2", "tcp://c:3"]}
    picks = [rollout_endpoint(group, i, "tcp://l:5555") for i in range(6)]
    assert [rank for _, rank in picks] == [0, 1, 2, 0, 1, 2]
    assert picks[4] == ("tcp://b:2", 1)


def test_a_malformed_endpoint_list_is_ignored():
    assert rollout_endpoint({"learners": ["tcp://a:1", 7]}, 1, "tcp://l:1") == ("tcp://l:1", None)
    assert rollout_endpoint({"learners": "tcp://a:1"}, 1, "tcp://l:1") == ("tcp://l:1", None)
