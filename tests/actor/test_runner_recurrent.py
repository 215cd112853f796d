"""EnvRunner with a recurrent policy: each batch carries the state its envs started from,
the state goes on from rollout to rollout and resets at episode starts, and the learner,
replaying a batch from that state, gets exactly the actor's log-probs and values."""

from __future__ import annotations

import numpy as np
import torch

from ppomq.actor.runner import EnvRunner
from ppomq.core.envs import env_seed, make_vector_env, rollout_spec_for
from ppomq.core.envs.memory import MASKED_CARTPOLE
from ppomq.core.models import build_model
from ppomq.learner.sequences import episode_starts

SPEC = {"arch": "lstm", "encoder": "mlp", "obs_shape": [2],
        "action": {"kind": "categorical", "n": 2}, "hidden": [16], "activation": "tanh",
        "obs_norm": None, "lstm_size": 8}  # fmt: skip


def _runner(num_envs: int = 3, num_steps: int = 40) -> EnvRunner:
    spec = rollout_spec_for(MASKED_CARTPOLE, run_id="r", num_steps=num_steps, max_bytes=1 << 24)
    envs = make_vector_env(MASKED_CARTPOLE, num_envs, [env_seed(0, 0, i) for i in range(num_envs)])
    return EnvRunner(envs=envs, spec=spec, run_id="r", actor_id="a", env_id=MASKED_CARTPOLE)


def _replay(model, batch):
    """The learner's view: the whole batch from its hidden_state, starts from its flags."""
    a = batch.arrays
    starts = torch.from_numpy(episode_starts(a["terminated"], a["truncated"]))
    obs = torch.from_numpy(a["obs"])
    x = model.preprocess(obs.reshape(-1, *obs.shape[2:])).reshape(*obs.shape[:2], -1)
    with torch.no_grad():
        logp, _, value = model.evaluate_sequence(
            x, torch.from_numpy(a["actions"]), starts, model.state_from_wire(a["hidden_state"])
        )
    return logp.numpy(), value.numpy()


def test_replaying_a_batch_from_its_hidden_state_gives_the_actors_logp_and_values():
    torch.manual_seed(0)
    model = build_model(SPEC)
    runner = _runner()
    policy = model.inference()
    first = runner.sample(policy, policy_version=0, seq=0)
    second = runner.sample(policy, policy_version=0, seq=1)
    for batch in (first, second):
        a = batch.arrays
        assert a["hidden_state"].shape == (3, 2, 8) and a["hidden_state"].dtype == np.float32
        assert (a["terminated"] | a["truncated"]).any()  # episodes end inside the batch
        logp, value = _replay(model, batch)
        np.testing.assert_allclose(logp, a["logp"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(value, a["values"], rtol=1e-5, atol=1e-6)
    assert not np.any(first.arrays["hidden_state"])  # every env starts an episode at first
    assert np.any(second.arrays["hidden_state"])  # then the state goes on


def test_the_state_carried_into_the_next_batch_is_zero_where_an_episode_starts_there():
    torch.manual_seed(1)
    model = build_model(SPEC)
    runner = _runner(num_envs=4, num_steps=13)
    policy = model.inference()
    prev = runner.sample(policy, policy_version=0, seq=0)
    for seq in range(1, 12):
        batch = runner.sample(policy, policy_version=0, seq=seq)
        ended = prev.arrays["terminated"][-1] | prev.arrays["truncated"][-1]
        h0 = batch.arrays["hidden_state"]
        assert not np.any(h0[ended]) and np.all(np.any(h0[~ended], axis=(1, 2)))
        prev = batch
