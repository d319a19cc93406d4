#!/usr/bin/env bash
# Build a trimmed FlashInfer that fits in the GPU machine's carry.
#
# Why: the FlashInfer 0.7.2 wheel is 65 MB compressed (about 460 MB unpacked), which is over
# the 64 MiB limit on what can be carried to the GPU machine. That machine has no internet,
# so pip cannot fetch FlashInfer there. The kit needs only two parts of it:
#   - flashinfer.comm's PCIe-IPC all-reduce (csrc/pcie_ipc_all_reduce.cu), and
#   - the TRT-LLM all-reduce fusion kernel (csrc/trtllm_allreduce*.cu, trtllm_moe_allreduce_fusion.cu).
# Both are JIT-compiled on the GPU machine, so the trimmed tree keeps their .cu sources and
# every header those files can include.
#
# Usage:  bash tools/gpu/flashinfer_carry.sh DEST [WHEEL_DIR]
#   Takes the pinned wheels from WHEEL_DIR when they are there, and downloads the rest
#   (cp312, manylinux x86_64). Writes DEST/site/, a directory to put on PYTHONPATH on the GPU
#   machine (Python 3.12), and DEST/manifest.txt, the list of FlashInfer files kept.
#   It fails if DEST/site is bigger than MAX_MB (default 30).
#
# What is kept (rules, in order):
#   1. Python: every flashinfer/*.py module that `import flashinfer.comm` can load. The closure
#      starts at flashinfer and flashinfer.comm and follows their module-level imports (inside
#      try/if/with too, but not under `if TYPE_CHECKING:`). For flashinfer.comm.* and
#      flashinfer.jit.* and flashinfer.autotuner.* (PCIe-IPC tuning) it also follows imports made
#      inside functions, because those are the
#      code paths the kit calls. A module is left out when it can never import on the GPU
#      machine: one whose module body unconditionally imports a package that machine lacks
#      (ABSENT_IMPORTS), one that unconditionally imports such a module, or one whose parent
#      package is such a module. Every importer of such a module guards it with
#      try/except ImportError, and a missing file raises the same ImportError.
#   2. Headers: the .cu files in JIT_SOURCES, plus every flashinfer/data file they include,
#      transitively (#include, #include_next, and __has_include(...) or a wrapper macro such as
#      FMT_HAS_INCLUDE(...), whatever #if surrounds them). Names are looked up the way nvcc
#      does for a FlashInfer JIT build (INCLUDE_ORDER). CUDA toolkit and tvm_ffi headers are
#      followed but not copied, and every toolkit header is a starting point too: toolkit
#      headers include CCCL ones (<cuda/atomic>), which nvcc takes from FlashInfer's CCCL
#      copy first; a dropped one would silently come from the toolkit's CCCL and break the build.
#   3. KEEP_DATA_FILES: data files that FlashInfer reads as text (not via #include).
#   Everything else is dropped: other csrc/ kernels, most of cutlass/ and cccl/, the
#   fused_moe/cudnn artifacts (JSON), experimental/, the top-level b12x alias package.
# Dependencies: only apache-tvm-ffi is carried (FlashInfer's JIT imports it at import time and
# compiles against its headers). nvidia-cutlass-dsl, cuda-tile and nvidia-cudnn-frontend are
# optional: every flashinfer import of them is guarded. nccl4py, nccl-extensions are not imported at all.
set -euo pipefail

FLASHINFER_VERSION=0.7.2
FLASHINFER_SHA256=770550a0aa92b2f10e6c9a1f048dd43713f0f3bb6a12710186fcf8e4e9c99bd8
TVM_FFI_VERSION=0.1.15.post2 # apache-tvm-ffi; FlashInfer 0.7.2 asks for >=0.1.11,<0.2
TVM_FFI_SHA256=059eed9bfc94bcd41650fb8eefde74040a1bc7e7b1a6f0a8ff897b02b118875b # cp312 manylinux_2_28
PY_VERSION=3.12
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64)
MAX_MB=${MAX_MB:-30}
# Import names of packages that the GPU machine lacks and this script does not carry.
ABSENT_IMPORTS="cutlass cuda.tile cudnn"
PY_ROOTS="flashinfer flashinfer.comm"
PY_DEEP="flashinfer.comm flashinfer.jit flashinfer.autotuner"
# JIT sources of gen_pcie_ipc_comm_module() and gen_trtllm_comm_module() (flashinfer/jit/comm.py).
JIT_SOURCES=(pcie_ipc_all_reduce.cu trtllm_allreduce.cu trtllm_allreduce_fusion.cu trtllm_moe_allreduce_fusion.cu)
# Include search order that nvcc sees for a FlashInfer JIT build (flashinfer/jit/cpp_ext.py, then
# nvcc.profile): the -I directories, then the -isystem ones. "data/X" is flashinfer/data/X,
# copied when used; "cuda/X" is $CUDA_HOME/X and "tvm_ffi/X" the carried tvm_ffi package: those
# are only read, to follow their includes; cuda/include is there twice, as nvcc.profile's -I
# and as cpp_ext.py's -isystem. (The Python include directory is left out: it
# includes no CUDA or FlashInfer header.)
INCLUDE_ORDER=(data/cccl/cub data/cccl/libcudacxx/include data/cccl/thrust cuda/include
  cuda/include tvm_ffi/include data/include data/csrc data/cutlass/include
  data/cutlass/tools/util/include data/spdlog/include cuda/include/cccl)
