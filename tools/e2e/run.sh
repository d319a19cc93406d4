#!/usr/bin/env bash
# `make e2e`: build both images from the real Dockerfile on local test bases and drive the compose
# stack through the Makefile verbs a user types, with a real Docker engine and no GPU.
#
#   1. engine: DOCKER_HOST or the default socket when one answers, else a private dockerd (root)
#   2. test bases: tools/e2e/bases.sh (debootstrap import, CPU SGLang, Python)
#   3. images: `make build` with tools/e2e/compose.e2e.yml laid over docker-compose.yml
#   4. inside the server image: the patch check, `launcher check --all`, sitecustomize precompiled
#   5. make up PROFILE=mine SPEC=plain (a profile and a spec mode of the user's, in a KIT_PROFILES_DIR
#      folder outside the checkout), status, switch PROFILE=custom-ar, bench, tune, switch back to mine, down
#
# What differs from a release build, and why: the GPU stages are skipped (KIT_GPU_STAGES=skip,
# DEEPEP_SM120=skip: the CPU base has no CUDA toolkit); the Dockerfile's `# syntax=` line is dropped
# (its frontend image lives in a registry this machine cannot reach; dockerd 20.10's built-in frontend
# reads the rest, cache mounts included); containers use the host network (the private engine has no
# bridge); the GPU reservation and the unlimited memlock (refused here) are removed; the server
# command is the SIMULATED stand-in.
# The `monitoring` compose profile (prom/prometheus, grafana/grafana) is not brought up: its images live in
# a registry this machine cannot reach. tests/test_monitoring_prometheus.py stands in for it in `make test`:
# Debian's prometheus binary scrapes a real kit stack with the shipped config, rules and dashboard queries.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD
e2e=${KIT_E2E_DIR:-/var/tmp/pcie-spec-kit-e2e}
cache=$repo/tools/e2e/.cache
py=${PY:-.venv/bin/python}
compose_bin=${COMPOSE_BIN:-$(command -v docker-compose || echo .venv/compose/bin/docker-compose)}
t0=$(date +%s)
step() { printf '\n=== [%4ss] %s\n' "$(($(date +%s) - t0))" "$*"; }

started_engine=""
cleanup() {
  local rc=$?
  if [ -n "${COMPOSE:-}" ]; then $COMPOSE --profile bench down -v --remove-orphans >/dev/null 2>&1 || true; fi
  if [ -n "$started_engine" ]; then bash tools/e2e/engine.sh stop "$e2e"; fi
  exit $rc
}
trap cleanup EXIT

step "engine"
pidfile_before=$([ -f "$e2e/dockerd.pid" ] && echo yes || echo no)
DOCKER_HOST=$(bash tools/e2e/engine.sh start "$e2e")
export DOCKER_HOST
if [ "$pidfile_before" = no ] && [ -f "$e2e/dockerd.pid" ]; then started_engine=yes; fi
echo "DOCKER_HOST=$DOCKER_HOST ($([ -n "$started_engine" ] && echo "private dockerd, stopped at the end" || echo "already running"))"
# Debian's docker CLI (BuildKit without buildx) first on PATH, for compose's CLI builds too
mkdir -p "$cache/bin"
ln -sf /usr/bin/docker "$cache/bin/docker"
export PATH="$cache/bin:$PATH" DOCKER=/usr/bin/docker DOCKER_BUILDKIT=1 COMPOSE_DOCKER_CLI_BUILD=1

step "test bases"
CACHE=$cache bash tools/e2e/bases.sh

step "compose file for this machine"
sed '1{/^# syntax=/d}' Dockerfile >"$cache/Dockerfile"
models=$e2e/models
mkdir -p "$models/target" "$models/draft" "$e2e/results"
export MODEL_PATH=$models/target DRAFT_MODEL_PATH=$models/draft RESULTS_DIR=$e2e/results
export KIT_CONTROL_TOKEN=${KIT_CONTROL_TOKEN:-e2e-$(date +%s)}
# Laid over by hand, not with `docker-compose config`, which would bake in today's PROFILE, SPEC,
# MODEL_PATH: they must stay ${...} and be read when each verb runs.
"$py" - docker-compose.yml tools/e2e/compose.e2e.yml "$cache/compose.merged.yml" <<'PY'
import sys, yaml

def lay(base, over):
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            lay(base[key], value)
        else:
            base[key] = value

doc = yaml.safe_load(open(sys.argv[1]))
lay(doc, yaml.safe_load(open(sys.argv[2])))
for svc in doc["services"].values():
    svc.pop("deploy", None)   # no GPU to reserve on this machine
    svc.pop("ports", None)    # host network: the ports are the host's
    # this machine's containers may not raise RLIMIT_MEMLOCK ("error setting rlimit type 8")
    (svc.get("ulimits") or {}).pop("memlock", None)
    if isinstance(svc.get("build"), dict):
        svc["build"]["context"] = "."
