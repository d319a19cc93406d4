"""README.md and docs/*.md against what they describe: quoted figures against their cited source, and
every setting they name against the settings registry.

Citation convention for figures: a line `<!-- figures: PATH [PATH ...] -->` directly above a table or
a paragraph says where that block's figures come from (a file or folder in the repository: an evidence
file under docs/evidence/, or another document that holds a tool's output). Every decimal figure in the
block (`60.2`, `0.79x`, `12.98`) must be found in a cited source, as written there or rounded from a
longer number there. In docs/figures.md's measured figures table (moved there from the README), a row whose
last cell links a file under docs/evidence/ (or says "same" below such a row) cites it the same way for its
"Measured" cell. Every relative link in README.md and docs/*.md resolves: to a file or folder of the
repository, and an anchor to a heading of its target.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from launcher.settings import REGISTRY

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
FIGURES = REPO / "docs" / "figures.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
MARKER = re.compile(r"^<!-- figures: (.+?) -->\s*$")
# A decimal figure: not part of a version (0.5.23), a path or a word.
FIGURE = re.compile(r"(?<![\w.])(\d+\.\d+)(?![\d.]*\d)(?![\w])|(?<![\w.])(\d+\.\d+)(?=x\b)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
READABLE = (".md", ".txt", ".log", ".json", ".csv")


# ----- figures ---------------------------------------------------------------------------------------
def figures(text: str) -> list[str]:
    return [a or b for a, b in FIGURE.findall(text)]


def source_text(rel: str) -> str:
    path = (REPO / rel).resolve()
    assert path.is_relative_to(REPO) and path.exists(), f"cited source {rel} does not exist"
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.suffix in READABLE)
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in files)


def found_in(figure: str, text: str) -> bool:
    """As written, or a longer number in the source that rounds to it (12.9812 -> 12.98)."""
    if re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d])", text):
        return True
    places = len(figure.split(".")[1])
    want = float(figure)
    for raw in NUMBER.findall(text):
        if "." in raw and len(re.match(r"\d*", raw.split(".")[1]).group()) > places and round(float(raw), places) == want:
            return True
    return False


def cited_blocks(text: str) -> list[tuple[int, list[str], str]]:
    """(line number of the marker, cited paths, the block below it) for every citation marker."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        block = []
        for nxt in lines[i + 1 :]:
            if not nxt.strip():
                break
            block.append(nxt)
        out.append((i + 1, m.group(1).split(), "\n".join(block)))
    return out


def missing_figures(block: str, sources: list[str]) -> list[str]:
    text = "\n".join(source_text(s) for s in sources)
    return [f for f in figures(block) if not found_in(f, text)]


def test_the_figure_checker_finds_figures_and_rejects_what_the_source_lacks(tmp_path):
    assert figures("| 60.2 ± 0.1 | 0.79x | SGLang 0.5.23 | 2.31.2 | run3-x.log | 15.94 |") == ["60.2", "0.1", "0.79", "15.94"]
    src = "tok/s 60.2 ± 0.1, 0.7912, 15.9449"
    assert found_in("60.2", src) and found_in("0.79", src) and found_in("15.94", src)
    assert not found_in("15.95", src) and not found_in("0.2", src)
    doc = "<!-- figures: README.md -->\n| a | 1.5 |\n\nafter 9.99\n"
    [(line, paths, block)] = cited_blocks(doc)
    assert (line, paths, block) == (1, ["README.md"], "| a | 1.5 |")


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_every_cited_figure_is_in_its_source(doc):
    problems = []
    for line, sources, block in cited_blocks(doc.read_text(encoding="utf-8")):
        assert block, f"{doc.name}:{line}: a figures marker with nothing below it"
        missing = missing_figures(block, sources)
        if missing:
            problems.append(f"{doc.name}:{line}: not in {' '.join(sources)}: {', '.join(missing)}")
    assert problems == []


def test_the_figures_page_cites_its_demo_and_calibration_tables():
    """The tables most likely to drift carry a citation (the check above is then applied to them)."""
    cited = {tuple(sources): block for _, sources, block in cited_blocks(FIGURES.read_text(encoding="utf-8"))}
    blocks = "\n".join(cited.values())
    assert "| baseline | off |" in blocks  # the make demo sample
    assert "| 14336 |" in blocks  # the kit against nccl-tests


def _measured_rows() -> list[tuple[str, str]]:
    text = FIGURES.read_text(encoding="utf-8")
    section = text[text.index("## Development machine and GPU runs") :]
    section = section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("|") and len(cells) >= 4 and not set(cells[0]) <= set("-:"):
            rows.append((cells[2], cells[-1]))
    return rows


