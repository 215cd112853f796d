#!/usr/bin/env bash
# Breakout's learning factors on the GPU machine that is sometimes lent (16 cores, one H100
# or H200, Python 3.12 with torch CUDA and numpy, no package registry, no OpenCV): every arm
# of `python -m benchmarks.variants breakout-factors` given in ARMS, on every seed in SEEDS,
# all at once (each `ppomq train --preset atari --env-backend ale`, its learner on the GPU,
# its 2 actors on the cores), on the 1M-step learning-rate schedule, each stopped after
# DURATION_S. What compares is the return at equal env steps (the task's marks); the runs
# share the machine, so their times do not. Under 8 minutes.
#
# Here, once (the wheels the machine lacks, as for atari.sh):
#   bash benchmarks/device/atari.sh --prepare
# There (the device tool's run, carry [".device-wheels-atari"], timeout_s 480):
#   bash benchmarks/device/breakout_factors.sh
# Here on the CPU, a smoke test of the whole script:
#   OUT=/tmp/bf-out QUICK=1 PY=.venv/bin/python bash benchmarks/device/breakout_factors.sh
#
# Results under $OUT: variants_breakout_factors.{json,md}, log.txt (all output), runs.tgz
# (each run's logs, summary.json and progress.csv).
#
# Settings (environment): OUT (required), QUICK=1 (one short run per arm on the CPU), PY
# (python3), WHEELS (.device-wheels-atari), BUDGET_S (430: the whole script's time), ARMS
# (norm-returns-no-clip-vloss,sf-value-weight,sf-init: the atari preset against Sample
# Factory's value-loss weight, twice CleanRL's, and against its initial weights, gain 1 on
# every layer), SEEDS (1,2,3), DURATION_S (330),
# WORK (/tmp/bf-work), FARM=1 (import the checkout through /tmp/ppomq-pkg even where ppomq
# is installed).
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO" || exit 2
WHEELS=${WHEELS:-$REPO/.device-wheels-atari}
BUDGET_S=${BUDGET_S:-430}
WORK=${WORK:-/tmp/bf-work}
OUT=${OUT:-}
# shellcheck source=benchmarks/device/common.sh
source "$REPO/benchmarks/device/common.sh"
: "${OUT:?OUT: the folder for the results}"

ARMS=${ARMS:-norm-returns-no-clip-vloss,sf-value-weight,sf-init}
if [[ "$QUICK" == 1 ]]; then
  SEEDS=${SEEDS:-1}; DURATION_S=${DURATION_S:-40}; DEVICE=cpu; MARKS=2000,4000
else
  SEEDS=${SEEDS:-1,2,3}; DURATION_S=${DURATION_S:-330}; DEVICE=cuda; MARKS=100000,200000,300000,400000
fi
device_environment
[[ "$HAS_CUDA" == 1 ]] || DEVICE=cpu
RUNS=$(( $(tr ',' '\n' <<<"$ARMS" | grep -c .) * $(tr ',' '\n' <<<"$SEEDS" | grep -c .) ))

step "Breakout factors: $ARMS x seeds $SEEDS, $RUNS runs at once, ${DURATION_S} s each, --device $DEVICE"
# Each run stops itself at DURATION_S; the rest of the budget is for start-up, the results
# and the packing (25 s).
timeout -k 10 "$(cap $(( $(left) - 25 )))" "$PY" -m benchmarks.variants breakout-factors \
  --tasks breakout-device --arms "$ARMS" --seeds "$SEEDS" --concurrent "$RUNS" \
  --task-flags "--device $DEVICE --duration-s $DURATION_S" --marks "$MARKS" \
  --timeout-s $(( DURATION_S + 60 )) --out "$WORK/res" --workdir "$WORK/runs" --lock ""
echo "variants: exit $?"

step "results"
pack_results variants_breakout_factors
echo
echo "=== done in $((SECONDS - T0)) s; files in $OUT:"
ls -la "$OUT"
exec 1>&- 2>&-  # tee sees the end and writes the log's last lines
sleep 1