yaml.safe_dump(doc, open(sys.argv[3], "w"), sort_keys=False)
PY
COMPOSE="$compose_bin -p kit-e2e --project-directory $repo -f $cache/compose.merged.yml"
export COMPOSE
# A user's own profile and spec mode, in a folder outside the checkout: every make verb below sees
# KIT_PROFILES_DIR, as a user's .env would give it, and lays the mount override over the compose file.
user_profiles=$e2e/user-profiles
rm -rf "$user_profiles"
mkdir -p "$user_profiles/spec"
cat >"$user_profiles/mine.toml" <<'TOML'
extends = "nccl-tuned"
description = "make e2e: a profile from a KIT_PROFILES_DIR folder"
TOML
cat >"$user_profiles/spec/plain.toml" <<'TOML'
description = "make e2e: a spec mode from a KIT_PROFILES_DIR folder (no speculative decoding)"
TOML
export KIT_PROFILES_DIR=$user_profiles
# The test bases, named as a user names a base image (.env or the make command line): make build
# checks that SGLANG_IMAGE exists before it builds, and passes both on as build arguments.
export SGLANG_IMAGE=kit-test/sglang:0.5.23-cpu BENCH_BASE_IMAGE=kit-test/python:3.11
# `make status` must name the running profile and spec mode, as /status reports them.
expect_status() {
  local out
  out=$(make --no-print-directory status COMPOSE="$COMPOSE")
  printf '%s\n' "$out"
  grep -q "^$1 + $2 " <<<"$out" || { echo "make status does not name $1 + $2" >&2; exit 1; }
}

step "make build (server and bench images from the real Dockerfile)"
make --no-print-directory build COMPOSE="$COMPOSE"
for image in pcie-spec-kit/server:e2e pcie-spec-kit/bench:e2e; do
  echo "$image: $(/usr/bin/docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')"
done

step "inside the server image"
/usr/bin/docker run --rm --network host --entrypoint bash pcie-spec-kit/server:e2e -c '
  set -e
  python3 patches/apply.py --check
  launcher check --all --require-parser | tail -3
  ls /opt/kit/sitecustomize/__pycache__/sitecustomize.*.pyc
  # .dockerignore is an allow-list: the kit (and what pip install made of it), nothing else of the checkout
  python3 -c "
import os
kit = {\"README.md\", \"bench\", \"docker\", \"launcher\", \"patches\", \"profiles\", \"pyproject.toml\", \"sitecustomize\"}
made = {\"patches.sha256\", \"build\", \"pcie_spec_kit.egg-info\"}
found = set(os.listdir(\"/opt/kit\"))
print(\"/opt/kit:\", \" \".join(sorted(found)))
assert kit <= found and found <= kit | made, (\"not the kit alone\", sorted((found ^ kit) - made))
"
  python3 -m launcher.doctor.nccl --require 2.31.2
  launcher doctor --json --out /tmp/doctor.json >/dev/null || true
  python3 -c "import json; c = {c[\"name\"]: c for c in json.load(open(\"/tmp/doctor.json\"))[\"checks\"]}[\"nccl\"]; print(\"doctor nccl check:\", c[\"status\"], c[\"detail\"]); assert c[\"status\"] == \"pass\""
'

step "make up PROFILE=mine SPEC=plain (KIT_PROFILES_DIR=$KIT_PROFILES_DIR)"
make --no-print-directory up PROFILE=mine SPEC=plain COMPOSE="$COMPOSE" UP_TIMEOUT=300
cid=$($COMPOSE ps -q server)
echo "profile env seen inside the container's server process:"
/usr/bin/docker exec "$cid" python3 -c '
import pathlib
for proc in pathlib.Path("/proc").glob("[0-9]*"):
    try:
        if b"testsupport.standin" not in (proc / "cmdline").read_bytes():
            continue
        env = dict(e.split("=", 1) for e in (proc / "environ").read_text().split("\0") if "=" in e)
    except OSError:
        continue
    print({k: env.get(k) for k in ("KIT_ACTIVE_PROFILE", "KIT_ACTIVE_SPEC", "NCCL_PROTO", "NCCL_ALGO")})
    # mine extends nccl-tuned: its NCCL settings come through the user file
    assert env.get("KIT_ACTIVE_PROFILE") == "mine" and env.get("KIT_ACTIVE_SPEC") == "plain", env
    assert env.get("NCCL_PROTO") == "LL", env
    break
else:
    raise SystemExit("no stand-in process found")
'

step "make status"
expect_status mine plain

step "make switch PROFILE=custom-ar SPEC=off"
make --no-print-directory switch PROFILE=custom-ar SPEC=off COMPOSE="$COMPOSE"

step "make bench"
make --no-print-directory bench COMPOSE="$COMPOSE" \
  BENCH_ARGS="run --profiles baseline,custom-ar --spec off --repeats 1 --num-prompts 4 --max-tokens 32 --warmup 1"
echo "bundle files and their owner (uid:gid), expected $(id -u):$(id -g):"
find "$RESULTS_DIR" -maxdepth 2 -newer "$cache/compose.merged.yml" -printf '  %U:%G %P\n' | head -8

step "make tune (host facts from the doctor in the server container, the tune in the bench container)"
make --no-print-directory tune COMPOSE="$COMPOSE" \
  TUNE_ARGS="--profiles baseline,custom-ar --spec off --num-prompts 2 --max-tokens 16 --warmup 1 --final-repeats 1 --budget 10m"
tune_json=$(ls -t "$RESULTS_DIR"/tune/*/tune.json | head -1)
"$py" -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["complete"] and d["simulated"], d; print("tune.json:", d["decision"]["outcome"], [c["label"] for c in d["cells"]])' "$tune_json"
expect_status custom-ar off  # the tune put production back on the plan it started from

step "make switch PROFILE=mine SPEC=plain (back to the user's profile)"
make --no-print-directory switch PROFILE=mine SPEC=plain COMPOSE="$COMPOSE"
expect_status mine plain

step "make down"
make --no-print-directory down COMPOSE="$COMPOSE"
left=$(/usr/bin/docker ps -aq --filter label=com.docker.compose.project=kit-e2e)
[ -z "$left" ] || { echo "containers left after make down: $left" >&2; exit 1; }
step "done: make e2e passed in $(($(date +%s) - t0)) s"
