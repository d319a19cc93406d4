"""patches/apply.py against the real sglang 0.5.23 wheel: apply, verify, record, refuse.

The wheel is downloaded once into ${KIT_CACHE_DIR:-.cache}/wheels and unpacked into a
temporary site-packages. The behaviour test imports the patched sglang modules in a
subprocess with the platform faked as SM120 (and a fake CUDA driver without multicast),
and runs the same probe on the unpatched wheel, which must fail it.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
APPLY = REPO / "patches" / "apply.py"
VERSION = "0.5.23"


def _load_apply():
    spec = importlib.util.spec_from_file_location("kit_patches_apply", APPLY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


apply_mod = _load_apply()
PATCH_SET = apply_mod.load_patch_set(VERSION)


def run_apply(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(APPLY), *args], capture_output=True, text=True, env=env, timeout=60
    )


def tree_hashes(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="session")
def wheel() -> Path:
    """The real sglang wheel from PyPI, cached across runs."""
    cache = Path(os.environ.get("KIT_CACHE_DIR", REPO / ".cache")) / "wheels"
    cache.mkdir(parents=True, exist_ok=True)
    found = sorted(cache.glob(f"sglang-{VERSION}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:"]
            + [f"sglang=={VERSION}", "-d", str(cache)],
            check=True,
            timeout=600,
        )
        found = sorted(cache.glob(f"sglang-{VERSION}-*.whl"))
    assert found, f"pip download left no sglang-{VERSION} wheel in {cache}"
    return found[-1]


@pytest.fixture(scope="session")
def pristine(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The unpacked wheel: a site-packages holding sglang/ and its dist-info. Never modified."""
    target = tmp_path_factory.mktemp("pristine")
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(target)
    return target


@pytest.fixture(scope="session")
def patched(
    pristine: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess]:
    """A full copy of the wheel, patched by apply.py; returns the dir and the apply run.

    The copy is hard links: apply.py replaces files by rename, never in place, so the
    pristine tree stays untouched (test_post_conditions_fail_on_pristine... checks it).
    """
    target = tmp_path_factory.mktemp("patched")
    shutil.copytree(pristine, target, dirs_exist_ok=True, copy_function=os.link)
    return target, run_apply("--target", str(target))


def slim_target(pristine: Path, dest: Path) -> Path:
    """A site-packages with only the dist-info and the files the patch set touches."""
    for dist_info in pristine.glob("sglang-*.dist-info"):
        shutil.copytree(dist_info, dest / dist_info.name)
    for rel in PATCH_SET.files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(pristine / rel, dest / rel)
    return dest


@pytest.mark.stack
def test_apply_to_real_wheel_records_and_checks(patched: tuple[Path, subprocess.CompletedProcess]) -> None:
    target, proc = patched
    assert proc.returncode == 0, proc.stderr
    assert "applied          sm120-allreduce-fusion" in proc.stdout

    record_file = target / "sglang" / "kit_patches.json"
    expected = {
        "sglang_version": VERSION,
        "patches": {p.name: hashlib.sha256(p.path.read_bytes()).hexdigest() for p in PATCH_SET.patches},
    }
    assert json.loads(record_file.read_text()) == expected
    record = apply_mod.read_record(target)
    assert record.to_json() == expected

    check = run_apply("--target", str(target), "--check")
    assert check.returncode == 0, check.stderr
    assert "record" in check.stdout and "matches" in check.stdout


@pytest.mark.stack
def test_post_conditions_fail_on_pristine_and_hold_when_patched(
    pristine: Path, patched: tuple[Path, subprocess.CompletedProcess]
) -> None:
    n_conditions = sum(len(p.post) for p in PATCH_SET.patches)
    assert n_conditions >= 3  # resolve, preflight, per-batch gate
    failures = apply_mod.check_post_conditions(pristine, PATCH_SET)
    assert len(failures) == n_conditions, failures
    assert apply_mod.check_post_conditions(patched[0], PATCH_SET) == []


