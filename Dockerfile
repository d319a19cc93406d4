# syntax=docker/dockerfile:1.7
#
# Targets:
#   server  SGLang 0.5.23 (CUDA 13) + the kit's patches (verified) + MSCCL++ + DeepEP with SM120
#           kernels + nccl-tests' all_reduce_perf + supervisor + the kit. Entry point: `launcher serve`.
#   bench   slim Python image with the kit, for `bench` against a running server.
#
# Build with BuildKit (`make build` does this): cache mounts keep pip and CMake work between builds.
# The heavy builds (MSCCL++, DeepEP) are separate stages that see neither patches/ nor the kit,
# so editing either never rebuilds them; inside the final stage patches/ is copied before the kit.

# SGLang's release tags for the CUDA 13.0 build are v<version>-cu130 (its tag_config in
# .github/workflows/_docker-build-and-publish.yml callers; docs/evidence.md, "The base image tag"), but
# this tag itself was not seen in the registry: `make build` and `make up` check it first and stop
# with one line naming SGLANG_IMAGE when docker has it neither locally nor in its registry.
# Pin it by digest once pulled: SGLANG_IMAGE=lmsysorg/sglang:v0.5.23-cu130@sha256:<digest>
ARG SGLANG_IMAGE=lmsysorg/sglang:v0.5.23-cu130
# Pin by digest as well for byte-identical bench images: python:3.12-slim@sha256:<digest>
ARG BENCH_BASE_IMAGE=python:3.12-slim


