#!/usr/bin/env bash
# Assemble the part of SGLang 0.5.23 that the all-reduce bench's `mscclpp` adapter imports
# (sglang.srt.distributed.device_communicators.pymscclpp), with the Python 3.12 wheels it needs
# that the GPU development machine lacks: DEST/site (put it on PYTHONPATH there) and DEST/wheels
# (install them there with `pip install --no-index --no-deps --target`; unpacked, jedi alone is 33 MB).
#
# Why not the wheel: sglang's wheel is 39 MB compressed, 123 MB unpacked, and built for CPython 3.11
# only (its Rust extensions), while the machine runs 3.12 and takes 64 MiB per call. The adapter
# needs about 1 MB of it: the modules that importing the communicator loads, found here by importing
# it in the test environment (make venv), plus the package metadata so the bench can name the version.
#
#   tools/gpu/sglang_carry.sh DEST        (needs .venv, from `make venv`, and PyPI)
set -euo pipefail

if [ "$#" -ne 1 ]; then
  echo "usage: $0 DEST" >&2
  exit 2
fi
dest=$1
python=${PYTHON:-.venv/bin/python}
MODULE=sglang.srt.distributed.device_communicators.pymscclpp
# What importing $MODULE needs beyond the machine's own packages (its list is in the device notes),
# at the versions the test environment resolved; all for CPython 3.12 on x86-64.
WHEELS=(
  msgspec==0.23.0 orjson==3.13.0 pybase64==1.5.1 pyzmq==27.3.0 starlette==1.10.0
  ipython==9.18.1 ipython_pygments_lexers==1.1.1 traitlets==5.16.1 jedi==0.20.1 parso==0.8.7
  prompt_toolkit==3.0.53 decorator==5.3.1 matplotlib-inline==0.2.2 pexpect==4.9.0 ptyprocess==0.7.0
  stack-data==0.6.3 asttokens==3.0.2 executing==2.3.0 pure_eval==0.2.4 wcwidth==0.9.4
  blake3==1.0.11 sortedcontainers==2.4.0
)
if ! "$python" -c 'import sglang' 2>/dev/null; then
  echo "$python cannot import sglang: run 'make venv' first (it installs sglang==0.5.23 without deps)" >&2
  exit 2
fi

rm -rf "$dest/site" "$dest/wheels"
mkdir -p "$dest/site" "$dest/wheels"
"$python" - "$MODULE" "$dest/site" <<'EOF'
import importlib, importlib.metadata as md, shutil, sys
from pathlib import Path

module, site = sys.argv[1], Path(sys.argv[2])
before = set(sys.modules)
importlib.import_module(module)
root = Path(importlib.import_module("sglang").__file__).parent.parent
files = sorted(
    Path(m.__file__)
    for name, m in list(sys.modules.items())
    if name.split(".")[0] == "sglang" and getattr(m, "__file__", None)
)
for f in files:
    target = site / f.relative_to(root)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(f, target)
dist = md.distribution("sglang")
info = Path(dist._path)  # the .dist-info folder: version metadata for importlib.metadata
shutil.copytree(info, site / info.name, ignore=shutil.ignore_patterns("RECORD"))
print(f"sglang {dist.version}: {len(files)} modules copied for {module}")
EOF
"$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
  --platform any -d "$dest/wheels" "${WHEELS[@]}"
du -sh "$dest/site" "$dest/wheels"
