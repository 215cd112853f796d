#!/usr/bin/env bash
# A venv for Sample Factory 2's own Atari example (sf_examples.atari.train_atari), the peer run
# by benchmarks/contenders/sf_atari.py on Atari Breakout, kept apart from .venv because
# sample-factory 2.1.1 needs gymnasium < 1.0 and numpy < 2 where ppomq pins gymnasium 1.4.0
# and numpy 2 (see requirements-sf.txt).
#
#   bash benchmarks/contenders/sf_setup.sh [VENV_DIR]      # default: .venv-sf
#
# What it installs: the `sample-factory==2.1.1` wheel (its latest release on the package
# registry, which carries both `sample_factory` and the `sf_examples` package with the Atari
# example), with --no-deps. Why: its declared dependencies include wandb, huggingface-hub,
# pyglet and tensorboard, which serve features that stay off here (wandb logging, model
# upload, rendering; SF itself writes its summaries with tensorboardX) and would bring in
# packages of their own; requirements-sf.txt pins what its training path and its Atari
# example import, torch==2.13.0 among them (the CPU build on local disk).
# The venv gets a `.gitignore` of `*`, so that git ignores it wherever it is made.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${1:-.venv-sf}
PYTHON=${PYTHON:-python3}

"$PYTHON" -m venv "$VENV"
echo '*' >"$VENV/.gitignore"
"$VENV/bin/pip" install --quiet -r benchmarks/contenders/requirements-sf.txt
"$VENV/bin/pip" install --quiet --no-deps sample-factory==2.1.1
# Fail here, not an hour into a benchmark: SF's Atari example imports, knows atari_breakout,
# and its own env factory makes and steps that env (ROMs included); its MuJoCo example's
# factory makes and steps HalfCheetah-v4.
"$VENV/bin/python" - <<'PY'
import importlib.metadata

import ale_py  # registers the ...NoFrameskip-v4 ids with gymnasium
import gymnasium as gym
import torch
from sf_examples.atari.atari_params import atari_override_defaults  # noqa: F401
from sf_examples.atari.atari_utils import atari_env_by_name, make_atari_env
from sf_examples.atari.train_atari import parse_atari_args

spec = atari_env_by_name("atari_breakout")
cfg = parse_atari_args(["--env=atari_breakout", "--experiment=probe", "--device=cpu"])
env = make_atari_env("atari_breakout", cfg, None)
obs, _ = env.reset(seed=0)
env.step(env.action_space.sample())
env.close()
from sf_examples.mujoco.mujoco_utils import make_mujoco_env

cheetah = make_mujoco_env("mujoco_halfcheetah", None, None)
cheetah.reset(seed=0)
cheetah.step(cheetah.action_space.sample())
cheetah.close()
print(
    f"ok: sample-factory {importlib.metadata.version('sample-factory')}, atari_breakout = {spec.env_id},"
    f" obs {obs.shape}, gymnasium {gym.__version__}, ale-py {ale_py.__version__},"
    f" torch {torch.__version__}, HalfCheetah-v4 on mujoco {importlib.metadata.version('mujoco')}"
)
PY
echo "Sample Factory python: $VENV/bin/python"
