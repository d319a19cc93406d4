"""The results bundle: run id, host fingerprint, manifest, per-(profile, spec) result files.

Layout of `<out>/<run-id>/`:

    manifest.json                   host fingerprint, kit/sglang versions, the server's plans, settings, complete
    <profile>__<spec>.json          summary of one (profile, spec): keys below
    <profile>__<spec>.requests.jsonl  one line per measured request (raw timings and text)
    <profile>__<spec>__<S>-<K>-<D>.json (and .requests.jsonl)  a cell at an EAGLE-3 point (`bench run
                                    --eagle3 S,K,D`): `spec_params` {steps, topk, draft_tokens} in the file
    summary.csv, summary.md, *.png  rebuilt from the files above by `bench report`

Result-file keys follow `sglang.benchmark.serving` where they overlap: completed, duration,
total_output_tokens, request_throughput, output_throughput (aggregate tok/s),
{mean,median,std,p90,p99}_{ttft,tpot,itl,e2e_latency}_ms, accept_length. `itl` here is the RAW
gap between streamed chunks (SGLang's own bench divides each gap by the tokens it carried; TPOT
is reported separately). Every per-repeat number also appears as `<key>_mean` / `<key>_sd`
across repeats; the bare key is the mean. completed/duration/total_output_tokens are sums over
repeats. The top-level numbers are for the first concurrency level; `by_concurrency` holds all.
An invalid result carries `valid: false`, `invalid_reason`, and None for every number.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import bundle_schema, stats
from bench.request_record import RequestRecord
from launcher import __version__, atomic, settings
from launcher.errors import RuntimeFailure, UserError

MANIFEST = "manifest.json"
SUFFIX = ".json"
REQUESTS_SUFFIX = ".requests.jsonl"
LATENCY_METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "itl": None, "e2e_latency": "e2e_s"}
# per-repeat numeric keys that get _mean/_sd across repeats
SUMMED_KEYS = ("completed", "failed", "duration", "total_output_tokens")


def make_run_id(now: float | None = None) -> str:
    """UTC timestamp plus a short random suffix, so two runs in the same second never collide."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now if now is not None else time.time()))
    return f"{stamp}-{secrets.token_hex(3)}"


def cell_name(profile: str, spec: str, spec_params: Mapping[str, Any] | None = None) -> str:
    """`fused__eagle3`, or `fused__eagle3__1-1-2` for a cell at an EAGLE-3 point: a file name and a key."""
    name = f"{profile}__{spec}"
    if spec_params:
        name += "__" + "-".join(str(int(spec_params[k])) for k in SPEC_PARAM_KEYS)
    return name


SPEC_PARAM_KEYS = ("steps", "topk", "draft_tokens")


def point_text(spec_params: Mapping[str, Any] | None) -> str:
    """`(1,1,2)` for a point, "" for none: what follows the spec name in a label."""
    if not spec_params:
        return ""
    return "(" + ",".join(str(spec_params.get(k)) for k in SPEC_PARAM_KEYS) + ")"


def cell_label(cell: Mapping[str, Any]) -> str:
    """`fused+eagle3`, or `fused+eagle3(1,1,2)`: how summaries and messages name a cell."""
    return f"{cell['profile']}+{cell['spec']}{point_text(cell.get('spec_params'))}"


def cell_key(cell: Mapping[str, Any]) -> str:
    """A cell's identity in a bundle (its file name): profile, spec and EAGLE-3 point."""
    return cell_name(cell["profile"], cell["spec"], cell.get("spec_params"))


_NAME = re.compile(bundle_schema.policy.NAME_PATTERN)


def inside(run_dir: Path, name: str) -> Path:
    """`run_dir / name`, checked before anything is written: the name is one file name and the path
    resolves (links followed) to a file directly in the bundle's folder; RuntimeFailure otherwise."""
    path = Path(run_dir) / name
    if "/" in name or "\0" in name or name in ("", ".", "..") or path.resolve().parent != Path(run_dir).resolve():
        raise RuntimeFailure(f"{path}: outside the bundle folder {run_dir}; nothing written there")
    return path


