#!/usr/bin/env bash
# The learner group (DD-PPO) on the GPU machine that is sometimes lent (16 cores, one H100
# or H200, Python 3.12 with torch CUDA and numpy, no package registry): (a) the CUDA tests,
# (b) the learner's update on CUDA against the CPU, (c) the group's update alone with W in
# 1,2,4,8 ranks of one core each (CartPole, HalfCheetah, the Atari CNN), and (d) the sweep of
# `ppomq train --learners W` over W in 1,2,4,8 (CartPole and HalfCheetah, the same total
# batch). Under 8 minutes; every
# step is bounded by `timeout` and a deadline, and a failed step leaves the others running.
#
# Here, once (the wheels the machine lacks, into .device-wheels, ignored by git):
#   bash benchmarks/device/learner_group.sh --prepare
# There (the device tool's run, carry [".device-wheels"], timeout_s 480):
#   bash benchmarks/device/learner_group.sh
# Here on the CPU, a smoke test of the whole script (CUDA parts skipped without a GPU):
#   OUT=/tmp/lg-out QUICK=1 PY=.venv/bin/python bash benchmarks/device/learner_group.sh
#
# Results under $OUT (9 files): learner_group_device.md (everything, one page),
# cuda_update.{json,md}, group_update.{json,md}, group_sweep.{json,md}, log.txt (all output), runs.tgz (each
# sweep run's logs, summary.json and progress.csv).
#
# Settings (environment): OUT (required), QUICK=1 (W 1,2, 10 s runs, a small update case),
# PY (python3), WHEELS (.device-wheels), BUDGET_S (420: the whole script's time), LEARNERS
# (1,2,4,8), TASKS (cartpole,halfcheetah), ACTORS (8), DURATION_S (15), RUN_TESTS (1 with a
# GPU), WORK (/tmp/lg-work), LOCK (/tmp/ppomq-bench.lock), FARM=1 (import the checkout
# through /tmp/ppomq-pkg even where ppomq is installed).
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO" || exit 2
WHEELS=${WHEELS:-$REPO/.device-wheels}
BUDGET_S=${BUDGET_S:-420}
WORK=${WORK:-/tmp/lg-work}
OUT=${OUT:-}
# shellcheck source=benchmarks/device/common.sh
source "$REPO/benchmarks/device/common.sh"

if [[ "${1:-}" == "--prepare" ]]; then
  # Core and MuJoCo wheels, less what the machine's image already holds (KINDS.md's list:
  # matplotlib and its needs, absl-py, etils, fsspec, zipp) and ale-py (no Atari run here),
  # so that the wheels and the checkout fit the 64 MiB a call carries.
  DROP="matplotlib fonttools kiwisolver contourpy pyparsing cycler python_dateutil absl_py
        etils fsspec zipp ale_py" prepare_wheels core mujoco
  exit 0
fi

: "${OUT:?OUT: the folder for the results}"
LOCK=${LOCK:-/tmp/ppomq-bench.lock}
ACTORS=${ACTORS:-8}
TASKS=${TASKS:-cartpole,halfcheetah}
if [[ "$QUICK" == 1 ]]; then
  LEARNERS=${LEARNERS:-1,2}; DURATION_S=${DURATION_S:-10}
else
  LEARNERS=${LEARNERS:-1,2,4,8}; DURATION_S=${DURATION_S:-15}
fi
device_environment
if ! "$PY" -c 'import mujoco, gymnasium.envs.mujoco' 2>/dev/null; then
  echo "no MuJoCo here: the sweep leaves halfcheetah out"
  TASKS=$(echo "$TASKS" | tr ',' '\n' | grep -vx halfcheetah | paste -sd, -)
fi

step "(a) the CUDA tests"
cuda_tests 150

step "(b) the learner's update, CUDA against the CPU"
if [[ "$HAS_CUDA" == 1 ]]; then
  if [[ "$QUICK" == 1 ]]; then CU_ARGS=(--cases cartpole-1,halfcheetah --updates 3 --cell-s 2)
  else CU_ARGS=(--updates 10 --cell-s 4); fi
  timeout -k 10 "$(cap 150)" "$PY" -m benchmarks.device.cuda_update --out "$WORK/res" \
    --devices cpu-1,cpu-all,cuda "${CU_ARGS[@]}"
  echo "cuda_update: exit $?"
elif [[ "$QUICK" == 1 ]]; then
  # No GPU: the CPU column alone, so that a smoke test exercises the code.
  timeout -k 10 120 "$PY" -m benchmarks.device.cuda_update --out "$WORK/res" \
    --devices cpu-1 --cases cartpole-1 --updates 3 --cell-s 2
  echo "cuda_update (CPU only, no GPU): exit $?"
else
  echo "not run: no GPU"
fi

step "(c) the update alone: W ranks of one torch thread each, no actors (benchmarks.group_update)"
if [[ "$QUICK" == 1 ]]; then GU_ARGS=(--world 1,2 --cases cartpole --rounds 1 --updates 1)
else GU_ARGS=(--world 1,2,4,8 --cases cartpole,halfcheetah,atari --rounds 2 --updates 2); fi
timeout -k 10 "$(cap 120)" "$PY" -m benchmarks.group_update --out "$WORK/res/group_update" "${GU_ARGS[@]}"
echo "group_update: exit $?"

step "(d) the learner-group sweep: W in $LEARNERS, $TASKS, $ACTORS actors, ${DURATION_S} s runs"
# Leave 25 s for packing the results; a run that would end past the deadline is skipped.
DEADLINE=$(( $(date +%s) + $(left) - 25 ))
SW_ARGS=(--learners "$LEARNERS" --tasks "$TASKS" --actors "$ACTORS" --duration-s "$DURATION_S"
         --deadline "$DEADLINE" --workdir "$WORK/runs" --lock "$LOCK")
[[ "$HAS_CUDA" == 1 ]] && SW_ARGS+=(--cuda-reference)
timeout -k 10 "$(cap $(( $(left) - 15 )))" "$PY" -m benchmarks.device.group_sweep --out "$WORK/res" "${SW_ARGS[@]}"
echo "group_sweep: exit $?"

step "results"
pack_results cuda_update group_update group_sweep
report "Learner group on the GPU machine" "bash benchmarks/device/learner_group.sh" \
  learner_group_device.md "cuda_update:the learner's update on CUDA" \
  "group_update:the update alone" "group_sweep:the sweep"
echo
echo "=== done in $((SECONDS - T0)) s; files in $OUT:"
ls -la "$OUT"
exec 1>&- 2>&-  # tee sees the end and writes the log's last lines
sleep 1
