# Test bases for `make e2e` only: stand-ins for the two external base images the release Dockerfile
# starts from, built on a local debootstrap import because no registry is reachable here. Tagged
# kit-test/*, labelled pcie-spec-kit.test-base=true, never pushed; the release Dockerfile is unchanged.
#
#   python      for BENCH_BASE_IMAGE (python:3.12-slim): Python, pip, no externally-managed guard
#   sglang-cpu  for SGLANG_IMAGE (lmsysorg/sglang:v0.5.23-cu130): SGLang 0.5.23 without its GPU
#               dependencies, CPU torch, and what the server stage expects to find (python3, pip,
#               curl, patch, git)
#
# The build context is tools/e2e/.cache/context (tools/e2e/bases.sh fills it): this machine's CA
# bundle, at a path of its own that apt's ca-certificates never regenerates, and a wheelhouse that
# the host's pip resolved (torch CPU, SGLang's light dependencies, sglang itself).
ARG DEBIAN_IMAGE=kit-test/debian:bookworm-minbase

FROM ${DEBIAN_IMAGE} AS debian
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY ca-bundle.crt /usr/local/share/kit-test/ca-bundle.crt
ENV PIP_CERT=/usr/local/share/kit-test/ca-bundle.crt \
    SSL_CERT_FILE=/usr/local/share/kit-test/ca-bundle.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DEBIAN_FRONTEND=noninteractive
# hadolint ignore=DL3008 # a throw-away test base on Debian bookworm; versions follow that release
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-pip python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
LABEL pcie-spec-kit.test-base=true

FROM debian AS python
# python:3.12-slim has no externally-managed guard; the bench stage installs with plain pip.
ENV PIP_BREAK_SYSTEM_PACKAGES=1
RUN ln -s /usr/bin/python3 /usr/local/bin/python

FROM debian AS sglang-cpu
ENV PIP_BREAK_SYSTEM_PACKAGES=1
# hadolint ignore=DL3008 # a throw-away test base on Debian bookworm; versions follow that release
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl patch git \
    && rm -rf /var/lib/apt/lists/*
ARG SGLANG_VERSION=0.5.23
# hadolint ignore=DL3013 # the wheelhouse holds exactly the versions the host resolved (tools/e2e/bases.sh)
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    python3 -m pip install --no-cache-dir --no-index --find-links /wheelhouse -r /wheelhouse/requirements.txt \
    && python3 -m pip install --no-cache-dir --no-index --find-links /wheelhouse --no-deps "sglang==${SGLANG_VERSION}" \
    && python3 -c 'import importlib.metadata as m, torch; print("sglang", m.version("sglang"), "torch", torch.__version__)'
