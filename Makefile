# User-facing verbs of the kit. `make` alone lists them.
#
#   make doctor                     is this host fit, and which profiles can run here
#   make up PROFILE=fused           build if needed, start SGLang with that profile, wait until healthy
#   make switch PROFILE=custom-ar   change the running server's profile through its control API
#   make bench                      every profile end to end, side by side, with a report; the server
#                                   ends on the plan it was on (BENCH_ARGS="run --leave-on CELL" keeps a passed cell)
#   make sla SLA_ARGS="--ttft-p99-ms 2000 --tpot-p99-ms 50"
#                                   the highest request rate each profile x spec holds within those p99 targets
#   make down
#
# Checks of PROFILE, SPEC, MODEL_OVERLAY and MODEL_PATH are plain make and shell, plus the host's python3
# (3.11 or newer, standard library only) asking the launcher which profiles, spec modes and model overlays exist
# (launcher/profiles/catalog.py), so they work on a host without the kit's Python environment, and
# they stop before any docker command runs. `make -n VERB` prints the docker commands a verb runs.

.DEFAULT_GOAL := help
SHELL := /bin/sh

PROFILE ?= $(or $(call dotenv,PROFILE),baseline)
SPEC ?= $(or $(call dotenv,SPEC),$(DEFAULT_SPEC))
# The model overlay (profiles/model/<name>.toml) laid over every profile: one choice per deployment,
# so `make switch` keeps the server's. Empty: none.
MODEL_OVERLAY ?= $(call dotenv,MODEL_OVERLAY)
VENV ?= .venv
PY ?= $(VENV)/bin/python
HADOLINT ?= $(if $(wildcard $(VENV)/bin/hadolint),$(VENV)/bin/hadolint,hadolint)
# The test environment: SGLang's real argument parser needs torch (CPU is enough) and sglang without
# its GPU dependencies. Off this project's CI, add the CPU wheel index to avoid a CUDA build:
#   make test TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
PYTHON ?= python3
TORCH_SPEC ?= torch==2.13.0
TORCH_PIP_ARGS ?=
SGLANG_VERSION ?= 0.5.23
# docker-compose v1 for the compose-file tests and `make e2e`, in a venv of its own (its pins clash
# with the kit's: python-dotenv<1, PyYAML<6; it runs with PyYAML 6), so no system package is needed.
COMPOSE_V1 ?= docker-compose==1.29.2
COMPOSE_V1_DEPS ?= "PyYAML>=6,<7" "docker>=5,<7" "dockerpty>=0.4.1,<1" "docopt>=0.6.1,<1" "jsonschema>=2.5.1,<4" \
	"requests>=2.20,<2.32" "texttable>=0.9,<2" "websocket-client>=0.32,<1" "python-dotenv>=0.13,<1" "distro>=1.5,<2" \
	"setuptools<81"
DOCKER ?= docker
# `docker compose` (v2 plugin) when it is installed, else docker-compose (v1). Worked out on first use
# only, so verbs that never reach docker never run it.
COMPOSE ?= $(eval COMPOSE := $(shell $(DOCKER) compose version >/dev/null 2>&1 && echo "$(DOCKER) compose" || echo docker-compose))$(COMPOSE)
# Seconds `make up` waits for /health (a 1T-parameter load with CUDA-graph capture takes many minutes).
UP_TIMEOUT ?= 3600
BENCH_ARGS ?= run
TUNE_ARGS ?=
SLA_ARGS ?=
GATE_ARGS ?=
ALLREDUCE_ARGS ?= --graph --with-nccl-tests
DOCTOR_ARGS ?=
RESULTS_DIR ?= $(or $(call dotenv,RESULTS_DIR),results)

# ---- values from .env (docker compose reads the same file; the environment wins over it) ----------
dotenv = $(shell [ -f .env ] && sed -n 's/^[[:space:]]*$(1)[[:space:]]*=[[:space:]]*//p' .env | tail -n 1 \
	| sed -e 's/[[:space:]]*$$//' -e 's/^"\(.*\)"$$/\1/' -e "s/^'\(.*\)'$$/\1/")
ENV_MODEL_PATH = $(or $(MODEL_PATH),$(call dotenv,MODEL_PATH))
ENV_DRAFT_MODEL_PATH = $(or $(DRAFT_MODEL_PATH),$(call dotenv,DRAFT_MODEL_PATH))

