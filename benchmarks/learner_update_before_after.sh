#!/usr/bin/env bash
# The learner update before and after a change: runs benchmarks.learner_update of an older
# revision (its own code, from a git worktree) and of this checkout, interleaved round by
# round so both see the same machine, then prints the per-round JSON paths.
#   bash benchmarks/learner_update_before_after.sh REV [ROUNDS]
set -euo pipefail
rev=${1:?usage: $0 REV [ROUNDS]}
rounds=${2:-5}
root=$(git rev-parse --show-toplevel)
py=$root/.venv/bin/python
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
for r in $(seq 1 "$rounds"); do
  (cd "$work/tree" && PYTHONPATH="$work/pkg:$work/tree" "$py" -m benchmarks.learner_update \
    --rounds 1 --updates 20 --out "$out/before-$r" > /dev/null)
  (cd "$root" && "$py" -m benchmarks.learner_update --rounds 1 --updates 20 \
    --out "$out/after-$r" > /dev/null)
  echo "round $r done"
done
"$py" - "$out" "$rev" "$root/benchmarks/results" <<'PY'
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
         "", f"`bash benchmarks/learner_update_before_after.sh {rev}`: ms per update, median "
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
