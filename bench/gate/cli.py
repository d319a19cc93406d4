"""`bench gate`: the correctness gate alone, between any two servers or over a bundle kept on disk.

    bench gate --reference URL --candidate URL [--concurrency 1,8] [--num-prompts N] [--max-tokens N] [--json]
    bench gate --bundle DIR [--json]

Two servers: each gets the correctness pass (bench/run/passes.py) through SGLang's native /generate only
(plus /server_info, when it answers, to name what ran): one greedy reply per prompt with every token's
log-probability and its top alternatives, at concurrency 1 and the highest level given; the reference also
at a second batch size when only 1 is given, for the null. The verdict is the one `bench run` gives a
profile (bench/run/correctness.py `judge_levels`): each level against the reference at the same level,
under limits from the reference's null. This is what checks a new SGLang version, a quantized checkpoint or a
kernel patch against the old server. The accept-length rule is not applied: the two servers may run other
draft models or none.

A bundle: every cell of a `bench run` (or `bench tune`) bundle judged again against its reference cell from the
raw replies the bundle keeps (`<cell>.logprobs.jsonl`, docs/bench.md), with today's KIT_GATE_* settings. The
bundle is not changed.

Exit status: 0 PASS, 1 FAIL (or a runtime failure, which the message names), 2 a usage error, 3 not enough
evidence (never a PASS).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from rich.console import Console

from bench import JsonObject
from bench import args as flags
from bench.args import CliArgs, ParserOptions, http_url, positive_ints
from bench.bundle import store as bundle
from bench.bundle.schema import Cell
from bench.client.server_client import ServerClient
from bench.client.workload import build_workload, choose_prompts
from bench.run import correctness, logprob_gate, passes
from bench.run.cell import apply_gate
from bench.run.correctness import LevelJson, LevelsJson, LevelsVerdict
from bench.run.logprob_gate import Thresholds
from bench.run.server_identity import PROBE_ERRORS
from bench.run.settings import RunKnobs
from launcher.errors import RuntimeFailure, UserError, run_cli

EXIT = {logprob_gate.PASS: 0, logprob_gate.FAIL: 1, logprob_gate.NOT_ENOUGH: 3}
REFERENCE, CANDIDATE = "reference", "candidate"


@dataclass(frozen=True, kw_only=True)
class GateArgs(CliArgs):
    """The flags of `bench gate`."""

    prog: ClassVar[str] = "bench gate"
    description: ClassVar[str] = ("The correctness gate alone: a candidate server against a reference server "
                                  "(SGLang's /generate), or a results bundle judged again offline. "
                                  "Exit 0 PASS, 1 FAIL, 2 usage error, 3 not enough evidence.")
    parser_options: ClassVar[ParserOptions] = {"allow_abbrev": False}

    reference: str | None = None
    candidate: str | None = None
    bundle: str | None = None
    concurrency: str = "1"
    num_prompts: int | None = RunKnobs.num_prompts
    max_tokens: int = RunKnobs.max_tokens
    workload: str = RunKnobs.workload
    prompts: str | None = None
    seed: int = RunKnobs.seed
    timeout: float = RunKnobs.request_timeout
    json: bool = False

    @classmethod
    def add_cli_args(cls, parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p = parser
        p.add_argument("--reference", help="URL of the server whose outputs are right (e.g. the old SGLang)")
        p.add_argument("--candidate", help="URL of the server to judge against it")
        p.add_argument("--bundle", help="judge every cell of this results bundle again (no server is asked)")
        flags.CONCURRENCY.add(p, cls.concurrency)
        flags.NUM_PROMPTS.add(p, None, help=flags.NUM_PROMPTS.help.format(default=RunKnobs.num_prompts))
        flags.MAX_TOKENS.add(p, cls.max_tokens)
        flags.WORKLOAD.add(p, cls.workload)
        flags.PROMPTS.add(p)
        flags.SEED.add(p, cls.seed)
        p.add_argument("--timeout", type=float, default=cls.timeout, help="seconds one request may take (default %(default)g)")
        p.add_argument("--json", action="store_true", help="print the verdict as JSON")
        return p

    def mode(self) -> str:
        """"servers" or "bundle"; UserError for any other mix of flags."""
        if self.bundle is not None:
            if self.reference or self.candidate:
                raise UserError("--bundle judges a bundle kept on disk; drop --reference/--candidate (or --bundle)")
            if not Path(self.bundle).is_dir():
                raise UserError(f"--bundle {self.bundle}: no such folder (give the <out>/<run-id> folder of a bench run)")
            return "bundle"
        if not (self.reference and self.candidate):
            raise UserError("give --reference URL and --candidate URL (two servers), or --bundle DIR")
        return "servers"


# ----- two servers ---------------------------------------------------------------------------------------
IDENTITY = ("version", "model_path", "served_model_name", "tp_size")


@dataclass(frozen=True)
class Server:
    """One server judged: its URL and what its /server_info says of it (the IDENTITY keys it sent, their values
    as sent; none when it does not answer)."""

    url: str
    info: Mapping[str, object]

    def to_json(self) -> dict[str, object]:
        return {"url": self.url, **self.info}


@dataclass(frozen=True)
class ServersResult:
    """The verdict of a candidate server against a reference server, and what they were asked."""

    reference: Server
    candidate: Server
    prompts: int
    max_tokens: int
    thresholds: Thresholds
    exact_match_rate: float | None  # of the texts, information only
    verdict: LevelsVerdict

    @property
    def status(self) -> str:
        return self.verdict.status

    def to_json(self) -> dict[str, object]:
        """The `--json` output: what was asked, then the verdict's keys (bench/run/correctness.py `LevelsJson`)."""
        return {"mode": "servers", "reference": self.reference.to_json(), "candidate": self.candidate.to_json(),
                "prompts": self.prompts, "max_tokens": self.max_tokens, "thresholds": asdict(self.thresholds),
                "exact_match_rate": self.exact_match_rate, **self.verdict.to_json()}


