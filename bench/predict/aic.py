"""`bench predict --aic`: a second opinion from NVIDIA AIConfigurator's model of the target host.

AIConfigurator (PyPI `aiconfigurator`, with its data in `aiconfigurator-core`) ships a system
`rtx_pro_6000_server` (8 SM120 GPUs over PCIe Gen5) with per-op tables measured under SGLang,
including all-reduce at decode sizes. It is an optional extra, never a dependency of the kit: it runs
in its own virtual environment (`make aic` creates .venv-aic), through a subprocess running
bench/predict/aic_probe.py, so its dependencies (pandas, pyarrow, bokeh, ...) stay out of the kit's.

Which Python: KIT_AIC_PYTHON, else .venv-aic/bin/python in the current folder, else the kit's own
interpreter. None of them able to import aiconfigurator: exit 2, naming `make aic` and the setting.

What is asked (aic_probe.py says how): the decode step (nextn 0) and one speculative step with
`--tokens - 1` drafts (default 3) at batch 1, TP 8, SGLang, and the all-reduce latency its tables hold
for the decode message (hidden elements) and the verify message (tokens x hidden elements).

Its speculative step is an MTP iteration: the verify of nextn+1 tokens plus nextn draft layers that
cost what a target layer costs (every per-layer op scaled by (layers + nextn) / layers). EAGLE-3's
draft is a separate small model, so AIConfigurator's step is compared with the kit's cycle (draft +
verify) as well as with its verify alone.

The model: --aic-model (an AIConfigurator model name or a local model folder), else --model-path when
its config.json is readable here, else the model overlay (--model-overlay, else MODEL_OVERLAY) mapped
by AIC_MODELS; no mapping is exit 2 naming --aic-model.

Disagreement: ratio = kit / AIConfigurator for each figure both have; outside DISAGREE (0.8..1.25)
the row says the two models disagree.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench.predict.records import AicTables, AllreduceOpinion, RatioRow, SecondOpinion
from launcher import settings
from launcher.errors import RuntimeFailure, UserError

PROBE = Path(__file__).with_name("aic_probe.py")
VENV = ".venv-aic"
SYSTEM = "rtx_pro_6000_server"
BACKEND = "sglang"
TP = 8
ISL, OSL = 1024, 128
ELEM_BYTES = 2  # bf16 activations: AIConfigurator's tables count elements, `bench allreduce` bytes
DISAGREE = (0.8, 1.25)
TIMEOUT_S = 600.0
# The kit's model overlays (profiles/model/) and AIConfigurator 0.12's model names (its model_configs/).
# kimi-k2 covers K2 and K2.5: K2.5 is in AIConfigurator's default model list, K2-Instruct is not (it would
# fetch its config from the Hub). DeepSeek-V3 is refused on rtx_pro_6000_server by 0.12 itself (no fp8_block GEMM
# table for sglang; its support_matrix/rtx_pro_6000_server.csv says FAIL): the error is passed on as it is.
AIC_MODELS = {"kimi-k2": "moonshotai/Kimi-K2.5", "deepseek-v3": "deepseek-ai/DeepSeek-V3"}
INSTALL_HINT = (f"install it in its own environment with `make aic` (creates {VENV}/ with aiconfigurator), then "
                f"run from the checkout or set KIT_AIC_PYTHON to that environment's python")


class AicMissing(UserError):
    """No Python that can import aiconfigurator (exit 2)."""


@dataclass(frozen=True)
class Estimate:
    """AIConfigurator's answer, checked."""

    version: str
    model: str
    system: str
    backend: str
    backend_version: str
    nextn: int
    decode_ms: float
    spec_step_ms: float
    allreduce: AicTables

    @property
    def ratio(self) -> float:
        return self.spec_step_ms / self.decode_ms