def test_measured_rows_that_link_evidence_quote_it():
    rows = _measured_rows()
    assert rows, "docs/figures.md: no measured figures table"
    problems = []
    checked, links = 0, []
    for measured, command in rows:
        # "same" / "(same)" in the command cell: the row above's command and source.
        # links are relative to docs/: (evidence/...) is docs/evidence/...
        found = ["docs/" + p for p in re.findall(r"\]\((evidence/[^)#]+)", command)]
        links = found or (links if re.search(r"\bsame\)?$", command) else [])
        if not links:
            continue
        checked += 1
        missing = missing_figures(measured, links)
        if missing:
            problems.append(f"{measured[:60]}...: not in {' '.join(links)}: {', '.join(missing)}")
    assert checked >= 4 and problems == []


# ----- links -----------------------------------------------------------------------------------------
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", lambda m: "_" if m.group() == "_" else "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    out, seen = set(), {}
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"#{1,6} (.+)$", line)
        if m:
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(doc: Path) -> list[str]:
    text = doc.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)  # no links inside fenced code
    problems = []
    for a, b in LINK.findall(text):
        target = a or b
        if re.match(r"[a-z]+:", target) or target.startswith("<"):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.is_relative_to(REPO) or not dest.exists():
            problems.append(f"{doc.relative_to(REPO)}: {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
            problems.append(f"{doc.relative_to(REPO)}: {target}: no such heading")
    return problems


def test_the_link_checker_finds_a_missing_file_and_heading(tmp_path, monkeypatch):
    assert _slug("Bench: which profile makes speculation fastest, and is it still correct?") == (
        "bench-which-profile-makes-speculation-fastest-and-is-it-still-correct")
    assert _slug("`make demo` (SIMULATED)") == "make-demo-simulated"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "b.md").write_text("# Here\n")
    doc = tmp_path / "a.md"
    doc.write_text("[ok](b.md#here) [x](c.md) [y](b.md#there) [z](#self) [w](https://x/y)\n# Self\n")
    assert broken_links(doc) == ["a.md: c.md: no such file", "a.md: b.md#there: no such heading"]


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_every_relative_link_resolves(doc):
    assert broken_links(doc) == []


# ----- settings ---------------------------------------------------------------------------------------
# Names the docs may use that are no kit setting: other programs' variables, by prefix.
EXTERNAL_PREFIXES = (
    "NCCL_", "NVSHMEM_", "SGLANG_", "CUDA_", "TORCH_", "PYTORCH_", "FLASHINFER_", "TRTLLM_", "HF_",
    "PYTHON", "PIP_", "DOCKER_", "COMPOSE_", "NVIDIA_", "LD_", "STANDIN_",
)
# Named one by one, with why they are no setting.
NOT_SETTINGS = {
    "FUSE_ALLREDUCE_MAX_BATCH_SIZE": "a constant in SGLang's source (docs/evidence.md)",
    "GPU_A_CONTROL_TOKEN": "docs/fleet.md's example of a token variable a fleet file names (token_env)",
    "SITE_PACKAGES": "a placeholder for a path (docs/patches.md)",
    "DIR_A": "a placeholder for a bundle folder (bench compare)",
    "DIR_B": "a placeholder for a bundle folder (bench compare)",
    "SO_REUSEADDR": "a socket option (the fleet router's port check, docs/fleet.md)",
    "FROZEN_KV_MTP": "an SGLang speculative algorithm's name (docs/evidence.md)",
    "SYNC_TOKEN_IDS_ACROSS_TP": "a constant in SGLang's sampler (docs/evidence.md)",
    "TIME_WAIT": "a TCP connection state (docs/fleet.md)",
    "PR_SET_PDEATHSIG": "a Linux prctl option (launcher/runtime/process/parent_death.py, docs/evidence.md)",
    "NO_NULL": "a constant of the correctness gate (bench/run/logprob_gate.py, docs/evidence.md)",
    "DETECTION_LIMIT": "a constant of the correctness gate (bench/run/logprob_gate.py, docs/evidence.md)",
    "TYPE_CHECKING": "Python's typing constant (docs/development.md, the import contracts)",
}
SETTING_LIKE = re.compile(r"(?<![\w$/.-])([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+)(?![\w/(-])")


def build_parameters() -> set[str]:
    """Make variables, Dockerfile ARGs and what docker/*.sh read: parameters of a build, not settings."""
    names = set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*[?:+]?=", (REPO / "Makefile").read_text(), re.M))
    names |= set(re.findall(r"^ARG ([A-Z_][A-Z0-9_]*)", (REPO / "Dockerfile").read_text(), re.M))
    for script in (REPO / "docker").glob("*.sh"):
        names |= set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", script.read_text()))
    return names


def unknown_settings(text: str, build: set[str]) -> set[str]:
    out = set()
    for name in SETTING_LIKE.findall(text):
        if name in REGISTRY or name in NOT_SETTINGS:
            continue
        if name.startswith("KIT_"):
            if name not in build:  # a KIT_ name is a setting, or a build argument (labels, KIT_GPU_STAGES)
                out.add(name)
        elif not name.startswith(EXTERNAL_PREFIXES) and name not in build:
            out.add(name)
    return out