PROBE = r'''
"""Exercise the fusion gates of the sglang first on sys.path, platform faked as SM120."""
import importlib.util, json, sys, tempfile, types
from pathlib import Path
from types import SimpleNamespace as NS

import sglang.srt.utils as sgl_utils
from sglang.srt.runtime_context import _ConfigBag, get_context, override_platform

override_platform(
    is_cuda=True, is_sm90=False, is_sm100=False, is_sm120=True, is_blackwell=True, has_flashinfer=True
).install()
import sglang.srt.arg_groups.overrides as overrides
import sglang.srt.layers.flashinfer_comm_fusion as fcf

out = {"sglang_file": sgl_utils.__file__}

def attempt(key, fn):
    try:
        out[key] = fn()
    except Exception as exc:
        out[key] = f"{type(exc).__name__}: {exc}"

# 1. auto-enable pass
overrides.model_config_of = lambda view: NS(
    hf_config=NS(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3", hidden_size=7168)
)
overrides.attn_dp_enabled_of = lambda view: False
view = NS(flashinfer_allreduce_fusion_backend=None, tp_size=8, nnodes=1, moe_a2a_backend="none",
          disable_custom_all_reduce=False)
attempt("auto_enable", lambda: overrides._flashinfer_allreduce_fusion_auto_enable(view))

# 2. backend resolution
attempt("resolve_auto", lambda: fcf._resolve_backend("auto"))
attempt("resolve_trtllm", lambda: fcf._resolve_backend("trtllm"))
attempt("resolve_mnnvl", lambda: fcf._resolve_backend("mnnvl"))
attempt("resolve_auto_multinode", lambda: fcf._resolve_backend("auto", True))

# 3. per-batch gate; add_norm's heavy neighbours are stubbed, the gate and fcf are real
exec_bag, comm_bag = _ConfigBag("exec"), _ConfigBag("exec.comm")
comm_bag._set("flashinfer_allreduce_fusion_backend", "auto")
exec_bag._set_sub("comm", comm_bag)
get_context()._config_bags = {"exec": exec_bag}

def stub(name, **attrs):
    mod = types.ModuleType(name)
    mod.__path__ = []
    mod.__dict__.update(attrs)
    mod.__getattr__ = lambda attr: type(attr, (), {"__init__": lambda self, *a, **k: None})
    sys.modules[name] = mod

stub("sglang.srt.layers.dp_attention", is_dp_attention_enabled=lambda: False)
for name in ("layer_boundary", "layer_boundary.adapters", "layer_boundary.adapters.attention",
             "layer_boundary.residual", "quantization.fp8_utils"):
    stub("sglang.srt.layers." + name)
stub("sglang.srt.model_executor.forward_batch_info")
sgl_utils.is_cuda = lambda: True
sgl_utils.is_flashinfer_available = lambda: True
path = Path(sgl_utils.__file__).parents[1] / "layers/layer_boundary/residual/add_norm.py"
spec = importlib.util.spec_from_file_location("sglang.srt.layers.layer_boundary.residual.add_norm", path)
add_norm = importlib.util.module_from_spec(spec)
spec.loader.exec_module(add_norm)
out["gate_batch_4"] = add_norm.flashinfer_ar_fusion_applies(4)
out["gate_batch_4096"] = add_norm.flashinfer_ar_fusion_applies(4096)

# 4. workspace preflight on a PCIe host: the driver has no multicast
import torch
import torch.distributed as dist

class PcieDriver:
    CUresult = NS(CUDA_SUCCESS=0, CUDA_ERROR_NOT_SUPPORTED=801)
    CUmemAllocationGranularity_flags = NS(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED=0)
    CUmulticastGranularity_flags = NS(CU_MULTICAST_GRANULARITY_RECOMMENDED=0)
    CUmulticastObjectProp = NS
    multicast_queries = 0
    created = []
    def cuMemGetAllocationGranularity(self, prop, flags):
        return 0, 2 << 20
    def cuMulticastGetGranularity(self, prop, flags):
        PcieDriver.multicast_queries += 1
        return 801, 0
    def cuMemCreate(self, size, prop, flags):
        self.created.append(size)
        return 0, len(self.created)
    def cuMemRelease(self, handle):
        return (0,)

fcf.get_cuda_driver_bindings = lambda: PcieDriver()
fcf._make_flashinfer_workspace_allocation_prop = lambda driver: NS(requestedHandleTypes=1)
store = Path(tempfile.mkdtemp()) / "store"
dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
out["preflight"] = fcf._preflight_check_workspace_memory(
    world_size=8, max_token_num=2048, hidden_dim=7168, dtype=torch.bfloat16, cpu_group=dist.group.WORLD
)
dist.destroy_process_group()
out["multicast_queries"] = PcieDriver.multicast_queries
out["allocations"] = len(PcieDriver.created)

# 5. other architectures keep their behaviour
with override_platform(is_sm120=False, is_sm90=True):
    attempt("sm90_auto", lambda: fcf._resolve_backend("auto"))
with override_platform(is_sm120=False, is_sm100=True):
    attempt("sm100_auto", lambda: fcf._resolve_backend("auto"))
with override_platform(is_sm120=False):
    attempt("sm80_auto", lambda: fcf._resolve_backend("auto"))
print("PROBE-RESULT " + json.dumps(out))
'''


