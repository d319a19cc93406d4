"""launcher/runtime/activation.py: a profile's expected backends, proven from the server's own log.

Unit: the verdicts against SGLang's lines and its fallback warnings (the lines read per rank:
test_runtime_start_lines.py; the follower that keeps them: test_runtime_start_records.py).
Integration (real supervisord, control API and the stand-in, which prints SGLang's lines or
withholds them): switch, roll back, the degraded setting, serve at start, and what /status and
`launcher status` show.
"""

from __future__ import annotations

import json

import httpx
import pytest
from helpers_profiles import ENV

from launcher.profiles import loader
from launcher.profiles import plan as plans
from launcher.profiles.hostfacts import HostFacts
from launcher.runtime import activation, start_lines
from launcher.runtime.process.server_exec import START_MARKER
from testsupport.net import until
from testsupport.standin.activation import GAVE_UP, startup_lines, switched_on
from testsupport.standin.server_args import parse_server_argv

LOADED_START_S = 120  # a loaded host can take more than the stack's 30 s to start; the start is not under test here


def _plan(name="custom-ar", **env):
    return plans.build_plan(name, "off", environ={**ENV, **env})


def _start(plan, lines, pid=42):
    """A log as SGLang writes it: server_exec's start line, then the ranks' lines."""
    marker = f"{START_MARKER}{plan.name} spec off digest {plan.digest()} pid {pid} start 1: x"
    (record,) = start_lines.scan("\n".join([marker, *lines]))
    return record


def _lines(plan, withhold=(), missing=frozenset()):
    return startup_lines(parse_server_argv(plan.flags), plan.env, set(withhold), missing)


FACTS_TP2 = HostFacts(gpus=[{"index": 0, "compute_cap": "12.0"}, {"index": 1, "compute_cap": "12.0"}],
                      interconnect="pcie-switch", p2p_ok=True, p2p_bad_pairs=[])


def test_a_backend_is_active_only_when_every_rank_logged_it():
    plan = _plan()
    (ipc,), decode = activation.assess(plan, _start(plan, _lines(plan)))
    assert ipc["active"] is True and "on every rank: TP0, TP1, TP2, TP3, TP4, TP5, TP6, TP7" in ipc["evidence"]
    assert decode["backend"] == "pcie-ipc"
    (ipc,), decode = activation.assess(plan, _start(plan, _lines(plan, missing={3, 5})))
    assert (ipc["active"], ipc["verdict"], ipc["missing_ranks"]) == (False, "failed", ["TP3", "TP5"])
    assert "not on TP3, TP5" in ipc["evidence"]
    assert decode["backend"] is None and "ranks disagree" in decode["why"]
    # a line without SGLang's rank prefix cannot be counted: unknown, never active
    plain = "FlashInfer PCIe-IPC workspace built (world=8, max_numel=1, hidden=7168)"
    (ipc,), _ = activation.assess(plan, _start(plan, [plain]))
    assert ipc["active"] is None and "no rank tag" in ipc["evidence"]


def test_expected_ranks_follow_tp_and_pp():
    assert activation.expected_ranks({"tp-size": "2", "pp-size": "2"}) == ["PP0 TP0", "PP0 TP1", "PP1 TP0", "PP1 TP1"]


