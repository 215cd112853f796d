#!/usr/bin/env bash
# PufferLib 3.0.0 for benchmarks/puffer_tax.py, from its published sdist (sha256 checked
# against the package index), in two parts:
#  1. a venv of its own (default .venv-puffer): PufferLib's trainer and its C envs. Its pins
#     (numpy<2, gymnasium<=0.29.1) differ from ppomq's, hence the separate venv. Skipped when
#     VENV already imports pufferlib (e.g. made by the same steps elsewhere).
#  2. its cartpole binding (pufferlib/ocean/cartpole/binding.c) compiled once more, for
#     ppomq's .venv (its Python and NumPy 2), into VENV/ppomq-ocean/cartpole/: what
#     benchmarks/contenders/puffer_cartpole_env.py loads so that ppomq's actors step the
#     same C env. The same flags as PufferLib's setup.py, linked with the raylib it ships.
# The sdist does not build offline as it is: setup.py downloads raylib's and box2d's web
# builds (empty stand-ins do: the CPU build needs only raylib's linux build, which the sdist
# ships); with nvcc on PATH it picks a CUDA build (PATH is trimmed); impulse_wars links
# box2d, which the sdist lacks (left out).
#
#   bash benchmarks/contenders/puffer_setup.sh [VENV_DIR]     # about 3-4 min on 2 cores
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=$(realpath -m "${1:-.venv-puffer}")
PY=${PYTHON:-python3}
PPOMQ_PY=$(realpath -ms "${PPOMQ_PYTHON:-.venv/bin/python}")  # -s: the venv's own link
work=$(mktemp -d -t puffer-build.XXXX)
trap 'rm -rf "$work"' EXIT

fetch_sdist() {  # pip's own index, the sha256 it gives checked
    "$1" - "$work" <<'PY'
import hashlib, re, subprocess, sys, urllib.request
out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                     capture_output=True, text=True).stdout.strip() or "https://pypi.org/simple"
page = urllib.request.urlopen(out.rstrip("/") + "/pufferlib/").read().decode()
href = next(h for h in re.findall(r'href="([^"]+)"', page) if "pufferlib-3.0.0.tar.gz" in h)
url, _, frag = href.partition("#sha256=")
url = urllib.request.urljoin(out.rstrip("/") + "/pufferlib/", url)
data = urllib.request.urlopen(url).read()
assert not frag or hashlib.sha256(data).hexdigest() == frag, "sha256 mismatch"
open(sys.argv[1] + "/pufferlib-3.0.0.tar.gz", "wb").write(data)
PY
    tar -xzf "$work"/pufferlib-3.0.0.tar.gz -C "$work"
}

if ! "$VENV/bin/python" -c 'import pufferlib.pufferl' 2>/dev/null; then
    "$PY" -m venv "$VENV"
    echo '*' >"$VENV/.gitignore"
    "$VENV/bin/pip" install -q torch==2.13.0 'numpy<2.0' Cython setuptools wheel
    "$VENV/bin/pip" install -q torch==2.13.0 'numpy<2.0' 'gym<=0.23' 'gymnasium<=0.29.1' \
        'pettingzoo<=1.24.1' 'shimmy[gym-v21]' psutil pynvml rich rich_argparse imageio \
        pyro-ppl heavyball
    fetch_sdist "$VENV/bin/python"
    (
        cd "$work/pufferlib-3.0.0"
        mkdir -p raylib-5.5_webassembly box2d-web box2d-linux-amd64
        mv pufferlib/ocean/impulse_wars/binding.c pufferlib/ocean/impulse_wars/binding.c.disabled
        PATH="$VENV/bin:/usr/sbin:/usr/bin:/sbin:/bin" pip install -q --no-deps --no-build-isolation .
    )
else
    fetch_sdist "$VENV/bin/python"
fi

# Part 2: the cartpole binding for ppomq's interpreter and NumPy.
src="$work/pufferlib-3.0.0"
read -r py_inc np_inc suffix < <("$PPOMQ_PY" -c 'import sysconfig, numpy
print(sysconfig.get_paths()["include"], numpy.get_include(), sysconfig.get_config_var("EXT_SUFFIX"))')
out="$VENV/ppomq-ocean/cartpole"
mkdir -p "$out"
gcc -shared -fPIC -O2 -flto -fwrapv -Wl,-Bsymbolic-functions \
    -DNPY_NO_DEPRECATED_API=NPY_1_7_API_VERSION -DPLATFORM_DESKTOP \
    -Wno-alloc-size-larger-than -Wno-implicit-function-declaration \
    -I"$py_inc" -I"$np_inc" -I"$src/raylib-5.5_linux_amd64/include" \
    "$src/pufferlib/ocean/cartpole/binding.c" "$src/raylib-5.5_linux_amd64/lib/libraylib.a" -lm \
    -o "$out/binding$suffix"

# Fail here, not in a benchmark: PufferLib trains its cartpole, and ppomq's venv steps it.
cd "$work" && "$VENV/bin/python" -c 'import pufferlib.pufferl, pufferlib.ocean.cartpole.cartpole'
cd - >/dev/null
PYTHONPATH=. "$PPOMQ_PY" -c '
import gymnasium as gym
import benchmarks.contenders.puffer_cartpole_env as shim
env = gym.make(shim.ENV_ID)
env.reset(seed=1)
env.step(0)
print("pufferlib 3.0.0 ready; cartpole binding for ppomq:", shim.binding_path())'