# ---- profiles and spec modes: the launcher knows them (launcher/profiles/catalog.py) ----------------
KIT_PROFILES_DIR ?= $(call dotenv,KIT_PROFILES_DIR)
export KIT_PROFILES_DIR
# One catalog query with the host's python3, run at most once per make (cached on first use).
shquote = '$(subst ','\'',$(1))'
CATALOG = $(PYTHON) -m launcher.profiles.catalog
catalog = $(eval CATALOG_OUT := $(shell (KIT_PROFILES_DIR=$(call shquote,$(KIT_PROFILES_DIR)) $(CATALOG) $(1)) 2>&1))$(if \
	$(filter 0,$(.SHELLSTATUS)),$(CATALOG_OUT),$(error $(CATALOG) $(1) failed: $(CATALOG_OUT) \
	(the checks need Python 3.11 or newer as $(PYTHON); PYTHON=/path/to/python3 picks another)))
KNOWN_PROFILES = $(eval KNOWN_PROFILES := $(call catalog,profiles))$(KNOWN_PROFILES)
KNOWN_SPECS = $(eval KNOWN_SPECS := $(call catalog,specs))$(KNOWN_SPECS)
DEFAULT_SPEC = $(eval DEFAULT_SPEC := $(call catalog,default-spec))$(DEFAULT_SPEC)
KNOWN_MODEL_OVERLAYS = $(eval KNOWN_MODEL_OVERLAYS := $(call catalog,model-overlays))$(KNOWN_MODEL_OVERLAYS)
# MODEL_OVERLAY=<value> goes on a command only when it, or .env, names one: an empty value then still
# wins over .env, and nothing changes for a deployment without one.
MODEL_OVERLAY_ARG = $(if $(or $(MODEL_OVERLAY),$(call dotenv,MODEL_OVERLAY)),MODEL_OVERLAY=$(MODEL_OVERLAY) )
# Compose cannot split a colon-separated variable into volumes, so with KIT_PROFILES_DIR set the
# launcher writes an override that mounts each folder read-only at its own path in the server and
# bench containers and passes the variable on; every compose verb lays it over the compose file.
PROFILES_OVERRIDE := .kit/compose.profiles.yml
PROFILES_OVERRIDE_DEP = $(if $(KIT_PROFILES_DIR),$(PROFILES_OVERRIDE))
COMPOSE_FILES = $(if $(KIT_PROFILES_DIR), $(if $(filter -f --file,$(COMPOSE)),,-f docker-compose.yml )-f $(PROFILES_OVERRIDE))

# ---- checks, before any recipe runs --------------------------------------------------------------
PROFILE_GOALS := up switch show allreduce fleet-switch
MODEL_OVERLAY_GOALS := up show allreduce
MODEL_GOALS := up bench sla tune allreduce

ifneq ($(filter $(PROFILE_GOALS),$(MAKECMDGOALS)),)
ifneq ($(words $(PROFILE))$(filter $(PROFILE),$(KNOWN_PROFILES)),1$(PROFILE))
$(error unknown PROFILE '$(PROFILE)'. Known profiles: $(KNOWN_PROFILES) (profiles/<name>.toml$(if $(KIT_PROFILES_DIR), or <dir>/<name>.toml for a dir in KIT_PROFILES_DIR=$(KIT_PROFILES_DIR)); `make profiles` lists them))
endif
ifneq ($(words $(SPEC))$(filter $(SPEC),$(KNOWN_SPECS)),1$(SPEC))
$(error unknown SPEC '$(SPEC)'. Known spec modes: $(KNOWN_SPECS) (profiles/spec/<mode>.toml$(if $(KIT_PROFILES_DIR), or <dir>/spec/<mode>.toml for a dir in KIT_PROFILES_DIR)))
endif
endif

ifneq ($(filter $(MODEL_OVERLAY_GOALS),$(MAKECMDGOALS)),)
ifneq ($(strip $(MODEL_OVERLAY)),)
ifneq ($(words $(MODEL_OVERLAY))$(filter $(MODEL_OVERLAY),$(KNOWN_MODEL_OVERLAYS)),1$(MODEL_OVERLAY))
$(error unknown MODEL_OVERLAY '$(MODEL_OVERLAY)'. Known model overlays: $(or $(KNOWN_MODEL_OVERLAYS),(none)) (profiles/model/<name>.toml$(if $(KIT_PROFILES_DIR), or <dir>/model/<name>.toml for a dir in KIT_PROFILES_DIR)); leave it empty for none)
endif
endif
endif