def find_python(environ: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[list[str], str]:
    """(the Pythons to try, in order; how they were chosen)."""
    explicit = settings.KIT_AIC_PYTHON.get(environ)
    if explicit is not None:
        return [str(explicit)], "KIT_AIC_PYTHON"
    venv = (cwd or Path.cwd()) / VENV / "bin" / "python"
    return ([str(venv)] if venv.exists() else []) + [sys.executable], f"{VENV}/bin/python, else this Python"


def resolve_model(*, aic_model: str | None, model_path: str | None, overlay: str | None,
                  environ: dict[str, str] | None = None) -> tuple[str, str]:
    """(the model AIConfigurator is asked about, where the choice came from); exit 2 without one."""
    if aic_model:
        return aic_model, "--aic-model"
    if model_path and (Path(model_path) / "config.json").is_file():
        return str(model_path), "--model-path"
    name, source = overlay, "--model-overlay"
    if not name:
        name, source = settings.MODEL_OVERLAY.get(environ), "MODEL_OVERLAY"
    if name and name in AIC_MODELS:
        return AIC_MODELS[name], f"{source} {name}"
    known = ", ".join(f"{k} -> {v}" for k, v in AIC_MODELS.items())
    what = f"model overlay {name!r} has no AIConfigurator model" if name else "no model overlay is named"
    raise UserError(f"--aic: {what} (known: {known}); name one with --aic-model (an AIConfigurator model such "
                    "as moonshotai/Kimi-K2.5, or a local model folder with config.json)")


def request(model: str, *, tokens: int, hidden: int) -> dict[str, str | int | list[int]]:
    """What the probe is asked (aic_probe.py's request): decode and (tokens - 1)-draft steps, all-reduce at
    both message sizes."""
    return {"model": model, "system": SYSTEM, "backend": BACKEND, "tp": TP, "nextn": tokens - 1, "isl": ISL,
            "osl": OSL, "elements": [hidden, tokens * hidden]}


def ask(req: dict[str, str | int | list[int]], *, environ: dict[str, str] | None = None, cwd: Path | None = None,
        timeout_s: float = TIMEOUT_S) -> Estimate:
    """Run the probe under the first Python that has aiconfigurator; its checked answer."""
    pythons, how = find_python(environ, cwd)
    tried = []
    for python in pythons:
        try:
            proc = subprocess.run([python, str(PROBE), json.dumps(req)], capture_output=True, text=True,
                                  timeout=timeout_s, env={**os.environ, **(environ or {})}, check=False)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            tried.append(f"{python} ({exc.strerror or type(exc).__name__})")
            continue
        except subprocess.TimeoutExpired:
            raise RuntimeFailure(f"--aic: AIConfigurator ({python}) gave no answer in {timeout_s:g} s") from None
        answer = _decode(proc, python)
        if answer.get("error") == "missing":
            tried.append(f"{python} (no aiconfigurator)")
            continue
        if "error" in answer:
            raise UserError(f"--aic: AIConfigurator ({python}) failed: {answer.get('error')}: "
                            f"{answer.get('message', '')}")
        return parse(answer)
    raise AicMissing(f"--aic: AIConfigurator is not installed where the kit looks ({how}; tried "
                     f"{'; '.join(tried)}): {INSTALL_HINT}")


def _decode(proc: subprocess.CompletedProcess[str], python: str) -> dict[str, object]:
    """The probe's answer: the JSON object on its last line of output."""
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if proc.returncode != 0 or not isinstance(answer, dict):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeFailure(f"--aic: {python} {PROBE.name} exited {proc.returncode} without an answer: {tail}")
    return answer


def _positive(d: dict[str, object], key: str) -> float:
    value = d.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 or value != value:
        raise RuntimeFailure(f"--aic: AIConfigurator's answer has no positive {key} (got {value!r})")
    return float(value)


def _tables(answer: dict[str, object]) -> AicTables:
    try:
        return AicTables.model_validate(answer.get("allreduce"))
    except ValidationError:
        raise RuntimeFailure("--aic: AIConfigurator's answer has no all-reduce tables") from None


def parse(answer: dict[str, object]) -> Estimate:
    """The probe's JSON as an Estimate; RuntimeFailure (exit 1) on an answer missing a figure."""
    ar = _tables(answer)
    nextn = answer.get("nextn", 0)
    if isinstance(nextn, bool) or not isinstance(nextn, int) or nextn < 0:
        raise RuntimeFailure(f"--aic: AIConfigurator's answer has no draft count (nextn {nextn!r})")
    return Estimate(
        version=str(answer.get("aiconfigurator_version", "?")), model=str(answer.get("model", "?")),
        system=str(answer.get("system", "?")), backend=str(answer.get("backend", "?")),
        backend_version=str(answer.get("backend_version", "?")), nextn=nextn,
        decode_ms=_positive(answer, "decode_ms"), spec_step_ms=_positive(answer, "spec_step_ms"),
        allreduce=ar,
    )


def ratio_row(what: str, kit: float | None, aic: float | None) -> RatioRow:
    """One figure from both models: kit / AIConfigurator, and whether that is outside DISAGREE."""
    kit_r, aic_r = (None if kit is None else round(kit, 4)), (None if aic is None else round(aic, 4))
    if kit is None or aic is None or aic <= 0:
        verdict = "kit has no figure" if kit is None else "AIConfigurator has no figure"
        return RatioRow(what=what, kit=kit_r, aic=aic_r, ratio=None, verdict=verdict)
    r = kit / aic
    if DISAGREE[0] <= r <= DISAGREE[1]:
        verdict = "agree"
    else:
        verdict = "disagree: kit higher" if r > 1 else "disagree: kit lower"
    return RatioRow(what=what, kit=kit_r, aic=aic_r, ratio=round(r, 3), verdict=verdict)


def table_us(est: Estimate, label: str, gpus: int, elements: int) -> float | None:
    """AIConfigurator's all-reduce µs of one table (nccl, sglang_graph, sglang_eager) at a size, or None."""
    for t in est.allreduce.tables:
        if t.label == label and not t.missing:
            for p in t.gpus.get(str(gpus), []):
                if p.elements == elements:
                    return float(p.us)
    return None


def _opinion(est: Estimate, phase: str, elements: int, gpus: int, kit: str | None,
             kit_us: tuple[float, float] | None) -> AllreduceOpinion:
    """One message size and GPU count: AIConfigurator's NCCL and in-graph tables beside the kit's figure
    (`kit_us`: as shown, and unrounded for the ratio)."""
    nccl = table_us(est, "nccl", gpus, elements)
    return AllreduceOpinion(phase=phase, elements=elements, size_B=elements * ELEM_BYTES, gpus=gpus, aic_nccl_us=nccl,
                            aic_sglang_graph_us=table_us(est, f"{BACKEND}_graph", gpus, elements), kit=kit,
                            kit_us=None if kit_us is None else kit_us[0],
                            vs_nccl=ratio_row("all-reduce µs", None if kit_us is None else kit_us[1], nccl))


def _allreduce_opinions(est: Estimate, *, tokens: int, hidden: int, kit_allreduce_us: float | None,
                        curves: list[Any]) -> list[AllreduceOpinion]:
    """At the decode and the verify message: the kit's --allreduce-us and each measured curve of 2, 4 or 8
    ranks beside AIConfigurator's tables for as many GPUs (its NCCL table and its backend's in-graph one)."""
    out = []
    measured = [c for c in curves if getattr(c, "nranks", None) in (2, 4, 8)]
    for phase, elements in (("decode", hidden), ("verify", tokens * hidden)):
        if kit_allreduce_us is not None:
            out.append(_opinion(est, phase, elements, TP, "--allreduce-us", (kit_allreduce_us, kit_allreduce_us)))
        for c in measured:
            us, how = c.at(elements * ELEM_BYTES)
            out.append(_opinion(est, phase, elements, c.nranks, f"{c.label} ({how})", (round(us, 3), us)))
        if kit_allreduce_us is None and not measured:
            out.append(_opinion(est, phase, elements, TP, None, None))
    return out


def second_opinion(est: Estimate, *, model_source: str, tokens: int, hidden: int, kit_decode_ms: float | None,
                   kit_verify_ms: float | None, kit_cycle_ms: float | None, kit_allreduce_us: float | None,
                   curves: list[Any]) -> SecondOpinion:
    """Both models side by side: step times, their ratio, and all-reduce latency at decode and verify size."""
    kit_ratio = kit_verify_ms / kit_decode_ms if kit_verify_ms and kit_decode_ms else None
    steps = [
        ratio_row("decode step ms", kit_decode_ms, est.decode_ms),
        ratio_row(f"verify ms (AIC: {est.nextn}-draft MTP step)", kit_verify_ms, est.spec_step_ms),
        ratio_row(f"cycle ms, draft + verify (AIC: {est.nextn}-draft MTP step)", kit_cycle_ms, est.spec_step_ms),
        ratio_row("verify / decode", kit_ratio, est.ratio),
    ]
    allreduce = _allreduce_opinions(est, tokens=tokens, hidden=hidden, kit_allreduce_us=kit_allreduce_us,
                                    curves=curves)
    return SecondOpinion(
        aiconfigurator_version=est.version, model=est.model, model_source=model_source,
        system=est.system, backend=f"{est.backend} {est.backend_version}", tp=TP, isl=ISL, osl=OSL,
        nextn=est.nextn, decode_ms=round(est.decode_ms, 4), spec_step_ms=round(est.spec_step_ms, 4),
        verify_over_decode=round(est.ratio, 4), system_file=est.allreduce.system_file,
        data_dir=est.allreduce.data_dir, nccl_version=est.allreduce.nccl_version,
        steps=steps, allreduce=allreduce,
        disagree=[r.what for r in steps if r.verdict.startswith("disagree")]
        + [f"all-reduce {a.phase} ({a.kit})" for a in allreduce if a.vs_nccl.verdict.startswith("disagree")],
    )


def render(console: Any, op: SecondOpinion) -> None:
    """The second opinion as two tables and one line of verdict."""
    from bench.report.tables import fmt, table

    console.print(f"second opinion: AIConfigurator {op.aiconfigurator_version}, {op.model} "
                  f"({op.model_source}) on {op.system}, {op.backend}, TP {op.tp}, batch 1, "
                  f"ISL {op.isl}/OSL {op.osl}; its data: {op.system_file}", markup=False)
    rows = [(r.what, fmt(r.kit), fmt(r.aic), fmt(r.ratio, 2, "x"), r.verdict) for r in op.steps]
    console.print(table("kit vs AIConfigurator: step times", ("figure", "kit", "AIConfigurator", "kit / AIC",
                                                               "verdict"), rows))
    rows = [(a.phase, str(a.size_B), str(a.gpus), a.kit or "-", fmt(a.kit_us, 1), fmt(a.aic_nccl_us, 1),
             fmt(a.aic_sglang_graph_us, 1), fmt(a.vs_nccl.ratio, 2, "x"), a.vs_nccl.verdict) for a in op.allreduce]
    console.print(table(f"all-reduce µs: kit vs AIConfigurator's tables (NCCL {op.nccl_version}, "
                        f"{op.backend} graph)",
                        ("message", "bytes", "GPUs", "kit source", "kit µs", "AIC NCCL µs", "AIC in-graph µs",
                         "kit / AIC NCCL", "verdict"), rows))
    if op.disagree:
        console.print(f"the two models disagree on: {', '.join(op.disagree)} (outside {DISAGREE[0]:g}..{DISAGREE[1]:g})",
                      markup=False)
    else:
        console.print("the two models agree within "
                      f"{DISAGREE[0]:g}..{DISAGREE[1]:g} on every figure both have", markup=False)
