"""launcher/runtime/activation.py: two more lines of SGLang 0.5.23 read as evidence.

- `ca` (SGLang's custom all-reduce) logs "Registering N cuda graph addresses" from TP rank 0 after each
  CUDA-graph capture while it is on (custom_all_reduce.py:181-194, 234-242): without host facts that line
  decides `ca` is on, where the verdict used to stay unknown.
- PCIe-IPC's prepare() logs "autotuned N shape(s)" or a seed-policy line (pcie_ipc_ar.py:322-385): the
  status says whether the kernels run measured tactics (the persisted cache or a measurement) or not.
"""

from __future__ import annotations

from helpers_profiles import ENV

from launcher.profiles import plan as plans
from launcher.profiles.hostfacts import HostFacts
from launcher.runtime import activation, start_lines
from launcher.runtime.process.server_exec import START_MARKER
from testsupport.standin.activation import startup_lines
from testsupport.standin.server_args import parse_server_argv

TS = "[2026-11-30 10:00:02 TP{r}] "
REGISTER = TS.format(r=0) + "Registering 312 cuda graph addresses"
TUNED = "FlashInfer PCIe-IPC all-reduce autotuned 8 shape(s) (hidden=7168, rows=(1, 2, 4, 8, 16, 32, 64, 128))"
SEED = ("FlashInfer PCIe-IPC all-reduce reached its first reduction inside a graph capture; skipping autotune "
        "and keeping the seed policy.")


def _plan(name="custom-ar", **env):
    return plans.build_plan(name, "off", environ={**ENV, **env})


def _with_ca(plan, *extra):
    """The plan with SGLang's `ca` left on (custom-ar turns it off), plus extra flags."""
    flags = [f for f in plan.flags if f != "--disable-custom-all-reduce"]
    return plan.model_copy(update={"flags": [*flags, *extra]})


def _start(plan, lines):
    marker = f"{START_MARKER}{plan.name} spec off digest {plan.digest()} pid 42 start 1: x"
    (record,) = start_lines.scan("\n".join([marker, *lines]))
    return record


def _lines(plan):
    return startup_lines(parse_server_argv(plan.flags), plan.env, set(), frozenset())


def test_the_registration_line_says_ca_is_on_without_host_facts():
    plan = _with_ca(_plan(KIT_TP_SIZE="2"))
    # without the line and without host facts: unknown, as before
    (ipc,), decode = activation.assess(plan, _start(plan, _lines(plan)))
    assert ipc["active"] is None and decode["backend"] is None and decode["why"].startswith("unknown: ca")
    # with it: ca is on and comes ahead of PCIe-IPC, which is then superseded
    record = _start(plan, [*_lines(plan), REGISTER])
    assert record["seen"]["cuda graph addresses"]["ranks"] == ["TP0"]
    (ipc,), decode = activation.assess(plan, record)
    assert (ipc["active"], ipc["verdict"]) == (False, "superseded") and "but ca comes first" in ipc["evidence"]
    assert decode["backend"] == "ca"
    assert "Registering 312 cuda graph addresses" in decode["why"] and "TP rank 0 alone" in decode["why"]
    assert "custom_all_reduce.py:181-194" in decode["why"]


def test_the_registration_line_does_not_overrule_what_is_known():
    plan = _with_ca(_plan(KIT_TP_SIZE="2"))
    record = _start(plan, [*_lines(plan), REGISTER])
    # --disable-custom-all-reduce or host facts that turn ca off still decide
    assert activation.assess(_plan(KIT_TP_SIZE="2"), record)[1]["backend"] == "pcie-ipc"
    facts = HostFacts(gpus=[{"index": 0, "compute_cap": "12.0"}, {"index": 1, "compute_cap": "12.0"}],
                      interconnect="pcie-switch", p2p_ok=False, p2p_bad_pairs=[[0, 1]])
    assert activation.assess(plan, record, facts, "")[1]["backend"] == "pcie-ipc"


def test_a_subgroups_registration_line_is_not_the_tp_groups():
    """DP attention and DCP build their own `ca` on a subgroup (parallel_state.py:2726-2735, 2813-2828)."""
    for extra in (["--enable-dp-attention"], ["--dcp-size", "2"], ["--attn-cp-size", "2"]):
        plan = _with_ca(_plan(KIT_TP_SIZE="2"), *extra)
        (ipc,), decode = activation.assess(plan, _start(plan, [*_lines(plan), REGISTER]))
        assert ipc["active"] is None and decode["backend"] is None, extra


def test_pcie_ipc_autotune_lines_say_whether_the_kernels_are_tuned():
    plan = _plan()  # TP 8, ca off by flag
    ranks = range(8)
    # no autotune line (the stand-in prints none): nothing said
    (ipc,), _ = activation.assess(plan, _start(plan, _lines(plan)))
    assert ipc["active"] is True and ipc["autotune"] is None and "autotune" not in ipc["evidence"]
    # measured tactics on every rank
    tuned = [TS.format(r=r) + TUNED for r in ranks]
    (ipc,), decode = activation.assess(plan, _start(plan, [*_lines(plan), *tuned]))
    assert ipc["active"] is True and ipc["autotune"] == "tuned" and decode["backend"] == "pcie-ipc"
    assert "autotuned 8 shape(s)" in ipc["evidence"] and "persisted autotune cache" in ipc["evidence"]
    assert "pcie_ipc_ar.py:380-385" in ipc["evidence"]
    # one rank kept the seed policy: still active, but untuned there, and said so
    seed = [*tuned[:3], TS.format(r=3) + SEED, *tuned[4:]]
    (ipc,), _ = activation.assess(plan, _start(plan, [*_lines(plan), *seed]))
    assert ipc["active"] is True and ipc["autotune"] == "seed"
    assert "untuned on TP3" in ipc["evidence"] and "seed policy" in ipc["evidence"]
    assert "neither the persisted autotune cache nor a measurement" in ipc["evidence"]
    # --disable-flashinfer-autotune says so in its own words
    off = TS.format(r=0) + ("FlashInfer PCIe-IPC all-reduce: --disable-flashinfer-autotune is set; keeping "
                            "FlashInfer's seed policy.")
    (ipc,), _ = activation.assess(plan, _start(plan, [*_lines(plan), off]))
    assert ipc["autotune"] == "seed" and "pcie_ipc_ar.py:329-333" in ipc["evidence"]


def test_every_new_needle_is_found_through_a_search_key():
    """The follower searches the log for KEYS first; each line SGLang 0.5.23 logs for these needles holds one."""
    logged = [
        "Registering 312 cuda graph addresses",  # custom_all_reduce.py:238, 242
        "Registered 12 cuda graph addresses via POSIX fd handles (3 unique allocations) in 1.0 ms",  # v2, VMM
        TUNED, SEED,
        "FlashInfer PCIe-IPC all-reduce: --disable-flashinfer-autotune is set; keeping FlashInfer's seed policy.",
        "FlashInfer PCIe-IPC all-reduce reached its first reduction inside another autotune context; skipping "
        "autotune and keeping the seed policy. Call PcieIpcCommunicator.prepare() from warmup to tune.",
        "FlashInfer PCIe-IPC all-reduce has no host group to autotune on; running FlashInfer's seed policy "
        "instead of measured tactics.",
        "FlashInfer PCIe-IPC autotune failed (boom); keeping the seed policy.",
        "FlashInfer PCIe-IPC autotune covered no shapes for hidden=7168 (requested rows (1, 2)); the kernels "
        "keep the seed policy.",
    ]
    for line in logged:
        assert any(k in line for k in start_lines.KEYS), line
        assert any(n in line for n in start_lines.NEEDLES), line