def test_the_settings_checker_flags_unregistered_names():
    build = build_parameters()
    assert unknown_settings("set `KIT_HEALTH_TIMEOUT=5` and MODEL_PATHS, not NCCL_ALGO or HF_HOME", build) == {
        "KIT_HEALTH_TIMEOUT", "MODEL_PATHS"}
    assert unknown_settings("`KIT_HEALTH_TIMEOUT_S`, `MODEL_PATH`, `KIT_GPU_STAGES`, `BENCH_ARGS`", build) == set()


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_every_setting_the_docs_name_is_registered(doc):
    assert sorted(unknown_settings(doc.read_text(encoding="utf-8"), build_parameters())) == []


# ----- the cost model's example: one source, with its commands -------------------------------------------
def predict_examples() -> list[tuple[str, list[str]]]:
    """(command, the lines docs/diagnose.md shows under it) for each `$ bench predict` line of step 4's block."""
    text = (REPO / "docs" / "diagnose.md").read_text(encoding="utf-8")
    section = text.split("### 4. Predict", 1)[1].split("\n### ", 1)[0]
    out: list[tuple[str, list[str]]] = []
    for block in re.findall(r"^```\n(.*?)^```", section, re.S | re.M):
        for line in block.splitlines():
            if line.startswith("$ "):
                out.append((line[2:], []))
            elif out:
                out[-1][1].append(line)
    return out


def test_the_cost_model_example_is_what_its_commands_print(monkeypatch, capsys):
    """docs/diagnose.md writes the cost model's figures once, under the commands that print them."""
    from bench.predict import cli

    examples = predict_examples()
    assert len(examples) == 3 and all(shown for _, shown in examples)
    monkeypatch.setenv("COLUMNS", "200")
    for command, shown in examples:
        argv = shlex.split(command)
        assert argv[:2] == ["bench", "predict"], command
        assert cli.main(argv[2:]) == 0, command
        printed = {" ".join(line.split()) for line in capsys.readouterr().out.splitlines()}
        for line in shown:
            assert " ".join(line.split()) in printed, f"{command}: docs/diagnose.md shows a line it does not print: {line}"


def test_the_readme_repeats_no_cost_model_figure():
    """The README links the example rather than quoting its break-even or verify figures (which drifted once)."""
    rows = [line for _, shown in predict_examples() for line in shown if line.startswith("│")]
    numbers = {cell.strip() for row in rows for cell in row.strip("│").split("│")[-4:]}  # tok/s, speed-up, break-even
    readme = README.read_text(encoding="utf-8")
    assert numbers and not [n for n in numbers if re.search(rf"(?<![\d.]){re.escape(n)}(?![\d])", readme)]
    assert "docs/diagnose.md#4-predict-what-a-fix-would-buy" in readme


# ----- the control API's routes ------------------------------------------------------------------------
def control_api_routes(tmp_path) -> set[tuple[str, str]]:
    """(method, path) of every route the control API's app serves (HEAD, which aiohttp adds to GET, left out)."""
    from launcher.runtime.api.control_api import make_app

    app = make_app(tmp_path, "token")
    return {(r.method, r.resource.canonical) for r in app.router.routes() if r.method != "HEAD"}


def test_docs_switching_lists_every_control_api_route(tmp_path):
    routes = control_api_routes(tmp_path)
    assert ("POST", "/switch") in routes and ("DELETE", "/hold") in routes
    text = (REPO / "docs" / "switching.md").read_text(encoding="utf-8")
    section = text.split("\n## Control API\n", 1)[1].split("\n## ", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("| `")]
    missing = sorted(f"{m} {path}" for m, path in routes
                     if not any(re.search(rf"`{m} {re.escape(path)}(?![\w/])", row) for row in table))
    assert missing == [], f"docs/switching.md's Control API table lacks: {missing}"


# ----- the workload's prompt counts ----------------------------------------------------------------------
def test_the_docs_give_the_default_prompt_count():
    """docs/bench.md's workload says how many prompts the file holds and how many a repeat sends by default;
    no document says the bench runs on all of the file's prompts."""
    from bench.run.settings import RunSettings
    from bench.tune.settings import TuneSettings

    held = len((REPO / "bench" / "data" / "prompts.jsonl").read_text(encoding="utf-8").splitlines())
    text = (REPO / "docs" / "bench.md").read_text(encoding="utf-8")
    workload = text.split("\n### Workload\n", 1)[1].split("\n### ", 1)[0]
    m = re.search(r"holds (\d+) prompts.*?sends the first (\d+) of them.*?(\d+) for `bench tune`", workload, re.S)
    assert m, "docs/bench.md's Workload names the file's count, bench run's default and bench tune's"
    run_default = RunSettings.__dataclass_fields__["num_prompts"].default
    tune_default = TuneSettings.__dataclass_fields__["num_prompts"].default
    assert tuple(map(int, m.groups())) == (held, run_default, tune_default)
    for doc in [README, *DOCS]:
        assert not re.search(rf"\bon {held} [\w-]* ?prompts", doc.read_text(encoding="utf-8")), doc.name
