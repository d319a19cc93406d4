"""README.md's quickstart (its two set-up commands, how to learn whether `fused` pays, where the timings are, the
test set-up), its length and profile table, and the map of the tree (in docs/development.md) against the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")
DEVELOPMENT = (REPO / "docs" / "development.md").read_text(encoding="utf-8")


def _section(text: str, heading: str) -> str:
    """The body under `heading` (a whole line), up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    lines = text.splitlines()
    start = lines.index(heading) + 1
    body = []
    for line in lines[start:]:
        if re.match(rf"#{{1,{len(level)}}} ", line):
            break
        body.append(line)
    return "\n".join(body)


def _map_rows() -> list[tuple[str, str, str]]:
    section = _section(DEVELOPMENT, "## Map of the tree")
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and not set(cells[0]) <= {"-"} and cells[0] != "Path":
            rows.append((cells[0], cells[1], cells[2]))
    return rows


def test_every_path_in_the_map_exists():
    rows = _map_rows()
    assert len(rows) >= 10
    for paths, _, _ in rows:
        for path in re.findall(r"`([^`]+)`", paths):
            assert (REPO / path).exists(), f"docs/development.md map names {path}, which is not in the tree"


def _packages() -> list[Path]:
    """Every package of the product and of the test support, subpackages included."""
    return sorted(p.parent for top in ("launcher", "bench", "testsupport") for p in (REPO / top).rglob("__init__.py"))


def _row_of(pkg: str, rows: list[tuple[str, str, str]]) -> str | None:
    """The map row that names `pkg/` in its path cell (its description lists the package's modules)."""
    for paths, what, _ in rows:
        if f"`{pkg}/`" in paths:
            return what
    return None


def test_every_module_of_every_package_is_on_its_row():
    """A package's modules are named (`module`) on the row of that package; a subpackage without a row of
    its own is named on its parent's row, and its modules there too."""
    rows = _map_rows()
    for pkg_dir in _packages():
        pkg = pkg_dir.relative_to(REPO).as_posix()
        row, owner = _row_of(pkg, rows), pkg
        while row is None and "/" in owner:
            owner = owner.rsplit("/", 1)[0]
            row = _row_of(owner, rows)
        if pkg == "launcher":  # its top-level modules have path cells of their own
            row = "\n".join(" ".join(r[:2]) for r in rows)
        assert row is not None, f"{pkg}/ has no row on the map (docs/development.md), nor a parent that has one"
        if owner != pkg:
            assert f"`{pkg_dir.name}`" in row or f"`{pkg_dir.name}/`" in row, f"{pkg}/ is not named on {owner}/'s row"
        for mod in sorted(pkg_dir.glob("*.py")):
            if mod.stem in ("__init__", "__main__"):
                continue
            assert f"`{mod.stem}`" in row or f"{pkg}/{mod.name}" in row, f"{pkg}/{mod.name} is not on {owner}/'s row of the map"