async def _identity(client: ServerClient) -> dict[str, object]:
    """What /server_info says of the server, when it answers (a server without it is judged all the same)."""
    with contextlib.suppress(*PROBE_ERRORS, RuntimeFailure):
        info = await client.server_info()
        return {k: info.get(k) for k in IDENTITY if k in info}
    return {}


async def _pass(url: str, prompts: list, levels: list[int], a: GateArgs, top_k: int) -> tuple[list[passes.Reply], Server]:
    async with ServerClient(url, api="generate", max_tokens=a.max_tokens, ignore_eos=False, connect_timeout=10.0,
                            concurrency=max(levels), read_timeout=a.timeout, request_timeout=a.timeout) as client:
        info = await _identity(client)
        replies: list[passes.Reply] = []
        for level in levels:
            replies += await client.logprob_pass(prompts, top_k, level)
        return replies, Server(url, info)


def judge_servers(a: GateArgs, say) -> ServersResult:
    t = logprob_gate.thresholds()
    ref_url, cand_url = http_url("--reference", a.reference or ""), http_url("--candidate", a.candidate or "")
    concurrency = positive_ints("--concurrency", a.concurrency)
    workload, n, _ = choose_prompts(a.prompts, a.num_prompts, RunKnobs.num_prompts, a.workload)
    if a.max_tokens < 1:
        raise UserError(f"--max-tokens {a.max_tokens}: must be at least 1")
    if not a.timeout > 0:
        raise UserError(f"--timeout {a.timeout}: must be a positive number of seconds")
    correctness.check_workload(n, a.max_tokens, t)
    prompts = build_workload(workload, n, a.seed)
    ref_levels, cand_levels = passes.reference_levels(concurrency), passes.levels(concurrency)
    say(f"reference {ref_url}: {n} prompts at concurrency {', '.join(map(str, ref_levels))} ...")
    ref, ref_server = asyncio.run(_pass(ref_url, prompts, ref_levels, a, t.top_k))
    say(f"candidate {cand_url}: {n} prompts at concurrency {', '.join(map(str, cand_levels))} ...")
    cand, cand_server = asyncio.run(_pass(cand_url, prompts, cand_levels, a, t.top_k))
    verdict = correctness.judge_levels(correctness.Side(CANDIDATE, passes.texts(cand), cand),
                                       correctness.Side(REFERENCE, passes.texts(ref), ref), t)
    texts = correctness.compare_outputs(passes.texts(cand), passes.texts(ref))
    return ServersResult(ref_server, cand_server, n, a.max_tokens, t, texts.exact_match_rate, verdict)


# ----- a bundle ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BundleCell:
    """One cell of a bundle judged again: its key and the verdict's keys a person reads (None where the verdict
    has none, e.g. `levels` for a cell not judged on log-probabilities)."""

    key: str
    status: str | None
    reasons: list[str] | None
    baseline: str | None
    levels: dict[str, LevelJson] | None
    tolerance: dict[str, object] | None
    notes: list[str] | None

    @classmethod
    def of(cls, key: str, cell: Cell) -> BundleCell:
        """The verdict `apply_gate` gave the cell, read from its record (the keys `Correctness` keeps as they are)."""
        corr = cell.correctness.model_dump() | (cell.correctness.model_extra or {})
        return cls(key, corr.get("status"), corr.get("reasons"), corr.get("baseline"), corr.get("levels"),
                   corr.get("tolerance"), corr.get("notes"))

    def verdict(self) -> JsonObject:
        """The verdict's keys, as `render_levels` reads them."""
        return {"status": self.status or "", "reasons": self.reasons or [], "levels": self.levels or {},
                "tolerance": self.tolerance or {}, "notes": self.notes or []}

    def to_json(self) -> dict[str, object]:
        return {"status": self.status, "reasons": self.reasons, "baseline": self.baseline, "levels": self.levels,
                "tolerance": self.tolerance, "notes": self.notes, "key": self.key}


