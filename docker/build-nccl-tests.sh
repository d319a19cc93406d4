#!/usr/bin/env bash
# Build nccl-tests' all_reduce_perf (single process, no MPI) against the NCCL that this Python's torch
# loads, so `bench allreduce --with-nccl-tests` compares the kit with nccl-tests on the same library.
# The Dockerfile's nccl-tests stage and the GPU development machine run this same script.
#
#   build-nccl-tests.sh SRC_DIR PREFIX      -> PREFIX/bin/all_reduce_perf
#
# SRC_DIR is an nccl-tests checkout (the Dockerfile clones the pinned tag). Environment:
#   NCCL_TESTS_ARCHS  CUDA architectures, ';'-separated (default "90;100;120")
#   CUDA_HOME         toolkit with nvcc (default /usr/local/cuda)
#   NCCL_HOME         NCCL with include/ and lib/ (default: the nvidia-nccl wheel torch uses)
#   PYTHON            the Python whose NCCL wheel is used (default python3)
#   NCCL_TESTS_MPI    1: build with MPI, one process per GPU under mpirun (needs MPI_HOME with
#                     include/mpi.h and lib/libmpi.so); default 0, one process for all GPUs
set -euo pipefail

if [ "$#" -ne 2 ]; then
  echo "usage: $0 SRC_DIR PREFIX" >&2
  exit 2
fi
src=$(cd "$1" && pwd)
prefix=$2
archs=${NCCL_TESTS_ARCHS:-90;100;120}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
python=${PYTHON:-python3}

if [ ! -f "$src/src/all_reduce.cu" ]; then
  echo "$src is not an nccl-tests checkout (no src/all_reduce.cu)" >&2
  exit 2
fi

nccl_home=${NCCL_HOME:-}
if [ -z "$nccl_home" ]; then
  nccl_home=$("$python" -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl"); print(next(iter(s.submodule_search_locations)))' 2>/dev/null) || {
    echo "no NCCL_HOME given and $python has no nvidia-nccl wheel; set NCCL_HOME to a folder with include/nccl.h" >&2
    exit 2
  }
fi
if [ ! -f "$nccl_home/include/nccl.h" ]; then
  echo "NCCL_HOME=$nccl_home has no include/nccl.h" >&2
  exit 2
fi

# The wheel ships lib/libnccl.so.2 only; the link step wants libnccl.so. Link against a private view.
view=$(mktemp -d)
trap 'rm -rf "$view"' EXIT
mkdir -p "$view/lib"
ln -s "$nccl_home/include" "$view/include"
for so in "$nccl_home"/lib/libnccl.so*; do ln -s "$so" "$view/lib/"; done
[ -e "$view/lib/libnccl.so" ] || ln -s "$nccl_home/lib/libnccl.so.2" "$view/lib/libnccl.so"

gencode=""
for arch in ${archs//;/ }; do
  gencode="$gencode -gencode=arch=compute_${arch},code=sm_${arch}"
done

build=$(mktemp -d)
# LD_RUN_PATH: the linker records the wheel's lib/ as the binary's run path, so it loads that NCCL.
mpi=${NCCL_TESTS_MPI:-0}
case "$mpi" in
  0) mpi_args=(MPI=0) ;;
  1) [ -f "${MPI_HOME:-}/include/mpi.h" ] || { echo "NCCL_TESTS_MPI=1 needs MPI_HOME with include/mpi.h (MPI_HOME='${MPI_HOME:-}')" >&2; exit 2; }
     mpi_args=(MPI=1 "MPI_HOME=$MPI_HOME") ;;
  *) echo "NCCL_TESTS_MPI must be 0 or 1, not '$mpi'" >&2; exit 2 ;;
esac
LD_RUN_PATH="$nccl_home/lib" make -C "$src/src" -j"$(nproc)" "${mpi_args[@]}" CUDA_HOME="$cuda_home" NCCL_HOME="$view" NVCC_GENCODE="$gencode" \
  BUILDDIR="$build" "$build/all_reduce_perf"
mkdir -p "$prefix/bin"
install -m 0755 "$build/all_reduce_perf" "$prefix/bin/all_reduce_perf"
rm -rf "$build"
echo "built $prefix/bin/all_reduce_perf for sm ${archs} against $nccl_home"
