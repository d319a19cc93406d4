"""Is the backend a profile asked for really running, and which one carries the decode all-reduce?

Every non-NCCL path in SGLang 0.5.23 except MSCCL++ falls back to NCCL with no more than a log warning
(MSCCL++ raises instead and the server dies, `pymscclpp.py:1110-1115`), so a healthy server proves
nothing about which all-reduce it runs. Three things decide it (sources in docs/evidence.md,
"Activation lines" and "Activation verdicts"):

1. **the line SGLang logs once the backend's workspace exists, on every rank.** TP workers prefix
   each line with their ranks (`[time DPn PPn TPn EPn] message`, `managers/scheduler.py:6279-6298`,
   `utils/common.py:2630`). A backend that came up on some ranks only is `failed`: those ranks run
   other collectives than their peers. The evidence names the missing ranks. The lines and the
   reading of them: start_lines.py.
2. **SGLang's per-call precedence** (`distributed/parallel_state.py:745-780`, `:951-993`): the
   FlashInfer fusion workspace, then MSCCL++ (inside CUDA-graph capture), then the custom all-reduce
   `ca`, then PCIe-IPC, then NCCL. A workspace that exists proves nothing when a backend ahead of it
   is on: at TP 2 `ca` takes every decode reduction (`custom_all_reduce.py:272`) while PCIe-IPC
   still builds its workspace, on every rank, in the runner's warm-up before CUDA-graph capture
   (`base_runner.py:257-269`, `:350-365`, `prepare()` at `pcie_ipc_ar.py:307-320`), not on a first
   reduction `ca` declines. `ca` is on unless `--disable-custom-all-reduce`; it turns itself off (with
   a warning, on every rank) at world sizes other than 2/4/6/8, above 2 PCIe-only GPUs, or without P2P
   (`custom_all_reduce_utils.py:466-510`). While it is on, TP rank 0 alone logs "Registering N cuda
   graph addresses" after each capture (`custom_all_reduce.py:181-194`, `:234-242`): where neither the
   warning nor the host facts (KIT_HOST_FACTS) tell, that line says it is on; without it, unknown.
   PCIe-IPC's status also says whether its kernels run measured tactics ("autotuned N shape(s)", from
   the persisted cache or measured at this start) or FlashInfer's seed policy (`pcie_ipc_ar.py:322-385`).
3. **what the server's start proved, kept where log rotation cannot lose it.** supervisord rotates
   the server log at 50 MB. `start_records.Follower` reads the log incrementally from the last start
   line (start_lines.START_MARKER) and keeps, per start, each matched line and the ranks that logged it in
   `$KIT_STATE_DIR/starts/<start>.json`. It runs in the control API (its monitor polls it every
   period, a switch polls it before it judges): outside the server's output path, so a slow or
   failed follower can never block or kill the server, as a tee in server_exec could; it follows
   rotation by inode into the renamed file. A control API that was down while the log rotated away
   the start finds the record it wrote before.

`active` is True (up on every rank, nothing ahead of it), False (missing, given up, up on some
ranks only, or something ahead carries the reductions), or None (cannot be known).
"""

from __future__ import annotations

import json

from launcher.runtime.start_lines import (
    ADAPTIVE_OFF,
    ADAPTIVE_ON,
    ADAPTIVE_UPDATE,
    CA_OFF,
    CA_ON,
    CA_SRC,
    DETECTORS,
    IPC_SEED,
    IPC_TUNED,
    KNOWN,
    MSCCLPP_SRC,
    PS_SRC,
    Detector,
    adaptive_init,
    adaptive_reason,
)

ADAPTIVE = "spec-adaptive"  # the verdict's name for SGLang's run-time EAGLE adaptation (--speculative-adaptive)


def flag_map(flags: list[str]) -> dict[str, object]:
    """`--name value` / bare `--name` pairs of a plan's flags."""
    out: dict[str, object] = {}
    i = 0
    while i < len(flags):
        tok = flags[i]
        if tok.startswith("--"):
            if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
                out[tok[2:]] = flags[i + 1]
                i += 2
                continue
            out[tok[2:]] = True
        i += 1
    return out


