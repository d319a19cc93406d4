"""bench.client.workload: the bundled chat prompts, the seeded random workload, and prompt-file errors."""

from __future__ import annotations

import pytest

from bench.client.workload import build_workload, load_prompts, render_chat_template
from launcher.errors import UserError


def test_bundled_prompts_are_mixed_and_chat_templated():
    prompts = load_prompts()
    assert len(prompts) >= 64
    assert {p.task for p in prompts} >= {"code", "math", "prose", "extraction"}
    assert len({p.id for p in prompts}) == len(prompts)
    text = prompts[0].text()
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert render_chat_template([{"role": "user", "content": "hi"}]) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    first4 = {p.task for p in build_workload("chat", 4)}
    assert len(first4) == 4  # a short run still mixes the tasks


def test_random_workload_is_seeded_and_cycling_ids_stay_unique():
    a, b = build_workload("random", 5, seed=7), build_workload("random", 5, seed=7)
    assert [p.text() for p in a] == [p.text() for p in b]
    assert [p.text() for p in a] != [p.text() for p in build_workload("random", 5, seed=8)]
    many = build_workload("chat", 150)
    assert len({p.id for p in many}) == 150
    with pytest.raises(UserError):
        build_workload("sharegpt", 4)


def test_bad_prompts_file_names_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"id": "a", "messages": [{"role": "user", "content": "x"}]}\n{"id": "a", "messages": []}\n')
    with pytest.raises(UserError, match=r"p.jsonl:2"):
        load_prompts(f)