def run_probe(site_packages: Path, tmp_path: Path) -> dict:
    script = tmp_path / f"probe_{site_packages.name}.py"
    script.write_text(PROBE)
    env = {**os.environ, "PYTHONPATH": str(site_packages), "GLOO_SOCKET_IFNAME": "lo"}
    proc = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE-RESULT "))
    result = json.loads(line.removeprefix("PROBE-RESULT "))
    assert Path(result["sglang_file"]).is_relative_to(site_packages)  # not the venv's sglang
    return result


@pytest.mark.stack
def test_patched_gates_open_on_sm120_and_pristine_ones_do_not(
    pristine: Path, patched: tuple[Path, subprocess.CompletedProcess], tmp_path: Path
) -> None:
    before = run_probe(pristine, tmp_path)
    assert before["auto_enable"] == {}
    assert before["resolve_auto"].startswith("ValueError: FlashInfer allreduce fusion requires SM90")
    assert before["gate_batch_4"] is False
    assert before["preflight"] is False and before["multicast_queries"] >= 1

    after = run_probe(patched[0], tmp_path)
    # fusion never switches itself on for SM120: only a profile's flag asks for it
    assert after["auto_enable"] == {}
    assert after["resolve_auto"] == "trtllm"
    assert after["resolve_trtllm"] == "trtllm"
    assert after["resolve_mnnvl"].startswith("ValueError") and "trtllm" in after["resolve_mnnvl"]
    assert after["resolve_auto_multinode"].startswith("ValueError")
    assert after["gate_batch_4"] is True
    assert after["gate_batch_4096"] is False  # above FUSE_ALLREDUCE_MAX_BATCH_SIZE
    assert after["preflight"] is True
    assert after["multicast_queries"] == 0 and after["allocations"] == 3

    # SM90/SM100/other archs resolve exactly as before the patch
    for key in ("sm90_auto", "sm100_auto", "sm80_auto"):
        assert after[key] == before[key], key
    assert after["sm90_auto"] == "trtllm" and after["sm100_auto"] == "mnnvl"


@pytest.mark.stack
def test_default_target_found_without_importing_sglang(
    patched: tuple[Path, subprocess.CompletedProcess],
) -> None:
    target = patched[0]
    env = {**os.environ, "PYTHONPATH": str(target)}
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import apply; "
        "print(apply.find_site_packages()); print('sglang' in sys.modules)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(APPLY.parent)], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.stdout.split() == [str(target.resolve()), "False"], proc.stderr
    check = run_apply("--check", env=env)
    assert check.returncode == 0, check.stderr
    assert str(target.resolve()) in check.stdout


