"""launcher/runtime/activation.py: a profile's expected backends, proven from the server's own log.

Unit: the detectors against SGLang's lines and its fallback warnings. Integration (real supervisord,
control API and the stand-in, which prints SGLang's lines or withholds them): switch, roll back,
the degraded setting, serve at start, and what /status and `launcher status` show.
"""

from __future__ import annotations

import httpx
import pytest
from helpers_profiles import ENV

from launcher.profiles import loader
from launcher.profiles import plan as plans
from launcher.runtime import activation
from launcher.runtime.server_exec import START_MARKER
from testsupport.standin.activation import startup_lines, switched_on
from testsupport.standin.server_args import parse_server_argv

LINE = "[2026-11-30 10:00:01 TP0] FlashInfer PCIe-IPC workspace built (world=8, max_numel=1, hidden=7168)"


def test_each_detector_reads_active_inactive_or_unknown():
    log = f"boot\n{LINE}\nready\n"
    (ipc,) = activation.check(["pcie-ipc"], log)
    assert ipc == {"name": "pcie-ipc", "expected": True, "active": True, "evidence": LINE}
    (mscclpp,) = activation.check(["mscclpp"], "PyMscclpp is disabled due to an unsupported world size: 2.\n")
    assert mscclpp["active"] is False and mscclpp["evidence"].startswith("PyMscclpp is disabled")
    (fusion,) = activation.check(["fusion"], "nothing about it\n")
    assert fusion["active"] is False
    assert "no 'FlashInfer AllReduce Fusion enabled and workspace initialized'" in fusion["evidence"]
    assert "flashinfer_comm_fusion.py" in fusion["evidence"]
    (deepep,) = activation.check(["deepep"], log)
    assert deepep["active"] is None and "no line" in deepep["evidence"]
    statuses = activation.check(["pcie-ipc", "fusion", "deepep"], log)
    assert [s["name"] for s in activation.inactive(statuses)] == ["fusion"]
    assert activation.summary(statuses).startswith("fusion: no 'FlashInfer AllReduce Fusion")


def test_the_up_line_wins_over_an_unrelated_fallback():
    """pcie_ipc_ar.py warns 'reductions stay on NCCL' for fp16 too, while the bf16 workspace is up."""
    warning = "FlashInfer PCIe-IPC all-reduce serves bf16 only; torch.float16 reductions stay on NCCL."
    (ipc,) = activation.check(["pcie-ipc"], f"{warning}\n{LINE}\n")
    assert ipc["active"] is True
    # ... but the evidence says that some reductions (here: every fp16 one) skip it
    assert ipc["evidence"] == f"{LINE}; but also: {warning}"
    assert activation.check(["pcie-ipc"], f"{LINE}\n")[0]["evidence"] == LINE


