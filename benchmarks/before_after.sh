#!/usr/bin/env bash
# Before and after a change, interleaved round by round so both see the same machine: an
# older revision runs its own code (a git worktree, its packages under their installed
# names) and this checkout runs its own.
#   bash benchmarks/before_after.sh REV ROUNDS learner-update
#       benchmarks.learner_update, one round each; writes
#       OUT/learner_update_before_after.{md,json}
#   bash benchmarks/before_after.sh REV ROUNDS train ARGS...
#       `ppomq train ARGS` timed from command to exit (what a user waits for); writes
#       OUT/train_before_after.{md,json}
# OUT is $BEFORE_AFTER_OUT, by default /tmp/ppomq-before-after: a comparison with an older
# revision is evidence for a change, not a current figure, so it stays out of
# benchmarks/results/ (which holds each benchmark's current result, indexed in its README).
set -euo pipefail
usage="usage: $0 REV ROUNDS learner-update | train ARGS..."
rev=${1:?$usage}
rounds=${2:?$usage}
what=${3:?$usage}
shift 3
root=$(git rev-parse --show-toplevel)
py=$root/.venv/bin/python
results=${BEFORE_AFTER_OUT:-/tmp/ppomq-before-after}
mkdir -p "$results"
work=$(mktemp -d)
git -C "$root" worktree add -q --detach "$work/tree" "$rev"
trap 'git -C "$root" worktree remove --force "$work/tree"; rm -rf "$work"' EXIT
# The old revision's packages under the names they install as (pyproject's package-dir).
mkdir -p "$work/pkg"
cp -r "$work/tree/src/ppomq" "$work/pkg/ppomq"
for pair in proto:proto actor:services/actor learner:services/learner \
    weightserver:services/weightserver; do
  rm -rf "$work/pkg/ppomq/${pair%%:*}"
  ln -s "$work/tree/${pair#*:}" "$work/pkg/ppomq/${pair%%:*}"
done
out=$work/rounds
mkdir -p "$out"
if [ "$what" = train ]; then
  for r in $(seq 1 "$rounds"); do
    for side in before after; do
      if [ $side = before ]; then dir=$work/tree; path=$work/pkg:$work/tree; else dir=$root; path=; fi
      start=$(date +%s.%N)
      (cd "$dir" && PYTHONPATH=$path "$py" -m ppomq.cli train "$@" --no-progress \
        --run-dir "$out/$side-$r" > "$out/$side-$r.log" 2>&1)
      echo "$side $r $(echo "$(date +%s.%N) - $start" | bc)" | tee -a "$out/times"
    done
  done
  "$py" - "$out/times" "$rev" "$results" "$*" <<'PY'
import json, statistics, sys
from pathlib import Path
rows = [line.split() for line in Path(sys.argv[1]).read_text().splitlines()]
rev, results, args = sys.argv[2], Path(sys.argv[3]), sys.argv[4]
times = {side: [float(t) for s, _, t in rows if s == side] for side in ("before", "after")}
med = {side: statistics.median(v) for side, v in times.items()}
md = (f"# `ppomq train {args}` before ({rev}) and after, interleaved\n\n"
      f"Command to exit, seconds, {len(times['after'])} rounds: before {times['before']}, "
      f"after {times['after']}.\n\nMedian before {med['before']:.2f} s, after "
      f"{med['after']:.2f} s: after / before = {med['after'] / med['before']:.3f}.\n")
(results / "train_before_after.md").write_text(md)
(results / "train_before_after.json").write_text(json.dumps(
    {"before_rev": rev, "args": args, "seconds": times}, indent=2) + "\n")
print(md)
PY
  exit 0
fi
for r in $(seq 1 "$rounds"); do
  (cd "$work/tree" && PYTHONPATH="$work/pkg:$work/tree" "$py" -m benchmarks.learner_update \
    --rounds 1 --updates 20 --out "$out/before-$r" > /dev/null)
  (cd "$root" && "$py" -m benchmarks.learner_update --rounds 1 --updates 20 \
    --out "$out/after-$r" > /dev/null)
  echo "round $r done"
done
"$py" - "$out" "$rev" "$results" <<'PY'
import json, statistics, sys
from pathlib import Path
out, rev, results = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
def load(kind):
    runs = [json.loads(p.read_text()) for p in sorted(out.glob(f"{kind}-*/learner_update.json"))]
    table = {}
    for run in runs:
        for case in run["cases"].values():
            n = case["samples"] // 256  # older revisions had only the CartPole cases
            name = case.get("name", f"cartpole, {n} batch{'es' if n > 1 else ''}")
            for engine, e in case["engines"].items():
                table.setdefault((name, engine), []).append(e["update_ms_median"])
    return table
before, after = load("before"), load("after")
summary = []
lines = [f"# Learner update before ({rev}) and after, interleaved",
         "", f"`bash benchmarks/before_after.sh {rev} N learner-update`: ms per update, median "
         "of the rounds (each the median of 20 updates), one torch thread.", "",
         "| case | engine | before ms | after ms | after / before |", "|---|---|---|---|---|"]
for key in sorted(after):
    a = statistics.median(after[key])
    b = statistics.median(before[key]) if key in before else None
    ratio = f"{a / b:.2f}" if b else "n/a"
    lines.append(f"| {key[0]} | {key[1]} | {b if b is None else round(b, 2)} | {round(a, 2)} | {ratio} |")
    summary.append({"case": key[0], "engine": key[1], "before_ms": before.get(key),
                    "after_ms": after[key]})
(results / "learner_update_before_after.md").write_text("\n".join(lines) + "\n")
(results / "learner_update_before_after.json").write_text(
    json.dumps({"before_rev": rev, "rounds": summary}, indent=2) + "\n")
print("\n".join(lines))
PY
