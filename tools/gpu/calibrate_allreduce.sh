#!/usr/bin/env bash
# Calibrate `bench allreduce` against nccl-tests on a machine with 2+ GPUs (2 H200s during
# development), in one run of both tools, writing everything to $OUT (default ./gpu-out):
#   (1) build nccl-tests' all_reduce_perf with docker/build-nccl-tests.sh (the Dockerfile's script)
#       from an nccl-tests checkout in $NCCL_TESTS_SRC (default .src/nccl-tests);
#   (2) baseline and nccl-tuned, eager and CUDA graph, default sizes, with --with-nccl-tests;
#   (3) baseline and nccl-tuned interleaved (A B A B), eager, at verify sizes, with the host's launch
#       share per call: does the profile move NCCL's time, or the host's?
# Backends: nccl (torch.distributed) and nccl-direct (NCCL on the current stream, no torch around it).
# Uses the machine's own python3/torch; pydantic comes from wheels in .whl/ when present.
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends), in every process.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
OUT=${OUT:-$PWD/gpu-out}
NCCL_TESTS_SRC=${NCCL_TESTS_SRC:-$PWD/.src/nccl-tests}
NRANKS=${NRANKS:-2}
WORK=$(mktemp -d)
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
AR="python3 -m bench.allreduce.cli --backends nccl,nccl-direct --nranks $NRANKS"
VERIFY="14336,43008,57344,114688,229376,458752"
step() { echo; echo "=== $* ==="; }

{
  step "machine"
  nvidia-smi --query-gpu=index,name,driver_version,pci.bus_id --format=csv
  nvidia-smi topo -m
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__, "| CUDA", torch.version.cuda, "| NCCL", ".".join(map(str, torch.cuda.nccl.version())), "| GPUs", torch.cuda.device_count())'
  nvcc --version | tail -2
  env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)_' | sort

  step "(1) build nccl-tests"
  t0=$(date +%s)
  NCCL_TESTS_ARCHS=${NCCL_TESTS_ARCHS:-90} bash docker/build-nccl-tests.sh "$NCCL_TESTS_SRC" "$WORK/nccl-tests" >"$OUT/nccl_tests_build.log" 2>&1
  echo "build exit=$? in $(( $(date +%s) - t0 )) s"; tail -1 "$OUT/nccl_tests_build.log"
  export KIT_NCCL_TESTS_BIN="$WORK/nccl-tests/bin/all_reduce_perf"
  ldd "$KIT_NCCL_TESTS_BIN" | grep -i nccl

  for profile in baseline nccl-tuned; do
    for mode in eager graph; do
      step "(2) $profile, $mode, default sizes, kit (nccl, nccl-direct) vs nccl-tests"
      flag=""; [ "$mode" = graph ] && flag="--graph"
      $AR $flag --profile "$profile" --with-nccl-tests --out "$WORK/cal-$profile-$mode"; echo "exit=$?"
    done
  done

  step "(3) baseline vs nccl-tuned, eager, verify sizes, interleaved A B A B (drift shows as A != A)"
  for round in 1 2; do
    for profile in baseline nccl-tuned; do
      $AR --profile "$profile" --sizes "$VERIFY" --with-nccl-tests --out "$WORK/ab-$round-$profile" \
        >"$WORK/ab-$round-$profile.log" 2>&1
      echo "round $round $profile exit=$?"
      python3 - "$WORK/ab-$round-$profile/allreduce.json" "$round $profile" <<'EOF'
import json, sys
rows = json.load(open(sys.argv[1]))
nt = {r["size_B"]: r for r in rows if r["backend"] == "nccl-tests" and r["status"] == "ok"}
for r in rows:
    if r["backend"] in ("nccl", "nccl-direct") and r["status"] == "ok":
        print(f"  {sys.argv[2]:<18} {r['backend']:<11} {r['size_B']:>7} B  time {r['time_us']:7.2f}  "
              f"launch {r['host_launch_us']:7.2f}  p50 {r['time_us_p50']:7.2f}  "
              f"nccl-tests {nt.get(r['size_B'], {}).get('time_us', float('nan')):7.2f}  wrong {r['wrong']}")
EOF
    done
  done
} 2>&1 | tee "$OUT/calibrate.log"

( cd "$WORK" && find . -name allreduce.json -o -name 'nccl-tests-*.txt' | tar czf "$OUT/results.tgz" -T - )
echo "results in $OUT"
