"""launcher.profiles.running_requests: the running-request cap SGLang 0.5.23 resolves from a plan's flags."""

from __future__ import annotations

import pytest

from launcher.profiles import running_requests


@pytest.mark.parametrize("algo", ["EAGLE", "EAGLE3", "eagle3", "NGRAM", "STANDALONE"])
def test_speculation_without_the_flag_runs_48(algo):
    cap, why = running_requests.resolve({"speculative-algorithm": algo})
    assert cap == 48 and "speculative_hook.py:1086-1093" in why


def test_the_flag_wins_under_speculation_and_without_it():
    assert running_requests.resolve({"speculative-algorithm": "EAGLE3", "max-running-requests": "64"})[0] == 64
    assert running_requests.resolve({"max-running-requests": 8})[0] == 8


@pytest.mark.parametrize("raw", ["x", "0", "-3", "", "٣"])
def test_a_malformed_flag_fixes_nothing(raw):
    assert running_requests.resolve({"speculative-algorithm": "EAGLE3", "max-running-requests": raw}) == (None, "")


def test_no_speculation_and_no_flag_is_unknown():
    assert running_requests.resolve({}) == (None, "")
