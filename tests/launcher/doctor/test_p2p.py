"""launcher.doctor.p2p: `nvidia-smi topo -p2p r` parsing, overall verdict and the GPU pairs without P2P."""

from __future__ import annotations

import pytest
from helpers_doctor import assert_format_error, read

from launcher.doctor import p2p


def test_single_h200_has_no_pairs():
    m = p2p.parse(read("h200x1_p2p.txt"))
    assert m.gpus == [0] and m.ok is None and m.bad_pairs() == []


def test_p2p_broken_pairs_with_statuses():
    m = p2p.parse(read("pcie8_p2p_broken.txt"))
    assert m.gpus == list(range(8))
    assert m.ok is False
    assert m.bad_pairs() == [(0, 7, "CNS"), (2, 5, "NS")]
    assert m.status[(5, 2)] == "NS" and m.status[(1, 2)] == "OK"
    assert p2p.parse(read("pcie8_p2p_ok.txt")).ok is True


def test_p2p_one_direction_bad_counts():
    text = " \tGPU0\tGPU1\t\n GPU0\tX\tOK\t\n GPU1\tTNS\tX\t\n"
    m = p2p.parse(text)
    assert m.bad_pairs() == [(0, 1, "TNS")]


def test_every_bad_status_has_a_meaning():
    m = p2p.parse(read("pcie8_p2p_broken.txt"))
    assert all(p2p.STATUS_MEANING[s] for _, _, s in m.bad_pairs())


@pytest.mark.parametrize(
    ("text", "lineno", "needle"),
    [
        (" \tGPU0\tGPU1\t\n GPU0\tX\tMAYBE\t\n GPU1\tOK\tX\t\n", 2, "MAYBE"),
        ("GPU0 GPU1 CPU Affinity\n", 1, "GPU0 GPU1 CPU Affinity"),
    ],
)
def test_unknown_format_names_the_line(text, lineno, needle):
    assert_format_error(p2p.parse, text, lineno, needle)
