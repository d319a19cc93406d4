#!/usr/bin/env bash
# Assemble, on a machine with the git mirrors and Debian's apt, the offline sources that
# tools/gpu/build_gpu_stages.sh carries to the GPU machine (which cannot reach GitHub):
#   gpu_build_sources.sh MIRRORS DEST     MIRRORS/<owner>+<name>/repo are git mirrors
# Pins: MSCCL++ and DeepEP from the Dockerfile; nanobind v1.9.2 (+ its robin_map commit) and
# dlpack 5c210da4 as MSCCL++ v0.10.0's python/csrc/CMakeLists.txt names them; fmt at DeepEP's
# submodule commit. nlohmann/json: MSCCL++ names v3.12.0; JSON_REF (default HEAD of the mirror)
# says which commit is used instead when the mirror lacks that tag, and the build log records it.
set -euo pipefail
[ "$#" -eq 2 ] || { echo "usage: $0 MIRRORS DEST" >&2; exit 2; }
M=$1
mkdir -p "$2" && DEST=$(cd "$2" && pwd)
JSON_REF=${JSON_REF:-HEAD}
arg() { sed -n "s/^ARG $1=//p" Dockerfile | head -1; }
rm -rf "$DEST" && mkdir -p "$DEST"/{mscclpp,deps/json,deps/nanobind,deps/dlpack,numa,wheels}
git -C "$M/microsoft+mscclpp/repo" archive "$(arg MSCCLPP_REF)" | tar -x -C "$DEST/mscclpp"
git -C "$M/nlohmann+json/repo" archive "$JSON_REF" -- CMakeLists.txt cmake include single_include \
  nlohmann_json.natvis LICENSE.MIT meson.build | tar -x -C "$DEST/deps/json"
echo "nlohmann/json $(git -C "$M/nlohmann+json/repo" describe --tags "$JSON_REF")" >"$DEST/deps/json/KIT_SOURCE"
git -C "$M/wjakob+nanobind/repo" archive v1.9.2 | tar -x -C "$DEST/deps/nanobind"
robin=$(git -C "$M/wjakob+nanobind/repo" ls-tree v1.9.2 ext/robin_map | awk '{print $3}')
rm -rf "$DEST/deps/nanobind/ext/robin_map" && mkdir -p "$DEST/deps/nanobind/ext/robin_map"
git -C "$M/Tessil+robin-map/repo" archive "$robin" | tar -x -C "$DEST/deps/nanobind/ext/robin_map"
git -C "$M/dmlc+dlpack/repo" archive 5c210da409e7f1e51ddf445134a4376fdbd70d7d | tar -x -C "$DEST/deps/dlpack"
deepep=$(arg DEEPEP_REF)
fmt=$(git -C "$M/deepseek-ai+DeepEP/repo" ls-tree "$deepep" third-party/fmt | awk '{print $3}')
git init -q --bare "$DEST/deepep.git" && git -C "$M/deepseek-ai+DeepEP/repo" push -q "$DEST/deepep.git" "$deepep:refs/heads/pin"
git init -q --bare "$DEST/fmt.git" && git -C "$M/fmtlib+fmt/repo" push -q "$DEST/fmt.git" "$fmt:refs/heads/pin"
for r in deepep.git fmt.git; do git -C "$DEST/$r" config uploadpack.allowAnySHA1InWant true; done
(cd "$DEST/numa" && apt-get download libnuma-dev libnuma1 && for f in *.deb; do dpkg -x "$f" root; done && rm -f ./*.deb)
# 9.x: MSCCL++'s __init__ imports __commit_id__ from the _version.py that setuptools-scm writes, and
# 8.x's template has no such name (the wheel builds, then `import mscclpp` fails).
python3 -m pip download -q --no-deps --only-binary=:all: -d "$DEST/wheels" setuptools-scm==9.2.2
# DeepEP at its pin compiles only against NCCL >= 2.30.4 headers; the GPU machine has 2.28.9 and the
# 212 MB wheel is over the carry limit, so only its headers travel (NCCL_WHEEL_DIR: a folder that
# already holds the wheel).
nccl_version=${NCCL_HEADERS_VERSION:-2.30.4}
wheel_dir=${NCCL_WHEEL_DIR:-$(mktemp -d)}
ls "$wheel_dir"/nvidia_nccl_cu13-"$nccl_version"-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps \
  --only-binary=:all: --python-version 3.12 --platform manylinux_2_18_x86_64 -d "$wheel_dir" "nvidia-nccl-cu13==$nccl_version"
mkdir -p "$DEST/nccl" && unzip -q -o "$wheel_dir"/nvidia_nccl_cu13-"$nccl_version"-*.whl 'nvidia/nccl/include/*' -d "$DEST/nccl"
mv "$DEST/nccl/nvidia/nccl/include" "$DEST/nccl/include" && rm -rf "$DEST/nccl/nvidia"
du -sh "$DEST"
