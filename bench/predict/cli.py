"""`bench predict`: verify time and speculative tok/s from compute time, all-reduce count and latency.

verify ms  = compute ms + decode collectives x all-reduce us / 1000 + verify collectives x broadcast us / 1000
             + overhead ms
decode collectives = 1 embedding all-reduce + 2 all-reduces per layer + 1 logits all-gather (--layers)
verify collectives = 3 sampling broadcasts at --temperature > 0, else 0 (un-graphed)
spec tok/s = accept_len / (draft ms + verify ms) x 1000
baseline   = 1000 / decode ms   (or --baseline-tokps, or the bundle's baseline__off.json)
break-even accept length = baseline tok/s x (draft + verify ms) / 1000
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from bench.args import CliArgs, entry_point, print_result, temperature
from bench.predict import model
from bench.predict.records import BundleRow, CollectivesUsed, Prediction, Scenario, SecondOpinion
from launcher.errors import UserError

if TYPE_CHECKING:
    from bench.predict.measured import AllreduceCurve

_DOC = __doc__ or ""  # inside the class body, __doc__ is the class's own


@dataclass(frozen=True)
class PredictArgs(CliArgs):
    """The flags of `bench predict`, in the order `inputs` lists them."""

    prog: ClassVar[str] = "bench predict"
    description: ClassVar[str] = _DOC.split("\n", 1)[0].split(": ", 1)[1]
    parser_options: ClassVar[dict[str, Any]] = {
        "epilog": "formulas:\n" + "\n".join(_DOC.splitlines()[2:]),
        "formatter_class": argparse.RawDescriptionHelpFormatter,
        "allow_abbrev": False,
    }

    verify_ms: float | None = None
    compute_ms: float | None = None
    allreduces: int | None = None
    allreduce_us: float | None = None
    temperature: float = 0.0
    layers: int | None = None
    model_overlay: str | None = None
    model_path: str | None = None
    broadcast_us: float | None = None
    overhead_ms: float = 0.0
    draft_ms: float = 0.0
    accept_len: float | None = None
    baseline_tokps: float | None = None
    decode_ms: float | None = None
    target_tokps: float | None = None
    allreduce_json: str | None = None
    tokens: int | None = None
    hidden: int = 7168
    bundle: str | None = None
    json: bool = False
    aic: bool = False
    aic_model: str | None = None
    points: str | None = None

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p = parser
        verify = p.add_mutually_exclusive_group()
        verify.add_argument("--verify-ms", type=float, help="measured verify time per step (ms)")
        verify.add_argument("--compute-ms", type=float, help="verify compute time without communication (ms)")
        p.add_argument("--allreduces", type=int,
                       help="collectives of the target forward per step, priced at the all-reduce latency "
                            "(default: from the model: 1 + 2 per layer + 1, 124 for 61 layers)")
        p.add_argument("--allreduce-us", type=float, help="latency of one all-reduce (us)")
        p.add_argument("--temperature", type=float, default=0.0,
                       help="sampling temperature; above 0 each verify adds 3 un-graphed broadcasts (default 0)")
        p.add_argument("--layers", type=int, help="transformer layers of the target (default: --model-path's "
                                                  "config.json, else --model-overlay's model, else 61)")
        p.add_argument("--model-overlay", help="model overlay whose model to count layers of (kimi-k2, deepseek-v3)")
        p.add_argument("--model-path", help="target model directory: num_hidden_layers of its config.json")
        p.add_argument("--broadcast-us", type=float,
                       help="latency of one un-graphed broadcast (us; default: the all-reduce latency)")
        p.add_argument("--overhead-ms", type=float, default=0.0, help="other per-step cost: launch, sampling (ms)")
        p.add_argument("--draft-ms", type=float, default=0.0, help="draft model time per step (ms)")
        p.add_argument("--accept-len", type=float, help="mean tokens emitted per speculative step")
        base = p.add_mutually_exclusive_group()
        base.add_argument("--baseline-tokps", type=float, help="tok/s without speculation")
        base.add_argument("--decode-ms", type=float, help="time of one plain decode step (ms)")
        p.add_argument("--target-tokps", type=float, help="what all-reduce latency would reach this tok/s?")
        p.add_argument("--allreduce-json", help="allreduce.json from `bench allreduce`: latency per backend/profile")
        p.add_argument("--tokens", type=int, help="tokens per verify pass (draft tokens + 1), for --allreduce-json")
        p.add_argument("--hidden", type=int, default=7168, help="hidden size, for --allreduce-json (default 7168)")
        p.add_argument("--bundle", help="`bench run` output directory: compare predictions with measurements")
        p.add_argument("--json", action="store_true", help="print JSON instead of tables")
        p.add_argument("--aic", action="store_true",
                       help="a second opinion: AIConfigurator's decode and verify estimate and all-reduce tables "
                            "beside the kit's (optional extra: `make aic`, KIT_AIC_PYTHON)")
        p.add_argument("--points", metavar="BUNDLE",
                       help="which EAGLE-3 chain point should win at each load, from a `bench run --eagle3` bundle's "
                            "acceptance by draft position and each point's pass time (bench/predict/points.py); "
                            "no other flag is needed")
        p.add_argument("--aic-model", help="the model AIConfigurator is asked about (default: --model-path, "
                                            "else the model overlay's, e.g. moonshotai/Kimi-K2.5 for kimi-k2)")
        return p

    @property
    def collectives(self) -> model.Collectives:
        """The step's collectives from the model's layer count (model.step_collectives, as the tune counts)."""
        if self.layers is not None:
            layers, source = self.layers, "--layers"
        else:
            layers, source = model.model_layers(overlay=self.model_overlay, model_path=self.model_path)
        return model.step_collectives(layers, self.temperature, layers_source=source)

    @property
    def step(self) -> model.Step:
        coll = self.collectives
        return model.Step(draft_ms=self.draft_ms, overhead_ms=self.overhead_ms, accept_len=self.accept_len,
                          compute_ms=self.compute_ms,
                          allreduces=self.allreduces if self.allreduces is not None else coll.decode,
                          broadcasts=coll.verify, broadcast_us=self.broadcast_us)

    def inputs(self) -> dict[str, str | int | float | bool]:
        """The flags given (or defaulted), as the JSON output echoes them."""
        return {k: v for k, v in asdict(self).items() if v is not None and k != "json"}

    def check(self) -> None:
        """Every input problem, before anything is read (exit 2)."""
        temperature("--temperature", self.temperature)
        for name in ("verify_ms", "compute_ms", "allreduce_us", "accept_len", "baseline_tokps", "decode_ms",
                     "target_tokps", "broadcast_us"):
            value = getattr(self, name)
            if value is not None and value <= 0 and not (
                    name in ("allreduce_us", "compute_ms", "broadcast_us") and value == 0):
                raise UserError(f"--{name.replace('_', '-')} must be positive, got {value}")
        for name in ("overhead_ms", "draft_ms"):
            if getattr(self, name) < 0:
                raise UserError(f"--{name.replace('_', '-')} must not be negative, got {getattr(self, name)}")
        for name in ("allreduces", "tokens", "hidden", "layers"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserError(f"--{name} must be at least 1, got {value}")
        if self.accept_len is None and not self.bundle and not self.aic:
            raise UserError(
                "--accept-len is required (mean tokens per speculative step, e.g. 2.3), unless --bundle gives it"
            )
        if self.allreduce_json:
            if self.compute_ms is None:
                raise UserError("--allreduce-json needs --compute-ms (verify compute time without communication)")
            if self.tokens is None:
                raise UserError("--allreduce-json needs --tokens (tokens per verify pass, e.g. 4 for 3 draft tokens)")
        elif self.compute_ms is not None and self.allreduce_us is None:
            raise UserError("--compute-ms needs --allreduce-us (or --allreduce-json with --tokens)")
        if self.verify_ms is None and self.compute_ms is None and not self.bundle and not self.aic:
            raise UserError("give --verify-ms, or --compute-ms with --allreduce-us")
        if self.verify_ms is not None and (self.allreduce_json or self.allreduce_us is not None):
            raise UserError(
                "--verify-ms already includes the all-reduces; drop --allreduce-us/--allreduce-json or use --compute-ms"
            )


def _baseline(args: PredictArgs, bundle_baseline: float | None) -> float | None:
    if args.baseline_tokps is not None:
        return args.baseline_tokps
    if args.decode_ms is not None:
        return model.baseline_tokps(args.decode_ms)
    return bundle_baseline


def _curves_scenarios(
    *, allreduce_json: str, tokens: int, hidden: int, step: model.Step, baseline: float | None,
    target_tokps: float | None,
) -> tuple[list[Scenario], list[AllreduceCurve], int]:
    """One scenario per measured all-reduce curve, read at the verify pass's message size."""
    from bench.predict.measured import ELEM_BYTES, load_allreduce_curves

    curves = load_allreduce_curves(Path(allreduce_json))
    out = []
    size = 0
    for curve in curves:
        size = tokens * hidden * ELEM_BYTES.get(curve.dtype, 2)
        us, how = curve.at(size)
        out.append(model.scenario(curve.label, step, baseline=baseline, verify=step.verify_ms(us), allreduce_us=us,
                                  source=f"{allreduce_json}: {how} at {size} B", target_tokps=target_tokps))
    return out, curves, size