# Every missing or wrong model path in one message, so a new user fixes them in one go.
ifneq ($(filter $(MODEL_GOALS),$(MAKECMDGOALS)),)
MODEL_PROBLEMS := $(if $(ENV_MODEL_PATH),$(if $(wildcard $(ENV_MODEL_PATH)),,MODEL_PATH=$(ENV_MODEL_PATH) does not exist on this host (it must be the model directory's absolute path).),MODEL_PATH is not set: put MODEL_PATH=/absolute/path/to/model in .env (cp .env.example .env) or pass MODEL_PATH=... to make.)
ifneq ($(filter up,$(MAKECMDGOALS)),)
ifeq ($(SPEC),eagle3)
MODEL_PROBLEMS += $(if $(ENV_DRAFT_MODEL_PATH),$(if $(wildcard $(ENV_DRAFT_MODEL_PATH)),,DRAFT_MODEL_PATH=$(ENV_DRAFT_MODEL_PATH) does not exist on this host (it must be the draft model directory's absolute path).),SPEC=eagle3 needs DRAFT_MODEL_PATH (the EAGLE-3 draft model directory) in .env or on the command line; or use SPEC=ngram or SPEC=off.)
endif
endif
ifneq ($(strip $(MODEL_PROBLEMS)),)
$(error $(strip $(MODEL_PROBLEMS)))
endif
endif

# docker-compose.yml does not load without MODEL_PATH. Verbs that never create the server container
# (build, down, logs, status, switch) get a placeholder when it is unset, so `make down` always works.
COMPOSE_CMD = $(COMPOSE)$(COMPOSE_FILES)
COMPOSE_ANY = $(if $(ENV_MODEL_PATH),,MODEL_PATH=/nonexistent )$(COMPOSE_CMD)
# BuildKit (cache mounts) also when docker-compose v1 drives the build.
BUILD_ENV = DOCKER_BUILDKIT=1 COMPOSE_DOCKER_CLI_BUILD=1
# Image labels, and base-image/source pins from the environment or .env when set. KIT_CREATED is the
# commit time, so an unchanged tree rebuilds to the same image and `make up` does not recreate it.
PIN_VARS := SGLANG_IMAGE BENCH_BASE_IMAGE MSCCLPP_REF DEEPEP_REF DEEPEP_SM120 NCCL_WHEEL
# The version lives in launcher/__init__.py alone (pyproject reads it too).
KIT_VERSION := $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' launcher/__init__.py)
BUILD_ARGS = --build-arg KIT_VERSION=$(KIT_VERSION) --build-arg KIT_PATCHES_SHA256=$$(docker/patch-set-hash.sh patches) \
	--build-arg KIT_REVISION=$$(git describe --always --dirty --abbrev=40 2>/dev/null || echo unknown) \
	--build-arg KIT_CREATED=$$(git log -1 --format=%cI 2>/dev/null || echo unknown) \
	$(strip $(foreach v,$(PIN_VARS),$(if $(or $($(v)),$(call dotenv,$(v))),--build-arg $(v)=$(or $($(v)),$(call dotenv,$(v))))))
# First line of every docker verb: without an engine, one clear line instead of a compose traceback.
ENGINE_CHECK = @$(DOCKER) info >/dev/null 2>&1 || { echo "make $@: no Docker engine answers ($(DOCKER) info failed): start it (sudo systemctl start docker) or set DOCKER_HOST" >&2; exit 1; }
# The server image's base (SGLANG_IMAGE; unset: the Dockerfile's default), checked before a build:
# locally, else in its registry. Without it, one line naming the build argument instead of a BuildKit
# error deep in the build output.
BASE_IMAGE = $(or $(SGLANG_IMAGE),$(call dotenv,SGLANG_IMAGE),$(shell sed -n 's/^ARG SGLANG_IMAGE=//p' Dockerfile 2>/dev/null | head -n 1))
BASE_CHECK = @$(DOCKER) image inspect $(call shquote,$(BASE_IMAGE)) >/dev/null 2>&1 || $(DOCKER) manifest inspect $(call shquote,$(BASE_IMAGE)) >/dev/null 2>&1 \
	|| { echo "make $@: base image '$(BASE_IMAGE)' is neither local nor in its registry (docker image inspect, docker manifest inspect): set SGLANG_IMAGE=<an SGLang $(SGLANG_VERSION) CUDA-13 image> in .env or on the make command line" >&2; exit 1; }
# -T when stdin is not a terminal (CI, scripts): docker refuses a TTY there.
EXEC_T = $(shell [ -t 0 ] || echo -T)

.PHONY: help build up switch status down logs bench sla tune gate allreduce doctor demo demo-tune demo-sla test test-fast e2e lint check show profiles venv aic docs fleet-up fleet-status fleet-switch monitor

help: ## list the verbs (this text)
	@printf 'Usage: make VERB [PROFILE=<profile>] [SPEC=<mode>] [MODEL_OVERLAY=<model overlay>]\n\nVerbs:\n'
	@grep -E '^[a-z0-9-]+:.*## ' $(firstword $(MAKEFILE_LIST)) | sed 's/:.*## /|/' | awk -F'|' '{printf "  %-10s %s\n", $$1, $$2}'
	@printf '\nProfiles:       %s\nSpec modes:     %s\nModel overlays: %s\nNow:            PROFILE=%s SPEC=%s MODEL_OVERLAY=%s PY=%s\n' \
		'$(KNOWN_PROFILES)' '$(KNOWN_SPECS)' '$(KNOWN_MODEL_OVERLAYS)' '$(PROFILE)' '$(SPEC)' '$(MODEL_OVERLAY)' '$(PY)'

build: $(PROFILES_OVERRIDE_DEP)
build: ## build the server and bench images (labels carry the patch-set hash and git revision)
	$(ENGINE_CHECK)
	$(BASE_CHECK)
	$(BUILD_ENV) $(COMPOSE_ANY) --profile bench build $(BUILD_ARGS) server bench

up: $(PROFILES_OVERRIDE_DEP)
up: ## build if needed, start SGLang with PROFILE and SPEC, wait until /health answers
	$(ENGINE_CHECK)
	$(BASE_CHECK)
	$(BUILD_ENV) $(COMPOSE_CMD) build $(BUILD_ARGS) server
	mkdir -p $(RESULTS_DIR)
	$(MODEL_OVERLAY_ARG)PROFILE=$(PROFILE) SPEC=$(SPEC) $(COMPOSE_CMD) up -d server
	@cid=$$($(COMPOSE_CMD) ps -q server); start=$$(date +%s); last=-30; \
	echo "waiting for the server to become healthy (up to $(UP_TIMEOUT)s; loading a large model takes minutes)"; \
	while :; do \
		state=$$($(DOCKER) inspect -f '{{.State.Status}}/{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$$cid") || exit 1; \
		elapsed=$$(( $$(date +%s) - start )); \
		case "$$state" in \
		running/healthy) echo "server healthy after $${elapsed}s: PROFILE=$(PROFILE) SPEC=$(SPEC)$(if $(MODEL_OVERLAY), MODEL_OVERLAY=$(MODEL_OVERLAY)); make status, make logs"; exit 0 ;; \
		running/starting|running/) ;; \
		*) echo "server is $$state after $${elapsed}s; see: make logs" >&2; exit 1 ;; \
		esac; \
		if [ "$$elapsed" -ge "$(UP_TIMEOUT)" ]; then echo "server not healthy after $${elapsed}s (UP_TIMEOUT); see: make logs" >&2; exit 1; fi; \
		if [ $$((elapsed - last)) -ge 30 ]; then last=$$elapsed; \
			echo "  $${elapsed}s $$state: $$($(DOCKER) logs --tail 1 "$$cid" 2>&1 | cut -c1-120)"; fi; \
		sleep 5; \
	done

switch: $(PROFILES_OVERRIDE_DEP)
switch: ## switch the running server to PROFILE/SPEC via its control API (drain, restart, health gate, roll back)
	$(ENGINE_CHECK)
	$(COMPOSE_ANY) exec $(EXEC_T) server launcher switch $(PROFILE) --spec $(SPEC)

status: $(PROFILES_OVERRIDE_DEP)
status: ## container state, then the control API's view of the running profile
	$(ENGINE_CHECK)
	$(COMPOSE_ANY) ps server
	$(COMPOSE_ANY) exec $(EXEC_T) server launcher status

down: $(PROFILES_OVERRIDE_DEP)
down: ## stop and remove the containers (caches and kit state stay in their volumes)
	$(ENGINE_CHECK)
	$(COMPOSE_ANY) --profile bench down

logs: $(PROFILES_OVERRIDE_DEP)
logs: ## follow the server log
	$(ENGINE_CHECK)
	$(COMPOSE_ANY) logs -f --tail=200 server

bench: $(PROFILES_OVERRIDE_DEP)
bench: ## run the bench container against the server (starts it if needed); BENCH_ARGS="run ..."; production ends on the plan it found
	$(ENGINE_CHECK)
	$(BUILD_ENV) $(COMPOSE_CMD) --profile bench build $(BUILD_ARGS) bench
	mkdir -p $(RESULTS_DIR)
	KIT_UID=$$(id -u) KIT_GID=$$(id -g) $(COMPOSE_CMD) --profile bench run --rm bench $(BENCH_ARGS)

sla: $(PROFILES_OVERRIDE_DEP)
sla: ## highest request rate each profile x spec holds within p99 targets: SLA_ARGS="--ttft-p99-ms 2000 --tpot-p99-ms 50" (docs/sla.md)
	$(ENGINE_CHECK)
	$(BUILD_ENV) $(COMPOSE_CMD) --profile bench build $(BUILD_ARGS) bench
	mkdir -p $(RESULTS_DIR)
	KIT_UID=$$(id -u) KIT_GID=$$(id -g) $(COMPOSE_CMD) --profile bench run --rm bench sla $(SLA_ARGS)

tune: $(PROFILES_OVERRIDE_DEP)
tune: ## fastest correct profile x spec x EAGLE-3 point for this host, within a budget (TUNE_ARGS="--budget 3h"; docs/tune.md)
	$(ENGINE_CHECK)
	$(BUILD_ENV) $(COMPOSE_CMD) --profile bench build $(BUILD_ARGS) bench
	mkdir -p $(RESULTS_DIR)/tune
	$(COMPOSE_CMD) exec -T server launcher doctor --json > $(RESULTS_DIR)/tune/host-facts.json \
		|| [ -s $(RESULTS_DIR)/tune/host-facts.json ] \
		|| { echo "make tune: no host facts: the tune switches a running server; start it first (make up PROFILE=...)" >&2; exit 1; }
	KIT_UID=$$(id -u) KIT_GID=$$(id -g) $(COMPOSE_CMD) --profile bench run --rm bench tune \
		--facts /results/tune/host-facts.json $(TUNE_ARGS)

gate: ## the correctness gate alone: GATE_ARGS="--reference URL --candidate URL" (two servers) or "--bundle results/RUN" (docs/bench.md)
	$(ENGINE_CHECK)
	$(BUILD_ENV) $(COMPOSE_CMD) --profile bench build $(BUILD_ARGS) bench
	mkdir -p $(RESULTS_DIR)
	KIT_UID=$$(id -u) KIT_GID=$$(id -g) $(COMPOSE_CMD) --profile bench run --rm bench gate $(GATE_ARGS)

allreduce: $(PROFILES_OVERRIDE_DEP)
allreduce: ## all-reduce latency for PROFILE's environment beside nccl-tests, into results/allreduce/
	$(ENGINE_CHECK)
	$(BASE_CHECK)
	$(BUILD_ENV) $(COMPOSE_CMD) build $(BUILD_ARGS) server
	mkdir -p $(RESULTS_DIR)
	$(MODEL_OVERLAY_ARG)$(COMPOSE_CMD) run --rm --no-deps --entrypoint bench server allreduce --profile $(PROFILE) \
		--out /results/allreduce/$$(date -u +%Y%m%dT%H%M%SZ)-$(PROFILE) $(ALLREDUCE_ARGS)

# `make doctor` runs in the server container when a Docker engine answers. Without one (Docker not installed
# or not started yet, the first thing a new host may lack) it checks the host itself with the kit's venv,
# created on first use as for `make demo`: the driver, links, kernel and limits are the host's either way;
# only the NCCL judged is the host's instead of the image's, and the docker check says why Docker failed.
ifneq ($(filter doctor,$(MAKECMDGOALS)),)
DOCKER_UP := $(shell $(DOCKER) info >/dev/null 2>&1 && echo yes)
endif
DOCTOR_ON_HOST = $(strip $(PY) -m launcher doctor $(DOCTOR_ARGS))

doctor: $(PROFILES_OVERRIDE_DEP)
doctor: ## check this host (driver, toolkit, P2P, IOMMU/ACS, /dev/shm, NCCL) in the server container, or from .venv without Docker
ifneq ($(DOCKER_UP),)
	$(BASE_CHECK)
	$(BUILD_ENV) $(COMPOSE_ANY) build $(BUILD_ARGS) server
	$(COMPOSE_ANY) run --rm --no-deps --entrypoint launcher server doctor $(DOCTOR_ARGS)
else
	@echo "make doctor: no Docker engine answers ($(DOCKER) info failed): checking this host with $(DOCTOR_ON_HOST) instead; start Docker (sudo systemctl start docker) to check inside the server image, with its NCCL" >&2
	$(if $(VENV_KIT_STAMP),@$(MAKE) --no-print-directory $(VENV_KIT_STAMP))
	@$(PY) -c 'import launcher.doctor.cli' >/dev/null 2>&1 || { echo "make doctor: no Docker engine, and $(PY) cannot import the kit to check the host: create its venv (python3 -m venv .venv && .venv/bin/pip install -e .), then run .venv/bin/python -m launcher doctor; or start Docker" >&2; exit 1; }
	$(DOCTOR_ON_HOST)
endif

$(PROFILES_OVERRIDE): FORCE
	$(CATALOG) compose-override --out $@
FORCE:

# Host-side verbs create the virtualenv on first use; PY=... on the command line uses that Python as is.
ifeq ($(origin PY),command line)
VENV_KIT_STAMP :=
VENV_TEST_STAMP :=
VENV_COMPOSE_STAMP :=
else
VENV_KIT_STAMP := $(VENV)/.kit-installed
VENV_TEST_STAMP := $(VENV)/.test-installed
VENV_COMPOSE_STAMP := $(VENV)/.compose-installed
endif

$(VENV)/.kit-installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

# SGLang's light dependencies first, SGLang itself last with --no-deps: pip then has nothing to
# resolve against SGLang's GPU pins, so it prints no dependency-conflict block.
$(VENV)/.compose-installed:
	$(PYTHON) -m venv $(VENV)/compose
	$(VENV)/compose/bin/pip install -q $(COMPOSE_V1_DEPS)
	$(VENV)/compose/bin/pip install -q --no-deps $(COMPOSE_V1)
	touch $@

$(VENV)/.test-installed: $(VENV)/.kit-installed $(VENV)/.compose-installed
	$(VENV)/bin/pip install -q $(TORCH_PIP_ARGS) $(TORCH_SPEC)
	$(VENV)/bin/pip install -q -e '.[sglang-cpu]'
	$(VENV)/bin/pip install -q --no-deps sglang==$(SGLANG_VERSION)
	@echo "sglang $(SGLANG_VERSION) installed without its GPU dependencies (CUDA torch, sgl-kernel, flashinfer): the tests use only its argument parser"
	touch $@

venv: $(VENV_TEST_STAMP) ## create .venv with the kit, the test tools and SGLang's CPU-only parser

# AIConfigurator (NVIDIA's performance model, with an rtx_pro_6000_server system) in a venv of its own: an
# optional second opinion for `bench predict --aic`, never a dependency of the kit (its pins: pandas,
# pyarrow, bokeh, ...). `bench predict --aic` finds .venv-aic/bin/python here, or KIT_AIC_PYTHON.
AIC_VENV ?= .venv-aic
AIC_SPEC ?= aiconfigurator==0.12.0
aic: ## install AIConfigurator into .venv-aic for `bench predict --aic` (optional; KIT_AIC_PYTHON picks another)
	$(PYTHON) -m venv $(AIC_VENV)
	$(AIC_VENV)/bin/pip install -q --upgrade pip
	$(AIC_VENV)/bin/pip install -q '$(AIC_SPEC)'
	@$(AIC_VENV)/bin/python -c "import aiconfigurator; print('aiconfigurator', aiconfigurator.__version__, 'in $(AIC_VENV); bench predict --aic uses it from this folder, or set KIT_AIC_PYTHON=$(AIC_VENV)/bin/python')"

demo: $(VENV_KIT_STAMP) ## the whole flow against a simulated server (no GPU, no docker)
	$(PY) -m testsupport.demo

demo-tune: $(VENV_KIT_STAMP) ## `bench tune` against the simulated server; fails unless it finds the stand-in's optimum
	$(PY) -m testsupport.demo --tune

demo-sla: $(VENV_KIT_STAMP) ## `bench sla` against a simulated server whose passes slow with the load: each cell's max rate within a p99 SLA, the frontier plot (about 3 minutes)
	$(PY) -m testsupport.demo --sla

# The tests mostly wait on the processes they start, so there are more workers than cores. --dist loadfile
# keeps a file's tests on one worker: module-scoped fixtures (a started stack, a built wheel) are set up once.
# Files go out heaviest first (tests/file_seconds.json, tools/suite_weights.py), not by their count of tests.
TEST_WORKERS ?= 4
TEST_ARGS ?=
test: $(VENV_TEST_STAMP) ## run the test suite, TEST_WORKERS=4 in parallel (creates .venv on first use)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(TEST_ARGS)

test-fast: $(VENV_TEST_STAMP) ## the tests not marked stack: they start no process (how long: docs/development.md)
	$(PY) -m pytest -q -m "not stack" $(TEST_ARGS)

e2e: $(VENV_TEST_STAMP) ## both images from the real Dockerfile and the compose stack, on a CPU machine (root: may start a private dockerd)
	PY=$(PY) COMPOSE_BIN=$(VENV)/compose/bin/docker-compose bash tools/e2e/run.sh

.PHONY: test-real demo-real
REAL_VENV ?= .venv-real
$(REAL_VENV)/.real-installed: tools/real/requirements.txt tools/real/constraints.txt tools/real/install.sh
	REAL_VENV=$(abspath $(REAL_VENV)) bash tools/real/install.sh
test-real: $(REAL_VENV)/.real-installed ## real SGLang 0.5.23 on the CPU under launcher serve (tests_real/; builds a 6.5 GB .venv-real first)
	$(REAL_VENV)/bin/python -m pytest tests_real -q -p no:cacheprovider --timeout 3600 $(TEST_ARGS)

# AIPerf (NVIDIA's benchmark client) in a venv of its own (its pins: dash, datasets, pyarrow, kubernetes-asyncio, ...;
# 1.2 GB): the outside client tests_outside/ holds `bench run --request-rate` against, run as a command, offline
# (testsupport/aiperf_client.py). The tests themselves run under the kit's venv.
.PHONY: test-outside
AIPERF_VENV ?= .venv-aiperf
AIPERF_SPEC ?= aiperf==0.13.0
$(AIPERF_VENV)/.aiperf-installed:
	$(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/pip install -q --upgrade pip
	$(AIPERF_VENV)/bin/pip install -q '$(AIPERF_SPEC)'
	$(AIPERF_VENV)/bin/aiperf --version
	touch $@
test-outside: $(VENV_KIT_STAMP) $(AIPERF_VENV)/.aiperf-installed ## open-loop `bench run` against AIPerf 0.13.0 and the stand-in's schedule (tests_outside/; builds a 1.2 GB .venv-aiperf first)
	AIPERF_VENV=$(abspath $(AIPERF_VENV)) $(PY) -m pytest tests_outside -q -p no:cacheprovider -rA $(TEST_ARGS)

demo-real: $(REAL_VENV)/.real-installed ## the demo's flow (up, switch, bench, report) on REAL SGLang 0.5.23 on the CPU with a tiny random model: timings mean nothing about a GPU host
	$(REAL_VENV)/bin/python -m testsupport.real.demo

# shellcheck is a system package (Debian: shellcheck); without it `make lint` says, on one line, that it
# checked no shell script. The compose file is checked by the docker-compose `make test` installs in
# .venv/compose (created here too unless PY is given), else by PATH's docker compose or docker-compose.
SHELLCHECK ?= shellcheck
# import-linter's command beside PY (pyproject.toml's [tool.importlinter] contracts), or PATH's when PY is a bare name.
LINT_IMPORTS ?= $(if $(findstring /,$(PY)),$(dir $(PY)),)lint-imports
LINT_COMPOSE = $(if $(or $(VENV_COMPOSE_STAMP),$(wildcard $(VENV)/compose/bin/docker-compose)),$(VENV)/compose/bin/docker-compose,$(COMPOSE))
lint: $(VENV_KIT_STAMP) $(VENV_COMPOSE_STAMP)
lint: ## ruff, the import contracts (lint-imports), hadolint, shellcheck (one line says so when it is missing), docker-compose config
	$(PY) -m ruff check .
	$(LINT_IMPORTS) --no-logo
	$(HADOLINT) Dockerfile
	@if command -v $(SHELLCHECK) >/dev/null 2>&1; then $(SHELLCHECK) docker/*.sh && echo "docker/*.sh ok (shellcheck)"; \
	else echo "make lint: shellcheck not installed, docker/*.sh NOT checked: apt-get install shellcheck (Debian)" >&2; fi
	@if [ -x $(VENV)/compose/bin/docker-compose ] || command -v docker-compose >/dev/null 2>&1 || $(DOCKER) compose version >/dev/null 2>&1; then \
		$(if $(ENV_MODEL_PATH),,MODEL_PATH=/nonexistent )$(LINT_COMPOSE) -f docker-compose.yml config -q && echo "docker-compose.yml ok"; \
	else echo "make lint: no docker-compose, docker-compose.yml NOT checked: make venv puts one in $(VENV)/compose" >&2; fi

check: $(VENV_TEST_STAMP)
check: ## validate every profile: schema, rules, SGLang's own argument parser when importable
	$(PY) -m launcher check --all

show: $(VENV_KIT_STAMP)
show: ## print the resolved plan (env and SGLang command line) for PROFILE, SPEC and MODEL_OVERLAY
	$(PY) -m launcher show $(PROFILE) --spec $(SPEC)$(if $(MODEL_OVERLAY_ARG), --model-overlay '$(MODEL_OVERLAY)')$(if $(wildcard .env), --env-file .env)

FLEET ?= $(call dotenv,FLEET)
fleet-up: $(VENV_KIT_STAMP)
fleet-up: ## sglang-router in front of every host of FLEET=<fleet file> (foreground; docs/fleet.md)
	@[ -n "$(FLEET)" ] || { echo "make fleet-up needs FLEET=<fleet file> (docs/fleet.md)" >&2; exit 2; }
	$(PY) -m launcher fleet router --fleet $(FLEET)

fleet-status: $(VENV_KIT_STAMP)
fleet-status: ## each host's profile, state and backends, and the router's view (FLEET=<fleet file>)
	@[ -n "$(FLEET)" ] || { echo "make fleet-status needs FLEET=<fleet file> (docs/fleet.md)" >&2; exit 2; }
	$(PY) -m launcher fleet status --fleet $(FLEET)

fleet-switch: $(VENV_KIT_STAMP)
fleet-switch: ## rolling switch of every host of FLEET to PROFILE/SPEC, one at a time, out of the router
	@[ -n "$(FLEET)" ] || { echo "make fleet-switch needs FLEET=<fleet file> (docs/fleet.md)" >&2; exit 2; }
	$(PY) -m launcher fleet switch $(PROFILE) --spec $(SPEC) --fleet $(FLEET)

# Prometheus and Grafana (compose profile `monitoring`, docs/monitoring.md): the scrape targets first
# (the compose stack's server, or with FLEET every host and the router), then the two services, then
# SIGHUP so Prometheus rereads edited rules (docker/monitoring/rules/).
monitor: $(if $(FLEET),$(VENV_KIT_STAMP))
monitor: ## Prometheus (9090) and Grafana (3000) on KIT_BIND_ADDR; FLEET=<fleet file> scrapes every host
	$(ENGINE_CHECK)
	$(if $(FLEET),$(PY),$(PYTHON)) docker/monitoring/targets.py$(if $(FLEET), --fleet $(FLEET)) --out docker/monitoring/targets
	$(COMPOSE_ANY) --profile monitoring up -d prometheus grafana
	$(COMPOSE_ANY) --profile monitoring kill -s SIGHUP prometheus
	@echo "Prometheus http://$(or $(call dotenv,KIT_BIND_ADDR),127.0.0.1):9090, Grafana http://$(or $(call dotenv,KIT_BIND_ADDR),127.0.0.1):3000 (dashboard pcie-spec-kit)"

docs: $(VENV_KIT_STAMP)
docs: ## regenerate .env.example and docs/settings.md from the settings registry (launcher/settings.py), and the bench run/tune option tables of docs/bench.md and docs/tune.md from their flags
	$(PY) -m launcher settings --write
	$(PY) -m bench.flag_docs --write

profiles: ## list profiles with their status and description
	@if $(PY) -c 'import launcher' >/dev/null 2>&1; then $(PY) -m launcher profiles; \
	else echo "($(PY) cannot import launcher; profile files found:)"; printf '  %s\n' $(KNOWN_PROFILES); fi

