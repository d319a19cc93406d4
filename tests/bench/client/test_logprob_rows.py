"""bench/client/logprob_rows.py against malformed replies: reading never raises, a malformed field is no evidence (None)
and the reason names it; a reply without log-probabilities is None without a reason."""

from __future__ import annotations

import time

import pytest

from bench.client import logprob_rows
from bench.run.logprob_gate import TokenLogprob

OK_ROW = [-0.1, 7, None]


def gen(rows=None, tops=None, **meta):
    """A /generate body: two good positions unless `rows` / `tops` replace them."""
    m = {"output_token_logprobs": [OK_ROW, [-0.2, 8, None]] if rows is None else rows,
         "output_top_logprobs": [[OK_ROW, [-2.0, 9, None]], [[-0.2, 8, None]]] if tops is None else tops}
    return {"text": "ab", "meta_info": {**m, **meta}}


def chat(content=None, top=None):
    top = [{"token": "a", "logprob": -0.1}] if top is None else top
    content = [{"token": "a", "logprob": -0.1, "top_logprobs": top}] if content is None else content
    return {"choices": [{"message": {"content": "a"}, "logprobs": {"content": content}}]}


def row(lp):
    return gen(rows=[[lp, 7, None], [-0.2, 8, None]])


def token(tid):
    return gen(rows=[[-0.1, tid, None], [-0.2, 8, None]])


nested = [-0.1]
for _ in range(50):
    nested = [nested]

