"""The results bundle on disk: write its manifest, cell records and request rows; load it back, checked.

Layout of `<out>/<run-id>/` (names: bench/bundle/names.py):

    manifest.json                   host fingerprint, kit/sglang versions, the server's plans, settings, complete
    <profile>__<spec>.json          the record of one (profile, spec): keys below
    <profile>__<spec>.requests.jsonl  one line per measured request (raw timings and text)
    <profile>__<spec>.logprobs.jsonl  the correctness pass: per prompt and concurrency level, the raw request
                                    sent to /generate (or the chat API) and the raw JSON reply, from which each
                                    token's log-probability and top alternatives are read (bench/client/reply.py);
                                    `bench gate --bundle` re-judges a bundle from these files alone
    <profile>__<spec>__<S>-<K>-<D>.json (and .requests.jsonl)  a cell at an EAGLE-3 point (`bench run
                                    --eagle3 S,K,D`): `spec_params` {steps, topk, draft_tokens} in the file
    summary.csv, summary.md, *.png  rebuilt from the files above by `bench report` (acceptance.csv too when a
                                    cell carries acceptance by draft position)

A cell's record (bench/bundle/schema.py `Cell`) carries profile, spec, spec_params,
plan_spec_params, valid, invalid_reason, simulated, plan_digest, setup_digest, local, switch,
server, backends, api, workload, num_prompts, max_tokens, repeats, concurrency_levels, warmup,
per_repeat (each repeat's numbers), requests_file, by_concurrency (each level's aggregate),
acceptance (each level's acceptance by draft position, when measured: bench/bundle/acceptance.py) and
correctness (the gate's verdict). Its numbers (bench/bundle/aggregate.py) follow
`sglang.benchmark.serving` where they overlap: completed, duration, total_output_tokens,
request_throughput, output_throughput (aggregate tok/s), {mean,median,std,p90,p99}_{ttft,tpot,itl,
e2e_latency}_ms, accept_length. `itl` here is the RAW gap between streamed chunks (SGLang's own bench
divides each gap by the tokens it carried; TPOT is reported separately). Every per-repeat number
also appears as `<key>_mean` / `<key>_sd` across repeats; the bare key is the mean.
completed/duration/total_output_tokens are sums over repeats. The top-level numbers are for the
first concurrency level; `by_concurrency` holds all. An invalid result carries `valid: false`,
`invalid_reason`, and None for every number.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from bench import JsonObject
from bench.bundle import schema as bundle_schema
from bench.bundle.names import LOGPROBS_SUFFIX, MANIFEST, REQUESTS_SUFFIX, SUFFIX, Point, cell_file, inside
from bench.bundle.schema import Cell
from bench.client.reply import Reply
from bench.client.request_record import RequestRecord
from launcher import atomic
from launcher.errors import RuntimeFailure, UserError


def write_manifest(run_dir: Path, manifest: JsonObject) -> None:
    atomic.write_json(inside(run_dir, MANIFEST), manifest)


def write_cell(run_dir: Path, cell: Cell) -> Path:
    """The cell's record, whole, as `<name>.json`."""
    return atomic.write_json(cell_file(run_dir, cell.profile, cell.spec, SUFFIX, cell.spec_params), cell.to_json())


def append_requests(run_dir: Path, profile: str, spec: str, rows: Iterable[RequestRecord],
                    spec_params: Point = None) -> None:
    path = cell_file(run_dir, profile, spec, REQUESTS_SUFFIX, spec_params)
    with path.open("a", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row.to_json(), sort_keys=True) + "\n")


def read_requests(run_dir: Path, profile: str, spec: str, spec_params: Point = None) -> list[RequestRecord]:
    """The request rows of one cell, each checked as its record; UserError names a bad line."""
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
            rows.append(bundle_schema.check(RequestRecord, row, f"{path} line {n}"))
    return rows


def write_logprobs(run_dir: Path, profile: str, spec: str, replies: Iterable[Reply], spec_params: Point = None) -> None:
    """The correctness pass of one cell (bench/client/reply.py `Reply`: one per prompt and level), written whole."""
    path = cell_file(run_dir, profile, spec, LOGPROBS_SUFFIX, spec_params)
    lines = [json.dumps(r.to_json(), sort_keys=True) for r in replies]
    atomic.write_text(path, "".join(line + "\n" for line in lines))


def read_logprobs(run_dir: Path, profile: str, spec: str, spec_params: Point = None,
                  api: str = "generate") -> list[Reply] | None:
    """The replies of a cell's correctness pass, log-probabilities parsed again from each kept raw body (`api`:
    the API they came from); None when the cell has no pass (an older bundle, or a cell that stopped first).
    UserError names a bad line."""
    try:
        path = cell_file(run_dir, profile, spec, LOGPROBS_SUFFIX, spec_params)
    except RuntimeFailure as exc:
        raise UserError(str(exc)) from None
    if not path.is_file():
        return None
    out: list[Reply] = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        row = bundle_schema.parse(Path(f"{path}:{n}"), line)
        reply = Reply.from_json(row, api) if isinstance(row, dict) else None
        if reply is None:
            raise UserError(f"{path} line {n}: not a correctness-pass row (an object with prompt_id and a "
                            f"concurrency of 1 or more); {bundle_schema.FIX}")
        out.append(reply)
    return out


def read_cell(path: Path) -> Cell | None:
    """The record in `path`, checked; None for a JSON file that is no cell (no profile and spec)."""
    data = bundle_schema.parse(path)
    if isinstance(data, dict) and "profile" in data and "spec" in data:
        return bundle_schema.check(Cell, data, str(path))
    return None


def load(run_dir: str | Path) -> tuple[bundle_schema.Manifest, list[Cell]]:
    """Manifest and cell records of one bundle, cells in the manifest's matrix order.

    Every file is checked first (bundle_schema): a damaged one is a UserError naming it and its key."""
    d = Path(run_dir)
    mpath = d / MANIFEST
    if not mpath.is_file():
        inner = sorted(p.parent for p in d.glob(f"*/{MANIFEST}"))
        hint = f"; did you mean {inner[-1]}?" if inner else "; give the <out>/<run-id> folder written by `bench run`"
        raise UserError(f"{mpath}: no manifest.json here{hint}")
    manifest = bundle_schema.check(bundle_schema.Manifest, bundle_schema.parse(mpath), str(mpath))
    cells = [c for p in sorted(d.glob(f"*{SUFFIX}")) if p.name != MANIFEST and (c := read_cell(p)) is not None]
    order = {name: i for i, name in enumerate(manifest.matrix)}
    cells.sort(key=lambda c: (order.get(c.key, len(order)), c.profile, c.spec, c.key))
    return manifest, cells
