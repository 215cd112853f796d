"""torch state dict <-> weights message <-> torch, through a real Redis."""

from __future__ import annotations

import pytest
import redis
import torch

from ppomq.core.store.torch_io import state_dict_to_numpy, weights_to_state_dict
from ppomq.core.store.weight_store import WeightStore
from ppomq.proto.weights_blob import pack_weights


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2), torch.nn.BatchNorm1d(2)
    )


def test_state_dict_survives_publish_and_fetch(redis_client: redis.Redis) -> None:
    torch.manual_seed(0)
    source = _mlp()
    store = WeightStore(redis_client, "r1")
    store.publish(*pack_weights(1, state_dict_to_numpy(source.state_dict()), model={"a": 1}))
    target = _mlp()
    target.load_state_dict(weights_to_state_dict(*store.fetch(1, verify=True)))
    for (name, a), (_, b) in zip(
        source.state_dict().items(), target.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
        assert a.dtype == b.dtype  # num_batches_tracked stays int64


def test_bfloat16_is_refused_rather_than_cast() -> None:
    with pytest.raises(ValueError, match="bfloat16"):
        state_dict_to_numpy({"w": torch.zeros(2, dtype=torch.bfloat16)})
