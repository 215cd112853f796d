#!/usr/bin/env bash
# Atari on the GPU machine that is sometimes lent (16 cores, one H100 or H200, Python 3.12
# with torch CUDA and numpy, no package registry, no OpenCV): (a) the CUDA tests, (b) the
# Nature CNN update on CUDA against the CPU, (c) the whole system, `ppomq train --preset
# atari --env-backend ale` with the learner on the GPU, as the preset is and with a fleet of
# actors on the cores, projected to 10M steps against CleanRL's published times, and (d),
# with the time left, the learner group's update alone at W in 1,2,4,8 ranks (CartPole and
# the Atari CNN). Under 8 minutes; every step is bounded by `timeout` and a deadline, and a
# failed step leaves the others running.
#
# Here, once (the wheels the machine lacks, into .device-wheels-atari, ignored by git):
#   bash benchmarks/device/atari.sh --prepare
# There (the device tool's run, carry [".device-wheels-atari"], timeout_s 480):
#   bash benchmarks/device/atari.sh
# Here on the CPU, a smoke test of the whole script (CUDA parts skipped without a GPU):
#   OUT=/tmp/atari-out QUICK=1 PY=.venv/bin/python bash benchmarks/device/atari.sh
#
# Results under $OUT: atari_device.md (everything, one page), cuda_update.{json,md},
# atari_fleet.{json,md}, group_update.{json,md}, log.txt (all output), runs.tgz (each run's
# logs, summary.json and progress.csv).
#
# Settings (environment): OUT (required), QUICK=1 (short runs on the CPU), PY (python3),
# WHEELS (.device-wheels-atari), BUDGET_S (440: the whole script's time), PARTS (a,b,c,d:
# the parts to run), ARMS (preset,fleet), BPV (1: the learner's --batches-per-version, a
# list runs each), ROUNDS (1), FLEET_ACTORS (14), DURATION_S (50), RUN_TESTS (1 with a GPU), WORK (/tmp/atari-work), LOCK
# (/tmp/ppomq-bench.lock), FARM=1 (import the checkout through /tmp/ppomq-pkg even where
# ppomq is installed).
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO" || exit 2
WHEELS=${WHEELS:-$REPO/.device-wheels-atari}
BUDGET_S=${BUDGET_S:-440}
WORK=${WORK:-/tmp/atari-work}
OUT=${OUT:-}
# shellcheck source=benchmarks/device/common.sh
source "$REPO/benchmarks/device/common.sh"

if [[ "${1:-}" == "--prepare" ]]; then
  # The core set (ale-py and its ROMs included), less what the machine's image holds.
  DROP="matplotlib fonttools kiwisolver contourpy pyparsing cycler python_dateutil" \
    prepare_wheels core
  exit 0
fi

: "${OUT:?OUT: the folder for the results}"
LOCK=${LOCK:-/tmp/ppomq-bench.lock}
if [[ "$QUICK" == 1 ]]; then
  FLEET_ACTORS=${FLEET_ACTORS:-2}; DURATION_S=${DURATION_S:-25}; DEVICE=cpu
else
  FLEET_ACTORS=${FLEET_ACTORS:-14}; DURATION_S=${DURATION_S:-50}; DEVICE=cuda
fi
PARTS=",${PARTS:-a,b,c,d},"
part() { [[ "$PARTS" == *",$1,"* ]]; }
ARMS=${ARMS:-preset,fleet}; BPV=${BPV:-1}; ROUNDS=${ROUNDS:-1}
device_environment
[[ "$HAS_CUDA" == 1 ]] || DEVICE=cpu

step "(a) the CUDA tests"
if part a; then cuda_tests 110; else TEST_STATE="not run: left out (PARTS)"; fi

step "(b) the Nature CNN update, CUDA against the CPU"
if ! part b; then
  echo "left out (PARTS)"
elif [[ "$HAS_CUDA" == 1 ]]; then
  timeout -k 10 "$(cap 80)" "$PY" -m benchmarks.device.cuda_update --out "$WORK/res" \
    --devices cpu-1,cpu-all,cuda --cases atari --updates 5 --cell-s 3
  echo "cuda_update: exit $?"
elif [[ "$QUICK" == 1 ]]; then
  timeout -k 10 120 "$PY" -m benchmarks.device.cuda_update --out "$WORK/res" \
    --devices cpu-1 --cases atari --updates 1 --cell-s 1
  echo "cuda_update (CPU only, no GPU): exit $?"
else
  echo "not run: no GPU"
fi

step "(c) the whole system: --preset atari --env-backend ale --device $DEVICE, ${DURATION_S} s runs"
# Leave 70 s for (d) and the packing; a run that would end past the deadline is skipped.
if part c; then
  part d && RESERVE=70 || RESERVE=25
  DEADLINE=$(( $(date +%s) + $(left) - RESERVE ))
  timeout -k 10 "$(cap $(( $(left) - RESERVE + 10 )))" "$PY" -m benchmarks.device.atari_fleet \
    --out "$WORK/res" --arms "$ARMS" --batches-per-version "$BPV" --rounds "$ROUNDS" \
    --fleet-actors "$FLEET_ACTORS" --duration-s "$DURATION_S" --device "$DEVICE" \
    --deadline "$DEADLINE" --workdir "$WORK/runs" --lock "$LOCK"
  echo "atari_fleet: exit $?"
else
  echo "left out (PARTS)"
fi

step "(d) the learner group's update alone, W ranks of one torch thread each (benchmarks.group_update)"
if ! part d; then
  echo "left out (PARTS)"
elif (( $(left) > 45 )); then
  if [[ "$QUICK" == 1 ]]; then GU_ARGS=(--world 1,2 --cases cartpole --rounds 1 --updates 1)
  else GU_ARGS=(--world 1,2,4,8 --cases cartpole,atari --rounds 1 --updates 2); fi
  timeout -k 5 "$(cap $(( $(left) - 25 )))" "$PY" -m benchmarks.group_update \
    --out "$WORK/res/group_update" "${GU_ARGS[@]}"
  echo "group_update: exit $?"
else
  echo "not run: $(left) s left"
fi

step "results"
pack_results cuda_update atari_fleet group_update
report "Atari on the GPU machine" "bash benchmarks/device/atari.sh" atari_device.md \
  "cuda_update:the Nature CNN update" "atari_fleet:the whole system" \
  "group_update:the learner group's update"
echo
echo "=== done in $((SECONDS - T0)) s; files in $OUT:"
ls -la "$OUT"
exec 1>&- 2>&-  # tee sees the end and writes the log's last lines
sleep 1