# The CUDA toolkit whose headers are scanned: they include CCCL headers (cooperative_groups.h
# includes <cuda/atomic>), and nvcc finds those in FlashInfer's CCCL first, so they must be kept.
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
# compilation_context.cutlass_supports_sm107() reads this header's text.
KEEP_DATA_FILES=(cutlass/include/cutlass/arch/arch.h)

usage() { echo "usage: bash $0 DEST [WHEEL_DIR]" >&2; exit 2; }
if [ "$#" -lt 1 ] || [ "$#" -gt 2 ]; then usage; fi
mkdir -p "$1"
DEST=$(cd "$1" && pwd)
WHEEL_DIR=${2:-}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PYTHON=${PYTHON:-python3}
if [ -n "${PIP:-}" ]; then read -r -a PIP_CMD <<<"$PIP"
elif [ -x "$REPO/.venv/bin/pip" ]; then PIP_CMD=("$REPO/.venv/bin/pip")
else PIP_CMD=("$PYTHON" -m pip)
fi
TARGET_ARGS=(--no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp)
for p in "${PLATFORMS[@]}"; do TARGET_ARGS+=(--platform "$p"); done

SITE=$DEST/site
STAGE=$DEST/.stage
WHEELS=$DEST/wheels
cleanup() { rm -rf "$STAGE"; }
trap cleanup EXIT
rm -rf "$SITE" "$STAGE"
mkdir -p "$SITE" "$STAGE" "$WHEELS"

# wheel NAME==VERSION GLOB SHA256: print the path of the wheel, from WHEEL_DIR or downloaded.
wheel() {
  local spec=$1 glob=$2 sha=$3 found=""
  for d in ${WHEEL_DIR:+"$WHEEL_DIR"} "$WHEELS"; do
    found=$(find "$d" -maxdepth 1 -name "$glob" | sort | head -n1)
    [ -n "$found" ] && break
  done
  if [ -z "$found" ]; then
    "${PIP_CMD[@]}" download "${TARGET_ARGS[@]}" "$spec" -d "$WHEELS" >&2
    found=$(find "$WHEELS" -maxdepth 1 -name "$glob" | sort | head -n1)
  fi
  [ -n "$found" ] || { echo "no wheel matching $glob for $spec" >&2; exit 1; }
  echo "$sha  $found" | sha256sum -c --quiet - >&2 || { echo "sha256 mismatch: $found" >&2; exit 1; }
  echo "$found"
}
FI_WHEEL=$(wheel "flashinfer-python==$FLASHINFER_VERSION" "flashinfer_python-$FLASHINFER_VERSION-py3-none-any.whl" "$FLASHINFER_SHA256")
TVM_WHEEL=$(wheel "apache-tvm-ffi==$TVM_FFI_VERSION" "apache_tvm_ffi-$TVM_FFI_VERSION-cp312-*.whl" "$TVM_FFI_SHA256")

# Dependencies go into site/ whole; flashinfer is unpacked to the stage and trimmed from there.
"${PIP_CMD[@]}" install "${TARGET_ARGS[@]}" --no-compile --target "$SITE" "$TVM_WHEEL" >&2
"${PIP_CMD[@]}" install "${TARGET_ARGS[@]}" --no-compile --target "$STAGE" "$FI_WHEEL" >&2
rm -rf "${SITE:?}/bin" # console scripts with this machine's interpreter in their #! line

