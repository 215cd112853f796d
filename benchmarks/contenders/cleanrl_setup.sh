#!/usr/bin/env bash
# A venv for CleanRL's ppo_continuous_action.py, the peer of `python -m benchmarks.learning
# side-by-side` (issue 13), kept apart from .venv because the script needs gymnasium 0.28
# where ppomq pins 1.4.0 (see requirements-cleanrl.txt).
#
#   bash benchmarks/contenders/cleanrl_setup.sh [VENV_DIR]      # default: .venv-cleanrl
#
# What it installs: the published script, i.e. the `cleanrl==1.2.0` wheel (its latest release
# on the package registry), with --no-deps and --ignore-requires-python. Why:
# - its metadata says Python < 3.11 only because some of its extras (jax 0.3) did; the script
#   itself runs on 3.11, the only Python the local CPU torch wheel is built for;
# - its declared dependencies (gym 0.23, stable-baselines3 1.2, wandb, moviepy, pygame, ...)
#   serve other scripts of the package and would pull a second torch; the script imports
#   only what requirements-cleanrl.txt pins (torch==2.13.0, the CPU build on local disk).
# The venv gets a `.gitignore` of `*`, so that git ignores it wherever it is made.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${1:-.venv-cleanrl}
PYTHON=${PYTHON:-python3}

"$PYTHON" -m venv "$VENV"
echo '*' >"$VENV/.gitignore"
"$VENV/bin/pip" install --quiet -r benchmarks/contenders/requirements-cleanrl.txt
"$VENV/bin/pip" install --quiet --no-deps --ignore-requires-python cleanrl==1.2.0
# Fail here, not an hour into a benchmark: the script is there and its env can be made.
"$VENV/bin/python" - <<'PY'
import importlib.util

import gymnasium as gym
import torch

spec = importlib.util.find_spec("cleanrl.ppo_continuous_action")
assert spec is not None and spec.origin, "cleanrl.ppo_continuous_action missing"
gym.make("HalfCheetah-v4").reset(seed=0)
print(f"ok: {spec.origin}, gymnasium {gym.__version__}, torch {torch.__version__}")
PY
echo "CleanRL python: $VENV/bin/python"