@pytest.mark.stack
def test_runs_as_a_script_and_as_a_module_with_another_patches_package_on_the_path(tmp_path: Path) -> None:
    """The image runs `python3 patches/apply.py`: its sibling modules come from its own folder, always."""
    decoy = tmp_path / "decoy" / "patches"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text('raise SystemExit("imported the wrong patches package")\n')
    env = {**os.environ, "PYTHONPATH": str(decoy.parent)}
    for cmd, cwd in (([str(APPLY)], tmp_path), (["-m", "patches.apply"], REPO)):
        proc = subprocess.run(
            [sys.executable, *cmd, "--target", str(tmp_path)],
            cwd=cwd, capture_output=True, text=True, env=env, timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert "no sglang package in" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.stack
def test_apply_twice_changes_nothing(pristine: Path, tmp_path: Path) -> None:
    target = slim_target(pristine, tmp_path / "site")
    before = tree_hashes(target)
    first = run_apply("--target", str(target))
    assert first.returncode == 0, first.stderr
    once = tree_hashes(target)
    assert all(once[rel] != before[rel] for rel in PATCH_SET.files)

    second = run_apply("--target", str(target))
    assert second.returncode == 0, second.stderr
    assert "already applied  sm120-allreduce-fusion" in second.stdout
    assert "(unchanged)" in second.stdout
    assert tree_hashes(target) == once


@pytest.mark.stack
def test_check_on_unpatched_fails_and_changes_nothing(pristine: Path, tmp_path: Path) -> None:
    target = slim_target(pristine, tmp_path / "site")
    before = tree_hashes(target)
    proc = run_apply("--target", str(target), "--check")
    assert proc.returncode == 1
    assert "not applied" in proc.stdout and "sm120-allreduce-fusion" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert tree_hashes(target) == before


@pytest.mark.stack
def test_check_reports_missing_record(pristine: Path, tmp_path: Path) -> None:
    target = slim_target(pristine, tmp_path / "site")
    assert run_apply("--target", str(target)).returncode == 0
    (target / "sglang" / "kit_patches.json").unlink()
    proc = run_apply("--target", str(target), "--check")
    assert proc.returncode == 1
    assert "kit_patches.json is missing" in proc.stderr


@pytest.mark.stack
def test_wrong_sglang_version_fails_cleanly(pristine: Path, tmp_path: Path) -> None:
    target = slim_target(pristine, tmp_path / "site")
    (meta,) = target.glob("sglang-*.dist-info/METADATA")
    meta.write_text(meta.read_text().replace(f"Version: {VERSION}\n", "Version: 0.5.22\n", 1))
    before = tree_hashes(target)
    for extra in ([], ["--check"]):
        proc = run_apply("--target", str(target), *extra)
        assert proc.returncode == 2
        assert "sglang 0.5.22 is installed" in proc.stderr and f"sglang=={VERSION}" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert tree_hashes(target) == before


@pytest.mark.stack
def test_hunk_that_does_not_apply_leaves_every_file_unchanged(pristine: Path, tmp_path: Path) -> None:
    target = slim_target(pristine, tmp_path / "site")
    # Break the last file of the patch only: the earlier files would apply on their own.
    broken = target / "sglang/srt/layers/layer_boundary/residual/add_norm.py"
    assert broken.as_posix().endswith(PATCH_SET.patches[0].files[-1])
    text = broken.read_text()
    gate = "        (_is_sm90_supported or _is_sm100_supported)\n"
    assert gate in text
    broken.write_text(text.replace(gate, "        (_is_sm90_supported or _is_sm100_supported or False)\n"))
    before = tree_hashes(target)

    proc = run_apply("--target", str(target))
    assert proc.returncode == 2
    assert "add_norm.py: hunk #2 failed" in proc.stderr
    assert "Nothing was changed" in proc.stderr and "--force-reinstall" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert tree_hashes(target) == before  # no partial patch, no record, no .orig/.rej/.tmp files


def test_read_record_absent_and_malformed(tmp_path: Path) -> None:
    (tmp_path / "sglang").mkdir()
    assert apply_mod.read_record(tmp_path) is None
    (tmp_path / "sglang" / "kit_patches.json").write_text('{"patches": []}')
    with pytest.raises(ValueError, match="kit_patches.json"):
        apply_mod.read_record(tmp_path)
