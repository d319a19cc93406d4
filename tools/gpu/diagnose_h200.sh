#!/usr/bin/env bash
# Check the CUDA paths of `bench allreduce` and `bench trace` on one CUDA machine (an H200 during
# development), writing everything to $OUT (default ./gpu-out):
#   (a) nccl at world size 1, eager and CUDA-graph: the CUDA/graph path runs and wrong=0
#       (NCCL with one rank launches no kernel: the timings are 1-rank timings, not link latency);
#   (b) the nccl-tuned profile's environment applied in the rank, seen by NCCL (NCCL_DEBUG=INFO);
#   (c) more ranks than GPUs is refused with exit 2 before any rank starts;
#   (d) a real torch-profiler CUDA trace of a small model step with NCCL all-reduces, analysed;
#   (e) the gloo harness on 2 CPU ranks with this machine's torch.
# Uses the machine's own python3/torch. pydantic (for --profile and --host-facts) comes from wheels
# in .whl/ when present. NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends).
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}
WORK=$(mktemp -d)
mkdir -p "$OUT"
LOG="$OUT/diagnose.log"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
AR="python3 -m bench.allreduce.cli"
step() { echo; echo "=== $* ==="; }

{
  step "machine"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 - <<'EOF'
import sys, torch
print("python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA", torch.version.cuda,
      "| NCCL", ".".join(map(str, torch.cuda.nccl.version())), "|", torch.cuda.get_device_name(0),
      "SM", "%d.%d" % torch.cuda.get_device_capability(0), "| GPUs", torch.cuda.device_count())
EOF
  echo '{"gpus":[{"index":0,"name":"NVIDIA H200","compute_cap":"9.0"}],"interconnect":"nvlink"}' > "$WORK/facts.json"

  step "(a1) nccl, 1 rank, eager, default sizes"
  $AR --backends nccl --nranks 1 --host-facts "$WORK/facts.json" --out "$WORK/a_eager"; echo "exit=$?"
  step "(a2) nccl, 1 rank, CUDA graph, default sizes"
  $AR --backends nccl --nranks 1 --graph --host-facts "$WORK/facts.json" --out "$WORK/a_graph"; echo "exit=$?"

  step "(b) nccl-tuned profile env, NCCL_DEBUG=INFO"
  python3 -c "from bench.allreduce.cli import _profile_env; print(_profile_env('nccl-tuned'))"
  NCCL_DEBUG=INFO $AR --backends nccl --nranks 1 --graph --profile nccl-tuned --sizes 43008,57344 --iters 100 \
    --out "$WORK/b_profile"; echo "exit=$?"
  grep -h "set by environment\|NCCL version" "$WORK/b_profile/logs/nccl-rank0.log" | tee "$OUT/nccl_env_lines.txt"

  step "(c) more ranks than GPUs"
  $AR --backends nccl --nranks 2 --out "$WORK/c_refused"; echo "exit=$? (want 2); logs dir exists: $(test -d "$WORK/c_refused/logs" && echo yes || echo no)"

  step "(d) real CUDA trace of a model step with NCCL all-reduces"
  python3 tools/gpu/capture_trace.py "$OUT/h200_tp1_nccl_step.json.gz"
  python3 -m bench.trace.cli "$OUT/h200_tp1_nccl_step.json.gz"; echo "exit=$?"
  python3 -m bench.trace.cli "$OUT/h200_tp1_nccl_step.json.gz" --json > "$WORK/trace_analysis.json"

  step "(e) gloo harness, 2 CPU ranks, this machine's torch"
  $AR --backends gloo --nranks 2 --sizes 4K,43008 --iters 20 --out "$WORK/e_gloo"; echo "exit=$?"
} 2>&1 | tee "$LOG"

cp "$WORK/a_graph/allreduce.png" "$OUT/allreduce_graph.png" 2>/dev/null
tar czf "$OUT/results.tgz" -C "$WORK" .
echo "results in $OUT"
