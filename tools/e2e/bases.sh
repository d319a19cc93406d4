#!/usr/bin/env bash
# Build the `make e2e` test bases (tools/e2e/bases.Dockerfile) into the engine DOCKER_HOST names:
#   kit-test/debian:bookworm-minbase   debootstrap --variant=minbase bookworm, imported (once)
#   kit-test/python:3.11               stand-in for BENCH_BASE_IMAGE
#   kit-test/sglang:0.5.23-cpu         stand-in for SGLANG_IMAGE
# Needs root for debootstrap the first time. CACHE (default tools/e2e/.cache) keeps the rootfs
# tarball and the wheelhouse between runs, so a warm run rebuilds nothing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
docker_cli=${DOCKER:-/usr/bin/docker}
cache=${CACHE:-$here/.cache}
python=${PYTHON:-python3}
sglang_version=${SGLANG_VERSION:-0.5.23}
torch_spec=${TORCH_SPEC:-torch==2.13.0}
ca=${KIT_E2E_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
mkdir -p "$cache/context/wheelhouse"

have() { "$docker_cli" image inspect "$1" >/dev/null 2>&1; }

if ! have kit-test/debian:bookworm-minbase; then
  if [ ! -s "$cache/bookworm-minbase.tar" ]; then
    command -v debootstrap >/dev/null || { echo "bases.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
    rootfs=$(mktemp -d "$cache/rootfs.XXXXXX")
    echo "bases.sh: debootstrap --variant=minbase bookworm (about a minute)"
    debootstrap --variant=minbase bookworm "$rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$cache/debootstrap.log" 2>&1 \
      || { tail -5 "$cache/debootstrap.log" >&2; exit 1; }
    tar -C "$rootfs" -cf "$cache/bookworm-minbase.tar.part" . && mv "$cache/bookworm-minbase.tar.part" "$cache/bookworm-minbase.tar"
    rm -rf "$rootfs"
  fi
  "$docker_cli" import --change 'LABEL pcie-spec-kit.test-base=true' --change 'CMD ["/bin/bash"]' \
    "$cache/bookworm-minbase.tar" kit-test/debian:bookworm-minbase >/dev/null
fi

cp "$ca" "$cache/context/ca-bundle.crt"
wh="$cache/context/wheelhouse"
# SGLang's light dependencies as the kit's own sglang-cpu extra names them (one list: pyproject.toml)
"$python" - "$here/../../pyproject.toml" "$torch_spec" >"$wh/requirements.txt" <<'PY'
import sys, tomllib
extra = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["sglang-cpu"]
print("\n".join([sys.argv[2], *extra]))
PY
if [ ! -f "$wh/.complete" ] || ! cmp -s "$wh/requirements.txt" "$wh/.complete"; then
  echo "bases.sh: filling the wheelhouse (the host's pip resolves: $torch_spec, SGLang's light dependencies, sglang $sglang_version)"
  "$python" -m pip download -q --only-binary=:all: -d "$wh" -r "$wh/requirements.txt"
  "$python" -m pip download -q --only-binary=:all: --no-deps -d "$wh" "sglang==$sglang_version"
  cp "$wh/requirements.txt" "$wh/.complete"
fi

export DOCKER_BUILDKIT=1
for target in python sglang-cpu; do
  tag=$([ "$target" = python ] && echo kit-test/python:3.11 || echo "kit-test/sglang:$sglang_version-cpu")
  "$docker_cli" build -q --network host --target "$target" --build-arg "SGLANG_VERSION=$sglang_version" \
    -f "$here/bases.Dockerfile" -t "$tag" "$cache/context" >/dev/null
  echo "bases.sh: $tag $("$docker_cli" image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}')"
done