def flag_int(value: object, default: int) -> int:
    try:
        return int(str(value))
    except ValueError:
        return default


def expected_ranks(flags: dict[str, object]) -> list[str]:
    tp, pp = flag_int(flags.get("tp-size", 1), 1), flag_int(flags.get("pp-size", 1), 1)
    if tp <= 1:
        return [f"PP{p}" for p in range(pp)] if pp > 1 else [""]
    return [f"PP{p} TP{t}" if pp > 1 else f"TP{t}" for p in range(pp) for t in range(tp)]


def graphs_on(flags: dict[str, object]) -> bool:
    cfg = flags.get("cuda-graph-config")
    try:
        decode = json.loads(cfg).get("decode", {}).get("backend") if isinstance(cfg, str) else None
    except (ValueError, AttributeError):
        decode = None
    return not (flags.get("disable-cuda-graph") is True or flags.get("disable-decode-cuda-graph") is True
                or flags.get("cuda-graph-backend-decode") == "disabled" or decode == "disabled")


def _ranks_text(ranks: list[str]) -> str:
    return ", ".join(r or "(no rank tag)" for r in ranks)


class _Start:
    """One start's record read against the plan: which lines every rank logged."""

    def __init__(self, record: dict | None, ranks: list[str]):
        self.record = record
        self.ranks = ranks
        self.seen = (record or {}).get("seen", {})

    def on_all(self, needle: str) -> tuple[str | None, list[str] | None]:
        """(first line, missing ranks) for a needle; (None, None) when no rank logged it."""
        hit = self.seen.get(needle)
        if not hit:
            return None, None
        got = set(hit["ranks"])
        if self.ranks != [""] and got == {""}:
            return hit["line"], None  # lines without rank tags: cannot be counted
        return hit["line"], [r for r in self.ranks if r not in got]

    def first(self, needles) -> tuple[str, str] | None:
        for needle, source in needles:
            hit = self.seen.get(needle)
            if hit:
                return hit["line"], source
        return None


def _backend_raw(det: Detector, start: _Start) -> dict:
    """One expected backend from its own lines: up on every rank, on some, given up, or silent."""
    out = {"name": det.name, "expected": True, "active": None, "verdict": "unknown", "evidence": det.unknown_reason}
    if det.line is None:
        return out
    line, missing = start.on_all(det.line)
    gave_up = start.first(det.fallbacks)
    if line and missing == []:
        caveat = next((start.seen[c]["line"] for c in det.caveats if c in start.seen), None)
        evidence = f"{line} [on every rank: {_ranks_text(start.ranks)}]"
        out.update(active=True, verdict="active", evidence=f"{evidence}; but also: {caveat}" if caveat else evidence)
    elif line and missing is None:
        out.update(evidence=f"{line} [the line carries no rank tag ([time TPn] ...), so the ranks that logged it "
                            f"cannot be counted against {len(start.ranks)}]")
    elif line:
        logged = [r for r in start.ranks if r not in missing]
        why = f"; {gave_up[0]} ({gave_up[1]})" if gave_up else ""
        out.update(active=False, verdict="failed", missing_ranks=missing,
                   evidence=f"up on some ranks only ({_ranks_text(logged)}), not on {_ranks_text(missing)}: "
                            f"those ranks run other collectives{why}; {line}")
    elif gave_up:
        out.update(active=False, verdict="fell_back", evidence=f"{gave_up[0]} ({gave_up[1]})")
    else:
        out.update(_unseen(start, det.line, det.source))
    return out


def _unseen(start: _Start, line: str, source: str) -> dict:
    """The verdict when the line that says a path is on never appeared: inactive, and whether the start itself
    is missing from the log or the line is."""
    if start.record is None:
        evidence = "the running server's start is not in the server log or in the state dir's start records"
    else:
        evidence = f"no '{line}' in the server log since it started ({source})"
    return {"active": False, "verdict": "inactive", "evidence": evidence}