# Rule 1: the Python import closure. Prints paths relative to the stage.
"$PYTHON" - "$STAGE" "$ABSENT_IMPORTS" "$PY_ROOTS" "$PY_DEEP" >"$STAGE/keep_py.txt" <<'PY'
import ast, os, sys

stage, absent, roots, deep = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()

def under(name, prefixes):
    return any(name == p or name.startswith(p + ".") for p in prefixes)

def source_of(mod):
    base = os.path.join(stage, *mod.split("."))
    for path in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(path):
            return path
    return None  # not a flashinfer file (or a namespace directory)

def targets(mod, path, node):
    """Absolute module names an import statement can load."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    package = mod.split(".") if path.endswith("__init__.py") else mod.split(".")[:-1]
    base = package[: len(package) - node.level + 1] if node.level else []
    target = ".".join(base + ([node.module] if node.module else []))
    # `from pkg import name` loads pkg.name too when that is a module.
    return [target] + [target + "." + a.name for a in node.names
                       if a.name != "*" and source_of(target + "." + a.name)]

def type_checking(test):
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")

parsed = {}
def imports(mod):
    """(unconditional, conditional, inside-functions) imports of a module."""
    if mod not in parsed:
        path = source_of(mod)
        if path is None:
            parsed[mod] = None
            return None
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)  # a SyntaxError stops the script: no silent drop
        hard, soft, lazy = [], [], []
        def walk(body, found):
            for node in body:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    found += targets(mod, path, node)
                elif isinstance(node, ast.If) and type_checking(node.test):
                    walk(node.orelse, soft)  # the `if TYPE_CHECKING:` body never runs
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    for sub in ast.walk(node):
                        if isinstance(sub, (ast.Import, ast.ImportFrom)):
                            lazy.extend(targets(mod, path, sub))
                else:  # try/if/with/for/class bodies run at import time, maybe
                    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                        sub = getattr(node, field, None)
                        if isinstance(sub, list):
                            walk(sub, soft)
        walk(tree.body, hard)
        parsed[mod] = (path, hard, soft, lazy)
    return parsed[mod]

dead = {}
def never_imports(mod, active=()):
    if mod in dead:
        return dead[mod]
    if mod in active or imports(mod) is None:
        return False
    parts = mod.split(".")
    parents = [".".join(parts[:i]) for i in range(1, len(parts))]
    result = any(never_imports(p, active + (mod,)) for p in parents) or any(
        under(t, absent) or (under(t, ["flashinfer"]) and never_imports(t, active + (mod,)))
        for t in imports(mod)[1])
    dead[mod] = result
    return result

keep, todo = {}, list(roots)
for r in roots:
    if imports(r) is None or never_imports(r):
        sys.exit(f"root module {r} is missing or cannot import")
while todo:
    mod = todo.pop()
    if mod in keep or not under(mod, ["flashinfer"]) or imports(mod) is None or never_imports(mod):
        continue
    path, hard, soft, lazy = imports(mod)
    keep[mod] = os.path.relpath(path, stage)
    parts = mod.split(".")
    todo += [".".join(parts[:i]) for i in range(1, len(parts))]
    todo += hard + soft + (lazy if under(mod, deep) else [])
print("\n".join(sorted(keep.values())))
print(f"python: kept {len(keep)} modules; left out {sum(dead.values())} that cannot import here",
      file=sys.stderr)
PY

# Rule 2: the include closure. Prints paths relative to the stage.
[ -f "$CUDA_HOME/include/cuda_runtime.h" ] || { echo "no CUDA toolkit at CUDA_HOME=$CUDA_HOME" >&2; exit 1; }
"$PYTHON" - "$STAGE/flashinfer" "$CUDA_HOME" "$SITE/tvm_ffi" "$DEST/unresolved-includes.txt" \
  "${INCLUDE_ORDER[*]}" "${JIT_SOURCES[@]}" >"$STAGE/keep_inc.txt" <<'PY'
import os, re, sys

package, cuda_home, tvm_ffi, unresolved_out = sys.argv[1:5]
package = os.path.realpath(package)
order, sources = sys.argv[5].split(), sys.argv[6:]
roots = {"data": os.path.join(package, "data"), "cuda": cuda_home, "tvm_ffi": tvm_ffi}
# (ours, directory): ours is True for flashinfer/data directories, whose files are copied.
search = [(d.split("/")[0] == "data", os.path.realpath(os.path.join(roots[d.split("/")[0]], d.split("/", 1)[1])))
          for d in order]
directive = re.compile(
    r'^[ \t]*#[ \t]*(include(?:_next)?)[ \t]*([<"])([^>"\n]+)[>"]'
    r'|[A-Za-z_]*has_include(_next)?[ \t]*\([ \t]*([<"])([^>"\n]+)[>"]', re.M | re.I)

# Start from the JIT sources, and from every CUDA toolkit header outside its own CCCL copy
# (read only), so that a toolkit header the remote build reaches cannot pull a dropped one.
todo = [(True, os.path.join(package, "data", "csrc", s)) for s in sources]
for s in todo:
    if not os.path.isfile(s[1]):
        sys.exit(f"JIT source missing from the wheel: {s[1]}")
toolkit_cccl = os.path.join(cuda_home, "include", "cccl")
for top, dirs, files in os.walk(os.path.join(cuda_home, "include")):
    if top == toolkit_cccl or top.startswith(toolkit_cccl + os.sep):
        continue
    todo += [(False, os.path.join(top, f)) for f in files]

keep, seen, unresolved = set(), set(), set()
while todo:
    ours, path = todo.pop()
    path = os.path.realpath(path)
    if path in seen:
        continue
    seen.add(path)
    if ours:
        keep.add(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    for m in directive.finditer(text):
        if m.group(1):
            kind, delim, name = m.group(1), m.group(2), m.group(3).strip()
        else:
            kind, delim, name = ("include_next" if m.group(4) else "include"), m.group(5), m.group(6).strip()
        where = search
        if kind == "include_next":  # continue after the directory this file was found in
            mine = [i for i, (_, d) in enumerate(search) if path.startswith(d + os.sep)]
            where = search[max(mine) + 1:] if mine else search
        elif delim == '"':
            where = [(ours, os.path.dirname(path))] + search
        hits = [(o, os.path.join(d, name)) for o, d in where if os.path.isfile(os.path.join(d, name))]
        if not hits:
            unresolved.add(name)  # host compiler / system header, or a branch for another platform
        elif kind == "include_next":
            todo += hits
        else:
            # The first hit is what nvcc uses. When that is a toolkit or tvm_ffi header and
            # flashinfer/data has the name too, keep that copy as well: a remote toolkit may lack it.
            todo += hits[:1] + ([h for h in hits if h[0]][:1] if not hits[0][0] else [])
print("\n".join(sorted(os.path.relpath(p, os.path.dirname(package)) for p in keep)))
with open(unresolved_out, "w") as f:
    f.write("".join(n + "\n" for n in sorted(unresolved)))
print(f"headers: kept {len(keep)} files of flashinfer/data; read {len(seen - keep)} toolkit/tvm_ffi"
      " headers; names found nowhere (system headers) are listed in " + unresolved_out, file=sys.stderr)
PY

# Rule 3 and the copy.
{
  cat "$STAGE/keep_py.txt" "$STAGE/keep_inc.txt"
  for f in "${KEEP_DATA_FILES[@]}"; do echo "flashinfer/data/$f"; done
  echo flashinfer/py.typed
} | sort -u >"$DEST/manifest.txt"
(cd "$STAGE" && xargs -d '\n' cp --parents -t "$SITE" <"$DEST/manifest.txt")
DIST_INFO=flashinfer_python-$FLASHINFER_VERSION.dist-info
cp -r "$STAGE/$DIST_INFO" "$SITE"/
# RECORD lists the files installed: keep the lines of the files kept (and of the dist-info).
awk -F, -v d="$DIST_INFO/" 'NR == FNR { kept[$0] = 1; next } ($1 in kept) || index($1, d) == 1' \
  "$DEST/manifest.txt" "$STAGE/$DIST_INFO/RECORD" >"$SITE/$DIST_INFO/RECORD"
# The include directories cpp_ext.py names must exist even where nothing in them is kept.
for d in "${INCLUDE_ORDER[@]}"; do
  case $d in data/*) mkdir -p "$SITE/flashinfer/$d" ;; esac
done

for d in "$SITE/flashinfer" "$SITE/tvm_ffi" "$SITE"; do du -sh "$d"; done
size_mb=$(du -sm "$SITE" | cut -f1)
if [ "$size_mb" -gt "$MAX_MB" ]; then
  echo "FAIL: $SITE is ${size_mb} MB, over MAX_MB=$MAX_MB" >&2
  exit 1
fi
echo "OK: $SITE (${size_mb} MB <= ${MAX_MB} MB); put it on PYTHONPATH on the GPU machine"