@dataclass(frozen=True)
class BundleResult:
    """Every cell of a bundle judged again: the worst status over them (PASS only when one passed and none is
    worse), each cell's verdict by its label."""

    bundle: str
    thresholds: Thresholds
    status: str
    cells: dict[str, BundleCell]

    def to_json(self) -> dict[str, object]:
        return {"mode": "bundle", "bundle": self.bundle, "thresholds": asdict(self.thresholds), "status": self.status,
                "cells": {label: c.to_json() for label, c in self.cells.items()}}


def judge_bundle(a: GateArgs) -> BundleResult:
    t = logprob_gate.thresholds()
    run_dir = Path(a.bundle or "")
    _, cells = bundle.load(run_dir)
    if not cells:
        raise UserError(f"--bundle {run_dir}: no cell records in it")
    judged = apply_gate(run_dir=run_dir, cells={c.key: c for c in cells}, thresholds=t)
    out = {cell.label: BundleCell.of(key, cell) for key, cell in judged.items()}
    statuses = [v.status for v in out.values()]
    status = next((s for s in (logprob_gate.FAIL, logprob_gate.NOT_ENOUGH) if s in statuses), None)
    if status is None:
        status = logprob_gate.PASS if logprob_gate.PASS in statuses else logprob_gate.NOT_ENOUGH
    return BundleResult(str(run_dir), t, status, out)


# ----- output --------------------------------------------------------------------------------------------
def _fmt(x: object, digits: int = 4) -> str:
    return f"{x:.{digits}f}" if isinstance(x, float) else "-" if x is None else str(x)


def render_levels(console: Console, verdict: LevelsJson | JsonObject, indent: str = "  ") -> None:
    tol = verdict.get("tolerance") or {}
    null = tol.get("null")
    console.print(f"{indent}limits ({tol.get('basis')}): mean {_fmt(tol.get('mean_delta'))}, p99 {_fmt(tol.get('p99_delta'))}, "
                  f"flip gap {_fmt(tol.get('max_flip_gap'))} nats", highlight=False)
    if null:
        console.print(f"{indent}null: {null['label']}: mean {_fmt(null.get('mean_delta'))}, p99 {_fmt(null.get('p99_delta'))}, "
                      f"flip gap {_fmt(null.get('max_flip_gap'))}, {null.get('tokens')} tokens", highlight=False)
    for level, v in (verdict.get("levels") or {}).items():
        st = v.get("stats") or {}
        console.print(f"{indent}concurrency {level}: {v['status']}: {st.get('tokens', 0)} tokens, mean {_fmt(st.get('mean_delta'))}, "
                      f"p99 {_fmt(st.get('p99_delta'))}, max {_fmt(st.get('max_delta'))}, flip gap {_fmt(st.get('max_flip_gap'))}, "
                      f"exact {_fmt(st.get('exact_match_rate'), 2)}", highlight=False)
    for note in verdict.get("notes") or []:
        console.print(f"{indent}note: {note}", highlight=False)
    for r in verdict.get("reasons") or []:
        console.print(f"{indent}- {r}", highlight=False)


def render(result: ServersResult | BundleResult) -> None:
    console = Console(width=160)
    if isinstance(result, ServersResult):
        console.print(f"correctness gate: candidate {result.candidate.url} against reference "
                      f"{result.reference.url}: [bold]{result.status}[/bold]", highlight=False)
        render_levels(console, result.verdict.to_json())
    else:
        console.print(f"correctness gate over {result.bundle}: [bold]{result.status}[/bold]", highlight=False)
        for label, v in result.cells.items():
            console.print(f"{label} (against {v.baseline}): {v.status}", highlight=False)
            if v.levels:
                render_levels(console, v.verdict(), "    ")
            else:
                for r in v.reasons or []:
                    console.print(f"    - {r}", highlight=False)
    console.print(f"detection limit: {logprob_gate.DETECTION_LIMIT}", highlight=False)


def work(a: GateArgs) -> int:
    err = Console(stderr=True)
    mode = a.mode()
    result = judge_bundle(a) if mode == "bundle" else judge_servers(a, lambda s: err.print(s, highlight=False))
    if a.json:
        print(json.dumps(result.to_json(), indent=2, default=str))
    else:
        render(result)
    return EXIT.get(result.status, 3)


def main(argv: list[str] | None = None) -> int:
    args = GateArgs.parse(sys.argv[1:] if argv is None else argv)
    return run_cli(lambda: work(args))

