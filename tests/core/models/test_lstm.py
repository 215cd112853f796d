"""arch lstm: one sequence pass equals stepping with the state carried, episode starts reset
the state, both encoders build from their specs, and bad specs are one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ppomq.core.models import ModelSpecError, build_model

MLP = {"arch": "lstm", "encoder": "mlp", "obs_shape": [3], "action": {"kind": "categorical",
       "n": 2}, "hidden": [16], "activation": "tanh", "obs_norm": None, "lstm_size": 8}  # fmt: skip
CNN = {"arch": "lstm", "encoder": "nature-cnn", "obs_shape": [4, 36, 36],
       "action": {"kind": "categorical", "n": 3}, "lstm_size": 8}  # fmt: skip
GAUSS = dict(MLP, action={"kind": "gaussian", "shape": [2]})


def _rollout(model, obs, starts, actions, state=None):
    """Step by step as an actor does: state carried, reset where an episode starts."""
    state = model.initial_state(obs.shape[1]) if state is None else state
    logps, values = [], []
    for t in range(obs.shape[0]):
        head, value, state = model.forward_sequence(
            model.preprocess(obs[t])[None], starts[t][None], state
        )
        logp, _ = model.dist.log_prob_entropy(
            head[0] if model.discrete else (head[0][0], head[1]), actions[t]
        )
        logps.append(logp)
        values.append(value[0])
    return torch.stack(logps), torch.stack(values), state


@pytest.mark.parametrize("spec", [MLP, CNN, GAUSS], ids=["mlp", "cnn", "gaussian"])
def test_one_sequence_pass_equals_stepping_with_the_state_carried(spec):
    torch.manual_seed(0)
    model = build_model(spec)
    steps, batch = 7, 3
    if spec["encoder"] == "mlp":
        obs = torch.randn(steps, batch, *spec["obs_shape"])
    else:
        obs = torch.randint(0, 256, (steps, batch, *spec["obs_shape"]), dtype=torch.uint8)
    starts = torch.zeros(steps, batch, dtype=torch.bool)
    # Starts at step 0 (over a carried state), inside, twice at one step, and at the end.
    starts[0, 2] = starts[3, 1] = starts[5, 0] = starts[5, 2] = starts[6, 1] = True
    if model.discrete:
        actions = torch.randint(0, spec["action"]["n"], (steps, batch))
    else:
        actions = torch.randn(steps, batch, 2)
    h0 = (torch.randn(batch, 8), torch.randn(batch, 8))  # a state carried from before
    ref_logp, ref_value, ref_state = _rollout(model, obs, starts, actions, h0)
    x = model.preprocess(obs.reshape(steps * batch, *obs.shape[2:])).reshape(steps, batch, -1)
    if spec["encoder"] == "nature-cnn":
        x = x.reshape(steps, batch, *spec["obs_shape"])
    logp, entropy, value = model.evaluate_sequence(x, actions, starts, h0)
    torch.testing.assert_close(logp, ref_logp)
    torch.testing.assert_close(value, ref_value)
    assert entropy.shape == (steps, batch)
    _, _, final = model.forward_sequence(x, starts, h0)
    torch.testing.assert_close(final[0], ref_state[0])
    torch.testing.assert_close(final[1], ref_state[1])
    logp.sum().backward()  # the learner's path differentiates through the whole sequence
    assert model.lstm.weight_hh_l0.grad is not None


def test_an_episode_start_forgets_everything_before_it():
    torch.manual_seed(1)
    model = build_model(MLP)
    obs = torch.randn(6, 2, 3)
    starts = torch.zeros(6, 2, dtype=torch.bool)
    starts[3] = True  # both envs start a new episode at t = 3
    actions = torch.zeros(6, 2, dtype=torch.long)
    other = obs.clone()
    other[:3] = torch.randn(3, 2, 3) * 10  # a different past
    a, _, _ = _rollout(model, obs, starts, actions)
    b, _, _ = _rollout(model, other, starts, actions)
    torch.testing.assert_close(a[3:], b[3:])  # the new episode does not see the old one
    assert not torch.allclose(a[:3], b[:3])
    c, _, _ = _rollout(model, other, torch.zeros_like(starts), actions)
    assert not torch.allclose(c[3:], a[3:])  # without the start, the past leaks in


def test_the_state_goes_through_the_wire_layout_unchanged():
    model = build_model(MLP)
    state = (torch.randn(4, 8), torch.randn(4, 8))
    wire = model.state_to_wire(state)
    assert wire.shape == (4, *model.state_shape) == (4, 2, 8) and wire.dtype == np.float32
    back = model.state_from_wire(wire)
    torch.testing.assert_close(back[0], state[0])
    torch.testing.assert_close(back[1], state[1])


def test_act_samples_one_step_and_returns_the_next_state():
    torch.manual_seed(2)
    model = build_model(MLP)
    state = model.initial_state(5)
    action, logp, value, nxt = model.act(torch.randn(5, 3), torch.ones(5, dtype=torch.bool), state)
    assert action.shape == logp.shape == value.shape == (5,)
    assert nxt[0].shape == nxt[1].shape == (5, 8) and not torch.equal(nxt[0], state[0])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"encoder": "gru"}, "encoder"),
        ({"lstm_size": 0}, "lstm_size"),
        ({"activation": "gelu"}, "activation"),
    ],
)
def test_a_bad_lstm_spec_is_a_one_line_error(change, message):
    with pytest.raises(ModelSpecError, match=message):
        build_model(dict(MLP, **change))


def test_the_cnn_encoder_refuses_observations_too_small_for_its_convolutions():
    with pytest.raises(ModelSpecError, match="nature-cnn"):
        build_model(dict(CNN, obs_shape=[4, 20, 20]))


def test_inference_steps_like_the_module_and_ignores_later_weight_changes():
    torch.manual_seed(3)
    model = build_model(MLP)
    fast = model.inference()
    obs = np.random.default_rng(0).normal(size=(4, 5, 3)).astype(np.float32)
    starts = np.zeros((4, 5), dtype=bool)
    starts[2, 3] = True
    state = fast.initial_state(5)
    mod_state = model.initial_state(5)
    for t in range(4):
        value = fast.value(obs[t], starts[t], state)
        _, _, value_act, state = fast.act(obs[t], starts[t], state)
        np.testing.assert_allclose(value, value_act, rtol=1e-6)
        _, ref_value, mod_state = model.forward_sequence(
            torch.from_numpy(obs[t])[None], torch.from_numpy(starts[t])[None], mod_state
        )
        np.testing.assert_allclose(value_act, ref_value[0].detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state, model.state_to_wire(mod_state), rtol=1e-5, atol=1e-6)
    action, nxt = fast.greedy(obs[0], starts[0], state)
    assert action.shape == (5,) and nxt.shape == (5, 2, 8)
    before = fast.value(obs[0], starts[0], state)
    with torch.no_grad():
        model.v.weight.add_(1.0)  # a newer version loaded into the module
    np.testing.assert_array_equal(fast.value(obs[0], starts[0], state), before)
    assert not np.allclose(model.inference().value(obs[0], starts[0], state), before)


NORM = dict(MLP, obs_norm={"clip": 10.0, "epsilon": 1e-8})


@pytest.mark.parametrize("spec", [MLP, CNN, GAUSS, NORM], ids=["mlp", "cnn", "gaussian", "norm"])
def test_the_actors_functional_step_computes_what_the_module_does(spec):
    """LSTMFunctional (the actor's path, picked by benchmarks/lstm_forward.py) against the
    module's forward_sequence over one step: head, value and next state, resets included."""
    from ppomq.core.models.lstm import LSTMFunctional

    torch.manual_seed(5)
    model = build_model(spec)
    rng = np.random.default_rng(5)
    if spec is NORM:  # statistics far from the identity
        model.obs_norm.update(torch.from_numpy(rng.normal(3.0, 2.0, (64, 3)).astype(np.float32)))
    shape = (6, *spec["obs_shape"])
    obs = (
        rng.integers(0, 256, shape, dtype=np.uint8)
        if spec["encoder"] == "nature-cnn"
        else rng.normal(size=shape).astype(np.float32)
    )
    starts = np.array([True, False, False, True, False, False])
    state = rng.normal(size=(6, 2, 8)).astype(np.float32)
    with torch.no_grad():
        head, value, nxt = model.forward_sequence(
            model.preprocess(torch.from_numpy(obs))[None], torch.from_numpy(starts)[None],
            model.state_from_wire(state),
        )  # fmt: skip
        f_head, f_value, f_nxt = LSTMFunctional(model).outputs(obs, starts, state)
    ref_out = head[0] if model.discrete else head[0][0]
    got_out = f_head if model.discrete else f_head[0]
    torch.testing.assert_close(got_out, ref_out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(f_value, value[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(f_nxt, torch.stack(nxt, dim=1), rtol=1e-5, atol=1e-6)


def test_the_cnn_encoder_with_norm_obs_normalizes_each_pixel_as_the_cnn_does():
    torch.manual_seed(0)
    normed = build_model({**CNN, "obs_norm": {"clip": 10.0, "epsilon": 1e-8}})
    frames = torch.randint(0, 64, (32, 4 * 36 * 36), dtype=torch.uint8)
    normed.obs_norm.update(frames)
    assert normed.obs_norm.mean.shape == (4 * 36 * 36,)
    plain = build_model(CNN)
    plain.load_state_dict(
        {k: v for k, v in normed.state_dict().items() if not k.startswith("obs_norm")}
    )
    obs = torch.randint(0, 256, (5, 4, 36, 36), dtype=torch.uint8)
    norm = normed.obs_norm
    x = ((obs.flatten(1).double() - norm.mean) / (norm.var + 1e-8).sqrt()).clamp(-10, 10)
    with torch.no_grad():  # the plain encoder divides by 255: hand it the normalized pixels x 255
        want = plain.features(plain.preprocess(x.float().view_as(obs) * 255.0))
        got = normed.features(normed.preprocess(obs))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
