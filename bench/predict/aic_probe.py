"""Run inside AIConfigurator's own Python (`make aic`: .venv-aic), never imported by the kit.

`python aic_probe.py '<request JSON>'` prints one JSON object on stdout and exits 0, whatever happens:
either the answer, or {"error": KIND, "message": ...} with KIND one of `missing` (aiconfigurator is not
importable here), `estimate` (its estimate raised), `data` (the system's all-reduce tables are not
where the package's system file says). Standard library, aiconfigurator and the packages it depends on
(pandas, PyYAML) only: the kit is not installed in that environment.

The request: {"model", "system", "backend", "tp", "nextn", "isl", "osl", "elements": [...]}.
The answer: the package's version and where its data lives; AIConfigurator's decode step (nextn 0) and
its speculative step (nextn drafts, acceptance 0: one iteration's time) in ms from
`aiconfigurator.cli.api.cli_estimate(mode="static", batch_size=1)`; and its all-reduce latency (µs)
at each requested message size (in elements, as its tables count them) for 2, 4 and 8 GPUs, read
from the installed package's tables: comm/nccl/<nccl_version>/nccl_perf.parquet (NCCL, half) and
comm/<backend>/<version>/custom_allreduce_perf.parquet (the backend's own all-reduce, graph and eager),
interpolated linearly in the element count between the two nearest rows, as its engine does.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any, TypedDict


class Request(TypedDict):
    """What the kit asks (bench/predict/aic.py `request`)."""

    model: str
    system: str
    backend: str
    tp: int
    nextn: int
    isl: int
    osl: int
    elements: list[int]


class Point(TypedDict):
    """One message size (elements) of one table: its latency and how the table gave it."""

    elements: int
    us: float
    how: str


class _TableName(TypedDict):
    label: str
    file: str


class Table(_TableName, total=False):
    """One all-reduce table: `missing`, or its version folder and its points per GPU count."""

    missing: bool
    version: str
    gpus: dict[str, list[Point]]


class Tables(TypedDict):
    """The all-reduce tables and where the system's data lives (bench/predict/records.py AicTables reads it)."""

    system_file: str
    data_dir: str
    nccl_version: str
    gpu: dict[str, object]
    node: dict[str, object]
    tables: list[Table]


class Failure(TypedDict):
    """No answer: KIND (module docstring) and what went wrong."""

    error: str
    message: str


class Answer(TypedDict, total=False):
    """AIConfigurator's figures (`allreduce` is added once its tables are read)."""

    aiconfigurator_version: str
    python: str
    core_dir: str
    model: str
    system: str
    backend: str
    backend_version: str
    tp: int
    nextn: int
    isl: int
    osl: int
    decode_ms: float
    spec_step_ms: float
    moe_quant: object
    gemm_quant: object
    allreduce: Tables


def _interp(points: list[tuple[int, float]], x: int) -> tuple[float, str]:
    """Linear interpolation in the element count; the nearest row outside the measured range."""
    points = sorted(points)
    if x <= points[0][0]:
        return points[0][1], "measured" if x == points[0][0] else f"below the table ({points[0][0]}): its first row"
    if x >= points[-1][0]:
        return points[-1][1], "measured" if x == points[-1][0] else f"above the table ({points[-1][0]}): its last row"
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if x0 <= x <= x1:
            if x in (x0, x1):
                return (y0 if x == x0 else y1), "measured"
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0), f"interpolated {x0}..{x1}"
    raise AssertionError("unreachable")


def _rows(path: Path) -> list[dict[str, Any]]:
    import pandas

    return list(pandas.read_parquet(path).to_dict("records"))


def _latest(folder: Path) -> Path | None:
    """The highest version folder under `folder` (numeric parts compared as numbers)."""
    def key(p: Path) -> tuple[Any, ...]:
        return tuple(int(s) if s.isdigit() else -1 for s in p.name.replace("rc", ".").split("."))

    versions = sorted((p for p in folder.iterdir() if p.is_dir()), key=key) if folder.is_dir() else []
    return versions[-1] if versions else None


