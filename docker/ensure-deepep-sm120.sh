#!/usr/bin/env bash
# Make sure DeepEP in the server image carries SM120 (RTX PRO 6000 Blackwell) kernels.
#
# SGLang 0.5.23 installs sgl-deep-ep from PyPI, and whether that build contains sm_120 code is
# not documented. This script lists the CUDA ELF images of DeepEP's extension modules with
# `cuobjdump --list-elf` and builds DeepEP from source for compute capability 12.0 only when no
# sm_120 code is found. Code for other SMs (sm_90, sm_100a, ...) does not run on SM120.
#
# Usage:
#   ensure-deepep-sm120.sh decide                    read `cuobjdump --list-elf` output on stdin
#   ensure-deepep-sm120.sh check [SO...]             check SO files (default: the installed deep_ep)
#   ensure-deepep-sm120.sh build-if-missing DIR [SO...]
#                                                    if check fails, build a DeepEP wheel into DIR
#   ensure-deepep-sm120.sh install DIR               replace sgl-deep-ep with the wheel in DIR, if
#                                                    there is one, then check the result
#
# Environment:
#   CUOBJDUMP     cuobjdump to run (default: from PATH, else /usr/local/cuda/bin/cuobjdump)
#   PYTHON        interpreter whose site-packages hold deep_ep (default: python3)
#   DEEPEP_REPO   git URL to build from (default: https://github.com/deepseek-ai/DeepEP.git)
#   DEEPEP_REF    commit or tag to build (required for a build; a commit keeps the image reproducible)
#   DEEPEP_ARCH   TORCH_CUDA_ARCH_LIST for the build (default: 12.0)
#   DEEPEP_SM120  "ensure" (default) or "skip": skip every step and leave sgl-deep-ep as shipped
#   DEEPEP_NCCL_MIN  the oldest NCCL whose headers DeepEP at DEEPEP_REF compiles against (default
#                 2.30.4: DeepEP's README at dd758caf asks for "NCCL 2.30.4 and above"; against
#                 2.28.9 its backend/nccl.cu fails on ncclCommQueryProperties and the Gin types)
#   EP_NCCL_ROOT_DIR  the NCCL DeepEP builds against (DeepEP's own variable; default: the
#                 nvidia-nccl pip package of PYTHON)
#   DRY_RUN=1     print the build/install commands instead of running them
#
# Exit codes: 0 sm_120 code present (or nothing to do); 1 sm_120 code missing, or a build or
# install that did not produce it; 2 usage error.
set -euo pipefail

PYTHON=${PYTHON:-python3}
DEEPEP_REPO=${DEEPEP_REPO:-https://github.com/deepseek-ai/DeepEP.git}
DEEPEP_REF=${DEEPEP_REF:-}
DEEPEP_ARCH=${DEEPEP_ARCH:-12.0}
DEEPEP_SM120=${DEEPEP_SM120:-ensure}
DEEPEP_NCCL_MIN=${DEEPEP_NCCL_MIN:-2.30.4}
DRY_RUN=${DRY_RUN:-0}

say() { printf 'deepep-sm120: %s\n' "$*" >&2; }
die() {
    local code=$1
    shift
    say "$*"
    exit "$code"
}

cuobjdump_bin() {
    if [ -n "${CUOBJDUMP:-}" ]; then
        printf '%s\n' "$CUOBJDUMP"
    elif command -v cuobjdump >/dev/null 2>&1; then
        command -v cuobjdump
    else
        printf '%s\n' /usr/local/cuda/bin/cuobjdump
    fi
}

# Print a command, then run it unless DRY_RUN=1.
run() {
    printf '+ %s\n' "$*" >&2
    if [ "$DRY_RUN" != 1 ]; then
        "$@"
    fi
}

# Reads `cuobjdump --list-elf` output on stdin. Prints one verdict line; returns 0 if any ELF
# image is sm_120 (plain, arch-specific 120a or family 120f), 1 otherwise.
decide() {
    local archs arch found=1
    archs=$(grep -E '^[[:space:]]*ELF file' | grep -oE 'sm_[0-9]+[a-z]*' | sort -u -V | tr '\n' ' ' || true)
    archs=${archs% }
    if [ -z "$archs" ]; then
        echo "sm_120 missing (no CUDA ELF images listed)"
        return 1
    fi
    for arch in $archs; do
        case "$arch" in
        sm_120 | sm_120a | sm_120f) found=0 ;;
        esac
    done
    if [ "$found" = 0 ]; then
        echo "sm_120 present (ELF: $archs)"
    else
        echo "sm_120 missing (ELF: $archs)"
    fi
    return "$found"
}

