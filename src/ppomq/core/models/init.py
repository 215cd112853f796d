"""How a fresh policy's weights start.

Every model starts as CleanRL's (and SB3's) layer_init builds it: orthogonal weights with
gain sqrt 2 on the hidden layers, 0.01 on the policy head (a near-uniform first policy),
1 on the value head, zero biases. `unit` is Sample Factory's (`policy_initialization
orthogonal`, `policy_init_gain 1.0`): orthogonal with gain 1 on every linear and
convolutional layer, zero biases, recurrent cells left as torch makes them.
"""

from __future__ import annotations

from typing import Literal

from torch import nn

Init = Literal["cleanrl", "unit"]


def apply_init(policy: nn.Module, init: Init) -> nn.Module:
    """The policy with its weights set by `init` ("cleanrl": as the model built them)."""
    if init == "unit":
        for layer in policy.modules():
            if isinstance(layer, (nn.Linear, nn.Conv2d)):
                nn.init.orthogonal_(layer.weight, 1.0)
                nn.init.zeros_(layer.bias)
    return policy
