# corral's agent image: the CUDA runtime, Python 3.11 and this corral; the entrypoint is the
# node bootstrap (src/corral/providers/common/node_bootstrap.sh), which runs the agent from the
# container's environment (CORRAL_PLAN_GZ, CORRAL_AGENT_TOKEN: what a container provider sets).
#
#   docker build -t corral-agent .
#
# A controller whose corral differs from the image's (another version) has its own installed by
# the bootstrap at start: the image is a cache, never a second source of truth.

# --- the wheel of this checkout -------------------------------------------------------------
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- the image ------------------------------------------------------------------------------
FROM nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04

ARG DEBIAN_FRONTEND=noninteractive
SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# Python 3.11 (Ubuntu 22.04 ships 3.10), git for code from a repository, CA certificates
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates gpg-agent software-properties-common \
    && add-apt-repository -y ppa:deadsnakes/ppa \
    && apt-get update \
    && apt-get install -y --no-install-recommends git python3.11 python3.11-venv \
    && apt-get purge -y software-properties-common \
    && apt-get autoremove -y \
    && rm -rf /var/lib/apt/lists/*

ENV CORRAL_NODE_HOME=/opt/corral \
    CORRAL_PYTHON=/opt/corral/venv/bin/python \
    PATH=/opt/corral/venv/bin:$PATH \
    PYTHONUNBUFFERED=1

# the extras installed with corral: a pool worker (deploy/compose.yaml) adds queue,postgres
ARG CORRAL_EXTRAS=aws
COPY --from=wheel /wheels /tmp/wheels
RUN python3.11 -m venv /opt/corral/venv \
    && wheel_file="$(ls /tmp/wheels/corral-*.whl)" \
    && /opt/corral/venv/bin/pip install --no-cache-dir "${wheel_file}[${CORRAL_EXTRAS}]" \
    && rm -rf /tmp/wheels

COPY src/corral/providers/common/node_bootstrap.sh /usr/local/bin/corral-node-bootstrap

# the agent's API (a provider maps or proxies this one port)
EXPOSE 8750
WORKDIR /opt/corral
ENTRYPOINT ["/usr/local/bin/corral-node-bootstrap"]
CMD ["-m", "corral.agent.boot"]