def _compare_bundle(
    *, bundle_dir: str, step: model.Step, scenarios: list[Scenario], curves: list[AllreduceCurve], size: int
) -> list[BundleRow]:
    """Predicted vs measured tok/s for every speculative entry of the bundle, with % error."""
    from bench.predict.measured import load_bundle

    entries, _ = load_bundle(Path(bundle_dir))
    rows = []
    for e in entries:
        accept = e.accept_length if e.accept_length is not None else step.accept_len
        row = BundleRow(profile=e.profile, spec=e.spec, file=e.file, valid=e.valid, measured_tokps=e.output_throughput,
                        measured_cycle_ms=e.median_itl_ms, accept_length=accept)
        if not e.valid or accept is None or not e.output_throughput:
            note = "invalid run: not compared" if not e.valid else "no accept length: not compared"
            rows.append(row.model_copy(update={"note": note}))
            continue
        verify, source = _verify_for_profile(step=step, scenarios=scenarios, curves=curves, size=size,
                                             profile=e.profile)
        if verify is None:
            note = "no verify model: give --verify-ms, or --compute-ms with --allreduces and latency"
            rows.append(row.model_copy(update={"note": note}))
            continue
        predicted = model.spec_tokps(accept, step.draft_ms, verify)
        rows.append(row.model_copy(update={
            "predicted_verify_ms": round(verify, 4),
            "predicted_cycle_ms": round(step.draft_ms + verify, 4),
            "predicted_tokps": round(predicted, 3),
            "error_pct": round((predicted - e.output_throughput) / e.output_throughput * 100.0, 2),
            "allreduce_source": source,
        }))
    return rows


