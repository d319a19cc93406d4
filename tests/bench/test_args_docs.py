"""bench/flag_docs.py: the option tables of docs/bench.md and docs/tune.md are the flags' declarations, and the
Makefile passes flags to `bench run` / `bench tune` only through BENCH_ARGS / TUNE_ARGS, naming declared ones."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from bench import flag_docs
from bench.args import FLAG_KEY
from testsupport.stack import REPO

MAKEFILE = (REPO / "Makefile").read_text(encoding="utf-8")


def _flags(command) -> set[str]:
    return {s for a in command.parser()._actions for s in a.option_strings if s.startswith("--") and s != "--help"}


@pytest.mark.parametrize("prog", sorted(flag_docs.DOCS))
def test_the_doc_table_is_the_declarations(prog):
    command = flag_docs.commands()[prog]
    text = (REPO / flag_docs.DOCS[prog]).read_text(encoding="utf-8")
    assert flag_docs.rewritten(text, command) == text, f"{flag_docs.DOCS[prog]}: run `make docs`"
    table = text.split(flag_docs.table(command).splitlines()[0], 1)[1]
    documented = {m.split()[0] for m in re.findall(r"^\| `(--[^`]+)` \|", table, re.M)}
    assert documented == _flags(command)  # every flag, and no other
    for name, default, meaning in flag_docs.rows(command):
        assert f"| `{name}` | {default} | " in table and meaning and "{default" not in meaning


def test_a_changed_declaration_is_a_stale_table(monkeypatch):
    from bench.run.settings import RunSettings

    command = flag_docs.commands()["bench run"]
    text = (REPO / flag_docs.DOCS["bench run"]).read_text(encoding="utf-8")
    f = RunSettings.__dataclass_fields__["repeats"]
    flag = f.metadata[FLAG_KEY]
    monkeypatch.setattr(f, "metadata", {FLAG_KEY: replace(flag, help="measured repeats, all of them")})
    assert flag_docs.rewritten(text, command) != text
    assert "| `--repeats` | `3` | measured repeats, all of them |" in flag_docs.table(command)
    monkeypatch.setattr(f, "default", 5)
    assert "| `--repeats` | `5` |" in flag_docs.table(command)


def test_the_help_default_leaves_the_meaning_column_and_other_words_stay():
    rows = {name: (default, meaning) for name, default, meaning in flag_docs.rows(flag_docs.commands()["bench run"])}
    assert rows["--num-prompts"] == ("`16`", "requests per repeat (with --prompts, every prompt of the file)")
    assert rows["--spec"][0] == "`eagle3,off`" and "(default" not in rows["--spec"][1]
    assert rows["--no-switch"][0] == "off" and rows["--leave-on CELL"][0] == "none"
    tune = {name: (default, meaning) for name, default, meaning in flag_docs.rows(flag_docs.commands()["bench tune"])}
    assert tune["--eagle3 S,K,D[;S,K,D...]"][0] == "`1,1,2;2,1,3;3,1,4;4,1,5`"
    assert "(default: back to the plan it started with)" in tune["--apply"][1]  # words about the default, kept


def test_a_doc_without_its_markers_is_exit_2_naming_them(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    for rel in flag_docs.DOCS.values():
        (tmp_path / rel).write_text("# no table\n")
    assert flag_docs.main(["--write", str(tmp_path)]) == 2
    assert "options: generated from the flags' declarations" in capsys.readouterr().err


def test_write_puts_the_tables_between_the_markers(tmp_path):
    (tmp_path / "docs").mkdir()
    for prog, rel in flag_docs.DOCS.items():
        command = flag_docs.commands()[prog]
        begin, end = flag_docs.table(command).splitlines()[0], flag_docs.table(command).splitlines()[-1]
        (tmp_path / rel).write_text(f"before\n\n{begin}\n| stale |\n{end}\n\nafter\n")
    assert flag_docs.main(["--write", str(tmp_path)]) == 0
    for prog, rel in flag_docs.DOCS.items():
        text = (tmp_path / rel).read_text()
        assert "| stale |" not in text and text.startswith("before\n\n") and text.endswith("\n\nafter\n")
        assert flag_docs.table(flag_docs.commands()[prog]) in text


def test_make_docs_writes_the_tables():
    recipe = MAKEFILE.split("\ndocs: ##", 1)[1].split("\n\n", 1)[0]
    assert "-m bench.flag_docs --write" in recipe


def _makefile_flags(variable: str, recipe_target: str) -> set[str]:
    """The flags the Makefile gives `bench` in `variable`="..." (its help and comments) and on the bench
    container's command line in `recipe_target`'s recipe."""
    given = " ".join(re.findall(rf'{variable}="([^"]*)"', MAKEFILE))
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", given + "\n" + _command_line(recipe_target)))


def _command_line(target: str) -> str:
    recipe = MAKEFILE.split(f"\n{target}: ##", 1)[1].split("\n\n", 1)[0]
    return recipe.split("run --rm bench", 1)[1]


def test_the_makefile_passes_only_declared_flags_and_declares_none():
    commands = flag_docs.commands()
    tune = _makefile_flags("TUNE_ARGS", "tune")
    run = _makefile_flags("BENCH_ARGS", "bench")
    assert "--facts" in tune and "--budget" in tune and "--leave-on" in run  # what the Makefile says today
    assert tune <= _flags(commands["bench tune"]), tune - _flags(commands["bench tune"])
    assert run <= _flags(commands["bench run"]), run - _flags(commands["bench run"])
    # the only variables the bench containers' command lines take are the pass-through ones
    for target, allowed in (("bench", {"BENCH_ARGS"}), ("tune", {"TUNE_ARGS"})):
        assert set(re.findall(r"\$\((\w+)\)", _command_line(target))) == allowed, _command_line(target)
