#!/usr/bin/env bash
# Run the image's two GPU build scripts, exactly as the Dockerfile runs them, on a machine with
# nvcc and no internet (the GPU development machine), and check the results with
# `cuobjdump --list-elf`. Everything lands in $OUT (default ./gpu-out).
#
#   docker/build-mscclpp.sh          MSCCL++ at the Dockerfile's pin, for $ARCHS (default 120)
#   docker/ensure-deepep-sm120.sh    build-if-missing: DeepEP at the Dockerfile's pin, for 12.0
#
# STAGES (default "mscclpp deepep") picks which to build; WHEEL_DEST, if set, receives the wheels.
#
# Sources come from $GPU_SRC (default .src/gpu-build), assembled on a machine with the mirrors by
# tools/gpu/gpu_build_sources.sh:
#   mscclpp/            the MSCCL++ tree at the pin (git archive)
#   deps/{json,nanobind,dlpack}   what MSCCL++'s CMake would FetchContent from GitHub
#   deepep.git, fmt.git           bare repos holding DeepEP's pin and its fmt submodule commit
#   numa/root           libnuma headers and library (MSCCL++ requires NUMA)
#   wheels/             setuptools-scm (MSCCL++'s version provider), absent on the machine
#   nccl/include        NCCL 2.30.4's headers: DeepEP's pin needs them, the machine has 2.28.9. The
#                       extension is linked against the machine's 2.28.9 libnccl.so.2 only to finish
#                       the build (a shared object may leave symbols unresolved); it is never loaded.
# Offline, the builds are pointed at those copies through standard knobs only (CMAKE_ARGS'
# FETCHCONTENT_SOURCE_DIR_*, git's url.insteadOf): the two scripts run unchanged.
# NVLink multicast stays off in every process.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}
GPU_SRC=$(cd "${GPU_SRC:-.src/gpu-build}" && pwd)
ARCHS=${ARCHS:-120}
STAGES=${STAGES:-mscclpp deepep}
for stage in $STAGES; do
  case $stage in
    mscclpp | deepep) ;;
    *) echo "STAGES: unknown stage '$stage' (known: mscclpp deepep)" >&2; exit 2 ;;
  esac
done
wants() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
JOBS=${JOBS:-$(nproc)}
WORK=$(mktemp -d)
mkdir -p "$OUT"
dockerfile_arg() { sed -n "s/^ARG $1=//p" Dockerfile | head -1; }
MSCCLPP_REF=$(dockerfile_arg MSCCLPP_REF)
DEEPEP_REF=$(dockerfile_arg DEEPEP_REF)

