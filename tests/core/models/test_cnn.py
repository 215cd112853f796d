"""`arch: nature-cnn`: CleanRL's ppo_atari.py network exactly, its fast inference path, its
spec (proto/WEIGHTS.md), and a PPO update through the learner's own trainer."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from ppomq.core.errors import UsageError
from ppomq.core.models import (
    ModelSpecError,
    build_model,
    load_numpy_state,
    model_spec_for,
    numpy_state,
)
from ppomq.core.models.cnn import NatureCNN
from ppomq.learner.gradients import AutogradGradient
from ppomq.learner.trainer import PPOConfig, PPOTrainer
from ppomq.proto import (
    ActionSpace,
    RolloutBatch,
    RolloutSpec,
    decode_weights,
    encode_weights,
    pack_weights,
    unpack_tensors,
)

SPEC = {"arch": "nature-cnn", "obs_shape": [4, 84, 84], "action": {"kind": "categorical", "n": 6}}
SMALL = {"arch": "nature-cnn", "obs_shape": [2, 36, 36], "action": {"kind": "categorical", "n": 2}}
GAUSS = {"arch": "nature-cnn", "obs_shape": [3, 40, 44],
         "action": {"kind": "gaussian", "shape": [2]}}  # fmt: skip
WEIGHTS_MD = Path(__file__).resolve().parents[3] / "proto" / "WEIGHTS.md"


def _obs(n: int, shape=(4, 84, 84), seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


def _trained_looking(model: NatureCNN) -> NatureCNN:
    with torch.no_grad():  # an untrained head's logits are all near zero
        model.pi.weight.mul_(100.0)
    return model


class CleanRLAgent(nn.Module):
    """ppo_atari.py's Agent, written out as CleanRL has it (the reference)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 512), nn.ReLU(),
        )  # fmt: skip
        self.actor = nn.Linear(512, n)
        self.critic = nn.Linear(512, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.network(x / 255.0)
        return self.actor(hidden), self.critic(hidden)


def test_the_network_is_cleanrls_ppo_atari_agent():
    torch.manual_seed(0)
    model = _trained_looking(build_model(SPEC))
    ref = CleanRLAgent(6)
    n_params = sum(p.numel() for p in model.parameters())
    assert n_params == sum(p.numel() for p in ref.parameters()) == 1_687_719
    ours = list(model.state_dict().values())
    theirs = list(ref.state_dict().values())  # the same tensors in the same order
    assert [t.shape for t in ours] == [t.shape for t in theirs]
    with torch.no_grad():
        for a, b in zip(ours, theirs, strict=True):
            b.copy_(a)
        obs = torch.from_numpy(_obs(5))
        (logits, value), (ref_logits, ref_value) = model(obs), ref(obs)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(value, ref_value.squeeze(-1), rtol=1e-6, atol=1e-6)


def test_the_channels_last_trunk_computes_what_an_nchw_one_does():
    """The CPU layout changes the kernels, not the function: features and gradients match
    plain NCHW convolutions to float rounding."""
    torch.manual_seed(0)
    model = build_model(SPEC)
    obs = torch.from_numpy(_obs(5))
    features = model.features(obs)
    features.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad()
    x = obs.float() / 255.0  # NCHW contiguous throughout
    for conv in model.conv:
        x = torch.relu(conv(x))
    nchw = torch.relu(model.fc(x.flatten(1)))
    nchw.square().sum().backward()
    torch.testing.assert_close(features, nchw, rtol=1e-5, atol=1e-5)
    nchw_grads = [p.grad for p in model.parameters() if p.grad is not None]
    for g, want in zip(grads, nchw_grads, strict=True):
        torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-4)


def test_pixels_are_scaled_inside_the_model():
    torch.manual_seed(0)
    model = build_model(SPEC)
    obs = _obs(3)
    with torch.no_grad():
        from_uint8 = model(torch.from_numpy(obs))[1]
        from_float = model(torch.from_numpy(obs).float())[1]  # raw 0..255 values as floats
        x = torch.from_numpy(obs).float() / 255.0
        x = x.contiguous(memory_format=torch.channels_last)  # the model's layout on a CPU
        for conv in model.conv:
            x = torch.relu(conv(x))
        by_hand = model.v(torch.relu(model.fc(x.flatten(1)))).squeeze(-1)
    torch.testing.assert_close(from_uint8, by_hand, rtol=0, atol=0)
    torch.testing.assert_close(from_float, by_hand, rtol=0, atol=0)
    assert model.preprocess(torch.from_numpy(obs)).dtype == torch.uint8  # scaled in forward


