#!/usr/bin/env bash
# Build an MSCCL++ wheel from a checkout for the given CUDA architectures, without a GPU.
# The Dockerfile's mscclpp stage and the GPU development machine run this same script.
#
#   build-mscclpp.sh SRC_DIR WHEEL_DIR      -> WHEEL_DIR/mscclpp-*.whl
#
# Environment:
#   MSCCLPP_CUDA_ARCHS   CUDA architectures, ';'-separated (default "90;100;120")
#   MSCCLPP_BUILD_DIR    scikit-build-core's build folder (default: a temporary one; the image keeps
#                        it in a cache mount so a rebuild reuses the objects)
#   MSCCLPP_BUILD_ISOLATION  "on" (default: pip fetches scikit-build-core and setuptools-scm into a
#                        fresh environment) or "off" (build with this Python's own, on a machine without
#                        PyPI; pip's PIP_NO_BUILD_ISOLATION=1 does not do this, its boolean is inverted)
#   PYTHON               the Python that builds (default python3)
set -euo pipefail

if [ "$#" -ne 2 ]; then
  echo "usage: $0 SRC_DIR WHEEL_DIR" >&2
  exit 2
fi
src=$1
wheels=$2
archs=${MSCCLPP_CUDA_ARCHS:-90;100;120}
python=${PYTHON:-python3}
if [ ! -f "$src/pyproject.toml" ] || [ ! -d "$src/python/mscclpp" ]; then
  echo "$src is not an MSCCL++ checkout (no pyproject.toml and python/mscclpp)" >&2
  exit 2
fi
build_dir=${MSCCLPP_BUILD_DIR:-$(mktemp -d)}
isolation=()
case "${MSCCLPP_BUILD_ISOLATION:-on}" in
  on) ;;
  off) isolation=(--no-build-isolation) ;;
  *) echo "MSCCLPP_BUILD_ISOLATION must be 'on' or 'off', not '${MSCCLPP_BUILD_ISOLATION}'" >&2; exit 2 ;;
esac

mkdir -p "$wheels"
# IB off (no RDMA NIC on the target hosts); the GPU check is bypassed because no GPU is present at
# build time; both the GPU and the CUDA architecture lists name the same archs.
"$python" -m pip wheel --no-deps "${isolation[@]}" --wheel-dir "$wheels" \
  "--config-settings=build-dir=$build_dir/{wheel_tag}" \
  --config-settings=cmake.define.MSCCLPP_USE_CUDA=ON \
  --config-settings=cmake.define.MSCCLPP_BYPASS_GPU_CHECK=ON \
  --config-settings=cmake.define.MSCCLPP_USE_IB=OFF \
  "--config-settings=cmake.define.MSCCLPP_GPU_ARCHS=$archs" \
  "--config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=$archs" \
  "$src"
ls "$wheels"/mscclpp-*.whl
