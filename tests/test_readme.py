"""README.md: the quickstart's two commands and the map of the tree match the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = (REPO / "README.md").read_text(encoding="utf-8")


def _map_rows() -> list[tuple[str, str, str]]:
    section = README.split("### Map of the tree", 1)[1].split("\n## ", 1)[0]
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
            assert (REPO / path).exists(), f"README map names {path}, which is not in the tree"


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
        assert row is not None, f"{pkg}/ has no row on the README map, nor a parent that has one"
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
    quick = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert "make up PROFILE=fused" in quick and "make demo" in quick and "make test" in quick
