"""Every `sglang:` metric the kit reads (dashboards, alert rules, the bench, the switch's drain) is in a
real SGLang 0.5.23 scrape with the type its query assumes, and the scrape passes `promtool check metrics`."""

from __future__ import annotations

import re
import shutil
import subprocess

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testsupport.stack import REPO

# Where the kit names SGLang's metrics: Grafana and Prometheus files, the bench (predict included) and
# the runtime's metrics reader.
USERS = ("docker/monitoring", "bench", "launcher/runtime/api/metrics_text.py")
NAME = re.compile(r"sglang:[A-Za-z_][A-Za-z0-9_:]*")
# Families that exist in SGLang 0.5.23 but get their first sample only under speculation, which this CPU
# cannot run (the tier serves spec off): name -> why.
ONLY_UNDER_SPECULATION = {
    "sglang:spec_verify_calls": "incremented only when a request had verify passes "
                                "(sglang/srt/observability/metrics_collector.py:2111-2112)",
}


def kit_metric_names() -> dict[str, set[str]]:
    """Each `sglang:` name the kit's files spell -> the files that spell it."""
    found: dict[str, set[str]] = {}
    for root in USERS:
        top = REPO / root
        files = [top] if top.is_file() else [p for p in top.rglob("*") if p.is_file() and p.suffix != ".pyc"]
        for path in files:
            for name in NAME.findall(path.read_text(errors="replace")):
                found.setdefault(name.rstrip(":"), set()).add(str(path.relative_to(REPO)))
    return found


def assumed_types(names: set[str]) -> dict[str, str]:
    """Family name -> the type the kit's use implies: `_bucket` is read by histogram_quantile (histogram),
    `_total` by rate() or as a counter (counter); a bare name is a histogram when its `_bucket` is used
    too, else a gauge."""
    out: dict[str, str] = {}
    bases = {n[: -len("_bucket")] for n in names if n.endswith("_bucket")}
    for n in names:
        if n.endswith("_bucket"):
            out[n[: -len("_bucket")]] = "histogram"
        elif n.endswith("_total"):
            out[n[: -len("_total")]] = "counter"
        elif n in bases:
            out[n] = "histogram"
        else:
            out.setdefault(n, "gauge")
    return out


@pytest.fixture(scope="module")
def scrape(serving_stack) -> str:
    """/metrics after a finished request, unstreamed and streamed, so the per-request histograms and
    counters have samples (inter-token latency is observed for streamed requests only)."""
    for stream in (False, True):
        r = serving_stack.post("/generate", {"text": "Metrics please", "stream": stream,
                                             "sampling_params": {"max_new_tokens": 4, "temperature": 0,
                                                                 "ignore_eos": True}})
        assert r.status_code == 200, r.text
    text = httpx.get(f"{serving_stack.server_url}/metrics", timeout=30).text
    assert "sglang:" in text
    return text


def test_the_kit_names_metrics_at_all():
    names = kit_metric_names()
    assert "sglang:num_running_reqs" in names  # the drain's: launcher/runtime/api/metrics_text.py
    assert len(names) >= 8, names


def test_every_metric_the_kit_reads_is_scraped_with_the_type_it_assumes(scrape):
    families = {f.name: f for f in text_string_to_metric_families(scrape)}
    wrong = []
    for name, kind in sorted(assumed_types(set(kit_metric_names())).items()):
        fam = families.get(name)
        if name in ONLY_UNDER_SPECULATION:
            if fam is not None:
                wrong.append(f"{name}: scraped with speculation off; drop it from ONLY_UNDER_SPECULATION")
            continue
        if fam is None:
            wrong.append(f"{name}: not in the scrape (the kit assumes a {kind})")
        elif fam.type != kind:
            wrong.append(f"{name}: scraped as {fam.type}, the kit assumes a {kind}")
        elif not fam.samples:
            wrong.append(f"{name}: declared but without a sample")
    assert not wrong, "\n".join(wrong)


def test_labels_are_the_ones_sglang_0523_sets(scrape):
    fam = {f.name: f for f in text_string_to_metric_families(scrape)}["sglang:num_running_reqs"]
    labels = set(fam.samples[0].labels)
    assert {"model_name", "tp_rank"} <= labels, labels


# promtool's lint findings on SGLang 0.5.23's own naming (exit 3: "lint problems", the exposition parsed
# fine); each is a naming choice of SGLang's, not a broken scrape: finding -> why it is accepted here.
PROMTOOL_LINT_ACCEPTED = {
    "metric names should not contain ':'": "every SGLang metric is named `sglang:...`; Prometheus keeps "
                                           "colons for recording rules, but scrapes and queries accept them",
    "metric name should not include type 'histogram'": "sglang:*_tokens_histogram are SGLang's names",
    "metric names should not contain abbreviated units": "sglang:*_memory_usage_gb report GB, as named",
    'non-histogram and non-summary metrics should not have "_count" suffix':
        "sglang:routing_key_*_req_count are gauges of request counts",
    'non-histogram metrics should not have "le" label': "sglang:routing_key_*_req_count gauges bucket "
                                                         "their counts by an `le` label of their own",
}
PROMTOOL_LINT_EXIT = 3  # promtool check metrics: 1 = the exposition does not parse, 3 = lint findings only


def test_the_scrape_passes_promtool(scrape):
    """It parses, and promtool's lint finds only SGLang's accepted naming choices."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: apt-get install prometheus"
    r = subprocess.run([promtool, "check", "metrics"], input=scrape, capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, PROMTOOL_LINT_EXIT), f"promtool could not parse the scrape: {r.stdout}{r.stderr}"
    findings = [line for line in (r.stdout + r.stderr).splitlines() if line.strip()]
    unknown = [f for f in findings if not any(f.endswith(" " + kind) for kind in PROMTOOL_LINT_ACCEPTED)]
    assert not unknown, "promtool found more than SGLang's naming:\n" + "\n".join(unknown)
    assert all(f.startswith("sglang:") for f in findings), findings
