"""bench/tune/adaptive.py keys each tier where SGLang 0.5.23 routes a measured level's batches: padded to the
`--cuda-graph-bs-decode` size at or above the batch first, then the largest tier at or below that
(adaptive_spec_params.py:342-358). On the stand-in (SIMULATED: testsupport/standin/engine.py routes as the wheel)
and on the wheel's own router, every measured level runs the steps that were measured there; tiers keyed at the
levels themselves would not."""

from __future__ import annotations

import pytest

from bench.tune import adaptive
from bench.tune.journal import Entry
from bench.tune.ledger import Ledger
from bench.tune.space import Candidate
from launcher.profiles import adaptive_tiers as at
from launcher.profiles import tier_routing as tr
from testsupport.standin.engine import Engine
from testsupport.standin.server_args import parse_server_argv
from testsupport.standin.settings import StandinSettings

CAPTURE = ["1", "2", "4", "8", "16"]
FLAGS = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
         "--speculative-num-draft-tokens", "4", "--speculative-adaptive", "--cuda-graph-bs-decode", *CAPTURE]
LEVELS = (1, 3, 4, 12)
# (3,1,4) wins at 1 and 3, (1,1,2) at 4 and 12: 3 and 4 pad to one CUDA graph (4), 12 to 16
MEASURED = {"p+eagle3(3,1,4)": {1: 95.0, 3: 160.0, 4: 150.0, 12: 200.0},
            "p+eagle3(1,1,2)": {1: 80.0, 3: 150.0, 4: 190.0, 12: 300.0},
            "p+off": {1: 50.0, 3: 120.0, 4: 200.0, 12: 400.0}}


def _ledger() -> Ledger:
    led = Ledger(thresholds=None)  # type: ignore[arg-type]
    led.entries = [Entry(label=label, profile="p", status="ok", plan_digest="d", profile_hash="h",  # type: ignore[arg-type]
                         settings_digest="s", phase="screen", reason="", spec=Candidate.parse(label).spec,  # type: ignore[arg-type]
                         detail={"cell": {"profile": "p", "spec": "off", "per_repeat": [{"concurrency": c, "repeat": r, "output_throughput": v}
                                                         for c, v in by.items() for r in (0, 1)]}})
                   for label, by in MEASURED.items()]
    return led


def _plan() -> adaptive.AdaptivePlan:
    plan = adaptive.build(_ledger(), [Candidate.parse(k) for k in MEASURED], LEVELS)
    return plan.routed(tr.Routing.from_flags(FLAGS))


def _standin(tiers: at.AdaptiveTiers, tmp_path) -> Engine:
    path = tiers.write(tmp_path)
    argv = ["--model-path", "/m", *FLAGS, "--speculative-adaptive-config", str(path)]
    return Engine(StandinSettings(), parse_server_argv(argv), environ={})


def _sglang(tiers: at.AdaptiveTiers, tmp_path):
    from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams

    params = AdaptiveSpeculativeParams(initial_steps=tiers.start_point().steps, cfg_path=str(tiers.write(tmp_path)))
    params.set_cuda_graph_bs([int(c) for c in CAPTURE])  # what init_states hands it (eagle_worker_v2.py:1408-1414)
    return params


def test_every_measured_level_runs_the_steps_measured_there(tmp_path):
    plan = _plan()
    assert plan.routing == tr.Routing((1, 2, 4, 8, 16), 48)
    assert plan.tiers.to_json() == {"1": [3], "4": [1], "16": [1]}
    engine, sglang = _standin(plan.tiers, tmp_path), _sglang(plan.tiers, tmp_path)
    for w in plan.winners:
        measured = adaptive.tier_steps(Candidate.parse(w.label), w.level)
        assert MEASURED[w.label][w.level] == w.tokps and measured == w.steps, w  # a measurement of these steps here
        assert engine.steps_for_batch(w.level) == w.steps, w  # the stand-in routes the level's batch to them
        assert sglang.get_steps_for_batch(w.level) == w.steps, w  # and so does SGLang's own router
    # off was faster at 4 and 12 and fills no tier: speculation cannot be turned off inside one EAGLE server
    assert plan.off_faster == [4, 12] and 0 not in plan.tiers.union()


def test_tiers_keyed_at_the_levels_would_run_another_levels_steps(tmp_path):
    """The old keying: one tier per level at the level. Batches of 3 pad to 4 and run the tier keyed at 4."""
    plan = _plan()
    naive = tr.from_levels({w.level: s for w, s in zip(plan.winners, (3, 3, 1, 1), strict=True)})
    assert naive.to_json() == {"1": [3], "3": [3], "4": [1], "12": [1]}
    engine, sglang = _standin(naive, tmp_path), _sglang(naive, tmp_path)
    assert engine.steps_for_batch(3) == sglang.get_steps_for_batch(3) == 1  # measured best there: 3 steps


@pytest.mark.parametrize("argv, routed", [
    ([], 3),  # no explicit capture list: SGLang's router pads nothing
    (["--cuda-graph-bs-decode", "1", "2", "4"], 4),
    (["--cuda-graph-bs-decode", "1", "2", "4", "--disable-cuda-graph"], 3),  # graphs off: the router gets None
    (["--cuda-graph-bs-decode", "1", "2", "4", "--cuda-graph-backend-decode", "disabled"], 3),
    (["--cuda-graph-bs-decode", "1", "2"], 3),  # above the last size: the batch itself
])
def test_the_standin_pads_only_to_the_explicit_capture_list(argv, routed, tmp_path):
    engine = Engine(StandinSettings(), parse_server_argv(["--model-path", "/m", *argv]), environ={})
    assert engine.routed_batch(3) == routed
    flags = ["--speculative-algorithm", "EAGLE3", *argv]
    assert tr.Routing.from_flags(flags).padded(3) == routed  # the tune reads the plan's flags the same way
