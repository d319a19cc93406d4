#!/usr/bin/env bash
# Does nccl-tests' process layout explain the kit's graph-mode gap? On a 2-GPU machine, builds
# all_reduce_perf with docker/build-nccl-tests.sh and times the same sizes in graph mode as
#   -g 2        one process, one thread driving both GPUs (what --with-nccl-tests runs);
#   -t 2 -g 1   one process, one thread per GPU;
#   mpirun -np 2 ... -g 1   one process per GPU, as the kit and SGLang run (only where an MPI is found).
# NVLink multicast stays off. Output in $OUT/layout.log.
set -u -o pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-$PWD/gpu-out}
SRC=${NCCL_TESTS_SRC:-$PWD/.src/nccl-tests}
WORK=$(mktemp -d)
mkdir -p "$OUT"
{
  NCCL_TESTS_ARCHS=90 bash docker/build-nccl-tests.sh "$SRC" "$WORK/st" >/dev/null 2>&1; echo "build single-process exit=$?"
  BIN="$WORK/st/bin/all_reduce_perf"
  echo "MPI: $(command -v mpirun || echo none) $(command -v mpicc || echo no-mpicc)"
  python3 -c 'import mpi4py; print("mpi4py", mpi4py.__version__, mpi4py.get_config())' 2>&1 | tail -1
  ls /usr/lib/x86_64-linux-gnu 2>/dev/null | grep -i -E "libmpi|openmpi|mpich" | head -5
  for size in 14336 43008 229376 1048576; do
    for layout in "-g 2" "-t 2 -g 1"; do
      line=$("$BIN" -b $size -e $size $layout -d bfloat16 -o sum -c 1 -a 1 -w 20 -n 20 -G 10 | grep -E "^ +$size ")
      echo "layout [$layout] $line"
    done
  done
  if command -v mpirun >/dev/null && command -v mpicc >/dev/null; then
    # The first run linked one MPI's header with another's library and every process came up as a
    # singleton (busbw 0). Take the include and lib dirs from the mpicc wrapper that matches mpirun.
    mpirun --version 2>&1 | head -1
    inc=$(mpicc -showme:incdirs 2>/dev/null | awk '{print $1}')
    lib=$(mpicc -showme:libdirs 2>/dev/null | awk '{print $1}')
    echo "mpicc include: ${inc:-?} lib: ${lib:-?}"
    mpi_home="$WORK/mpi-home"
    mkdir -p "$mpi_home" && ln -sfn "$inc" "$mpi_home/include" && ln -sfn "$lib" "$mpi_home/lib"
    NCCL_TESTS_MPI=1 MPI_HOME=$mpi_home NCCL_TESTS_ARCHS=90 bash docker/build-nccl-tests.sh "$SRC" "$WORK/mpi" >"$OUT/mpi_build.log" 2>&1
    echo "build MPI exit=$?"
    ldd "$WORK/mpi/bin/all_reduce_perf" | grep -i -E "mpi|nccl"
    for size in 14336 43008 229376 1048576; do
      line=$(mpirun --allow-run-as-root --oversubscribe -np 2 -x NCCL_NVLS_ENABLE -x LD_LIBRARY_PATH -x PATH \
        "$WORK/mpi/bin/all_reduce_perf" -b $size -e $size -g 1 -d bfloat16 -o sum -c 1 -a 1 -w 20 -n 20 -G 10 2>&1 \
        | grep -E "^ +$size |nranks|Rank")
      echo "layout [mpirun -np 2 -g 1] $line"
    done
  fi
  if [ -n "${KIT_TOO:-}" ]; then  # the kit at the same sizes, same machine, same minute
    python3 -m bench.allreduce.cli --backends nccl-direct --nranks 2 --graph --sizes 14336,43008,229376,1048576 \
      --out "$WORK/kit" 2>&1 | tail -12
  fi
} 2>&1 | tee "$OUT/layout.log"