def _verify_for_profile(
    *, step: model.Step, scenarios: list[Scenario], curves: list[AllreduceCurve], size: int, profile: str
) -> tuple[float | None, str]:
    if curves:
        match = [c for c in curves if c.profile == profile] or [
            c for c in curves if not c.profile and c.backend == "nccl"
        ]
        curve = (match or curves)[0]
        us, how = curve.at(size)
        return step.verify_ms(us), f"{curve.label}: {us:.1f} µs ({how})"
    if scenarios:
        return scenarios[0].verify_ms, scenarios[0].label
    return None, ""


def _flag_scenarios(args: PredictArgs, step: model.Step, baseline: float | None) -> list[Scenario]:
    """The scenario of --verify-ms, else of --allreduce-us; none without either."""
    if args.verify_ms is not None:
        return [model.scenario("--verify-ms", step, baseline=baseline, verify=args.verify_ms, allreduce_us=None,
                               target_tokps=args.target_tokps)]
    if args.allreduce_us is not None:
        return [model.scenario("--allreduce-us", step, baseline=baseline, verify=step.verify_ms(args.allreduce_us),
                               allreduce_us=args.allreduce_us, source="--allreduce-us",
                               target_tokps=args.target_tokps)]
    return []


def _collectives_used(args: PredictArgs, step: model.Step) -> CollectivesUsed:
    c = args.collectives
    return CollectivesUsed(layers=c.layers, layers_source=c.layers_source, allreduces=c.allreduces,
                           allgathers=c.allgathers, broadcasts=c.broadcasts, decode=c.decode, verify=c.verify,
                           temperature=c.temperature, decode_used=step.allreduces,
                           decode_from="--allreduces" if args.allreduces is not None else "the model")


def predict(args: PredictArgs) -> Prediction:
    """All predictions; the first scenario is the headline."""
    args.check()
    bundle_baseline = None
    if args.bundle:
        from bench.predict.measured import load_bundle

        _, bundle_baseline = load_bundle(Path(args.bundle))
    baseline = _baseline(args, bundle_baseline)
    step = args.step
    scenarios = _flag_scenarios(args, step, baseline)
    curves: list[AllreduceCurve] = []
    size = 0
    if args.allreduce_json:
        assert args.tokens is not None
        extra, curves, size = _curves_scenarios(allreduce_json=args.allreduce_json, tokens=args.tokens,
                                                hidden=args.hidden, step=step, baseline=baseline,
                                                target_tokps=args.target_tokps)
        scenarios.extend(extra)
    result = Prediction(baseline_tokps=baseline, inputs=args.inputs(), collectives=_collectives_used(args, step),
                        scenarios=scenarios)
    if args.aic:
        result = result.model_copy(update={"aic": _second_opinion(args, result, curves)})
    if args.bundle:
        result = result.model_copy(update={
            "bundle": _compare_bundle(bundle_dir=args.bundle, step=step, scenarios=scenarios, curves=curves,
                                      size=size),
            "bundle_baseline_tokps": bundle_baseline,
            "simulated": bundle_simulated(Path(args.bundle)),
        })
    return result


