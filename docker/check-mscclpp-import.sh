#!/usr/bin/env bash
# Fail unless MSCCL++ imports the way SGLang 0.5.23 imports it at start-up: mscclpp, mscclpp.ext and
# mscclpp.default_algos (sglang/srt/distributed/device_communicators/pymscclpp.py:1048-1050). Without
# cupy, `import mscclpp` fails (mscclpp/_core/algorithm.py imports it unconditionally) and SGLang logs
# "PyMscclpp is unavailable" and runs NCCL (docs/evidence.md, "MSCCL++ world sizes").
#
# An image build has no GPU driver. When libcuda.so.1 cannot be loaded, the CUDA toolkit's stub
# libcuda stands in for it: it resolves the driver symbols, and nothing imported here calls them.
# CHECK_WITH_STUB=1 uses the stub even where a driver exists (how the GPU machine tests this path).
# Usage: check-mscclpp-import.sh            (PYTHON, CUDA_HOME from the environment)
set -euo pipefail
py=${PYTHON:-python3}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
probe='import importlib
mods = [importlib.import_module(m) for m in ("mscclpp", "mscclpp.ext", "mscclpp.default_algos", "cupy")]
print("check-mscclpp-import: ok:", *(m.__name__ + " " + getattr(m, "__version__", "?") for m in mods[::3]))'

if [ "${CHECK_WITH_STUB:-0}" != 1 ] && "$py" -c 'import ctypes; ctypes.CDLL("libcuda.so.1")' 2>/dev/null; then
  exec "$py" -c "$probe"
fi
stub=$(find -L "$cuda_home" -path '*/stubs/libcuda.so' -print -quit 2>/dev/null || true)
if [ -z "$stub" ]; then
  echo "check-mscclpp-import: no GPU driver here and no stub libcuda.so under $cuda_home; set CUDA_HOME" >&2
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ln -s "$stub" "$dir/libcuda.so.1"
echo "check-mscclpp-import: no driver in use; the stub $stub stands in for libcuda.so.1"
LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$py" -c "$probe"