def cell_file(run_dir: Path, profile: str, spec: str, suffix: str,
              spec_params: Mapping[str, Any] | None = None) -> Path:
    """The file of one (profile, spec[, point]): both names follow the profile name rule, the point is
    whole numbers, the path stays inside."""
    for kind, name in (("profile", profile), ("spec", spec)):
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise RuntimeFailure(f"{kind} name {str(name)[:80]!r} cannot name a file in the bundle {run_dir}")
    if spec_params is not None and not all(
            type(spec_params.get(k)) is int and spec_params[k] >= 1 for k in SPEC_PARAM_KEYS):
        raise RuntimeFailure(f"spec_params {str(spec_params)[:80]} cannot name a file in the bundle {run_dir}")
    return inside(run_dir, f"{cell_name(profile, spec, spec_params)}{suffix}")


# ----- provenance --------------------------------------------------------------------------------
def host_fingerprint() -> dict[str, Any]:
    """The doctor's facts about this host (GPUs, driver, links, NCCL): one fingerprinter for the kit."""
    from launcher.doctor.fingerprint import host_fingerprint as doctor_fingerprint

    return doctor_fingerprint()


def kit_info() -> dict[str, Any]:
    """Kit version, git sha (git, else KIT_GIT_SHA) and image id (KIT_IMAGE_ID)."""
    repo = Path(__file__).resolve().parent.parent
    sha = None
    if shutil.which("git") and (repo / ".git").exists():
        try:
            out = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                                 timeout=5, check=True).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            out = ""
        sha = out if re.fullmatch(r"[0-9a-f]{40}", out) else None
    return {"version": __version__, "git_sha": sha or settings.KIT_GIT_SHA.get(), "image_id": settings.KIT_IMAGE_ID.get()}


# ----- per-repeat and per-cell numbers ---------------------------------------------------------
def repeat_summary(records: Sequence[RequestRecord], duration: float) -> dict[str, Any]:
    """One repeat's numbers in sglang.benchmark.serving's key names (plus accept length)."""
    ok = [r for r in records if r.ok]
    out_tokens = sum(r.completion_tokens or 0 for r in ok)
    res: dict[str, Any] = {
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "duration": duration,
        "total_output_tokens": out_tokens,
        "request_throughput": len(ok) / duration if duration > 0 else None,
        "output_throughput": out_tokens / duration if duration > 0 else None,
    }
    for name, attr in LATENCY_METRICS.items():
        if attr is None:
            values: list[float | None] = [g for r in ok for g in r.chunk_gaps_s]
        else:
            values = [getattr(r, attr) for r in ok]
        dist = stats.distribution(values)
        for stat, v in dist.items():
            res[f"{stat}_{name}_ms"] = None if v is None else v * 1000.0
    per_req = stats.distribution([r.output_tps for r in ok])
    res["mean_request_output_throughput"] = per_req["mean"]
    res["median_request_output_throughput"] = per_req["median"]
    accepts = [r.accept_length for r in ok if r.accept_length is not None]
    verify = sum(r.spec_verify_ct or 0 for r in ok)
    if accepts and verify:
        # token-weighted: all tokens over all verify passes of the repeat
        res["accept_length"] = sum(r.completion_tokens or 0 for r in ok if r.spec_verify_ct) / verify
        res["accept_length_source"] = "meta_info"
    else:
        res["accept_length"] = None
        res["accept_length_source"] = None
    res["chunks"] = sum(r.chunks for r in ok)
    return res


def schema_keys() -> list[str]:
    """Every per-repeat number a result file always carries (None when not measured)."""
    keys = [k for k in repeat_summary([], 1.0) if k != "accept_length_source"]
    return [*keys, "client_cpu_us_per_chunk"]


def numeric_keys(rows: Iterable[dict[str, Any]]) -> list[str]:
    keys: dict[str, None] = {}
    for row in rows:
        for k, v in row.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                keys.setdefault(k, None)
    return list(keys)


