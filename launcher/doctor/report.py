"""Rich tables for people: facts, link matrix, checks, profile eligibility."""

from __future__ import annotations

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from launcher.doctor.diagnose import Report

STATUS_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}
LINK_STYLE = {"SYS": "red", "NODE": "yellow", "PHB": "yellow", "PXB": "cyan", "PIX": "cyan"}


def _fmt_bool(v: bool | None, yes: str = "yes", no: str = "no") -> Text:
    if v is None:
        return Text("unknown", style="dim")
    return Text(yes, style="green") if v else Text(no, style="red")


def facts_table(r: Report) -> Table:
    f, topo = r.facts, r.details.get("topology", {})
    t = Table(title="Host facts", show_header=False, title_justify="left")
    t.add_column("fact", style="bold")
    t.add_column("value", overflow="fold")
    t.add_row("GPUs", f"{len(f.gpus)}" + (f" x {f.gpus[0].name}" if f.gpus and len({g.name for g in f.gpus}) == 1 else ""))
    t.add_row("compute capability", ", ".join(sorted(f.sm_versions)) or "unknown")
    t.add_row("interconnect", f.interconnect or ("single GPU" if len(f.gpus) == 1 else "unknown"))
    cpus = topo.get("cpu_affinity", {})
    split = [f"GPU {','.join(map(str, n))} (CPUs {cpus.get(str(n[0]), '?')})" for n in f.numa_nodes]
    t.add_row("NUMA split", "\n".join(split) or "unknown")
    pairs = ", ".join(f"GPU{d['pair'][0]}-GPU{d['pair'][1]} {d['status']}" for d in r.details.get("p2p_bad", []))
    p2p = _fmt_bool(f.p2p_ok, "OK between all pairs", f"not OK: {pairs}")
    t.add_row("P2P (read)", p2p if len(f.gpus) != 1 else Text("single GPU", style="dim"))
    t.add_row("NVLink multicast", _fmt_bool(f.nvlink_multicast))
    t.add_row("NCCL", f.nccl_version or Text("unknown", style="dim"))
    # From nvidia-smi topo -m and /sys/class/infiniband; none makes ep-deepep ineligible (docs/evidence.md).
    nics = ", ".join(f.rdma_nics or []) or ("none" if f.rdma_nics == [] else "")
    t.add_row("RDMA NICs", nics or Text("unknown", style="dim"))
    t.add_row("read from", ", ".join(f"{k}: {v}" for k, v in r.details.get("sources", {}).items()) or "nothing")
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


def eligibility_table(r: Report) -> Table:
    t = Table(title=f"Profiles on this host (spec={r.spec})", title_justify="left")
    t.add_column("profile", style="bold")
    t.add_column("runs here")
    t.add_column("status")
    t.add_column("why not / notes", overflow="fold")
    for name, e in r.eligibility.items():
        notes = list(e.messages) if not e.ok else [*(f"warning: {w}" for w in e.warnings), *(f"depends on: {q}" for q in e.requires)]
        t.add_row(name, Text("yes", style="green") if e.ok else Text("no", style="red"), e.status, "\n".join(notes))
    return t


def render(r: Report, console: Console) -> None:
    parts = [facts_table(r)]
    if r.facts.gpus or r.details.get("topology"):
        parts.append(gpu_table(r))
    parts += [checks_table(r), eligibility_table(r)]
    console.print(Group(*parts))
    n = r.counts()
    verdict = Text("FAIL", style="bold red") if r.failed else Text("OK", style="bold green")
    console.print(Text.assemble("doctor: ", verdict, f"  ({n['pass']} pass, {n['warn']} warn, {n['fail']} fail)"))
    console.print(Text("save these facts for `launcher show/check --host-facts`: launcher doctor --out host-facts.json", style="dim"))