def test_custom_all_reduce_ahead_of_pcie_ipc_at_tp2():
    """At TP 2 SGLang's `ca` takes every decode reduction first; the PCIe-IPC workspace still gets built.
    The shipped custom-ar turns `ca` off, so there PCIe-IPC carries them; without that flag it would not."""
    shipped = _plan(KIT_TP_SIZE="2")
    assert "--disable-custom-all-reduce" in shipped.flags
    plan = shipped.model_copy(update={"flags": [f for f in shipped.flags if f != "--disable-custom-all-reduce"]})
    record = _start(plan, _lines(plan))
    (ipc,), decode = activation.assess(shipped, record, FACTS_TP2, "")
    assert ipc["active"] is True and decode["backend"] == "pcie-ipc"
    assert "CustomAllreduce is disabled" not in record["seen"]  # SGLang logs nothing while ca is on
    (ipc,), decode = activation.assess(plan, record, FACTS_TP2, "")
    assert (ipc["active"], ipc["verdict"]) == (False, "superseded") and "but ca comes first" in ipc["evidence"]
    assert decode["backend"] == "ca" and "P2P" in decode["why"]
    assert activation.summary([ipc]).startswith("pcie-ipc: ")
    # no host facts: whether ca is on cannot be known, so PCIe-IPC is unknown, never active
    (ipc,), decode = activation.assess(plan, record)
    assert ipc["active"] is None and "KIT_HOST_FACTS" in ipc["evidence"]
    assert decode["backend"] is None and decode["why"].startswith("unknown: ca")
    # P2P broken, or ca turned off by flag: PCIe-IPC carries them
    broken = FACTS_TP2.model_copy(update={"p2p_ok": False})
    assert activation.assess(plan, record, broken, "")[0][0]["active"] is True
    off = plan.model_copy(update={"flags": [*plan.flags, "--disable-custom-all-reduce"]})
    (ipc,), decode = activation.assess(off, record)
    assert ipc["active"] is True and decode["backend"] == "pcie-ipc"
    # TP 8 on a PCIe host: SGLang's own warning on every rank says ca is off
    plan8 = _plan()
    assert activation.assess(plan8, _start(plan8, _lines(plan8)))[0][0]["active"] is True


def test_fallbacks_are_named_evidence():
    plan = _plan("fused")
    preflight = ("[2026-11-30 10:00:01 TP0] FlashInfer workspace preflight: cuMemCreate probe failed on at least "
                 "one rank. Skipping allreduce fusion to avoid cross-rank desync inside the flashinfer collective.")
    (fusion,), _ = activation.assess(plan, _start(plan, [preflight]))
    assert fusion["verdict"] == "fell_back" and "flashinfer_comm_fusion.py:387" in fusion["evidence"]
    probe = "[2026-11-30 10:00:01 TP1] FlashInfer workspace preflight probe failed (CUDA_ERROR_NOT_SUPPORTED). Skipping allreduce fusion."
    assert "flashinfer_comm_fusion.py:368" in activation.assess(plan, _start(plan, [probe]))[0][0]["evidence"]
    (fusion,), _ = activation.assess(plan, _start(plan, ["warmup"]))
    assert fusion["active"] is False and "no 'FlashInfer AllReduce Fusion enabled" in fusion["evidence"]
    (deepep,), _ = activation.assess(_plan("ep-deepep"), _start(plan, []))
    assert deepep["active"] is None and "no line" in deepep["evidence"]
    # every fallback line the stand-in prints holds one of the follower's search keys
    for name, line in GAVE_UP.items():
        assert any(k in line for k in start_lines.KEYS), name