# Extension modules of the installed deep_ep package (and the older top-level deep_ep_cpp).
installed_sos() {
    "$PYTHON" - <<'PY'
import importlib.util
import pathlib
import sys

found = []
spec = importlib.util.find_spec("deep_ep")
if spec is not None and spec.submodule_search_locations:
    for loc in spec.submodule_search_locations:
        found += sorted(pathlib.Path(loc).rglob("*.so"))
cpp = importlib.util.find_spec("deep_ep_cpp")
if cpp is not None and cpp.origin:
    found.append(pathlib.Path(cpp.origin))
if not found:
    sys.exit(3)
print("\n".join(str(p) for p in found))
PY
}

# check SO...: every module that holds CUDA code must hold sm_120 code, and at least one must.
check_files() {
    local so listing verdict cuobjdump any=1 bad=0
    cuobjdump=$(cuobjdump_bin)
    command -v "$cuobjdump" >/dev/null 2>&1 || die 2 "cuobjdump not found ($cuobjdump): set CUOBJDUMP"
    for so in "$@"; do
        [ -f "$so" ] || die 2 "no such file: $so"
        # cuobjdump exits non-zero for files without device code; the listing decides.
        listing=$("$cuobjdump" --list-elf "$so" 2>&1 || true)
        if verdict=$(decide <<<"$listing"); then
            any=0
        elif [[ "$verdict" == *"no CUDA ELF"* ]]; then
            verdict="no device code (ignored)"
        else
            any=0
            bad=1
        fi
        say "$so: $verdict"
    done
    if [ "$any" = 1 ]; then
        say "no DeepEP module with CUDA code found"
        return 1
    fi
    return "$bad"
}

check() {
    local sos
    if [ "$#" -gt 0 ]; then
        check_files "$@"
        return
    fi
    if ! sos=$(installed_sos); then
        say "deep_ep is not installed for $PYTHON"
        return 1
    fi
    # shellcheck disable=SC2086  # one path per line, no spaces in site-packages paths
    check_files $sos
}

# The .so files inside a built wheel, unpacked to a scratch directory.
check_wheel() {
    local wheel=$1 scratch
    scratch=$(mktemp -d)
    "$PYTHON" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$wheel" "$scratch"
    local sos
    sos=$(find "$scratch" -name '*.so' -print)
    if [ -z "$sos" ]; then
        rm -rf "$scratch"
        say "$wheel contains no extension module"
        return 1
    fi
    # shellcheck disable=SC2086
    if check_files $sos; then
        rm -rf "$scratch"
        return 0
    fi
    rm -rf "$scratch"
    return 1
}

# The NCCL DeepEP would build against: EP_NCCL_ROOT_DIR, else the nvidia-nccl pip package.
nccl_root() {
    if [ -n "${EP_NCCL_ROOT_DIR:-}" ]; then
        printf '%s\n' "$EP_NCCL_ROOT_DIR"
        return
    fi
    "$PYTHON" -c 'import importlib.util as u, sys
s = u.find_spec("nvidia.nccl") if u.find_spec("nvidia") else None
sys.exit(3) if s is None else print(list(s.submodule_search_locations)[0])' 2>/dev/null
}

