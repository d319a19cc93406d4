#!/usr/bin/env bash
# Run the all-reduce bench's non-NCCL adapters on a machine with 2+ GPUs and no internet (the GPU
# development machine), next to `nccl` in the same call, and keep everything under $OUT:
#
#   pcie-ipc   FlashInfer's PCIe-IPC all-reduce (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE=1), autotuned as
#              SGLang does at start-up
#   fused-ar   FlashInfer's TRT-LLM all-reduce fusion kernel (the `fused` profile), pattern kAllReduce
#   mscclpp    SGLang's PyMscclppCommunicator over the MSCCL++ that docker/build-mscclpp.sh builds here
#
# Carried (see docs/diagnose.md, "Running the adapters on GPUs"):
#   .whl/                      the kit's own dependencies the machine lacks (pydantic, ...)
#   .src/fi-carry/site         FlashInfer 0.7.2 trimmed to its comm kernels (tools/gpu/flashinfer_carry.sh)
#   .src/sglang-carry/         the SGLang modules the mscclpp adapter imports (tools/gpu/sglang_carry.sh)
#   .src/gpu-build/{mscclpp,deps,numa,wheels}   MSCCL++ sources (tools/gpu/gpu_build_sources.sh)
# Environment: NRANKS (default 2), ARCHS for MSCCL++ (default: the GPUs' own, e.g. 90 on H200),
# SIZES (default: the bench's verify shapes and 4K..1M), RUNS (default: each of pcie-ipc and fused-ar
# eager and in a CUDA graph, as "backend:mode" pairs), FLASHINFER_AUTOTUNE_DIR (default: per run).
# NVLink multicast stays off in every process; the fusion workspace is built with backend=trtllm
# (never mnnvl, which would create multicast objects).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}
NRANKS=${NRANKS:-2}
RUNS=${RUNS:-pcie-ipc:eager pcie-ipc:graph fused-ar:eager fused-ar:graph}
SIZES=${SIZES:-}
WORK=$(mktemp -d)
mkdir -p "$OUT"
ARCHS=${ARCHS:-$(python3 -c 'import torch; m, n = torch.cuda.get_device_capability(0); print(f"{m}{n}")')}
export FLASHINFER_WORKSPACE_BASE="$WORK/flashinfer" FLASHINFER_CUDA_ARCH_LIST="${ARCHS:0:-1}.${ARCHS: -1}"
# trtllm_allreduce_fusion.cu alone takes minutes in one nvcc; split its device compilation over the cores.
export FLASHINFER_EXTRA_CUDAFLAGS=${FLASHINFER_EXTRA_CUDAFLAGS:---split-compile=0}
export HOME="$WORK/home"
mkdir -p "$HOME" "$FLASHINFER_WORKSPACE_BASE"

site="$WORK/site"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
  .whl/*.whl .src/sglang-carry/wheels/*.whl
export PYTHONPATH="$site:$PWD/.src/fi-carry/site:$PWD/.src/sglang-carry/site:$PWD"
size_args=()
[ -n "$SIZES" ] && size_args=(--sizes "$SIZES")

keep() { # the runs so far (JSON, CSV, rank logs) in one archive: the machine returns few files
  local runs
  mapfile -t runs < <(cd "$WORK" && find . -maxdepth 1 \( -name '*-eager' -o -name '*-graph' \) | sort)
  tar -czf "$OUT/adapters.tgz" -C "$WORK" --exclude='*.png' "${runs[@]}"
}

bench() { # bench LABEL ARGS...: one `bench allreduce` run, its table on stdout, its folder in $WORK/LABEL
  local label=$1
  shift
  echo "=== bench allreduce $* ($label)"
  local t0
  t0=$(date +%s)
  python3 -m bench allreduce --nranks "$NRANKS" "${size_args[@]}" --timeout-s 900 --out "$WORK/$label" "$@"
  echo "exit=$? in $(($(date +%s) - t0)) s"
  keep
}

{
  echo "=== machine"
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  nvidia-smi topo -m 2>&1 | head -5
  nvcc --version | tail -1
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__, "| NCCL", ".".join(map(str, torch.cuda.nccl.version())))'
  python3 -c 'import flashinfer; print("flashinfer", flashinfer.__version__, flashinfer.__file__)' 2>&1 | tail -1
  echo "archs: $ARCHS; FLASHINFER_CUDA_ARCH_LIST=$FLASHINFER_CUDA_ARCH_LIST; ranks: $NRANKS"
  env | grep -E '^(NCCL_|TORCH_SYMM|NVSHMEM_)' | sort

  echo "=== MSCCL++ for sm_$ARCHS, in the background"
  (
    STAGES=mscclpp ARCHS=$ARCHS JOBS=$(($(nproc) / 2)) OUT="$OUT/mscclpp-build" WHEEL_DEST="$WORK/mscclpp-wheel" \
      bash tools/gpu/build_gpu_stages.sh >/dev/null 2>&1
  ) &
  build_pid=$!

  echo "=== FlashInfer JIT: the two comm modules, built once before the ranks load them"
  t0=$(date +%s)
  python3 - <<'EOF'
from flashinfer.jit.comm import gen_pcie_ipc_comm_module, gen_trtllm_comm_module

for gen in (gen_pcie_ipc_comm_module, gen_trtllm_comm_module):
    spec = gen()
    spec.build_and_load()
    print(f"built {spec.name}")
EOF
  echo "jit exit=$? in $(($(date +%s) - t0)) s"

  for run in $RUNS; do
    case ${run#*:} in
      eager) bench "${run%:*}-eager" --backends "nccl,${run%:*}" ;;
      graph) bench "${run%:*}-graph" --backends "nccl,${run%:*}" --graph ;;
      *) echo "RUNS: '$run' is not backend:eager or backend:graph" ;;
    esac
  done

  echo "=== mscclpp: waiting for the build"
  wait "$build_pid"
  tail -4 "$OUT/mscclpp-build/build-gpu-stages.log"
  if ls "$WORK"/mscclpp-wheel/mscclpp-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$WORK"/mscclpp-wheel/mscclpp-*.whl
    python3 -c 'import mscclpp; print("mscclpp", mscclpp.__version__, mscclpp.__file__)'
    echo "=== the image's import check (docker/check-mscclpp-import.sh), with the driver and with the stub"
    find / -xdev -path '*/stubs/libcuda.so' 2>/dev/null | head -3
    for so in "$site"/mscclpp/_mscclpp*.so "$site"/mscclpp/lib/libmscclpp.so.0; do
      echo "$(basename "$so"): $(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
    done
    bash docker/check-mscclpp-import.sh
    echo "import check exit=$?"
    CHECK_WITH_STUB=1 CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")} bash docker/check-mscclpp-import.sh
    echo "import check with the stub exit=$?"
    # the wheel comes back when it fits, for the same check on a machine without any driver
    find "$WORK"/mscclpp-wheel -name 'mscclpp-*.whl' -size -16M -exec cp {} "$OUT"/ \;
    bench mscclpp-graph --backends mscclpp --graph
  else
    echo "no MSCCL++ wheel: see mscclpp-build/"
  fi
} 2>&1 | tee "$OUT/run-adapters.log"