python3 -m pip install -q --no-index --no-deps --no-compile --target "$WORK/site" "$GPU_SRC"/wheels/*.whl
export PYTHONPATH="$WORK/site${PYTHONPATH:+:$PYTHONPATH}"
# A private git config: DeepEP's fmt submodule URL resolves to the carried repo.
export HOME="$WORK/home"
mkdir -p "$HOME"
git config --global url."file://$GPU_SRC/fmt.git".insteadOf https://github.com/fmtlib/fmt.git
git config --global protocol.file.allow always

listing() { # listing NAME FILE...: cuobjdump --list-elf of each file, and the verdict of the decide rule
  local name=$1 so
  shift
  for so in "$@"; do
    echo "## $(basename "$so")"
    cuobjdump --list-elf "$so" 2>&1 || true
  done >"$OUT/$name.list-elf.txt"
  bash docker/ensure-deepep-sm120.sh decide <"$OUT/$name.list-elf.txt"
}

{
  echo "=== machine"
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  nvcc --version | tail -2
  cmake --version | head -1
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA", torch.version.cuda)'
  echo "cores: $(nproc); jobs: $JOBS; MSCCL++ $MSCCLPP_REF; DeepEP $DEEPEP_REF; archs $ARCHS"

  mscclpp_pid=
  if wants mscclpp; then
  echo "=== MSCCL++ (docker/build-mscclpp.sh), in the background"
  (
    export MSCCLPP_BUILD_ISOLATION=off SETUPTOOLS_SCM_PRETEND_VERSION=${MSCCLPP_REF#v}
    export CMAKE_BUILD_PARALLEL_LEVEL=$((JOBS / 2))
    export CMAKE_ARGS="-DFETCHCONTENT_FULLY_DISCONNECTED=ON -DFETCHCONTENT_SOURCE_DIR_JSON=$GPU_SRC/deps/json -DFETCHCONTENT_SOURCE_DIR_NANOBIND=$GPU_SRC/deps/nanobind -DFETCHCONTENT_SOURCE_DIR_DLPACK=$GPU_SRC/deps/dlpack -DNUMA_ROOT_DIR=$GPU_SRC/numa/root/usr -DNUMA_LIB_DIR=$GPU_SRC/numa/root/usr/lib/x86_64-linux-gnu"
    t0=$(date +%s)
    MSCCLPP_CUDA_ARCHS=$ARCHS bash docker/build-mscclpp.sh "$GPU_SRC/mscclpp" "$WORK/mscclpp-wheels"
    echo "mscclpp build exit=$? in $(($(date +%s) - t0)) s"
  ) >"$OUT/mscclpp-build.log" 2>&1 &
  mscclpp_pid=$!
  fi

  if wants deepep; then
  echo "=== DeepEP (docker/ensure-deepep-sm120.sh build-if-missing)"
  if [ -d "$GPU_SRC/nccl/include" ]; then
    machine_nccl=$(python3 -c 'import importlib.util as u; print(list(u.find_spec("nvidia.nccl").submodule_search_locations)[0])')
    export EP_NCCL_ROOT_DIR="$WORK/nccl-headers"
    mkdir -p "$EP_NCCL_ROOT_DIR" && cp -r "$GPU_SRC/nccl/include" "$EP_NCCL_ROOT_DIR/" && ln -s "$machine_nccl/lib" "$EP_NCCL_ROOT_DIR/lib"
    echo "EP_NCCL_ROOT_DIR: headers $(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{printf "%s.", $3}' "$EP_NCCL_ROOT_DIR/include/nccl.h"), lib $(ls "$machine_nccl"/lib)"
  fi
  t0=$(date +%s)
  DEEPEP_REPO="file://$GPU_SRC/deepep.git" DEEPEP_REF=$DEEPEP_REF DEEPEP_ARCH=12.0 MAX_JOBS=$((JOBS / 2)) \
    DEEPEP_SRC="$WORK/DeepEP" bash docker/ensure-deepep-sm120.sh build-if-missing "$WORK/deepep-wheels" \
    >"$OUT/deepep-build.log" 2>&1
  echo "deepep build-if-missing exit=$? in $(($(date +%s) - t0)) s"
  tail -3 "$OUT/deepep-build.log"
  fi
  if [ -n "$mscclpp_pid" ]; then
    wait "$mscclpp_pid"
    tail -3 "$OUT/mscclpp-build.log"
  fi

  echo "=== cuobjdump --list-elf"
  for name in $STAGES; do
    wheel=$(find "$WORK/$name-wheels" -name '*.whl' -print -quit 2>/dev/null)
    if [ -z "$wheel" ]; then
      echo "$name: no wheel"
      continue
    fi
    echo "$name wheel: $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"
    mkdir -p "$WORK/$name-unpacked"
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$wheel" "$WORK/$name-unpacked"
    mapfile -t sos < <(find "$WORK/$name-unpacked" -name '*.so*' -type f | sort)
    printf '%s\n' "${sos[@]#"$WORK/$name-unpacked/"}"
    echo "$name: $(listing "$name" "${sos[@]}")"
    if [ -n "${WHEEL_DEST:-}" ]; then
      mkdir -p "$WHEEL_DEST" && cp "$wheel" "$WHEEL_DEST/"
    fi
  done
  if wants deepep; then
    echo "=== wheel check by the image's own rule (ensure-deepep-sm120.sh check)"
    mapfile -t deepep_sos < <(find "$WORK/deepep-unpacked" -name '*.so' -type f 2>/dev/null)
    bash docker/ensure-deepep-sm120.sh check "${deepep_sos[@]}" 2>&1
    echo "check exit=$?"
  fi
} 2>&1 | tee "$OUT/build-gpu-stages.log"
logs=()
for stage in $STAGES; do logs+=("$stage-build.log"); done
tar -czf "$OUT/build-logs.tgz" -C "$OUT" "${logs[@]}" 2>/dev/null