# Refuse, before a long compile, an NCCL older than DeepEP at DEEPEP_REF needs.
nccl_preflight() {
    local root header version
    root=$(nccl_root) || die 1 "no NCCL found for $PYTHON (no nvidia-nccl package): set EP_NCCL_ROOT_DIR to an NCCL >= $DEEPEP_NCCL_MIN"
    header="$root/include/nccl.h"
    [ -f "$header" ] || die 1 "no $header: set EP_NCCL_ROOT_DIR to an NCCL installation (include/nccl.h, lib/libnccl.so*)"
    version=$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{v[$2]=$3} END{print v["NCCL_MAJOR"] "." v["NCCL_MINOR"] "." v["NCCL_PATCH"]}' "$header")
    if [ "$(printf '%s\n%s\n' "$DEEPEP_NCCL_MIN" "$version" | sort -V | head -1)" != "$DEEPEP_NCCL_MIN" ]; then
        die 1 "DeepEP $DEEPEP_REF needs NCCL >= $DEEPEP_NCCL_MIN to build; $root has $version. Install nvidia-nccl-cu13>=$DEEPEP_NCCL_MIN, point EP_NCCL_ROOT_DIR at one, or build with DEEPEP_SM120=skip"
    fi
    say "NCCL $version at $root (>= $DEEPEP_NCCL_MIN)"
}

build_if_missing() {
    [ "$#" -ge 1 ] || die 2 "usage: $0 build-if-missing WHEEL_DIR [SO...]"
    local dir=$1 src wheel
    shift
    if check "$@"; then
        say "DeepEP already has sm_120 code; nothing to build"
        return 0
    fi
    [ -n "$DEEPEP_REF" ] || die 2 "DEEPEP_REF is not set: pass --build-arg DEEPEP_REF=<commit> (or DEEPEP_SM120=skip)"
    nccl_preflight
    say "building DeepEP $DEEPEP_REF from $DEEPEP_REPO for TORCH_CUDA_ARCH_LIST=$DEEPEP_ARCH"
    src=${DEEPEP_SRC:-$(mktemp -d)/DeepEP}
    run mkdir -p "$dir" "$src"
    run git init -q "$src"
    run git -C "$src" fetch -q --depth 1 "$DEEPEP_REPO" "$DEEPEP_REF"
    run git -C "$src" checkout -q FETCH_HEAD
    run git -C "$src" submodule update -q --init --recursive --depth 1
    run env TORCH_CUDA_ARCH_LIST="$DEEPEP_ARCH" "$PYTHON" -m pip wheel --no-build-isolation --no-deps -w "$dir" "$src"
    if [ "$DRY_RUN" = 1 ]; then
        return 0
    fi
    for wheel in "$dir"/*.whl; do
        [ -e "$wheel" ] || die 1 "the DeepEP build produced no wheel in $dir"
        check_wheel "$wheel" || die 1 "the DeepEP wheel built at $DEEPEP_REF still has no sm_120 code"
    done
    say "built a DeepEP wheel with sm_120 code in $dir"
}

install_wheels() {
    [ "$#" -eq 1 ] || die 2 "usage: $0 install WHEEL_DIR"
    local dir=$1
    local wheels=()
    if [ -d "$dir" ]; then
        shopt -s nullglob
        wheels=("$dir"/*.whl)
        shopt -u nullglob
    fi
    if [ "${#wheels[@]}" -eq 0 ]; then
        say "no DeepEP wheel to install; keeping the shipped sgl-deep-ep"
    else
        # Both distributions provide the deep_ep package: remove the shipped one first.
        run "$PYTHON" -m pip uninstall -y sgl-deep-ep
        run "$PYTHON" -m pip install --no-deps "${wheels[@]}"
    fi
    if [ "$DRY_RUN" = 1 ]; then
        return 0
    fi
    check || die 1 "DeepEP in this image has no sm_120 code (build with DEEPEP_SM120=skip to accept that)"
}

main() {
    [ "$#" -ge 1 ] || die 2 "usage: $0 decide|check|build-if-missing|install ..."
    local cmd=$1
    shift
    case "$DEEPEP_SM120" in
    ensure) ;;
    skip)
        if [ "$cmd" != decide ]; then
            say "DEEPEP_SM120=skip: leaving DeepEP as shipped (the ep-deepep profile may not run on SM120)"
            return 0
        fi
        ;;
    *) die 2 "DEEPEP_SM120 must be 'ensure' or 'skip', not '$DEEPEP_SM120'" ;;
    esac
    case "$cmd" in
    decide) decide ;;
    check) check "$@" ;;
    build-if-missing) build_if_missing "$@" ;;
    install) install_wheels "$@" ;;
    *) die 2 "unknown command '$cmd' (decide, check, build-if-missing, install)" ;;
    esac
}

main "$@"