def test_orthogonal_init_with_cleanrls_gains():
    torch.manual_seed(0)
    model = build_model(SPEC)
    layers = {"conv.0": (model.conv[0], 2.0), "conv.1": (model.conv[1], 2.0),
              "conv.2": (model.conv[2], 2.0), "fc": (model.fc, 2.0),
              "pi": (model.pi, 0.01**2), "v": (model.v, 1.0)}  # fmt: skip
    for name, (layer, gain_sq) in layers.items():
        w = layer.weight.detach().reshape(len(layer.weight), -1).double()
        assert w.shape[0] <= w.shape[1], name  # rows orthogonal: W Wᵀ = gain² I
        eye = torch.eye(w.shape[0], dtype=torch.float64)
        torch.testing.assert_close(w @ w.t(), gain_sq * eye, rtol=0, atol=1e-5 * gain_sq)
        assert not layer.bias.any(), name


def test_tensor_names_shapes_and_dtypes():
    state = numpy_state(build_model(SPEC))
    assert {k: (v.shape, v.dtype) for k, v in state.items()} == {
        "conv.0.weight": ((32, 4, 8, 8), np.float32), "conv.0.bias": ((32,), np.float32),
        "conv.1.weight": ((64, 32, 4, 4), np.float32), "conv.1.bias": ((64,), np.float32),
        "conv.2.weight": ((64, 64, 3, 3), np.float32), "conv.2.bias": ((64,), np.float32),
        "fc.weight": ((512, 3136), np.float32), "fc.bias": ((512,), np.float32),
        "pi.weight": ((6, 512), np.float32), "pi.bias": ((6,), np.float32),
        "v.weight": ((1, 512), np.float32), "v.bias": ((1,), np.float32),
    }  # fmt: skip
    gauss = numpy_state(build_model(GAUSS))
    # 40x44 -> 9x10 -> 3x4 -> 1x2: the flattened size follows the observation
    assert gauss["fc.weight"].shape == (512, 64 * 1 * 2)
    assert gauss["log_std"].shape == (2,)


def test_weights_md_documents_the_tensors_of_the_built_model():
    text = WEIGHTS_MD.read_text()
    section = text[text.index('### `arch: "nature-cnn"`') :]
    section = section[: section.index("\n## ")]
    documented = dict(re.findall(r"^\| `([\w.]+)` \| \[([\d, ]+)\] \|", section, flags=re.M))
    model = build_model(SPEC)  # the doc's table is for C=4, 84x84 and n actions = 6
    state = numpy_state(model)
    assert list(documented) == list(state)  # names, and the blob order pack_weights keeps
    for name, shape in documented.items():
        assert tuple(int(d) for d in shape.split(",")) == state[name].shape, name
    assert "| `log_std` | [A] |" in section


