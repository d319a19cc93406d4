"""Rich tables for people: facts, link matrix, checks, profile eligibility; one item per line when narrow."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from launcher.doctor.causes import Causes, narrow
from launcher.doctor.diagnose import Report
from launcher.doctor.eligibility import BLOCKING
from launcher.doctor.power import PowerLimit
from launcher.profiles.hostfacts import recipe

STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}
LINK_STYLE = {"SYS": "red", "NODE": "yellow", "PHB": "yellow", "PXB": "cyan", "PIX": "cyan"}


def _fmt_bool(v: bool | None, yes: str = "yes", no: str = "no") -> Text:
    if v is None:
        return Text("unknown", style="dim")
    return Text(yes, style="green") if v else Text(no, style="red")


def _facts_rows(r: Report) -> list[tuple[str, str | Text]]:
    f, topo = r.facts, r.details.get("topology", {})
    rows: list[tuple[str, str | Text]] = []
    rows.append(("GPUs", f"{len(f.gpus)}" + (f" x {f.gpus[0].name}" if f.gpus and len({g.name for g in f.gpus}) == 1 else "")))
    rows.append(("compute capability", ", ".join(sorted(f.sm_versions)) or "unknown"))
    rows.append(("interconnect", f.interconnect or ("single GPU" if len(f.gpus) == 1 else "unknown")))
    cpus = topo.get("cpu_affinity", {})
    split = [f"GPU {','.join(map(str, n))} (CPUs {cpus.get(str(n[0]), '?')})" for n in f.numa_nodes]
    rows.append(("NUMA split", "\n".join(split) or "unknown"))
    pairs = ", ".join(f"GPU{d['pair'][0]}-GPU{d['pair'][1]} {d['status']}" for d in r.details.get("p2p_bad", []))
    p2p = _fmt_bool(f.p2p_ok, "OK between all pairs", f"not OK: {pairs}")
    rows.append(("P2P (read)", p2p if len(f.gpus) != 1 else Text("single GPU", style="dim")))
    rows.append(("NVLink multicast", _fmt_bool(f.nvlink_multicast)))
    rows.append(("NCCL", f.nccl_version or Text("unknown", style="dim")))
    # From nvidia-smi topo -m and /sys/class/infiniband; none makes ep-deepep ineligible (docs/evidence.md).
    nics = ", ".join(f.rdma_nics or []) or ("none" if f.rdma_nics == [] else "")
    rows.append(("RDMA NICs", nics or Text("unknown", style="dim")))
    rows.append(("power limits", _power(r.details.get("power", {}))))
    rows.append(("read from", ", ".join(f"{k}: {v}" for k, v in r.details.get("sources", {}).items()) or "nothing"))
    return rows


def _power(power: dict) -> str | Text:
    """One line per GPU, as `GPU 0: power limit 600 W (default 600 W, range 150-600 W)`, or why unknown."""
    if "limits" not in power:
        return Text(f"unknown ({power.get('unknown', 'not read')})", style="dim")
    limits = [PowerLimit(**p) for p in power["limits"]]
    return "\n".join(p.describe() + (" (power-capped)" if p.capped else "") for p in limits)


def facts_table(r: Report) -> Table:
    t = Table(title="Host facts", show_header=False, title_justify="left")
    t.add_column("fact", style="bold")
    t.add_column("value", overflow="fold")
    for name, value in _facts_rows(r):
        t.add_row(name, value)
    return t


def gpu_table(r: Report) -> Table:
    """One row per GPU: SM, bus, NUMA node, then its link to every other GPU (the topo -m matrix)."""
    topo = r.details.get("topology", {})
    links = topo.get("links", {})
    mixed = len({g.name for g in r.facts.gpus}) > 1
    t = Table(title="GPUs and links", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    t.add_column("GPU", no_wrap=True)
    if mixed:
        t.add_column("name")
    for col in ("SM", "bus", "node"):
        t.add_column(col, no_wrap=True)
    labels = list(links)
    for lab in labels:
        t.add_column(lab[3:], justify="center", no_wrap=True, min_width=4)
    by_index = {g.index: g for g in r.facts.gpus}
    for i in sorted(set(by_index) | {int(lab[3:]) for lab in labels}):
        g = by_index.get(i)
        row = [str(i), *([g.name if g else ""] if mixed else [])]
        row += [g.compute_cap if g else "", (g.bus_id if g else "").removeprefix("00000000:")]
        row.append(topo.get("numa_affinity", {}).get(str(i), ""))
        mine = links.get(f"GPU{i}", {})
        t.add_row(*row, *(Text(mine.get(lab, ""), style=LINK_STYLE.get(mine.get(lab, ""), "")) for lab in labels))
    return t


def checks_table(r: Report) -> Table:
    t = Table(title="Checks", title_justify="left")
    t.add_column("check", style="bold")
    t.add_column("status")
    # fold, never "…": a fix text is a command to copy, so a long path or word wraps whole
    t.add_column("detail", ratio=3, overflow="fold")
    t.add_column("fix", ratio=2, overflow="fold")
    for c in r.checks:
        t.add_row(c.name, Text(c.status.upper(), style=STATUS_STYLE[c.status]), c.detail, Text(c.fix, style="dim"))
    return t


@dataclass
class ProfileNotes:
    """The eligibility section grouped by cause: per profile the texts only it has, and the numbers of
    the notes it shares with other profiles; each shared note printed once, naming its profiles."""

    own: dict[str, list[str]]
    refs: dict[str, list[int]]
    notes: list[tuple[int, str, list[str]]]  # (number, "warning: text", profiles)


_PREFIX = {"warning": "warning: ", "requires": "depends on: "}


def profile_notes(r: Report) -> ProfileNotes:
    causes = Causes()
    found: dict[str, list] = {}
    for name, e in r.eligibility.items():
        if e.findings:
            shown = [f for f in e.findings if f.level in BLOCKING] if not e.ok else [
                f for f in e.findings if f.level in ("warning", "requires")]
            found[name] = [causes.add(f.level, f.rule, f.message, name) for f in shown]
        else:  # no facts, or a broken profile file: its reason is all there is
            found[name] = [causes.add("ineligible", "", m, name) for m in e.messages]
    shared = [c for c in causes if len(c.where) > 1]
    number = {c.number: i for i, c in enumerate(shared, 1)}
    own = {name: [_PREFIX.get(c.level, "") + c.text for c in cs if c.number not in number] for name, cs in found.items()}
    refs = {name: [number[c.number] for c in cs if c.number in number] for name, cs in found.items()}
    notes = [(number[c.number], _PREFIX.get(c.level, "") + c.text, c.subjects()) for c in shared]
    return ProfileNotes(own, refs, notes)


def _see(refs: list[int]) -> str:
    return "see " + " ".join(f"[{n}]" for n in refs) if refs else ""


def eligibility_table(r: Report, pn: ProfileNotes | None = None) -> Table:
    pn = pn or profile_notes(r)
    t = Table(title=f"Profiles on this host (spec={r.spec})", title_justify="left")
    t.add_column("profile", style="bold")
    t.add_column("runs here")
    t.add_column("status")
    t.add_column("why not / notes", overflow="fold")
    for name, e in r.eligibility.items():
        cell = [*pn.own[name], *([_see(pn.refs[name])] if pn.refs[name] else [])]
        t.add_row(name, Text("yes", style="green") if e.ok else Text("no", style="red"), e.status, "\n".join(cell))
    return t


_TOKEN = re.compile(r"\S*`[^`]*`\S*|\S+")  # a `command` (with what sticks to it) is one word: never split


def _hanging(text: Text, width: int, indent: int, hang: int) -> Text:
    """`text` wrapped at `width` by words, its first line indented by `indent`, the rest by `hang`,
    so each item starts at the left and its continuation lines sit under it. A span in backticks
    is a command to copy: it moves whole to the next line, and stands alone on a line when longer."""
    plain = text.plain
    out = Text()  # printed with soft_wrap: rich must not fold a long command again
    col = indent
    out.append(" " * indent)
    first = True
    for m in _TOKEN.finditer(plain):
        word = text[m.start():m.end()]
        if not first and col + 1 + len(word) > width:
            out.append("\n" + " " * hang)
            col = hang
        elif not first:
            out.append(" ")
            col += 1
        out.append_text(word)
        col += len(word)
        first = False
    return out


def _notes(pn: ProfileNotes, width: int) -> list[Text]:
    """Each shared note once: its number and text, then the profiles it applies to."""
    out = []
    for n, text, names in pn.notes:
        out.append(_hanging(Text.assemble((f"[{n}] ", "bold"), text), width, 2, 6))
        out.append(_hanging(Text(f"for: {', '.join(names)}", style="dim"), width, 6, 6))
    return out


def _lines(r: Report, pn: ProfileNotes, width: int) -> list:
    """The report one item per line, for narrow terminals and pipes: no cell is squeezed into a strip."""
    out: list = [Text("Host facts", style="italic")]
    for name, value in _facts_rows(r):
        value = value if isinstance(value, Text) else Text(str(value).replace("\n", "; "))
        out.append(_hanging(Text.assemble((f"{name}: ", "bold"), value), width, 2, 4))
    if r.facts.gpus or r.details.get("topology"):
        out.append(gpu_table(r))
    out.append(Text("Checks", style="italic"))
    for c in r.checks:
        head = Text.assemble((c.status.upper(), STATUS_STYLE[c.status]), " ", (c.name, "bold"), f": {c.detail}")
        out.append(_hanging(head, width, 2, 7))
        if c.fix:
            out.append(_hanging(Text(f"fix: {c.fix}", style="dim"), width, 7, 12))
    out.append(Text(f"Profiles on this host (spec={r.spec})", style="italic"))
    for name, e in r.eligibility.items():
        verdict = Text("yes", style="green") if e.ok else Text("no", style="red")
        see = f"; {_see(pn.refs[name])}" if pn.refs[name] else ""
        out.append(_hanging(Text.assemble((name, "bold"), ": ", verdict, f" ({e.status or 'unknown'}){see}"), width, 2, 4))
        out.extend(_hanging(Text(text), width, 6, 8) for text in pn.own[name])
    return out


SAVE_HINT = "save these facts for `launcher show/check --host-facts`:"
SAVED_HINT = "use them with `launcher show/check --host-facts`:"
SAVE_COMMAND = recipe()  # the one recipe for a host-facts file, as every other hint gives it


def saved_lines(path: str) -> tuple[str, str]:
    """What the report says after `--out FILE` wrote the facts: where (a line of its own, never wrapped, like
    the command that reads them)."""
    return f"host facts written to {path}", f"  launcher check --all --host-facts {shlex.quote(path)}"


def render(r: Report, console: Console, saved: str | None = None) -> None:
    """Bordered tables at 100 columns or more; below that (80 columns, or a pipe without COLUMNS) one
    item per line. A command to copy is always on a line of its own, never wrapped. `saved`: the file
    `--out` wrote the facts to; the closing lines then name it instead of asking for one."""
    pn = profile_notes(r)
    if narrow(console.width):
        for item in _lines(r, pn, console.width):  # Texts come wrapped: soft_wrap keeps a long command whole
            console.print(item, soft_wrap=isinstance(item, Text))
    else:
        parts = [facts_table(r)]
        if r.facts.gpus or r.details.get("topology"):
            parts.append(gpu_table(r))
        parts += [checks_table(r), eligibility_table(r, pn)]
        console.print(Group(*parts))
    if pn.notes:
        console.print(Text("Notes (shared by several profiles)", style="italic"))
        for note in _notes(pn, console.width):
            console.print(note, soft_wrap=True)
    n = r.counts()
    verdict = Text("FAIL", style="bold red") if r.failed else Text("OK", style="bold green")
    console.print(Text.assemble("doctor: ", verdict, f"  ({n['pass']} pass, {n['warn']} warn, {n['fail']} fail)"))
    if saved:
        written, command = saved_lines(saved)
        console.print(Text(written), soft_wrap=True)
        console.print(_hanging(Text(SAVED_HINT, style="dim"), console.width, 0, 0), soft_wrap=True)
    else:
        command = "  " + SAVE_COMMAND
        console.print(_hanging(Text(SAVE_HINT, style="dim"), console.width, 0, 0), soft_wrap=True)
    console.print(Text(command), soft_wrap=True)
