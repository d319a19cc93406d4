#!/usr/bin/env bash
# Does NCCL_GRAPH_MIXING_SUPPORT cost an SGLang-shaped decode graph, and is 0 safe there? On a machine
# with 2 GPUs (tools/gpu/graph_mixing.py says what runs), bounded to about 8 minutes, writing to $OUT
# (default ./gpu-out): graph_mixing.json, graph_mixing.log (JSON lines, then the verdict) and logs.tgz
# (each rank's log, NCCL_DEBUG_SUBSYS=ENV lines included). The machine returns few files: three here.
# Environment: NRANKS (2), ROUNDS (2: mixing 1 0 1 0), SAFETY_STEPS (10000), TOTAL_S (480), EXTRA (more flags).
# Uses the machine's own python3/torch. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends),
# here and, whatever the caller set, in every rank (graph_mixing.py SAFETY_ENV).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}
WORK=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
{
  echo "=== machine"
  nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv
  nvidia-smi topo -m
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA", torch.version.cuda, "| NCCL", ".".join(map(str, torch.cuda.nccl.version())), "| GPUs", torch.cuda.device_count())'
  env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)_' | sort
  echo "=== graph_mixing.py"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  timeout -k 10 "$(( ${TOTAL_S:-480} + 45 ))" python3 tools/gpu/graph_mixing.py --out "$WORK" \
    --nranks "${NRANKS:-2}" --rounds "${ROUNDS:-2}" --safety-steps "${SAFETY_STEPS:-10000}" \
    --total-timeout-s "${TOTAL_S:-480}" ${EXTRA:-}
  code=$?
  echo "exit=$code in $(( $(date +%s) - t0 )) s"
  [ "$code" = 124 ] && echo '{"event": "hang", "case": "run", "reason": "timeout(1) stopped graph_mixing.py"}'
} 2>&1 | tee "$OUT/graph_mixing.log"
cp "$WORK/graph_mixing.json" "$OUT/" 2>/dev/null
tar -czf "$OUT/logs.tgz" -C "$WORK" logs 2>/dev/null
echo "results in $OUT"