@pytest.mark.parametrize("n", [1, 8, 16])
def test_inference_path_equals_the_modules_forward(n):
    torch.manual_seed(n)
    model = _trained_looking(build_model(SPEC))
    fast = model.inference()
    obs = _obs(n, seed=n)
    with torch.no_grad():
        logits, value = model(torch.from_numpy(obs))
    np.testing.assert_allclose(fast.value(obs), value.numpy(), rtol=1e-5, atol=1e-5)
    greedy = fast.greedy(obs)
    assert greedy.dtype == np.int64 and greedy.shape == (n,)
    np.testing.assert_array_equal(greedy, logits.argmax(-1).numpy())
    action, logp, v = fast.act(obs)
    assert (action.dtype, logp.dtype, v.dtype) == (np.int64, np.float32, np.float32)
    assert action.shape == logp.shape == v.shape == (n,)
    assert ((action >= 0) & (action < 6)).all()
    expected = torch.log_softmax(logits, -1).gather(-1, torch.from_numpy(action)[:, None])
    np.testing.assert_allclose(logp, expected.squeeze(-1).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(v, value.numpy(), rtol=1e-5, atol=1e-5)


def test_inference_samples_from_the_models_distribution():
    torch.manual_seed(0)
    model = build_model(SMALL)
    with torch.no_grad():
        model.pi.bias.copy_(torch.tensor([0.0, math.log(3.0)]))  # p(action 1) = 0.75
    actions = model.inference().act(_obs(4000, (2, 36, 36)))[0]
    assert abs(actions.mean() - 0.75) < 0.03


def test_inference_keeps_its_weights_when_the_module_gets_new_ones():
    torch.manual_seed(0)
    model = build_model(SPEC)
    fast, obs = model.inference(), _obs(2)
    before = fast.value(obs)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    np.testing.assert_array_equal(fast.value(obs), before)


def test_gaussian_actions():
    torch.manual_seed(0)
    model = build_model(GAUSS)
    obs = _obs(5, (3, 40, 44))
    action, logp, value = model.inference().act(obs)
    assert action.shape == (5, 2) and logp.shape == value.shape == (5,)
    with torch.no_grad():
        (mean, _), _ = model(torch.from_numpy(obs))
    np.testing.assert_allclose(model.inference().greedy(obs), mean.numpy(), rtol=1e-5, atol=1e-6)


def test_weights_round_trip_through_the_wire_format_and_build_model():
    torch.manual_seed(0)
    model = _trained_looking(build_model(SPEC))
    header, blob = pack_weights(3, numpy_state(model), model=model.spec)
    got_header, got_blob = decode_weights([bytes(f) for f in encode_weights(header, blob)])
    torch.manual_seed(1)
    rebuilt = build_model(got_header.model)  # freshly initialized: different weights
    obs = _obs(4)
    assert not np.allclose(rebuilt.inference().value(obs), model.inference().value(obs))
    load_numpy_state(rebuilt, unpack_tensors(got_header, got_blob))  # read-only views
    theirs = rebuilt.state_dict()
    assert list(theirs) == list(model.state_dict())
    assert all(torch.equal(v, theirs[k]) for k, v in model.state_dict().items())
    np.testing.assert_array_equal(rebuilt.inference().value(obs), model.inference().value(obs))
    np.testing.assert_array_equal(rebuilt.inference().greedy(obs), model.inference().greedy(obs))


def _rollout(policy: NatureCNN, t: int, n: int, seed: int) -> RolloutBatch:
    """Action 1 is always rewarded, action 0 never; episodes never end."""
    obs = _obs(t * n, tuple(policy.obs_shape), seed)
    action, logp, value = policy.inference().act(obs)
    actions = action.reshape(t, n)
    return RolloutBatch(
        run_id="r", actor_id="a", seq=seed, policy_version=0, env_id="X", num_envs=n,
        num_steps=t,
        arrays={
            "obs": obs.reshape(t, n, *policy.obs_shape), "actions": actions,
            "logp": logp.reshape(t, n), "values": value.reshape(t, n),
            "rewards": (actions == 1).astype(np.float32),
            "terminated": np.zeros((t, n), bool), "truncated": np.zeros((t, n), bool),
            "final_values": np.zeros((t, n), np.float32),
            "bootstrap_value": np.zeros(n, np.float32),
        },
    )  # fmt: skip


def test_ppo_updates_through_the_learners_trainer_on_the_autograd_path():
    torch.manual_seed(0)
    policy = build_model(SMALL)
    config = PPOConfig(
        gamma=0.9, anneal_lr=False, learning_rate=1e-3, update_epochs=4, minibatch_size=16
    )
    trainer = PPOTrainer(policy=policy, config=config)
    assert isinstance(trainer._gradient, AutogradGradient)
    before = [p.detach().clone() for p in policy.parameters()]
    probe = torch.from_numpy(_obs(64, (2, 36, 36), seed=99))

    def p_action1() -> float:
        with torch.no_grad():
            logits, _ = policy(probe)
        return float(torch.softmax(logits, -1)[:, 1].mean())

    start = p_action1()
    for i in range(3):
        stats = trainer.update([_rollout(policy, 8, 4, seed=i)], 0)
        assert all(math.isfinite(v) for v in stats.values()), stats
    assert all(not torch.equal(a, b) for a, b in zip(before, policy.parameters(), strict=True))
    assert p_action1() > start + 0.05


def test_the_analytic_gradient_path_refuses_the_cnn_in_one_line():
    with pytest.raises(UsageError, match="nature-cnn") as err:
        PPOTrainer(policy=build_model(SMALL), config=PPOConfig(gradients="analytic"))
    assert "\n" not in str(err.value)


def _rollout_spec(shape: tuple[int, ...], dtype: str) -> RolloutSpec:
    return RolloutSpec(
        run_id="r", obs_shape=shape, obs_dtype=dtype, action=ActionSpace("discrete", n=6),
        num_steps=4,
    )  # fmt: skip


def test_model_spec_for_picks_the_cnn_for_uint8_images():
    assert model_spec_for(_rollout_spec((4, 84, 84), "uint8"), hidden=[64, 64]) == SPEC
    assert model_spec_for(_rollout_spec((4,), "float32"), hidden=[64])["arch"] == "mlp"
    assert model_spec_for(_rollout_spec((4, 84, 84), "float32"), hidden=[8])["arch"] == "mlp"
    explicit = model_spec_for(_rollout_spec((4, 84, 84), "uint8"), arch="mlp", hidden=[8])
    assert explicit["arch"] == "mlp"
    normed = model_spec_for(_rollout_spec((4, 84, 84), "uint8"), hidden=[64], norm_obs=True)
    assert normed == {**SPEC, "obs_norm": {"clip": 10.0, "epsilon": 1e-8}}


NORMED = {**SPEC, "obs_norm": {"clip": 5.0, "epsilon": 1e-8}}


def _with_pixel_stats(model: NatureCNN, seed: int = 0) -> NatureCNN:
    """Statistics as a learner leaves them: from uint8 frames, one pixel rarely lit."""
    frames = torch.from_numpy(_obs(256, tuple(model.obs_shape), seed) // 4)
    frames[:250, :, 10, 10] = 0  # a mostly black pixel: a lit one is many stds away
    model.obs_norm.update(frames.flatten(1))
    return model


def test_norm_obs_normalizes_each_pixel_by_its_running_statistics_instead_of_1_255():
    torch.manual_seed(0)
    model = _with_pixel_stats(build_model(NORMED))
    reference = build_model(SPEC)
    reference.load_state_dict(
        {k: v for k, v in model.state_dict().items() if not k.startswith("obs_norm")}
    )
    obs = torch.from_numpy(_obs(3, seed=5))
    norm = model.obs_norm
    expected_in = ((obs.double().flatten(1) - norm.mean) / (norm.var + 1e-8).sqrt()).clamp(-5, 5)
    with torch.no_grad():  # the reference sees the normalized pixels, x 255 to undo its scale
        want = reference(expected_in.float().view_as(obs) * 255.0)
        got = model(obs)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert float(expected_in[:, 10 * 84 + 10].abs().max()) == 5.0  # the rare pixel: clipped


@pytest.mark.parametrize("n", [1, 8])
def test_the_inference_path_normalizes_pixels_as_the_module_does(n):
    torch.manual_seed(n)
    model = _with_pixel_stats(_trained_looking(build_model(NORMED)), seed=n)
    obs = _obs(n, seed=n + 10)
    with torch.no_grad():
        logits, value = model(torch.from_numpy(obs))
    fast = model.inference()
    np.testing.assert_allclose(fast.value(obs), value.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(fast.greedy(obs), logits.argmax(-1).numpy())


def test_the_learner_merges_pixel_statistics_after_its_update():
    torch.manual_seed(0)
    small = {**SMALL, "obs_norm": {"clip": 10.0, "epsilon": 1e-8}}
    policy = build_model(small)
    trainer = PPOTrainer(policy=policy, config=PPOConfig(minibatch_size=16, update_epochs=1))
    batch = _rollout(policy, 8, 4, seed=3)
    trainer.update([batch], 0)
    pixels = torch.from_numpy(batch.arrays["obs"]).reshape(32, -1).double()
    norm = policy.obs_norm
    assert float(norm.count) == pytest.approx(32 + 1e-4)
    torch.testing.assert_close(norm.mean, pixels.mean(0) * 32 / (32 + 1e-4))
    # Statistics travel with the weights: a rebuilt model acts exactly as the learner's.
    header, blob = pack_weights(1, numpy_state(policy), model=policy.spec)
    rebuilt = build_model(header.model)
    load_numpy_state(rebuilt, unpack_tensors(header, blob))
    obs = _obs(4, (2, 36, 36), seed=7)
    np.testing.assert_array_equal(rebuilt.inference().value(obs), policy.inference().value(obs))


@pytest.mark.parametrize(
    "shape",
    [[4, 35, 84], [4, 84, 20], [84, 84], [84, 84, 4], [1, 4, 84, 84], [4, 0, 84]],
)
def test_an_observation_shape_the_cnn_cannot_take_is_a_one_line_error(shape):
    spec = {**SPEC, "obs_shape": shape}
    with pytest.raises(ModelSpecError) as err:
        build_model(spec)
    assert "\n" not in str(err.value)
    if shape != [4, 0, 84]:
        assert str(tuple(shape)) in str(err.value) and "[C, H, W]" in str(err.value)
    build_model({**SPEC, "obs_shape": [1, 36, 36]})  # the smallest it takes


def test_a_batch_of_the_wrong_shape_is_a_one_line_error():
    model = build_model(SPEC)
    with pytest.raises(ModelSpecError, match=r"\(4, 84, 84\), got \(84, 84, 4\)"):
        model.inference().act(_obs(2, (84, 84, 4)))
    with pytest.raises(ModelSpecError, match=r"got \(4, 80, 80\)"):
        model.preprocess(torch.from_numpy(_obs(2, (4, 80, 80))))