SKIP_AGG = {"repeat", "concurrency", "server_start_time", "restarts_before", "restarts_after", "pid_before",
            "pid_after"}


def aggregate(repeats: Sequence[dict[str, Any]], valid: bool) -> dict[str, Any]:
    """Across repeats: bare key = mean (sum for counts), plus <key>_mean and <key>_sd. All None if invalid."""
    good = [r for r in repeats if r.get("valid")]
    keys = [k for k in dict.fromkeys([*schema_keys(), *numeric_keys(repeats)]) if k not in SKIP_AGG]
    out: dict[str, Any] = {}
    for k in keys:
        mean, sd = stats.mean_sd(r.get(k) for r in good) if valid else (None, None)
        out[f"{k}_mean"], out[f"{k}_sd"] = mean, sd
        if k in SUMMED_KEYS:
            out[k] = sum(r.get(k) or 0 for r in good) if valid else None
        else:
            out[k] = mean
    sources = {r.get("accept_length_source") for r in good if r.get("accept_length_source")}
    out["accept_length_source"] = ",".join(sorted(sources)) if sources and valid else None
    out["repeats_valid"] = len(good)
    return out


# ----- files -----------------------------------------------------------------------------------
def write_manifest(run_dir: Path, manifest: dict[str, Any]) -> None:
    atomic.write_json(inside(run_dir, MANIFEST), manifest)


def write_cell(run_dir: Path, cell: dict[str, Any]) -> Path:
    return atomic.write_json(cell_file(run_dir, cell["profile"], cell["spec"], SUFFIX, cell.get("spec_params")), cell)


def append_requests(run_dir: Path, profile: str, spec: str, rows: Iterable[dict[str, Any]],
                    spec_params: Mapping[str, Any] | None = None) -> None:
    path = cell_file(run_dir, profile, spec, REQUESTS_SUFFIX, spec_params)
    with path.open("a", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, sort_keys=True) + "\n")


def read_requests(run_dir: Path, profile: str, spec: str,
                  spec_params: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """The request rows of one cell, each checked (bundle_schema.RequestRow); UserError names a bad line."""
    try:
        path = cell_file(run_dir, profile, spec, REQUESTS_SUFFIX, spec_params)
    except RuntimeFailure as exc:
        raise UserError(str(exc)) from None
    if not path.is_file():
        return []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{path}: not UTF-8 text (byte {exc.start}); {bundle_schema.FIX}") from exc
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            row = bundle_schema.parse(Path(f"{path}:{n}"), line)
            bundle_schema.check(bundle_schema.RequestRow, row, f"{path} line {n}")
            rows.append(row)
    return rows


def load(run_dir: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Manifest and result files of one bundle, cells in the manifest's matrix order.

    Every file is checked first (bundle_schema): a damaged one is a UserError naming it and its key."""
    d = Path(run_dir)
    mpath = d / MANIFEST
    if not mpath.is_file():
        inner = sorted(p.parent for p in d.glob(f"*/{MANIFEST}"))
        hint = f"; did you mean {inner[-1]}?" if inner else "; give the <out>/<run-id> folder written by `bench run`"
        raise UserError(f"{mpath}: no manifest.json here{hint}")
    manifest = bundle_schema.parse(mpath)
    bundle_schema.check(bundle_schema.Manifest, manifest, str(mpath))
    cells = []
    for p in sorted(d.glob(f"*{SUFFIX}")):
        if p.name == MANIFEST:
            continue
        data = bundle_schema.parse(p)
        if isinstance(data, dict) and "profile" in data and "spec" in data:
            bundle_schema.check(bundle_schema.Cell, data, str(p))
            cells.append(data)
    order = {name: i for i, name in enumerate(manifest.get("matrix", []))}
    cells.sort(key=lambda c: (order.get(cell_key(c), len(order)), c["profile"], c["spec"], cell_key(c)))
    return manifest, cells