# ---------------------------------------------------------------------------------------------
# MSCCL++ from source. SGLang 0.5.23 imports the external `mscclpp` package (mscclpp.ext,
# mscclpp.default_algos), which it does not declare as a dependency; v0.9.0 is the first tag with
# both modules. docker/build-mscclpp.sh builds a wheel for SM 9.0, 10.0 and 12.0 without a GPU; the
# GPU development machine runs the same script.
FROM ${SGLANG_IMAGE} AS mscclpp
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# hadolint ignore=DL3008 # package versions follow the distribution release fixed by SGLANG_IMAGE; pin that by digest
RUN apt-get update \
    && apt-get install -y --no-install-recommends git libnuma-dev python3-dev \
    && rm -rf /var/lib/apt/lists/*
ARG MSCCLPP_REPO=https://github.com/microsoft/mscclpp.git
# A release tag (a tag or branch name: the clone is shallow). Commit 6231b4f3 is v0.10.0.
ARG MSCCLPP_REF=v0.10.0
ARG MSCCLPP_CUDA_ARCHS="90;100;120"
# KIT_GPU_STAGES=skip exists for `make e2e` alone (a CPU test base has no CUDA toolkit): the GPU
# stages then build nothing and the image is labelled so. `make build` and compose never pass it.
ARG KIT_GPU_STAGES=build
COPY docker/build-mscclpp.sh /usr/local/bin/build-mscclpp
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=cache,target=/var/cache/mscclpp-build \
    if [ "${KIT_GPU_STAGES}" = skip ]; then mkdir -p /wheels && echo "KIT_GPU_STAGES=skip: MSCCL++ not built"; exit 0; fi \
    && git clone --quiet --depth 1 --branch "${MSCCLPP_REF}" "${MSCCLPP_REPO}" /src/mscclpp \
    && MSCCLPP_CUDA_ARCHS="${MSCCLPP_CUDA_ARCHS}" MSCCLPP_BUILD_DIR=/var/cache/mscclpp-build \
        build-mscclpp /src/mscclpp /wheels


# ---------------------------------------------------------------------------------------------
# DeepEP with SM120 kernels. The shipped sgl-deep-ep is kept when `cuobjdump --list-elf` finds
# sm_120 code in it; otherwise DeepEP is built for 12.0 at DEEPEP_REF. /wheels stays empty when
# nothing needed building.
FROM ${SGLANG_IMAGE} AS deepep
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# hadolint ignore=DL3008 # package versions follow the distribution release fixed by SGLANG_IMAGE; pin that by digest
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*
ARG DEEPEP_REPO=https://github.com/deepseek-ai/DeepEP.git
# deepseek-ai/DeepEP main as of 2026-07-14 (Buffer and ElasticBuffer, as SGLang 0.5.23 imports them).
ARG DEEPEP_REF=dd758caf451848bd150e1046af3d0a73e5fff38d
# "ensure" (build when sm_120 is missing, fail if that does not yield it) or "skip".
ARG DEEPEP_SM120=ensure
COPY docker/ensure-deepep-sm120.sh /usr/local/bin/ensure-deepep-sm120
RUN --mount=type=cache,target=/root/.cache/pip \
    mkdir -p /wheels \
    && DEEPEP_REPO="${DEEPEP_REPO}" DEEPEP_REF="${DEEPEP_REF}" DEEPEP_SM120="${DEEPEP_SM120}" \
        ensure-deepep-sm120 build-if-missing /wheels


# ---------------------------------------------------------------------------------------------
# nccl-tests' all_reduce_perf, built by docker/build-nccl-tests.sh against the NCCL wheel the SGLang
# image's torch loads, so `make allreduce` (bench allreduce --with-nccl-tests) compares the kit with
# nccl-tests on one library. The development GPU machine runs the same script
# (tools/gpu/calibrate_allreduce.sh).
FROM ${SGLANG_IMAGE} AS nccl-tests
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008 # package versions follow the distribution release fixed by SGLANG_IMAGE; pin that by digest
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*
ARG NCCL_TESTS_REPO=https://github.com/NVIDIA/nccl-tests.git
# A release tag (the clone is shallow). Commit a0b82b2260cf5152b9f8c061bbf7eaf0ba096432 is v2.19.6.
ARG NCCL_TESTS_REF=v2.19.6
ARG NCCL_TESTS_ARCHS="90;100;120"
ARG KIT_GPU_STAGES=build
COPY docker/build-nccl-tests.sh /usr/local/bin/build-nccl-tests
RUN if [ "${KIT_GPU_STAGES}" = skip ]; then mkdir -p /opt/nccl-tests/bin && echo "KIT_GPU_STAGES=skip: nccl-tests not built"; exit 0; fi \
    && git clone --quiet --depth 1 --branch "${NCCL_TESTS_REF}" "${NCCL_TESTS_REPO}" /src/nccl-tests \
    && NCCL_TESTS_ARCHS="${NCCL_TESTS_ARCHS}" build-nccl-tests /src/nccl-tests /opt/nccl-tests \
    && /opt/nccl-tests/bin/all_reduce_perf -h > /dev/null


# ---------------------------------------------------------------------------------------------
FROM ${SGLANG_IMAGE} AS server
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /opt/kit

# The base must really be the SGLang version the patch set and the profiles were written for.
ARG SGLANG_VERSION=0.5.23
RUN found="$(python3 -c 'import importlib.metadata as m; print(m.version("sglang"))')" \
    && if [ "${found}" != "${SGLANG_VERSION}" ]; then \
        echo "SGLANG_IMAGE has sglang ${found}, expected ${SGLANG_VERSION} (see docs/deployment.md, upgrading SGLang)" >&2; \
        exit 1; \
    fi

# curl for the health check.
# hadolint ignore=DL3008 # package versions follow the distribution release fixed by SGLANG_IMAGE; pin that by digest
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl \
    && rm -rf /var/lib/apt/lists/*

# The kit's runtime dependencies (supervisor, pydantic, aiohttp, ...), read from pyproject.toml so
# the version ranges live in one place. Installed before any kit code so code edits reuse this layer.
COPY pyproject.toml /opt/kit/pyproject.toml
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))' \
        > /tmp/kit-requirements.txt \
    && python3 -m pip install -r /tmp/kit-requirements.txt \
    && rm /tmp/kit-requirements.txt

# NCCL over the base's, one exact release: SGLang 0.5.23's torch 2.14.1 pins nvidia-nccl-cu13 2.30.7.
# nccl#2418 (2x RTX PRO 6000, PCIe only): 2.26.2 hits an illegal memory access in all-reduces of
# 512 KiB or more (prefill all-reduces are that large) and 2.31.2 passes the same test; 2.30.7 was not
# tested there. So the image pins 2.31.2, the release that report shows passing; another one only when
# named (NCCL_WHEEL=nvidia-nccl-cu13==X.Y.Z). CUDA torch loads the wheel's libnccl.so.2 through its
# RPATH, so replacing the wheel replaces what torch runs (docs/evidence/nccl-pin/); the last step below
# proves it from the library the process maps, since torch.cuda.nccl.version() reports the NCCL torch
# was compiled against. pip warns that torch wants 2.30.7; that is expected.
# NCCL_WHEEL=base keeps the base image's NCCL.
ARG NCCL_WHEEL="nvidia-nccl-cu13==2.31.2"
ARG NCCL_MIN=2.31.2
# hadolint ignore=DL3013 # the version is the NCCL_WHEEL argument
RUN --mount=type=cache,target=/root/.cache/pip \
    if [ "${NCCL_WHEEL}" = base ]; then echo "NCCL_WHEEL=base: the base image's NCCL stays"; exit 0; fi \
    && python3 -m pip install "${NCCL_WHEEL}"

# MSCCL++ (built above) with cupy, which `import mscclpp` needs (mscclpp/_core/algorithm.py) and
# which neither sglang nor flashinfer declares: without it SGLang logs "PyMscclpp is unavailable"
# and runs NCCL. The build fails unless MSCCL++ imports as SGLang imports it; with no GPU driver
# at build time, the CUDA toolkit's stub libcuda stands in (docker/check-mscclpp-import.sh).
ARG CUPY_SPEC="cupy-cuda13x>=14.2,<15"
ARG KIT_GPU_STAGES=build
COPY docker/check-mscclpp-import.sh /usr/local/bin/check-mscclpp-import
# hadolint ignore=DL3013 # the MSCCL++ wheel is the one built above and cupy's range is the CUPY_SPEC argument
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,from=mscclpp,source=/wheels,target=/tmp/mscclpp-wheels \
    if [ "${KIT_GPU_STAGES}" = skip ]; then echo "KIT_GPU_STAGES=skip: no MSCCL++ in this image"; exit 0; fi \
    && python3 -m pip install /tmp/mscclpp-wheels/mscclpp-*.whl "${CUPY_SPEC}" \
    && check-mscclpp-import

# nccl-tests (built above) for `bench allreduce --with-nccl-tests`.
COPY --from=nccl-tests /opt/nccl-tests /opt/nccl-tests

# DeepEP: install the SM120 build if one was made, then require sm_120 code either way.
ARG DEEPEP_SM120=ensure
COPY docker/ensure-deepep-sm120.sh /usr/local/bin/ensure-deepep-sm120
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=bind,from=deepep,source=/wheels,target=/tmp/deepep-wheels \
    DEEPEP_SM120="${DEEPEP_SM120}" ensure-deepep-sm120 install /tmp/deepep-wheels

# The kit's patches against SGLang, applied and then verified: the build fails when the patch set
# does not match the installed SGLang, so no image silently lacks a patch. apply.py records what it
# applied in <site-packages>/sglang/kit_patches.json.
ARG KIT_PATCHES_SHA256=unknown
COPY docker/patch-set-hash.sh /usr/local/bin/kit-patch-set-hash
COPY patches/ /opt/kit/patches/
RUN python3 patches/apply.py \
    && python3 patches/apply.py --check \
    && actual="$(kit-patch-set-hash /opt/kit/patches)" \
    && if [ "${KIT_PATCHES_SHA256}" != unknown ] && [ "${KIT_PATCHES_SHA256}" != "${actual}" ]; then \
        echo "KIT_PATCHES_SHA256=${KIT_PATCHES_SHA256} does not match patches/ in the build context (${actual})" >&2; \
        exit 1; \
    fi \
    && echo "${actual}" > /opt/kit/patches.sha256

# FlashInfer's JIT cache and autotune results go to a volume (docker-compose.yml). Cubins the base
# image may have downloaded are copied there, so a fresh volume starts with them.
RUN mkdir -p /var/cache/flashinfer/.cache /var/cache/flashinfer/autotune /var/cache/flashinfer/autotune-cache \
        /var/lib/kit /results \
    && if [ -d /root/.cache/flashinfer ]; then cp -a /root/.cache/flashinfer /var/cache/flashinfer/.cache/; fi

# The kit itself, last: editing it rebuilds only the layers below. The wheel carries the built-in
# profiles and sitecustomize; test support (testsupport/: the SIMULATED stand-in) is never copied
# (.dockerignore) and never packaged.
COPY . /opt/kit/
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m pip install --no-deps /opt/kit \
    && python3 -m compileall -q /opt/kit/sitecustomize \
    && launcher --help > /dev/null \
    && if [ "${NCCL_WHEEL}" = base ]; then python3 -m launcher.doctor.nccl; \
       else python3 -m launcher.doctor.nccl --require "${NCCL_MIN}" --pinned "${NCCL_WHEEL}"; fi

# sitecustomize first on the path, so every Python process (TP workers included) applies the active
# profile's environment before anything else imports.
ENV PYTHONPATH=/opt/kit/sitecustomize${PYTHONPATH:+:${PYTHONPATH}} \
    KIT_SITECUSTOMIZE_DIR=/opt/kit/sitecustomize \
    KIT_BUILTIN_PROFILES_DIR=/opt/kit/profiles \
    KIT_STATE_DIR=/var/lib/kit \
    KIT_CONTROL_HOST=0.0.0.0 \
    KIT_CONTROL_PORT=30100 \
    KIT_NCCL_TESTS_BIN=/opt/nccl-tests/bin/all_reduce_perf \
    FLASHINFER_WORKSPACE_BASE=/var/cache/flashinfer \
    FLASHINFER_AUTOTUNE_DIR=/var/cache/flashinfer/autotune \
    FLASHINFER_AUTOTUNE_CACHE_DIR=/var/cache/flashinfer/autotune-cache

ARG SGLANG_IMAGE
ARG MSCCLPP_REF=v0.10.0
ARG DEEPEP_REF=dd758caf451848bd150e1046af3d0a73e5fff38d
ARG KIT_VERSION=unknown
ARG KIT_REVISION=unknown
ARG KIT_CREATED=unknown
LABEL org.opencontainers.image.title="pcie-spec-kit server" \
      org.opencontainers.image.description="SGLang ${SGLANG_VERSION} with the kit's profiles, patches and control API" \
      org.opencontainers.image.version="${KIT_VERSION}" \
      org.opencontainers.image.revision="${KIT_REVISION}" \
      org.opencontainers.image.created="${KIT_CREATED}" \
      org.opencontainers.image.base.name="${SGLANG_IMAGE}" \
      pcie-spec-kit.sglang.version="${SGLANG_VERSION}" \
      pcie-spec-kit.patches.sha256="${KIT_PATCHES_SHA256}" \
      pcie-spec-kit.mscclpp.ref="${MSCCLPP_REF}" \
      pcie-spec-kit.deepep.ref="${DEEPEP_REF}" \
      pcie-spec-kit.deepep.sm120="${DEEPEP_SM120}" \
      pcie-spec-kit.gpu-stages="${KIT_GPU_STAGES}" \
      pcie-spec-kit.nccl-wheel="${NCCL_WHEEL}"

EXPOSE 30000 30100
# /health answers 503 until the model is loaded, then generates one token; a 1T-parameter load
# with CUDA-graph capture takes many minutes, hence the long start period.
HEALTHCHECK --interval=30s --timeout=30s --start-period=1800s --retries=5 \
    CMD ["curl", "-fsS", "--max-time", "25", "http://127.0.0.1:30000/health"]
ENTRYPOINT ["launcher", "serve"]


# ---------------------------------------------------------------------------------------------
FROM ${BENCH_BASE_IMAGE} AS bench
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 MPLCONFIGDIR=/tmp/matplotlib
WORKDIR /opt/kit
COPY . /opt/kit/
# The energy extra: nvidia-ml-py, so the bench samples GPU power where NVML answers (docs/bench.md, Energy).
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m pip install "/opt/kit[energy]" \
    && python3 -c 'import pynvml' \
    && bench --help > /dev/null
ARG KIT_VERSION=unknown
ARG KIT_REVISION=unknown
ARG KIT_CREATED=unknown
LABEL org.opencontainers.image.title="pcie-spec-kit bench" \
      org.opencontainers.image.description="End-to-end and all-reduce benchmarks for the kit's SGLang server" \
      org.opencontainers.image.version="${KIT_VERSION}" \
      org.opencontainers.image.revision="${KIT_REVISION}" \
      org.opencontainers.image.created="${KIT_CREATED}"
# `bench run` writes to ./results by default: from / that is the /results volume.
WORKDIR /
ENTRYPOINT ["bench"]
