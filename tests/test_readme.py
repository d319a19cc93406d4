"""README.md's quickstart (its two set-up commands, how to learn whether `fused` pays, the demo's timing) and
the map of the tree (moved to docs/development.md) against the repository."""

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
    quick = _section(README, "## Quickstart")
    assert "make up PROFILE=fused" in quick and "make demo" in quick and "make test" in quick
    blocks = [line.split("#", 1)[0].strip() for line in quick.splitlines() if line.startswith("    ")]
    assert blocks == ["make up PROFILE=fused", "make demo", "make test"], blocks
    assert blocks[0] == re.search(r"^    (make \S+ \S+)", quick, re.M).group(1), "the first command is make up PROFILE=fused"


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


def test_demo_timing_is_after_the_first_setup_and_gives_the_setup_time():
    quick = _section(README, "## Quickstart")
    assert "on an idle machine, after the first set-up" in quick
    [para] = [p for p in quick.split("\n\n") if "after the first set-up" in p]
    seconds = re.findall(r"(\d+) s\b", para)
    assert len(seconds) >= 2, para  # the demo's time and the first set-up's
    figures = (REPO / "docs" / "figures.md").read_text(encoding="utf-8")
    for s in seconds:
        assert re.search(rf"\b{s} s\b", figures), f"{s} s is not in docs/figures.md's table"


def test_every_moved_section_is_linked_from_the_readme():
    for doc in ("profiles", "switching", "figures", "development"):
        assert f"](docs/{doc}.md" in README, doc
    assert "## Compare two hosts" in README.splitlines()
    compare = _section(README, "## Compare two hosts")
    assert "bench compare" in compare and "--force" in compare