def _ca_registered(flags, start: _Start) -> str | None:
    """SGLang's rank-0 line that `ca` registered its CUDA-graph buffers, when it can only be the TP group's:
    an attention-TP or DCP subgroup builds its own `ca` (parallel_state.py:2726-2735, 2813-2828) and
    would log the same line."""
    hit = start.first(CA_ON)
    if hit is None:
        return None
    if (flags.get("enable-dp-attention") is True or flag_int(flags.get("attn-cp-size", 1), 1) > 1
            or flag_int(flags.get("dcp-size", 1), 1) > 1):
        return None
    return (f"on: SGLang logged '{hit[0]}' ({hit[1]}), which the custom all-reduce logs after a CUDA-graph "
            f"capture only while it is not disabled; TP rank 0 alone logs it (log_info_on_rank0), so the "
            f"other ranks are taken to agree (they ran the same checks, {CA_SRC}:466-510)")


def _ca_state(flags, start: _Start, facts, facts_note: str) -> tuple[bool | None, str]:
    """Whether SGLang's custom all-reduce takes decode reductions: (True/False/None, why)."""
    on, why = _ca_from_config(flags, start, facts, facts_note)
    if on is None:
        registered = _ca_registered(flags, start)
        if registered:
            return True, registered
    return on, why


def _ca_from_config(flags, start: _Start, facts, facts_note: str) -> tuple[bool | None, str]:
    tp = flag_int(flags.get("tp-size", 1), 1)
    if flags.get("disable-custom-all-reduce") is True:
        return False, f"--disable-custom-all-reduce ({PS_SRC}:502, sglang/srt/distributed/bootstrap.py:252)"
    off = start.first(CA_OFF)
    if off:
        return False, f"SGLang turned it off: {off[0]} ({off[1]})"
    if tp not in (2, 4, 6, 8):
        return False, f"world size {tp} is not one of 2/4/6/8 (custom_all_reduce.py:41)"
    if facts is None:
        return None, (f"at TP {tp} it is on unless " + ("P2P fails" if tp == 2 else "the GPUs are PCIe-only or lack P2P")
                      + f" ({CA_SRC}:492-510), and no SGLang line says it was turned off; {facts_note}")
    p2p = facts.p2p_ok
    if tp > 2 and facts.is_pcie:
        return False, f"host facts: {facts.interconnect}, and SGLang turns it off above 2 PCIe-only GPUs ({CA_SRC}:492-498)"
    if facts.is_pcie is None and tp > 2:
        return None, f"the host facts do not name the interconnect; at TP {tp} it is on only with full NVLink ({CA_SRC}:492)"
    if p2p is False:
        return False, f"host facts: P2P not OK, and SGLang turns it off without P2P ({CA_SRC}:501-510)"
    if p2p is None:
        return None, f"the host facts do not say whether P2P works; it is on at TP {tp} only with P2P ({CA_SRC}:501-510)"
    link = "2 GPUs (any interconnect)" if tp == 2 else "full NVLink"
    return True, (f"on: not disabled, TP {tp} with {link} and P2P (host facts); it accepts every reduction up to "
                  f"8 MiB (custom_all_reduce.py:260-275), ahead of PCIe-IPC ({PS_SRC}:959-975)")


def _ipc_autotune(ipc: dict, start: _Start) -> None:
    """Whether PCIe-IPC's kernels run measured tactics: "tuned" ("autotuned N shape(s)" on every rank: read
    from the persisted $FLASHINFER_AUTOTUNE_DIR cache or measured at this start; the line does not say
    which), "seed" (a rank kept FlashInfer's seed policy: no cache entry was used and nothing was measured),
    or None (no line yet)."""
    seed = next(((n, src) for n, src in IPC_SEED if n in start.seen), None)
    if seed is not None:
        hit = start.seen[seed[0]]
        ipc["autotune"] = "seed"
        ipc["evidence"] += (f"; untuned on {_ranks_text(hit['ranks'])}: {hit['line']} ({seed[1]}): the one-shot "
                            "kernels run FlashInfer's seed policy, neither the persisted autotune cache nor a "
                            "measurement on this host")
        return
    line, missing = start.on_all(IPC_TUNED[0])
    if line and not missing:
        ipc["autotune"] = "tuned"
        ipc["evidence"] += (f"; {line} ({IPC_TUNED[1]}): measured tactics, from the persisted autotune cache "
                            "or measured at this start")
    else:
        ipc["autotune"] = None