# (body, the start of the reason): each names the malformed field
MALFORMED_GENERATE = {
    "tops 5,5,5,5": (gen(tops=[5, 5]), "meta_info.output_top_logprobs[0] is 5, not a list"),
    "tops [5,5,5,5]": (gen(tops=[[5, 5, 5, 5], [5, 5, 5, 5]]), "meta_info.output_top_logprobs[0][0] is 5, not a list"),
    "alternative above 0": (gen(tops=[[[5, 5, 5, 5]], None]),
                            "meta_info.output_top_logprobs[0][0][0] is 5: a log-probability is at most 0"),
    "tops a string": (gen(tops="x"), "meta_info.output_top_logprobs is 'x', not a list"),
    "tops shorter": (gen(tops=[[OK_ROW]]), "meta_info.output_top_logprobs has 1 positions and "
                                           "meta_info.output_token_logprobs 2"),
    "tops longer": (gen(tops=[None, None, None]), "meta_info.output_top_logprobs has 3 positions"),
    "a token twice": (gen(tops=[[OK_ROW, [-0.3, 7, None]], None]), "meta_info.output_top_logprobs[0] lists token 7 twice"),
    "logprob 5": (row(5), "meta_info.output_token_logprobs[0][0] is 5: a log-probability is at most 0"),
    "logprob 1e-5": (row(1e-5), "meta_info.output_token_logprobs[0][0] is 1e-05: a log-probability is at most 0"),
    "logprob NaN": (row(float("nan")), "meta_info.output_token_logprobs[0][0] is nan, not a finite log-probability"),
    "logprob inf": (row(float("inf")), "meta_info.output_token_logprobs[0][0] is inf, not a finite"),
    "logprob -inf": (row(float("-inf")), "meta_info.output_token_logprobs[0][0] is -inf, not a finite"),
    "logprob 'NaN' as kept": (row("NaN"), "meta_info.output_token_logprobs[0][0] is 'NaN', not a log-probability"),
    "logprob a string": (row("-0.1"), "meta_info.output_token_logprobs[0][0] is '-0.1', not a log-probability"),
    "logprob a long string": (row("x" * 10_000), "meta_info.output_token_logprobs[0][0] is 'xxxxxxxxxxxxxxxxxxxxxxxx...'"),
    "logprob true": (row(True), "meta_info.output_token_logprobs[0][0] is true, not a log-probability"),
    "logprob null": (row(None), "meta_info.output_token_logprobs[0][0] is null, not a log-probability"),
    "logprob a list": (row([-0.1]), "meta_info.output_token_logprobs[0][0] is a list of 1, not a log-probability"),
    "logprob an object": (row({"v": -0.1}), "meta_info.output_token_logprobs[0][0] is an object"),
    "logprob nested deep": (row(nested), "meta_info.output_token_logprobs[0][0] is a list of 1"),
    "logprob a huge int": (row(10**400), "meta_info.output_token_logprobs[0][0] is an integer of 19 digits or more: a "
                                         "log-probability is at most 0"),
    "logprob a huge negative int": (row(-(10**400)), "meta_info.output_token_logprobs[0][0] is an integer of 19 digits "
                                                     "or more, below -1e+30"),
    "logprob -1e31": (row(-1e31), "meta_info.output_token_logprobs[0][0] is -1e+31, below -1e+30"),
    "token id true": (token(True), "meta_info.output_token_logprobs[0][1] is true, not a token id"),
    "token id -1": (token(-1), "meta_info.output_token_logprobs[0][1] is -1, not a token id"),
    "token id 2**31": (token(2**31), "meta_info.output_token_logprobs[0][1] is 2147483648, not a token id"),
    "token id a string": (token("7"), "meta_info.output_token_logprobs[0][1] is '7', not a token id"),
    "token id a float": (token(7.0), "meta_info.output_token_logprobs[0][1] is 7, not a token id"),
    "token id a huge int": (token(10**400), "meta_info.output_token_logprobs[0][1] is an integer of 19 digits"),
    "row a number": (gen(rows=[5, OK_ROW]), "meta_info.output_token_logprobs[0] is 5, not a list"),
    "row an object": (gen(rows=[{}, OK_ROW]), "meta_info.output_token_logprobs[0] is an object, not a list"),
    "row too short": (gen(rows=[[-0.1], OK_ROW]), "meta_info.output_token_logprobs[0] has 1 item(s)"),
    "rows empty": (gen(rows=[], tops=[]), "meta_info.output_token_logprobs is empty"),
    "rows a string": (gen(rows="rows"), "meta_info.output_token_logprobs is 'rows', not a list"),
    "rows an object": (gen(rows={"0": OK_ROW}), "meta_info.output_token_logprobs is an object, not a list"),
    "meta_info a string": ({"text": "x", "meta_info": "oops"}, "meta_info is 'oops', not an object"),
    "meta_info a list": ({"text": "x", "meta_info": [1]}, "meta_info is a list of 1, not an object"),
    "the reply a list": ([1, 2], "the reply is a list of 2, not an object"),
    "the reply a string": ("x", "the reply is 'x', not an object"),
}
MALFORMED_CHAT = {
    "choices a string": ({"choices": "x"}, "choices is 'x', not a list"),
    "choices empty": ({"choices": []}, "choices is empty"),
    "choice a number": ({"choices": [5]}, "choices[0] is 5, not an object"),
    "logprobs a number": ({"choices": [{"logprobs": 5}]}, "choices[0].logprobs is 5, not an object"),
    "content a string": ({"choices": [{"logprobs": {"content": "x"}}]}, "choices[0].logprobs.content is 'x', not a list"),
    "content empty": (chat(content=[]), "choices[0].logprobs.content is empty"),
    "item a number": (chat(content=[5]), "choices[0].logprobs.content[0] is 5, not an object"),
    "token a number": (chat(content=[{"token": 3, "logprob": -0.1}]), "choices[0].logprobs.content[0].token is 3"),
    "logprob a string": (chat(content=[{"token": "a", "logprob": "low"}]),
                         "choices[0].logprobs.content[0].logprob is 'low', not a log-probability"),
    "logprob above 0": (chat(content=[{"token": "a", "logprob": 0.5}]),
                        "choices[0].logprobs.content[0].logprob is 0.5: a log-probability is at most 0"),
    "logprob NaN": (chat(content=[{"token": "a", "logprob": float("nan")}]), "choices[0].logprobs.content[0].logprob is nan"),
    "top_logprobs a number": (chat(top=5), "choices[0].logprobs.content[0].top_logprobs is 5, not a list"),
    "top item a list": (chat(top=[[5, 5, 5, 5]]), "choices[0].logprobs.content[0].top_logprobs[0] is a list of 4, not an"),
    "top logprob inf": (chat(top=[{"token": "b", "logprob": float("inf")}]),
                        "choices[0].logprobs.content[0].top_logprobs[0].logprob is inf"),
    "top token null": (chat(top=[{"token": None, "logprob": -1.0}]),
                       "choices[0].logprobs.content[0].top_logprobs[0].token is null, not a token"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_GENERATE))