def test_the_up_line_wins_over_an_unrelated_fallback():
    """pcie_ipc_ar.py warns 'reductions stay on NCCL' for fp16 too, while the bf16 workspace is up."""
    plan = _plan()
    warning = "[2026-11-30 10:00:01 TP0] FlashInfer PCIe-IPC all-reduce serves bf16 only; torch.float16 reductions stay on NCCL."
    (ipc,), _ = activation.assess(plan, _start(plan, [warning, *_lines(plan)]))
    assert ipc["active"] is True and ipc["evidence"].endswith(f"; but also: {warning}")


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
    args = parse_server_argv(["--tp-size", "4", "--ep-size", "4", "--flashinfer-allreduce-fusion-backend", "trtllm",
                              "--enable-mscclpp"])
    env = {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}
    assert switched_on(args, env) == ["fusion", "pcie-ipc", "mscclpp"]
    lines = startup_lines(args, env, {"mscclpp"})
    seen = start_lines.scan("\n".join([f"{START_MARKER}x spec off digest d pid 1 start 1: x", *lines]))[0]["seen"]
    assert seen["FlashInfer PCIe-IPC workspace built"]["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    assert seen["PyMscclpp is unavailable"]["ranks"] == ["TP0", "TP1", "TP2", "TP3"]
    assert "Created MSCCL++ communicator" not in seen
    assert lines[0].startswith("[") and " TP0 EP0] " in lines[0]
    assert all(line.endswith(" [SIMULATED]") for line in lines)
    off = parse_server_argv(["--flashinfer-allreduce-fusion-backend", "trtllm",
                             "--enforce-disable-flashinfer-allreduce-fusion"])
    assert switched_on(off, {}) == []


@pytest.mark.stack
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


@pytest.mark.stack
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


@pytest.mark.stack
def test_degraded_setting_keeps_the_server_and_says_so(kit_stack):
    stack = kit_stack("baseline", "off", extra_env={"KIT_ACTIVATION_FAILURE": "degraded"})
    cli = stack.cli("switch", "ipc-quiet", "--spec", "off")
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "degraded" in cli.stdout and "backend pcie-ipc: NOT ACTIVE" in cli.stdout
    st = stack.status()
    assert (st["profile"], st["state"]) == ("ipc-quiet", "degraded")
    assert st["backends"][0]["active"] is False and "pcie-ipc" in st["last_error"]
    assert stack.history()[-1]["outcome"] == "degraded"


@pytest.mark.stack
def test_serve_at_start_checks_and_shows_it(kit_stack):
    stack = kit_stack("ipc-quiet", "off")
    st = stack.wait_state({"serving"}, 30)
    assert st["backends"] and st["backends"][0]["active"] is False
    assert "expected backend not active: pcie-ipc" in st["last_error"]
    started = stack.history()[-1]
    assert started["outcome"] == "started" and started["backends"][0]["active"] is False


# ----- through the real switch and /status ----------------------------------------------------------------

def _profile(stack, name: str, extends: str, **env: str) -> None:
    """A test profile in the stack's profile folder: `extends` with stand-in settings in [env]."""
    lines = "".join(f'{k} = "{v}"\n' for k, v in env.items())
    (stack.profiles_dir / f"{name}.toml").write_text(
        f'description = "test"\nstatus = "experimental"\nextends = "{extends}"\n[env]\n{lines}')


def _poll(fn, timeout: float = 20):
    return until(fn, timeout)


@pytest.mark.stack
def test_every_rank_proves_it_and_one_missing_rank_rolls_back(kit_stack):
    stack = kit_stack("baseline", "off")
    body = stack.switch("custom-ar", "off").json()
    assert body["outcome"] == "switched", body
    assert "on every rank: TP0, TP1, TP2, TP3, TP4, TP5, TP6, TP7" in body["backends"][0]["evidence"]
    assert body["decode_allreduce"]["backend"] == "pcie-ipc"
    st = _poll(lambda: (s := stack.status())["decode_allreduce"] and s)
    assert st["decode_allreduce"]["backend"] == "pcie-ipc" and st["backends"][0]["active"] is True
    assert "decode all-reduce: pcie-ipc" in stack.cli("status").stdout

    _profile(stack, "ipc-rank3", "custom-ar", STANDIN_ACTIVATION_MISSING_RANKS="3")
    body = stack.switch("ipc-rank3", "off").json()
    assert body["outcome"] == "rolled_back" and body["failed_step"] == "activation", body
    (ipc,) = body["backends"]
    assert (ipc["active"], ipc["verdict"], ipc["missing_ranks"]) == (False, "failed", ["TP3"])
    assert "not on TP3" in body["error"]
    assert stack.wait_state({"rolled_back"}, 20)["profile"] == "custom-ar"


@pytest.mark.stack
def test_custom_all_reduce_ahead_at_tp2_rolls_back_and_says_which_carries_decode(kit_stack, tmp_path):
    facts = tmp_path / "facts.json"
    facts.write_text(FACTS_TP2.model_dump_json())
    stack = kit_stack("baseline", "off", extra_env={"KIT_TP_SIZE": "2", "KIT_HOST_FACTS": str(facts)})
    st = _poll(lambda: (s := stack.status())["decode_allreduce"] and s)
    assert st["decode_allreduce"]["backend"] == "ca"  # baseline at TP 2: SGLang's custom all-reduce
    body = stack.switch("custom-ar", "off").json()  # the shipped profile turns ca off: PCIe-IPC proven
    assert body["outcome"] == "switched" and body["decode_allreduce"]["backend"] == "pcie-ipc", body
    (stack.profiles_dir / "ipc-with-ca.toml").write_text(
        'description = "custom-ar with ca left on"\nextends = "custom-ar"\n[server]\ndisable-custom-all-reduce = false\n')
    body = stack.switch("ipc-with-ca", "off").json()
    assert body["outcome"] == "rolled_back" and body["failed_step"] == "activation", body
    (ipc,) = body["backends"]
    assert (ipc["active"], ipc["verdict"]) == (False, "superseded") and "PCIe-IPC workspace built" in ipc["evidence"]
    assert body["decode_allreduce"]["backend"] == "ca"
    st = stack.wait_state({"rolled_back"}, 20)
    assert "but ca comes first" in st["last_error"]
    cli = stack.cli("status")  # rolled back to the shipped custom-ar, whose ca is off
    assert "decode all-reduce: pcie-ipc" in cli.stdout


@pytest.mark.stack
def test_status_stays_right_after_60mb_of_log(kit_stack):
    stack = kit_stack("baseline", "off")
    _profile(stack, "ipc-chatty", "custom-ar", STANDIN_LOG_FILLER_MB="64")
    body = stack.switch("ipc-chatty", "off", timeout_s=60).json()
    assert body["outcome"] == "switched", body
    assert body["backends"][0]["active"] is True
    logs = stack.state_dir / "logs"
    assert (logs / "sglang.log.1").exists()  # rotated: the start lines are no longer in the live file
    # the monitor reads the backends again for the running server: still proven, from the start record
    st = _poll(lambda: (s := stack.status())["decode_allreduce"] and s)
    assert st["backends"][0]["active"] is True and st["decode_allreduce"]["backend"] == "pcie-ipc"
    stack.stop()
    record = json.loads(max((stack.state_dir / "starts").glob("*.json")).read_text())
    assert record["profile"] == "ipc-chatty"
    assert len(record["seen"]["FlashInfer PCIe-IPC workspace built"]["ranks"]) == 8


@pytest.mark.stack
def test_mscclpp_death_rolls_back_quoting_its_cause(kit_stack):
    stack = kit_stack("baseline", "off", start=False).start(timeout=LOADED_START_S)
    _profile(stack, "mscclpp-dies", "mscclpp", STANDIN_FAULT="mscclpp_init_failure")
    body = stack.switch("mscclpp-dies", "off").json()
    assert body["outcome"] == "rolled_back" and body["failed_step"] == "health", body
    assert "Failed to initialize MSCCL++ collectives" in body["error"] and "RuntimeError: SIMULATED" in body["error"]
    st = stack.wait_state({"rolled_back"}, 20)
    assert "Failed to initialize MSCCL++ collectives" in st["last_error"]
    assert "Failed to initialize MSCCL++ collectives" in stack.history()[-1]["error"]


@pytest.mark.stack
@pytest.mark.parametrize("start_secs", ["30", "1"])
def test_serve_names_mscclpps_cause_instead_of_a_bare_crash_loop(kit_stack, start_secs):
    """Dying within KIT_START_SECS ends in supervisord's FATAL (crash loop); dying later, as a real server
    that loads for a while does, in endless restarts: either way /status quotes the cause."""
    stack = kit_stack("mscclpp", "off", extra_env={"KIT_START_SECS": start_secs}, start=False)
    _profile(stack, "mscclpp-dies", "mscclpp", STANDIN_FAULT="mscclpp_init_failure")
    stack.env["PROFILE"] = "mscclpp-dies"
    with pytest.raises(AssertionError):
        stack.start(timeout=0.5)  # never serving

    def quoted():
        try:
            st = stack.status()
        except httpx.HTTPError:
            return None
        return st if "Failed to initialize MSCCL++ collectives" in (st["last_error"] or "") else None

    st = _poll(quoted, 40)
    assert "RuntimeError: SIMULATED MSCCL++" in st["last_error"] and st["state"] in ("failed", "starting")
    if start_secs == "30":
        st = _poll(lambda: (s := stack.status())["state"] == "failed" and "crash loop" in s["last_error"] and s, 40)
        assert "Failed to initialize MSCCL++ collectives" in st["last_error"]