def _second_opinion(args: PredictArgs, result: Prediction, curves: list[AllreduceCurve]) -> SecondOpinion:
    """AIConfigurator's estimate beside the kit's first scenario (bench/predict/aic.py)."""
    from bench.predict import aic

    model_name, source = aic.resolve_model(aic_model=args.aic_model, model_path=args.model_path,
                                           overlay=args.model_overlay)
    tokens = args.tokens or 4
    est = aic.ask(aic.request(model_name, tokens=tokens, hidden=args.hidden))
    head = result.headline
    baseline = head.baseline_tokps if head is not None else result.baseline_tokps
    decode = args.decode_ms if args.decode_ms is not None else (1000.0 / baseline if baseline else None)
    return aic.second_opinion(est, model_source=source, tokens=tokens, hidden=args.hidden, kit_decode_ms=decode,
                              kit_verify_ms=head.verify_ms if head is not None else None,
                              kit_cycle_ms=head.cycle_ms if head is not None else None,
                              kit_allreduce_us=args.allreduce_us, curves=curves)


def bundle_simulated(directory: Path) -> bool:
    """The bundle's manifest says its numbers came from the stand-in server (or it cannot say otherwise: a
    manifest that is missing or unreadable reads as not simulated, as its cells gave no such mark)."""
    try:
        manifest = json.loads((directory / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(manifest, dict) and manifest.get("simulated") is True


def _print(result: Prediction) -> None:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 120))
    if result.simulated:
        console.print("SIMULATED: the bundle was measured on the stand-in server; these predictions and break-even "
                      "values say nothing about a GPU host", style="bold red", markup=False)
    if result.scenarios:
        _print_scenarios(console, result)
    if result.aic is not None:
        from bench.predict import aic

        aic.render(console, result.aic)
    if result.bundle is not None:
        _print_bundle(console, result.bundle)
    console.print(
        "[dim]verify = compute + decode collectives·all-reduce + verify collectives·broadcast + overhead; spec tok/s = accept/(draft+verify)·1000; "
        "break-even accept = baseline tok/s·(draft+verify)/1000[/dim]"
    )


def _print_scenarios(console: Any, result: Prediction) -> None:
    """The step's collectives, one table row per scenario, and each scenario's target."""
    from bench.report.tables import fmt, table

    c = result.collectives
    console.print(f"collectives per step: {c.decode_used} decode, {c.verify} verify (3 sampling broadcasts "
                  f"when temperature > 0; here {c.temperature:g}). Decode from {c.decode_from}; the model: "
                  f"{c.allreduces} all-reduces + {c.allgathers} all-gather for {c.layers} layers "
                  f"({c.layers_source})", markup=False)
    cols = ("scenario", "all-reduce µs", "decode coll. ms", "verify coll. ms", "verify ms", "cycle ms",
            "spec tok/s", "baseline tok/s", "speed-up", "break-even accept")
    rows = [(s.label, fmt(s.allreduce_us, 1), fmt(s.decode_collectives_ms), fmt(s.verify_collectives_ms),
             fmt(s.verify_ms), fmt(s.cycle_ms), fmt(s.spec_tokps, 1), fmt(s.baseline_tokps, 1),
             fmt(s.speedup, 2, "x"), fmt(s.breakeven_accept_len))
            for s in result.scenarios]
    console.print(table("predicted verify and speculative throughput", cols, rows))
    for s in result.scenarios:
        if s.target is not None:
            console.print(f"target {s.target.target_tokps:g} tok/s ({s.label}): {s.target.answer}")


def _print_bundle(console: Any, bundle: list[BundleRow]) -> None:
    """Predicted vs measured per bundle entry.

    A note shared by rows (every row's "no verify model" when no latency was given) is printed once under
    the table, and each row shows its number."""
    from bench.report.tables import fmt, table

    notes = list(dict.fromkeys(b.note for b in bundle if b.note))
    cols = ("profile", "spec", "accept", "measured tok/s", "predicted tok/s", "error %", "measured cycle ms",
            "predicted cycle ms", "note")
    rows = [(b.profile, b.spec, fmt(b.accept_length), fmt(b.measured_tokps, 1), fmt(b.predicted_tokps, 1),
             fmt(b.error_pct, 1, sign=True), fmt(b.measured_cycle_ms), fmt(b.predicted_cycle_ms),
             f"[{notes.index(b.note) + 1}]" if b.note else "")
            for b in bundle]
    console.print(table("predicted vs measured (bundle)", cols, rows, left=0))
    for n, note in enumerate(notes, 1):
        console.print(f"[{n}] {note}", markup=False)


def run_main(args: PredictArgs) -> int:
    """Predict, then print JSON or the tables."""
    if args.points is not None:
        from bench.predict import points

        return points.run(args.points, args.json)
    result = predict(args)
    return print_result(result.to_json(), as_json=args.json, render=lambda _json: _print(result))


main = entry_point(PredictArgs, run_main)


if __name__ == "__main__":
    raise SystemExit(main())