def test_a_malformed_generate_reply_is_no_evidence_never_a_traceback(case):
    body, _ = MALFORMED_GENERATE[case]
    assert logprob_rows.from_generate(body) is None


@pytest.mark.parametrize("case", sorted(MALFORMED_CHAT))
def test_a_malformed_chat_reply_is_no_evidence_never_a_traceback(case):
    body, _ = MALFORMED_CHAT[case]
    assert logprob_rows.from_chat(body) is None


@pytest.mark.parametrize("case", sorted(MALFORMED_GENERATE))
def test_the_reason_names_the_malformed_generate_field(case):
    body, reason = MALFORMED_GENERATE[case]
    rows, why = logprob_rows.read_generate(body)
    assert rows is None and why is not None and why.startswith(reason), why
    assert len(why) < 300  # never the whole of a large value


@pytest.mark.parametrize("case", sorted(MALFORMED_CHAT))
def test_the_reason_names_the_malformed_chat_field(case):
    body, reason = MALFORMED_CHAT[case]
    rows, why = logprob_rows.read_chat(body)
    assert rows is None and why is not None and why.startswith(reason), why


@pytest.mark.parametrize("body", [{}, {"text": "x"}, {"meta_info": None}, {"meta_info": {}},
                                  {"meta_info": {"completion_tokens": 3, "output_token_logprobs": None}}])
def test_a_generate_reply_without_log_probabilities_is_none_without_a_reason(body):
    assert logprob_rows.read_generate(body) == (None, None)


@pytest.mark.parametrize("body", [{}, {"choices": None}, {"choices": [{"logprobs": None}]},
                                  {"choices": [{"logprobs": {"content": None}}]}])
def test_a_chat_reply_without_log_probabilities_is_none_without_a_reason(body):
    assert logprob_rows.read_chat(body) == (None, None)


def test_what_sglang_sends_reads_with_rounding_slack_null_positions_and_no_alternatives():
    assert logprob_rows.read_generate(gen()) == ([TokenLogprob(7, -0.1, {7: -0.1, 9: -2.0}),
                                                  TokenLogprob(8, -0.2, {8: -0.2})], None)
    # a log-softmax rounded a hair above 0 is still one (LOGPROB_SLACK); 0 as an int too
    rows, why = logprob_rows.read_generate(gen(rows=[[1e-7, 7, None], [0, 8, None]], tops=[None, []]))
    assert why is None and [(r.logprob, r.top) for r in rows] == [(1e-7, {}), (0.0, {})]
    rows, why = logprob_rows.read_generate({"meta_info": {"output_token_logprobs": [OK_ROW]}})  # no alternatives asked
    assert why is None and rows == [TokenLogprob(7, -0.1, {})]
    rows, why = logprob_rows.read_chat(chat(top=[{"token": "a", "logprob": -0.1}, {"token": "a", "logprob": -3.0}]))
    assert why is None and rows == [TokenLogprob("a", -0.1, {"a": -0.1})]  # two ids, one text: the likelier counts


def test_a_huge_reply_is_read_in_linear_time_naming_the_last_bad_position():
    n = 200_000
    body = gen(rows=[OK_ROW] * (n - 1) + [[0.5, 7, None]], tops=[None] * n)
    t = time.monotonic()
    rows, why = logprob_rows.read_generate(body)
    assert rows is None and why.startswith(f"meta_info.output_token_logprobs[{n - 1}][0] is 0.5")
    assert time.monotonic() - t < 10


@pytest.mark.parametrize("data", [[[1, 5.0, []]], [[1, -0.1, [[2, 3.0]]]], [[1, float("nan"), []]], [[1, 10**400, []]],
                                  [[True, -0.1, []]], [[1, -0.1, [[2]]]]])
def test_damaged_stored_rows_give_none(data):
    assert logprob_rows.from_json(data) is None
