"""`bench predict`: verify time and speculative tok/s from compute time, all-reduce count and latency.

verify ms  = compute ms + n_allreduce x all-reduce us / 1000 + overhead ms
spec tok/s = accept_len / (draft ms + verify ms) x 1000
baseline   = 1000 / decode ms   (or --baseline-tokps, or the bundle's baseline__off.json)
break-even accept length = baseline tok/s x (draft + verify ms) / 1000
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from bench.predict import model
from launcher.errors import UserError, run_cli


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench predict",
        description=__doc__.split("\n", 1)[0].split(": ", 1)[1],
        epilog="formulas:\n" + "\n".join(__doc__.splitlines()[2:]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    verify = p.add_mutually_exclusive_group()
    verify.add_argument("--verify-ms", type=float, help="measured verify time per step (ms)")
    verify.add_argument("--compute-ms", type=float, help="verify compute time without communication (ms)")
    p.add_argument(
        "--allreduces", type=int, help="all-reduces per verify step (2 per layer: 122 for 61 layers)"
    )
    p.add_argument("--allreduce-us", type=float, help="latency of one all-reduce (us)")
    p.add_argument(
        "--overhead-ms", type=float, default=0.0, help="other per-step cost: launch, sampling (ms)"
    )
    p.add_argument("--draft-ms", type=float, default=0.0, help="draft model time per step (ms)")
    p.add_argument("--accept-len", type=float, help="mean tokens emitted per speculative step")
    base = p.add_mutually_exclusive_group()
    base.add_argument("--baseline-tokps", type=float, help="tok/s without speculation")
    base.add_argument("--decode-ms", type=float, help="time of one plain decode step (ms)")
    p.add_argument("--target-tokps", type=float, help="what all-reduce latency would reach this tok/s?")
    p.add_argument(
        "--allreduce-json", help="allreduce.json from `bench allreduce`: latency per backend/profile"
    )
    p.add_argument(
        "--tokens", type=int, help="tokens per verify pass (draft tokens + 1), for --allreduce-json"
    )
    p.add_argument(
        "--hidden", type=int, default=7168, help="hidden size, for --allreduce-json (default 7168)"
    )
    p.add_argument("--bundle", help="`bench run` output directory: compare predictions with measurements")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    return p


def _positive(args: argparse.Namespace) -> None:
    for name in (
        "verify_ms",
        "compute_ms",
        "allreduce_us",
        "accept_len",
        "baseline_tokps",
        "decode_ms",
        "target_tokps",
    ):
        value = getattr(args, name)
        if value is not None and value <= 0 and not (name in ("allreduce_us", "compute_ms") and value == 0):
            raise UserError(f"--{name.replace('_', '-')} must be positive, got {value}")
    for name in ("overhead_ms", "draft_ms"):
        if getattr(args, name) < 0:
            raise UserError(f"--{name.replace('_', '-')} must not be negative, got {getattr(args, name)}")
    for name in ("allreduces", "tokens", "hidden"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UserError(f"--{name} must be at least 1, got {value}")


def _scenario(
    label: str,
    args: argparse.Namespace,
    baseline: float | None,
    verify: float,
    ar_us: float | None,
    note: str = "",
) -> dict[str, Any]:
    accept = args.accept_len
    cycle = args.draft_ms + verify
    out: dict[str, Any] = {
        "label": label,
        "allreduce_us": None if ar_us is None else round(ar_us, 3),
        "allreduce_source": note,
        "verify_ms": round(verify, 4),
        "cycle_ms": round(cycle, 4),
        "spec_tokps": round(model.spec_tokps(accept, args.draft_ms, verify), 3) if accept else None,
        "baseline_tokps": None if baseline is None else round(baseline, 3),
        "breakeven_accept_len": None
        if baseline is None
        else round(model.breakeven_accept_len(baseline, args.draft_ms, verify), 4),
    }
    out["speedup"] = round(out["spec_tokps"] / baseline, 4) if baseline and out["spec_tokps"] else None
    if args.target_tokps and accept:
        out["target"] = _target(args, verify_known_only=args.compute_ms is None)
    return out


def _target(args: argparse.Namespace, verify_known_only: bool) -> dict[str, Any]:
    budget = args.accept_len * 1000.0 / args.target_tokps - args.draft_ms
    result: dict[str, Any] = {"target_tokps": args.target_tokps, "verify_budget_ms": round(budget, 4)}
    if verify_known_only or args.allreduces is None:
        result["answer"] = (
            f"verify must take at most {budget:.2f} ms; give --compute-ms and --allreduces to turn that into an all-reduce latency"
        )
        result["allreduce_us_needed"] = None
        return result
    needed = model.allreduce_us_for_target(
        args.target_tokps, args.accept_len, args.draft_ms, args.compute_ms, args.overhead_ms, args.allreduces
    )
    result["allreduce_us_needed"] = round(needed, 3) if needed >= 0 else None
    if needed < 0:
        result["answer"] = (
            f"impossible even at 0 µs per all-reduce: compute {args.compute_ms:g} ms + overhead {args.overhead_ms:g} ms "
            f"already exceeds the {budget:.2f} ms verify budget at accept length {args.accept_len:g}"
        )
    else:
        result["answer"] = f"each of the {args.allreduces} all-reduces must take at most {needed:.1f} µs"
    return result


def _baseline(args: argparse.Namespace, bundle_baseline: float | None) -> float | None:
    if args.baseline_tokps is not None:
        return args.baseline_tokps
    if args.decode_ms is not None:
        return model.baseline_tokps(args.decode_ms)
    return bundle_baseline


def _curves_scenarios(
    args: argparse.Namespace, baseline: float | None
) -> tuple[list[dict[str, Any]], list[Any], int]:
    from bench.predict.measured import ELEM_BYTES, load_allreduce_curves

    curves = load_allreduce_curves(Path(args.allreduce_json))
    out = []
    size = 0
    for curve in curves:
        size = args.tokens * args.hidden * ELEM_BYTES.get(curve.dtype, 2)
        us, how = curve.at(size)
        verify = model.verify_ms(args.compute_ms, args.allreduces, us, args.overhead_ms)
        out.append(
            _scenario(curve.label, args, baseline, verify, us, f"{args.allreduce_json}: {how} at {size} B")
        )
    return out, curves, size


def _validate(args: argparse.Namespace) -> None:
    _positive(args)
    if args.accept_len is None and not args.bundle:
        raise UserError(
            "--accept-len is required (mean tokens per speculative step, e.g. 2.3), unless --bundle gives it"
        )
    if args.allreduce_json:
        if args.compute_ms is None or args.allreduces is None:
            raise UserError(
                "--allreduce-json needs --compute-ms and --allreduces (verify compute time and all-reduce count)"
            )
        if args.tokens is None:
            raise UserError(
                "--allreduce-json needs --tokens (tokens per verify pass, e.g. 4 for 3 draft tokens)"
            )
    elif args.compute_ms is not None and (args.allreduces is None or args.allreduce_us is None):
        raise UserError(
            "--compute-ms needs --allreduces and --allreduce-us (or --allreduce-json with --tokens)"
        )
    if args.verify_ms is None and args.compute_ms is None and not args.bundle:
        raise UserError("give --verify-ms, or --compute-ms with --allreduces and --allreduce-us")
    if args.verify_ms is not None and (args.allreduce_json or args.allreduce_us is not None):
        raise UserError(
            "--verify-ms already includes the all-reduces; drop --allreduce-us/--allreduce-json or use --compute-ms"
        )


def _compare_bundle(
    args: argparse.Namespace, scenarios: list[dict[str, Any]], curves: list[Any], size: int
) -> list[dict[str, Any]]:
    """Predicted vs measured tok/s for every speculative entry of the bundle, with % error."""
    from bench.predict.measured import load_bundle

    entries, _ = load_bundle(Path(args.bundle))
    rows = []
    for e in entries:
        row: dict[str, Any] = {"profile": e.profile, "spec": e.spec, "file": e.file, "valid": e.valid}
        row["measured_tokps"] = e.output_throughput
        row["measured_cycle_ms"] = e.median_itl_ms
        row["accept_length"] = e.accept_length if e.accept_length is not None else args.accept_len
        if not e.valid or row["accept_length"] is None or not e.output_throughput:
            row["note"] = "invalid run: not compared" if not e.valid else "no accept length: not compared"
            rows.append(row)
            continue
        verify, source = _verify_for_profile(args, scenarios, curves, size, e.profile)
        if verify is None:
            row["note"] = "no verify model: give --verify-ms, or --compute-ms with --allreduces and latency"
            rows.append(row)
            continue
        predicted = model.spec_tokps(row["accept_length"], args.draft_ms, verify)
        row.update(
            predicted_verify_ms=round(verify, 4),
            predicted_cycle_ms=round(args.draft_ms + verify, 4),
            predicted_tokps=round(predicted, 3),
            error_pct=round((predicted - e.output_throughput) / e.output_throughput * 100.0, 2)
            if e.output_throughput
            else None,
            allreduce_source=source,
        )
        rows.append(row)
    return rows


def _verify_for_profile(
    args: argparse.Namespace, scenarios: list[dict[str, Any]], curves: list[Any], size: int, profile: str
) -> tuple[float | None, str]:
    if curves:
        match = [c for c in curves if c.profile == profile] or [
            c for c in curves if not c.profile and c.backend == "nccl"
        ]
        curve = (match or curves)[0]
        us, how = curve.at(size)
        return model.verify_ms(
            args.compute_ms, args.allreduces, us, args.overhead_ms
        ), f"{curve.label}: {us:.1f} µs ({how})"
    if scenarios:
        return scenarios[0]["verify_ms"], scenarios[0]["label"]
    return None, ""


def predict(args: argparse.Namespace) -> dict[str, Any]:
    """All predictions as one JSON-able dict; top-level keys describe the first scenario."""
    _validate(args)
    bundle_baseline = None
    if args.bundle:
        from bench.predict.measured import load_bundle

        _, bundle_baseline = load_bundle(Path(args.bundle))
    baseline = _baseline(args, bundle_baseline)
    scenarios: list[dict[str, Any]] = []
    curves: list[Any] = []
    size = 0
    if args.verify_ms is not None:
        scenarios.append(_scenario("--verify-ms", args, baseline, args.verify_ms, None))
    elif args.allreduce_us is not None:
        verify = model.verify_ms(args.compute_ms, args.allreduces, args.allreduce_us, args.overhead_ms)
        scenarios.append(
            _scenario("--allreduce-us", args, baseline, verify, args.allreduce_us, "--allreduce-us")
        )
    if args.allreduce_json:
        extra, curves, size = _curves_scenarios(args, baseline)
        scenarios.extend(extra)
    result: dict[str, Any] = (
        dict(scenarios[0])
        if scenarios
        else {"verify_ms": None, "spec_tokps": None, "baseline_tokps": baseline, "breakeven_accept_len": None}
    )
    result["inputs"] = {k: v for k, v in vars(args).items() if v is not None and k != "json"}
    result["scenarios"] = scenarios
    if args.bundle:
        result["bundle"] = _compare_bundle(args, scenarios, curves, size)
        result["bundle_baseline_tokps"] = bundle_baseline
    return result


def _print(result: dict[str, Any]) -> None:
    from rich.console import Console

    from bench.tables import fmt, table

    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 120))
    if result["scenarios"]:
        cols = ("scenario", "all-reduce µs", "verify ms", "cycle ms", "spec tok/s", "baseline tok/s", "speed-up",
                "break-even accept")
        rows = [(s["label"], fmt(s["allreduce_us"], 1), fmt(s["verify_ms"]), fmt(s["cycle_ms"]), fmt(s["spec_tokps"], 1),
                 fmt(s["baseline_tokps"], 1), fmt(s["speedup"], 2, "x"), fmt(s["breakeven_accept_len"]))
                for s in result["scenarios"]]
        console.print(table("predicted verify and speculative throughput", cols, rows))
        for s in result["scenarios"]:
            if "target" in s:
                console.print(
                    f"target {s['target']['target_tokps']:g} tok/s ({s['label']}): {s['target']['answer']}"
                )
    if "bundle" in result:
        cols = ("profile", "spec", "accept", "measured tok/s", "predicted tok/s", "error %", "measured cycle ms",
                "predicted cycle ms", "note")
        rows = [(b["profile"], b["spec"], fmt(b.get("accept_length")), fmt(b.get("measured_tokps"), 1),
                 fmt(b.get("predicted_tokps"), 1), fmt(b.get("error_pct"), 1, sign=True),
                 fmt(b.get("measured_cycle_ms")), fmt(b.get("predicted_cycle_ms")), b.get("note", ""))
                for b in result["bundle"]]
        console.print(table("predicted vs measured (bundle)", cols, rows, left=0))
    console.print(
        "[dim]verify = compute + n·all-reduce + overhead; spec tok/s = accept/(draft+verify)·1000; "
        "break-even accept = baseline tok/s·(draft+verify)/1000[/dim]"
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point for `bench predict ...`."""
    args = build_parser().parse_args(argv)

    def body() -> int:
        result = predict(args)
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            _print(result)
        return 0

    return run_cli(body)


if __name__ == "__main__":
    raise SystemExit(main())
