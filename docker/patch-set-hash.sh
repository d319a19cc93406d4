#!/bin/sh
# One sha256 over every file of the patch set (default directory: patches/), path names
# included. `make build` passes it as a build argument for the image label, and the image
# build recomputes it, so a label can never describe patches the image does not contain.
set -eu
cd "${1:-patches}"
find . -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print | LC_ALL=C sort | xargs -r sha256sum | sha256sum | cut -d' ' -f1