def test_only_the_running_servers_part_of_the_log_counts(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(f"{START_MARKER}custom-ar spec off digest a: x\n{LINE}\n{START_MARKER}custom-ar spec off digest a: x\nwarmup\n")
    assert activation.check_server(["pcie-ipc"], log)[0]["active"] is False
    assert activation.check_server([], log) == []
    assert activation.check_server(["pcie-ipc"], tmp_path / "absent.log")[0]["active"] is False


@pytest.mark.parametrize(
    ("name", "expects"),
    [("baseline", []), ("nccl-tuned", []), ("fused", ["fusion"]), ("custom-ar", ["pcie-ipc"]),
     ("mscclpp", ["mscclpp"]), ("ep-deepep", ["deepep"])],
)
def test_profiles_declare_what_must_run(name, expects):
    assert plans.build_plan(name, "off", environ=ENV).expects == expects


def test_expects_is_inherited_and_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_PROFILES_DIR", str(tmp_path))
    (tmp_path / "child.toml").write_text('description = "x"\nextends = "custom-ar"\n[expects]\nfusion = true\n')
    assert plans.build_plan("child", "off", environ=ENV).expects == ["pcie-ipc", "fusion"]
    (tmp_path / "bad.toml").write_text('description = "x"\n[expects]\nallreduce = "quick-ar"\n')
    with pytest.raises(Exception) as err:
        loader.load("bad")
    assert "expects.allreduce" in str(err.value) and str(tmp_path / "bad.toml") in str(err.value)
    (tmp_path / "typo.toml").write_text('description = "x"\n[expects]\nfuson = true\n')
    with pytest.raises(Exception) as err:
        loader.load("typo")
    assert "fuson" in str(err.value)


def test_standin_prints_the_line_for_what_argv_and_env_switch_on():
    args = parse_server_argv(["--tp-size", "8", "--flashinfer-allreduce-fusion-backend", "trtllm", "--enable-mscclpp"])
    env = {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}
    assert switched_on(args, env) == ["fusion", "pcie-ipc", "mscclpp"]
    lines = startup_lines(args, env, {"mscclpp"})
    assert [activation.check([n], "\n".join(lines))[0]["active"] for n in ("fusion", "pcie-ipc", "mscclpp")] == [
        True, True, False]
    assert all(line.startswith("SIMULATED ") for line in lines)
    off = parse_server_argv(["--flashinfer-allreduce-fusion-backend", "trtllm",
                             "--enforce-disable-flashinfer-allreduce-fusion"])
    assert switched_on(off, {}) == []


def test_switch_proves_the_backend_then_rolls_back_when_it_is_missing(kit_stack):
    stack = kit_stack("baseline", "off")
    body = stack.switch("custom-ar", "off").json()
    assert body["outcome"] == "switched", body
    (ipc,) = body["backends"]
    assert ipc["name"] == "pcie-ipc" and ipc["active"] is True and "PCIe-IPC workspace built" in ipc["evidence"]
    st = stack.status()
    assert st["state"] == "serving" and st["backends"][0]["active"] is True
    cli = stack.cli("status")
    assert "backend pcie-ipc: active" in cli.stdout

    body = stack.switch("ipc-quiet", "off").json()
    assert body["outcome"] == "rolled_back" and body["failed_step"] == "activation"
    assert "expected backend not active: pcie-ipc" in body["error"] and "reductions stay on NCCL" in body["error"]
    st = stack.wait_state({"rolled_back"}, 20)
    assert st["profile"] == "custom-ar" and "pcie-ipc" in st["last_error"]
    assert stack.debug_env()["env"]["KIT_ACTIVE_PROFILE"] == "custom-ar"
    assert stack.history()[-1]["backends"][0]["active"] is False
    assert httpx.get(f"{stack.server_url}/health_generate", timeout=5).status_code == 200


def test_switch_to_each_profile_with_and_without_its_line(kit_stack):
    """fused and mscclpp are proven or rolled back like custom-ar; ep-deepep's DeepEP stays unknown."""
    stack = kit_stack("baseline", "off")
    for profile, quiet, name, fallback in (
        ("fused", "fusion-quiet", "fusion", "Disabling flashinfer allreduce fusion permanently"),
        ("mscclpp", "mscclpp-quiet", "mscclpp", "PyMscclpp is unavailable"),
    ):
        body = stack.switch(profile, "off").json()
        assert body["outcome"] == "switched", body
        assert [(b["name"], b["active"]) for b in body["backends"]] == [(name, True)]
        body = stack.switch(quiet, "off").json()
        assert body["outcome"] == "rolled_back" and body["failed_step"] == "activation", body
        assert f"expected backend not active: {name}" in body["error"] and fallback in body["error"]
        assert stack.wait_state({"rolled_back"}, 20)["profile"] == profile
    body = stack.switch("ep-deepep", "off").json()
    assert body["outcome"] == "switched", body  # unknown is not proof of absence
    (deepep,) = body["backends"]
    assert deepep["name"] == "deepep" and deepep["active"] is None and "no line" in deepep["evidence"]
    assert "backend deepep: unknown" in stack.cli("status").stdout


def test_degraded_setting_keeps_the_server_and_says_so(kit_stack):
    stack = kit_stack("baseline", "off", extra_env={"KIT_ACTIVATION_FAILURE": "degraded"})
    cli = stack.cli("switch", "ipc-quiet", "--spec", "off")
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "degraded" in cli.stdout and "backend pcie-ipc: NOT ACTIVE" in cli.stdout
    st = stack.status()
    assert (st["profile"], st["state"]) == ("ipc-quiet", "degraded")
    assert st["backends"][0]["active"] is False and "pcie-ipc" in st["last_error"]
    assert stack.history()[-1]["outcome"] == "degraded"


def test_serve_at_start_checks_and_shows_it(kit_stack):
    stack = kit_stack("ipc-quiet", "off")
    st = stack.wait_state({"serving"}, 30)
    assert st["backends"] and st["backends"][0]["active"] is False
    assert "expected backend not active: pcie-ipc" in st["last_error"]
    started = stack.history()[-1]
    assert started["outcome"] == "started" and started["backends"][0]["active"] is False
