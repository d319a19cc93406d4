"""flag_verdicts: SGLang's verdict on a command line is stored under a key of all it depends on and read back;
anything unreadable is computed again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from launcher.profiles import flag_verdicts, sglang_args


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


class Counting:
    def __init__(self, answer=None):
        self.calls = 0
        self.answer = answer or []

    def __call__(self, flags):
        self.calls += 1
        return list(self.answer)


def stored(cache: Path) -> list[Path]:
    return sorted((cache / "flag-verdicts").glob("*.json"))


@pytest.mark.parametrize("flags, expect", [
    (["--model-path", "/a/b", "--port", "30001", "--host", "0.0.0.0"],
     ["--model-path", "<value>", "--port", "<value>", "--host", "<value>"]),
    (["--model-path=/a", "--port=31000", "--speculative-draft-model-path=/d"],
     ["--model-path=<value>", "--port=<value>", "--speculative-draft-model-path=<value>"]),
    (["--port", "abc"], ["--port", "abc"]),  # the parser refuses it: the value is part of the key
    (["--port=x1"], ["--port=x1"]),
    (["--model-path", "--tp-size", "8"], ["--model-path", "--tp-size", "8"]),  # a flag, not a value
    (["--tp-size", "8", "--mem-fraction-static", "0.8"], ["--tp-size", "8", "--mem-fraction-static", "0.8"]),
])
def test_only_values_the_parser_cannot_refuse_leave_the_key(flags, expect):
    assert flag_verdicts.canonical_flags(flags) == expect


def test_a_verdict_is_computed_once_then_read_back(cache):
    compute = Counting([("--x", "no flag --x")])
    first = flag_verdicts.verdict(["--model-path", "/m1", "--x"], compute)
    again = flag_verdicts.verdict(["--model-path", "/other/model", "--x"], compute)
    assert first == again == [("--x", "no flag --x")]
    assert compute.calls == 1 and len(stored(cache)) == 1


def test_another_value_or_sglang_environment_is_another_verdict(cache, monkeypatch):
    compute = Counting()
    flag_verdicts.verdict(["--tp-size", "8"], compute)
    flag_verdicts.verdict(["--tp-size", "4"], compute)
    assert compute.calls == 2
    monkeypatch.setenv("SGLANG_SOMETHING", "1")
    flag_verdicts.verdict(["--tp-size", "8"], compute)
    assert compute.calls == 3 and len(stored(cache)) == 3
    monkeypatch.setenv("NOT_SGLANG", "1")  # only SGLANG_* is in the key
    flag_verdicts.verdict(["--tp-size", "8"], compute)
    assert compute.calls == 3


@pytest.mark.parametrize("damage", ["garbage {", '{"key": 1, "problems": []}', "", '{"problems": [[1]]}'])
def test_a_damaged_or_foreign_file_is_computed_again_and_replaced(cache, damage):
    compute = Counting([("--y", "bad")])
    flag_verdicts.verdict(["--y"], compute)
    [path] = stored(cache)
    path.write_text(damage)
    assert flag_verdicts.verdict(["--y"], compute) == [("--y", "bad")]
    assert compute.calls == 2
    assert json.loads(path.read_text())["problems"] == [["--y", "bad"]]


def test_an_unwritable_cache_still_answers(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("KIT_CACHE_DIR", str(blocker / "below"))  # below a file: mkdir fails
    compute = Counting([("--z", "bad")])
    assert flag_verdicts.verdict(["--z"], compute) == [("--z", "bad")]
    assert flag_verdicts.verdict(["--z"], compute) == [("--z", "bad")]
    assert compute.calls == 2


def test_without_sglang_nothing_is_stored(cache, monkeypatch):
    monkeypatch.setattr(flag_verdicts.importlib.util, "find_spec", lambda name: None)
    compute = Counting()
    flag_verdicts.verdict(["--a"], compute)
    flag_verdicts.verdict(["--a"], compute)
    assert compute.calls == 2 and not (cache / "flag-verdicts").exists()


def test_a_changed_sglang_file_changes_the_fingerprint(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    f = pkg / "sub" / "server_args.py"
    f.write_text("A = 1\n")
    (pkg / "data.bin").write_text("ignored")
    before = flag_verdicts._sglang_fingerprint.__wrapped__(str(pkg))
    assert flag_verdicts._sglang_fingerprint.__wrapped__(str(pkg)) == before
    (pkg / "data.bin").write_text("still ignored, not .py")
    assert flag_verdicts._sglang_fingerprint.__wrapped__(str(pkg)) == before
    f.write_text("A = 22\n")
    assert flag_verdicts._sglang_fingerprint.__wrapped__(str(pkg)) != before
    size_same = flag_verdicts._sglang_fingerprint.__wrapped__(str(pkg))
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert flag_verdicts._sglang_fingerprint.__wrapped__(str(pkg)) != size_same


def test_cache_folder_follows_the_settings(tmp_path, monkeypatch):
    monkeypatch.delenv("KIT_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert flag_verdicts.cache_dir() == tmp_path / "xdg" / "sglang-kit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert flag_verdicts.cache_dir() == tmp_path / "home" / ".cache" / "sglang-kit"
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "kit"))
    assert flag_verdicts.cache_dir() == tmp_path / "kit"


@pytest.mark.parametrize("flags", [
    ["--model-path", "/m", "--tp-size", "2"],
    ["--model-path", "/m", "--tp", "2"],  # abbreviation
    ["--model-path", "/m", "--mem-fraction-static", "lots"],  # value refused by the full parse
    ["--tp-size", "2"],  # no model path
])
def test_the_stored_verdict_is_the_real_parsers(cache, sglang_parser, flags):
    fresh = sglang_args._parse_problems(flags)
    assert sglang_args.flag_problems(flags) == fresh  # computed and stored
    assert len(stored(cache)) == 1
    assert sglang_args.flag_problems(flags) == fresh  # read back
    assert bool(fresh) == (flags[-1] != "2" or "--tp" in flags or "--model-path" not in flags)


def test_model_paths_share_one_real_verdict(cache, sglang_parser):
    a = sglang_args.flag_problems(["--model-path", "/models/a", "--port", "30000", "--tp-size", "2"])
    b = sglang_args.flag_problems(["--model-path", "/models/b", "--port", "31234", "--tp-size", "2"])
    assert a == b == [] and len(stored(cache)) == 1


def test_the_values_left_out_are_the_ones_the_parser_takes_as_any_string_or_int(sglang_parser):
    """What makes leaving them out sound: SGLang 0.5.23 parses them as str (and --port as int), nothing more."""
    types = {opt: (a.type, a.choices) for a in sglang_parser._actions for opt in a.option_strings}
    for flag in flag_verdicts.STRING_VALUED:
        assert types[flag] == (str, None), flag
    for flag in flag_verdicts.DIGITS_VALUED:
        assert types[flag] == (int, None), flag
