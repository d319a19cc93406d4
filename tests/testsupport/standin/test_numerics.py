"""testsupport/standin/numerics.py and logprob_shapes.py: the stand-in's log-probabilities, in the shapes of
SGLang 0.5.23 (its own pydantic models, read from the installed wheel), and bench/client/logprob_rows.py reading them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import sglang
from aiohttp import web
from pydantic import BaseModel

from bench.client import logprob_rows
from bench.run import logprob_gate
from testsupport.standin import logprob_shapes, numerics, simulation

PROTOCOL = Path(sglang.__file__).parent / "srt" / "entrypoints" / "openai" / "protocol.py"
VOCAB = len(simulation.VOCAB)


def wheel_models(*names: str) -> dict[str, type[BaseModel]]:
    """The named classes of sglang's openai/protocol.py, built from the wheel's own source (importing the
    module needs the openai package, which the kit does not install)."""
    tree = ast.parse(PROTOCOL.read_text(encoding="utf-8"))
    found = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef) and n.name in names}
    assert set(found) == set(names), f"{PROTOCOL} lacks {set(names) - set(found)}"
    ns: dict = {"BaseModel": BaseModel, "List": list}  # typing.List in the wheel: the same to pydantic
    for name in names:  # in dependency order, as given
        exec(compile(ast.Module([found[name]], []), str(PROTOCOL), "exec", dont_inherit=True), ns)  # noqa: S102
    return {n: ns[n] for n in names}


def decode(prompt: str, count: int, mode: str) -> list[numerics.Position]:
    return numerics.decode(prompt, count, mode, lambda n: simulation.token_ids(prompt, n, False), VOCAB)


PROMPTS = [f"prompt {i}" for i in range(12)]


def test_reference_decode_is_the_stand_ins_text_and_deterministic():
    for p in PROMPTS[:3]:
        ref = decode(p, 64, "reference")
        assert [x.token_id for x in ref] == simulation.token_ids(p, 64, False)
        assert ref == decode(p, 64, "reference")
        assert all(x.logprob <= 0 and x.top[0][0] == x.token_id and len(x.top) == numerics.TOP_N for x in ref)
        assert all(x.top[0][1] >= x.top[1][1] for x in ref)  # greedy: the chosen token is the most likely


def _stats(mode: str, count: int = 128):
    rows = lambda m: {p: [logprob_gate.TokenLogprob(x.token_id, x.logprob, dict(x.top)) for x in decode(p, count, m)]  # noqa: E731
                      for p in PROMPTS}
    return logprob_gate.compare(rows("reference"), rows(mode), 5)


def test_a_reordering_moves_log_probabilities_by_rounding_noise_and_flips_only_near_ties():
    s = _stats("reorder")
    assert 0 < s.max_delta <= numerics.REORDER_NOISE * 2
    assert s.flips > 0 and s.hard_mismatches == 0  # texts part ways, at near-ties only
    assert s.max_flip_gap is not None and s.max_flip_gap <= numerics.NEAR_TIE_GAP + 2 * numerics.REORDER_NOISE
    t = logprob_gate.thresholds({})
    assert logprob_gate.verdict(s, t)[0] == logprob_gate.PASS


def test_a_broken_reduction_jumps_far_past_the_thresholds():
    s = _stats("corrupt")
    t = logprob_gate.thresholds({})
    assert s.max_delta >= numerics.CORRUPT_JUMP[0]
    assert logprob_gate.verdict(s, t)[0] == logprob_gate.FAIL


def test_chat_content_validates_against_sglangs_own_models():
    models = wheel_models("TopLogprob", "ChatCompletionTokenLogprob", "ChoiceLogprobs")
    positions = decode("chat prompt", 16, "reorder")
    content = logprob_shapes.chat_content(positions, 3)
    parsed = models["ChoiceLogprobs"].model_validate(content)
    assert len(parsed.content) == 16 and all(len(t.top_logprobs) == 3 for t in parsed.content)
    assert all(bytes(t.bytes).decode() == t.token for t in parsed.content)
    assert set(content["content"][0]) == set(models["ChatCompletionTokenLogprob"].model_fields)
    rows = logprob_rows.from_chat({"choices": [{"logprobs": content}]})
    assert [r.logprob for r in rows] == [p.logprob for p in positions]


def test_generate_meta_has_sglangs_row_shape():
    positions = decode("generate prompt", 10, "reference")
    meta = logprob_shapes.generate_meta(positions, 4, False)
    assert meta["output_token_logprobs_length"] == 10
    assert all(len(r) == 3 and isinstance(r[0], float) and isinstance(r[1], int) and r[2] is None
               for r in meta["output_token_logprobs"])
    assert len(meta["output_top_logprobs"]) == 10 and all(len(top) == 4 for top in meta["output_top_logprobs"])
    assert logprob_shapes.generate_meta(positions, 0, True).get("output_top_logprobs") is None
    with_text = logprob_shapes.generate_meta(positions, 1, True)
    assert all(isinstance(r[2], str) for r in with_text["output_token_logprobs"])
    rows = logprob_rows.from_generate({"meta_info": meta})
    assert [r.token_id for r in rows] == [p.token_id for p in positions] and all(len(r.top) == 4 for r in rows)


@pytest.mark.parametrize("body", [{"return_logprob": "yes"}, {"return_logprob": True, "top_logprobs_num": -1},
                                  {"return_logprob": True, "top_logprobs_num": 21},
                                  {"return_logprob": True, "top_logprobs_num": True}])
def test_a_malformed_generate_request_is_a_400(body):
    with pytest.raises(web.HTTPBadRequest):
        logprob_shapes.generate_request(body)


def test_chat_top_logprobs_needs_logprobs():
    with pytest.raises(web.HTTPBadRequest):
        logprob_shapes.chat_request({"top_logprobs": 2})
    assert logprob_shapes.chat_request({"logprobs": True, "top_logprobs": 20}) == (True, numerics.TOP_N)


@pytest.mark.parametrize("body", [
    {}, {"meta_info": None}, {"meta_info": {"output_token_logprobs": []}},
    {"meta_info": {"output_token_logprobs": [[float("nan"), 3, None]]}},
    {"meta_info": {"output_token_logprobs": [["x", 3, None]]}},
    {"meta_info": {"output_token_logprobs": [[-0.1, True, None]]}},
    {"meta_info": {"output_token_logprobs": "rows"}},
    {"meta_info": {"output_token_logprobs": [[-0.1]]}},
])
def test_malformed_generate_replies_give_none(body):
    assert logprob_rows.from_generate(body) is None


@pytest.mark.parametrize("body", [
    {}, {"choices": []}, {"choices": ["x"]}, {"choices": [{"logprobs": None}]},
    {"choices": [{"logprobs": {"content": []}}]},
    {"choices": [{"logprobs": {"content": [{"token": 3, "logprob": -0.1}]}}]},
    {"choices": [{"logprobs": {"content": [{"token": "a", "logprob": "low"}]}}]},
    {"choices": [{"logprobs": {"content": ["a"]}}]},
])
def test_malformed_chat_replies_give_none(body):
    assert logprob_rows.from_chat(body) is None


@pytest.mark.parametrize("data", [None, [], "rows", [[1, -0.1]], [[1, "x", []]], [[None, -0.1, []]], [[1, -0.1, "top"]]])
def test_malformed_stored_rows_give_none(data):
    assert logprob_rows.from_json(data) is None


def test_stored_rows_round_trip():
    rows = [logprob_gate.TokenLogprob(5, -0.25, {5: -0.25, 9: -1.5}), logprob_gate.TokenLogprob("a", -0.5, {})]
    assert logprob_rows.from_json(logprob_rows.to_json(rows)) == rows