def allreduce_tables(core_dir: Path, system: str, backend: str, version: str, elements: list[int]) -> Tables:
    """What the installed package's tables say one all-reduce costs, per GPU count and message size."""
    import yaml

    systems = core_dir / "systems"
    system_file = systems / f"{system}.yaml"
    spec = yaml.safe_load(system_file.read_text(encoding="utf-8"))
    data_dir = systems / spec["data_dir"]
    nccl_version = str(spec.get("misc", {}).get("nccl_version", ""))
    out: Tables = {"system_file": str(system_file), "data_dir": str(data_dir), "nccl_version": nccl_version,
                   "gpu": {k: spec.get("gpu", {}).get(k) for k in ("sm_version", "mem_bw")},
                   "node": {k: spec.get("node", {}).get(k)
                            for k in ("num_gpus_per_node", "intra_node_bw", "p2p_latency")},
                   "tables": []}
    sources: list[tuple[str, Path, dict[str, str]]] = [
        ("nccl", data_dir / "comm" / "nccl" / nccl_version / "nccl_perf.parquet",
         {"op_name": "all_reduce", "nccl_dtype": "half"}),
    ]
    own = data_dir / "comm" / backend / version
    if not own.is_dir():
        own = _latest(data_dir / "comm" / backend) or own
    for kind in ("graph", "eager"):
        sources.append((f"{backend}_{kind}", own / "custom_allreduce_perf.parquet", {"backend": f"{backend}_{kind}"}))
    for label, path, where in sources:
        if not path.is_file():
            out["tables"].append({"label": label, "file": str(path), "missing": True})
            continue
        rows = [r for r in _rows(path) if all(r.get(k) == v for k, v in where.items())]
        per_gpus: dict[str, list[Point]] = {}
        for gpus in sorted({int(r["num_gpus"]) for r in rows}):
            pts = [(int(r["message_size"]), float(r["latency"]) * 1000.0) for r in rows if int(r["num_gpus"]) == gpus]
            per_gpus[str(gpus)] = [
                {"elements": n, "us": round(us, 3), "how": how} for n, (us, how) in ((n, _interp(pts, n)) for n in elements)
            ]
        out["tables"].append({"label": label, "file": str(path), "version": path.parent.name, "gpus": per_gpus})
    return out


def answer(req: Request) -> Answer | Failure:
    """AIConfigurator's figures for the request, or the Failure that names why there are none."""
    try:
        import aiconfigurator
        import aiconfigurator_core
        from aiconfigurator.cli.api import cli_estimate
    except ImportError as exc:
        return {"error": "missing", "message": f"{sys.executable}: {exc}"}
    logging.disable(logging.WARNING)  # its table loading logs to stderr; the answer is on stdout
    version = getattr(aiconfigurator, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("aiconfigurator")
    core_dir = Path(aiconfigurator_core.__file__).resolve().parent
    common = {"backend_name": req["backend"], "mode": "static", "isl": req["isl"], "osl": req["osl"],
              "batch_size": 1, "tp_size": req["tp"], "moe_tp_size": req["tp"], "moe_ep_size": 1}
    try:
        decode = cli_estimate(req["model"], req["system"], nextn=0, **common)
        spec = cli_estimate(req["model"], req["system"], nextn=req["nextn"], nextn_accepted=0.0, **common)
    except Exception as exc:  # noqa: BLE001 - whatever it raises is the answer, named
        return {"error": "estimate", "message": f"{type(exc).__name__}: {exc}"}
    result: Answer = {
        "aiconfigurator_version": version, "python": sys.executable, "core_dir": str(core_dir),
        "model": req["model"], "system": decode.system_name, "backend": decode.backend_name,
        "backend_version": decode.backend_version, "tp": req["tp"], "nextn": req["nextn"],
        "isl": req["isl"], "osl": req["osl"],
        "decode_ms": float(decode.tpot), "spec_step_ms": float(spec.tpot),
        "moe_quant": decode.raw.get("moe"), "gemm_quant": decode.raw.get("gemm"),
    }
    try:
        result["allreduce"] = allreduce_tables(core_dir, decode.system_name, decode.backend_name,
                                               decode.backend_version, [int(n) for n in req["elements"]])
    except (ImportError, OSError, KeyError, ValueError, TypeError) as exc:
        return {"error": "data", "message": f"{type(exc).__name__}: {exc}"}
    return result


def main(argv: list[str]) -> int:
    print(json.dumps(answer(json.loads(argv[1]))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