def assess(plan, record: dict | None, facts=None, facts_note: str = "no host facts (KIT_HOST_FACTS is not set)"
           ) -> tuple[list[dict], dict]:
    """(one status per expected backend, which backend carries the decode all-reduce) for `plan`'s start."""
    flags = flag_map(plan.flags)
    start = _Start(record, expected_ranks(flags))
    raw = {name: _backend_raw(DETECTORS[name], start) for name in KNOWN}
    stages = _stages(flags, plan.env, raw, start, facts, facts_note)
    statuses = [_in_order(dict(raw[name]), name, stages) for name in plan.expects]
    if flags.get("speculative-adaptive") is True:
        statuses.append(_adaptive_status(start))
    return statuses, _decode_carrier(flag_int(flags.get("tp-size", 1), 1), raw, stages)


def _stages(flags: dict, env: dict, raw: dict, start: _Start, facts, facts_note: str
            ) -> list[tuple[str, bool | None, str]]:
    """SGLang's order per call; each stage: (backend, True/False/None, why)."""
    stages: list[tuple[str, bool | None, str]] = []
    fusion_on = "flashinfer-allreduce-fusion-backend" in flags and "enforce-disable-flashinfer-allreduce-fusion" not in flags
    fusion = raw["fusion"]
    if fusion["active"]:
        stages.append(("fusion", True, f"the FlashInfer fusion workspace is up and takes plain all-reduces first "
                                       f"({PS_SRC}:765, bootstrap.py:257-262): {fusion['evidence']}"))
    elif fusion_on and fusion["active"] is None:
        stages.append(("fusion", None, fusion["evidence"]))
    else:
        stages.append(("fusion", False, "fusion off" if not fusion_on else fusion["evidence"]))
    ms = raw["mscclpp"]
    if flags.get("enable-mscclpp") is True:
        if ms["active"] and not graphs_on(flags):
            stages.append(("mscclpp", False, "MSCCL++ is up but runs only inside CUDA-graph capture, and decode "
                                             f"graphs are off ({MSCCLPP_SRC}:1266)"))
        else:
            stages.append(("mscclpp", ms["active"], ms["evidence"]))
    ca_on, ca_why = _ca_state(flags, start, facts, facts_note)
    stages.append(("ca", ca_on, ca_why))
    ipc = raw["pcie-ipc"]
    if ipc["active"] is not False:
        _ipc_autotune(ipc, start)
    if str(env.get("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "")).lower() in ("1", "true", "yes", "on"):
        stages.append(("pcie-ipc", ipc["active"], ipc["evidence"]))
    return stages


def _in_order(st: dict, name: str, stages: list[tuple[str, bool | None, str]]) -> dict:
    """An active backend's status, judged against the stages ahead of it: superseded by one that is on, unknown
    while one may be."""
    ahead = []
    for backend, on, why in stages:
        if backend == name:
            break
        ahead.append((backend, on, why))
    if st["active"] is True:
        winner = next(((b, why) for b, on, why in ahead if on is True), None)
        unsure = next(((b, why) for b, on, why in ahead if on is None), None)
        if winner:
            st.update(active=False, verdict="superseded",
                      evidence=f"{st['evidence']}; but {winner[0]} comes first in SGLang's order and carries the "
                               f"reductions: {winner[1]}")
        elif unsure:
            st.update(active=None, verdict="unknown",
                      evidence=f"{st['evidence']}; but whether {unsure[0]} comes first cannot be known: {unsure[1]}")
    return st


def _decode_carrier(tp: int, raw: dict, stages: list[tuple[str, bool | None, str]]) -> dict:
    """{"backend", "why"}: the first stage that is on carries the decode all-reduce, NCCL when none is; None while
    one may be on, or when the ranks disagree."""
    split = next((raw[b] for b, _, _ in stages if b in raw and raw[b]["verdict"] == "failed"), None)
    if tp <= 1:
        return {"backend": "none", "why": "TP 1: no tensor-parallel all-reduce"}
    if split is not None:
        return {"backend": None, "why": f"the ranks disagree: {split['name']} is {split['evidence']}"}
    for backend, on, why in stages:
        if on is True:
            return {"backend": backend, "why": why}
        if on is None:
            return {"backend": None, "why": f"unknown: {backend} may be on: {why}"}
    off = [f"{b}: {why}" for b, on, why in stages if on is False and b != "fusion"]
    if off:
        return {"backend": "nccl", "why": "nothing ahead of NCCL is on (" + "; ".join(off) + ")"}
    return {"backend": "nccl", "why": "nothing ahead of NCCL is on"}


def _adaptive_status(start: _Start) -> dict:
    """Whether SGLang runs the adaptive EAGLE controller the plan asked for (--speculative-adaptive), or
    fell back to the static point with its reason (speculative_hook.py:1374-1389). TP rank 0 alone logs
    "initialized" (log_info_on_rank0), so one rank's line stands for all: the others ran the same
    resolution of the same arguments."""
    out: dict = {"name": ADAPTIVE, "expected": True, "active": None, "verdict": "unknown", "evidence": ""}
    on = start.first([ADAPTIVE_ON])
    off = start.first([ADAPTIVE_OFF])
    if on:
        parsed = adaptive_init(on[0])
        if parsed:
            out["steps"], out["candidate_steps"] = parsed
        out.update(active=True, verdict="active",
                   evidence=f"{on[0]} ({on[1]}; TP rank 0 alone logs it, the first batch-size tier's steps)")
    elif off:
        out.update(active=False, verdict="fell_back", reason=adaptive_reason(off[0]),
                   evidence=f"{off[0]} ({off[1]}): SGLang runs the static point")
    else:
        out.update(_unseen(start, *ADAPTIVE_ON))
    return out


def adaptive_state(plan, record: dict | None) -> dict | None:
    """What SGLang's adaptive EAGLE controller chose, for /status and /metrics; None when the plan does not
    ask for it. `steps`: the steps of the last change SGLang logged (its line names no batch-size tier), else
    the first tier's starting steps; `changes`: "updated" lines since the server started (summed over the
    replicas when --dp-size runs several); `last_change`: {from, to, ema_accept_len, line}."""
    if plan is None or flag_map(plan.flags).get("speculative-adaptive") is not True:
        return None
    status = _adaptive_status(_Start(record, [""]))
    ad = (record or {}).get("adaptive") or {}
    last = ad.get("last") if isinstance(ad.get("last"), dict) else None
    steps = last.get("to") if last else status.get("steps")
    return {"verdict": status["verdict"], "active": status["active"], "reason": status.get("reason"),
            "initial_steps": status.get("steps"), "candidate_steps": status.get("candidate_steps"),
            "steps": steps if status["active"] else None, "changes": int(ad.get("changes") or 0),
            "last_change": last, "source": ADAPTIVE_UPDATE[1]}


def load_facts() -> tuple[object | None, str]:
    """The host facts the control API was given (KIT_HOST_FACTS), and a note when there are none."""
    from launcher.runtime.admission import host_facts

    try:
        facts = host_facts()
    except Exception as exc:  # a bad file: the verdicts stay unknown where they need it
        return None, f"KIT_HOST_FACTS cannot be read ({exc})"
    return facts, "" if facts is not None else "no host facts (KIT_HOST_FACTS is not set)"


def inactive(statuses: list[dict]) -> list[dict]:
    """The expected backends shown not to be running (unknown ones are not counted)."""
    return [s for s in statuses if s["expected"] and s["active"] is False]


def summary(statuses: list[dict]) -> str:
    """One line naming each inactive backend and why, for a switch's error and the bench."""
    return "; ".join(f"{s['name']}: {s['evidence']}" for s in inactive(statuses))