def test_every_top_level_folder_is_on_the_map():
    text = "\n".join(" ".join(r[:2]) for r in _map_rows())
    for folder in sorted(p for p in REPO.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if folder.name in ("results", "build", "dist") or folder.name.endswith(".egg-info"):
            continue
        assert f"`{folder.name}/" in text or f"`{folder.name}`" in text, f"{folder.name}/ is not on the map"


def test_the_map_promises_nothing_unbuilt():
    text = "\n".join(" ".join(r) for r in _map_rows())
    assert "not built yet" not in text and "planned" not in text


def test_every_verb_on_the_map_is_a_makefile_verb():
    makefile = (REPO / "Makefile").read_text()
    for _, _, verbs in _map_rows():
        for verb in re.findall(r"`make ([a-z-]+)`", verbs):
            assert re.search(rf"^{verb}:.*## ", makefile, re.M), f"`make {verb}` is on the map but not a verb"


def test_quickstart_has_the_two_setup_commands():
    """The demo first (it runs anywhere), then the GPU host's command, then the tests."""
    quick = _section(README, "## Quickstart")
    blocks = [line.split("#", 1)[0].strip() for line in quick.splitlines() if line.startswith("    ")]
    assert blocks == ["make demo", "make up PROFILE=fused", "make test"], blocks


def test_quickstart_says_how_to_learn_whether_fused_pays():
    """The line beside `make up PROFILE=fused` names a Makefile verb that measures fused against baseline."""
    quick = _section(README, "## Quickstart")
    [line] = [ln for ln in quick.split("\n\n") if "fused` pays" in ln]
    verb, args = re.search(r'`make ([a-z-]+) [A-Z_]+="([^"]+)"`', line).groups()
    makefile = (REPO / "Makefile").read_text()
    assert re.search(rf"^{verb}:.*## ", makefile, re.M), f"`make {verb}` is not a verb"
    profiles = re.search(r"--profiles (\S+)", args).group(1).split(",")
    assert {"baseline", "fused"} <= set(profiles)
    assert all((REPO / "profiles" / f"{p}.toml").is_file() for p in profiles)


def test_quickstart_gives_no_timing_and_links_the_one_source():
    """Timings drift: the quickstart quotes none (no seconds or minutes, nothing on `make test`'s line) and links
    where they are: the demo's in docs/figures.md, the suite's in docs/development.md."""
    quick = _section(README, "## Quickstart")
    assert not re.search(r"\b\d+(?:\.\d+)? ?(?:s|min|minutes|seconds)\b", quick), quick
    [test_line] = [line for line in quick.splitlines() if line.strip().startswith("make test ")]
    assert not re.search(r"\d", test_line) and "docs/development.md" in test_line
    assert "](docs/figures.md#development-machine-and-gpu-runs)" in quick
    assert "](docs/development.md#verbs-tests-and-ci)" in quick
    figures = (REPO / "docs" / "figures.md").read_text(encoding="utf-8")
    assert re.search(r"^\| `make demo` wall time on an idle machine after the first set-up .*\| \d+ s \|", figures, re.M)


def test_quickstart_says_how_to_get_the_cpu_torch_and_how_big_the_venv_is():
    """Plain PyPI serves torch's CUDA build: the README gives the Makefile's own CPU index and the .venv's size."""
    quick = _section(README, "## Quickstart")
    makefile = (REPO / "Makefile").read_text()
    index = re.search(r'TORCH_PIP_ARGS="(--index-url https://download\.pytorch\.org/whl/cpu)"', makefile).group(1)
    assert f'make test TORCH_PIP_ARGS="{index}"' in quick
    assert re.search(r"^TORCH_PIP_ARGS \?=", makefile, re.M)
    assert re.search(r"`\.venv`.*about \d+(?:\.\d)? GB", quick, re.S)


def test_the_readme_reads_in_five_minutes():
    assert len(README.splitlines()) <= 130
    for heading, doc in (("## Switching", "switching"), ("## Bench", "bench"), ("## Tune", "tune"),
                         ("## Monitoring", "monitoring")):
        assert f"](docs/{doc}.md" in _section(README, heading), heading


def _profile_rows(text: str, heading: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^\| `([a-z0-9-]+)` \|", _section(text, heading), re.M)]


def test_the_readme_shows_the_five_main_profiles_and_docs_profiles_has_every_one():
    assert _profile_rows(README, "## Profiles") == ["baseline", "nccl-tuned", "fused", "custom-ar", "ep"]
    profiles_doc = (REPO / "docs" / "profiles.md").read_text(encoding="utf-8")
    shipped = {p.stem for p in (REPO / "profiles").glob("*.toml") if p.stem != "base"}
    assert set(_profile_rows(profiles_doc, "## Built-in profiles")) == shipped
    assert "](docs/profiles.md)" in _section(README, "## Profiles")
    others = shipped - {"baseline", "nccl-tuned", "fused", "custom-ar", "ep"}
    assert all(f"`{name}`" in _section(README, "## Profiles") for name in others)


def test_every_moved_section_is_linked_from_the_readme():
    for doc in ("profiles", "switching", "figures", "development", "fleet", "diagnose", "doctor", "deployment"):
        assert f"](docs/{doc}.md" in README, doc
    bench = _section(README, "## Bench")  # comparing two hosts: bench compare here, the recipe in deployment.md
    assert "bench compare" in bench and "--force" in bench
    assert "](docs/deployment.md#reproducing-results-on-another-host)" in bench
