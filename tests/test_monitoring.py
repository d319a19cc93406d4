"""docker/monitoring: Prometheus config and rules checked by Debian's promtool, every alert unit-tested on
synthetic series (tests/fixtures/monitoring/alerts.test.yml), the Grafana files, the target and break-even
writers, the compose profile, and the stand-in's metric names against SGLang 0.5.23's own.

promtool is a system package (Debian `prometheus`, installed by .ci/run, named in the README beside make
and patch): without it these tests fail naming it, never skip.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
MON = ROOT / "docker" / "monitoring"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "monitoring"
SGLANG_METRICS = "sglang/srt/observability/metrics_collector.py"
ALERTS = ("KitBackendNotActive", "KitSwitchRolledBack", "KitServerDown", "KitCrashLoop", "KitFleetPlanDrift",
          "SpeculationNotPaying", "SGLangTTFTP99High", "SGLangTPOTP99High")


def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is not installed: apt-get install prometheus (Debian ships promtool in it; .ci/run installs it)"
    return found


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=120)


def predict_json(tmp: Path) -> Path:
    """A real `bench predict --json` result: verify 30 ms + draft 5 ms against 12 ms decode -> break-even 2.9167."""
    out = run(sys.executable, "-m", "bench", "predict", "--verify-ms", "30", "--draft-ms", "5", "--decode-ms", "12", "--accept-len", "3",
              "--json", cwd=ROOT)
    assert out.returncode == 0, out.stderr
    path = tmp / "predict.json"
    path.write_text(out.stdout)
    return path


def write_breakeven(tmp: Path, out: Path, profile: str = "custom-ar", spec: str = "eagle3") -> subprocess.CompletedProcess:
    return run(sys.executable, str(MON / "breakeven.py"), "--profile", profile, "--spec", spec,
               str(predict_json(tmp)), "--out", str(out))


def rules_dir(tmp: Path) -> Path:
    """The shipped rules, with breakeven.yml written from bench predict, in a folder of their own."""
    d = tmp / "rules"
    d.mkdir()
    for f in (MON / "rules").glob("*.yml"):
        shutil.copy(f, d / f.name)
    proc = write_breakeven(tmp, d / "breakeven.yml")
    assert proc.returncode == 0, proc.stderr
    return d


# ---- promtool ------------------------------------------------------------------------------------------
@pytest.mark.stack
def test_shipped_config_and_rules_pass_promtool(tmp_path):
    assert run(promtool(), "check", "config", str(MON / "prometheus.yml")).returncode == 0
    # the same config with the repo's folders where the container mounts them, so its rules are checked too
    cfg = yaml.safe_load((MON / "prometheus.yml").read_text())
    cfg["rule_files"] = [str(MON / "rules" / "*.yml")]
    for job in cfg["scrape_configs"]:
        for sd in job.get("file_sd_configs", []):
            sd["files"] = [str(tmp_path / Path(f).name) for f in sd["files"]]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    proc = run(promtool(), "check", "config", str(tmp_path / "prometheus.yml"))
    assert proc.returncode == 0 and "SUCCESS" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    proc = run(promtool(), "check", "rules", *map(str, sorted((MON / "rules").glob("*.yml"))))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.stack
def test_every_alert_has_a_unit_test_and_they_pass_run_as_documented(tmp_path):
    d = rules_dir(tmp_path)
    proc = run(promtool(), "check", "rules", str(d / "breakeven.yml"))
    assert proc.returncode == 0 and "1 rules found" in proc.stdout, proc.stdout + proc.stderr
    assert (FIXTURES / "breakeven.yml").read_text() == (d / "breakeven.yml").read_text()  # the fixture is bench predict's
    # docs/monitoring.md's command, from the repository root and from elsewhere: rule paths are the fixture's own
    for where in (ROOT, tmp_path):
        proc = run(promtool(), "test", "rules", str((FIXTURES / "alerts.test.yml").relative_to(ROOT))
                   if where == ROOT else str(FIXTURES / "alerts.test.yml"), cwd=where)
        assert proc.returncode == 0 and "SUCCESS" in proc.stdout, proc.stdout + proc.stderr
    defined = {r["alert"] for g in yaml.safe_load((MON / "rules" / "kit.yml").read_text())["groups"]
               for r in g["rules"] if "alert" in r}
    assert defined == set(ALERTS)
    tested = {t["alertname"] for case in yaml.safe_load((FIXTURES / "alerts.test.yml").read_text())["tests"]
              for t in case.get("alert_rule_test", []) if t.get("exp_alerts")}
    assert tested == set(ALERTS)


# ---- the break-even writer -------------------------------------------------------------------------------
@pytest.mark.stack
def test_breakeven_rules_come_from_bench_predict(tmp_path):
    out = tmp_path / "be.yml"
    proc = write_breakeven(tmp_path, out)
    assert proc.returncode == 0, proc.stderr
    rule = yaml.safe_load(out.read_text())["groups"][0]["rules"][0]
    assert rule == {"record": "kit:spec_breakeven_accept_length", "expr": "vector(2.9167)",
                    "labels": {"profile": "custom-ar", "spec": "eagle3"}}


@pytest.mark.stack
def test_breakeven_refuses_bad_input(tmp_path):
    no_baseline = tmp_path / "nobase.json"
    no_baseline.write_text(json.dumps({"breakeven_accept_len": None, "scenarios": []}))
    out = tmp_path / "be.yml"
    for args, message in (
        (["--profile", "custom-ar", str(no_baseline)], "needs a baseline"),
        (["--profile", "../x", str(predict_json(tmp_path))], "not a profile or spec name"),
        (["--profile", "a", str(tmp_path / "missing.json")], "missing.json"),
    ):
        proc = run(sys.executable, str(MON / "breakeven.py"), *args, "--out", str(out))
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not out.exists()


# ---- targets -----------------------------------------------------------------------------------------------
@pytest.mark.stack
def test_local_targets_name_the_compose_server(tmp_path):
    proc = run(sys.executable, str(MON / "targets.py"), "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "sglang.json").read_text()) == [
        {"targets": ["server:30000"], "labels": {"host": "local", "fleet": "local"}}]
    assert json.loads((tmp_path / "kit-control.json").read_text())[0]["targets"] == ["server:30100"]
    assert json.loads((tmp_path / "sglang-router.json").read_text()) == []


@pytest.mark.stack
def test_fleet_targets_list_every_host_and_the_router(tmp_path):
    fleet = tmp_path / "prod.toml"
    fleet.write_text('[router]\nurl = "http://10.0.0.1:30080"\nprometheus = "10.0.0.1:29000"\n'
                     '[[host]]\nname = "gpu-a"\nserver = "http://10.0.0.11:30000"\ncontrol = "http://10.0.0.11:30100"\n'
                     '[[host]]\nname = "gpu-b"\nserver = "http://10.0.0.12:30000/"\ncontrol = "http://10.0.0.12:30100"\n')
    proc = run(sys.executable, str(MON / "targets.py"), "--fleet", str(fleet), "--out", str(tmp_path / "t"))
    assert proc.returncode == 0, proc.stderr
    sglang = json.loads((tmp_path / "t" / "sglang.json").read_text())
    assert sglang == [{"targets": ["10.0.0.11:30000"], "labels": {"host": "gpu-a", "fleet": "prod"}},
                      {"targets": ["10.0.0.12:30000"], "labels": {"host": "gpu-b", "fleet": "prod"}}]
    assert [g["targets"] for g in json.loads((tmp_path / "t" / "kit-control.json").read_text())] == [
        ["10.0.0.11:30100"], ["10.0.0.12:30100"]]
    assert json.loads((tmp_path / "t" / "sglang-router.json").read_text()) == [
        {"targets": ["10.0.0.1:29000"], "labels": {"host": "router", "fleet": "prod"}}]
    fleet.write_text('[router]\nurl = "http://10.0.0.1:30080"\n[[host]]\nname = "a"\nserver = "x"\n')
    bad = run(sys.executable, str(MON / "targets.py"), "--fleet", str(fleet), "--out", str(tmp_path / "u"))
    assert bad.returncode == 2 and str(fleet) in bad.stderr, bad.stderr


# ---- Grafana -------------------------------------------------------------------------------------------------
def dashboard() -> dict:
    return json.loads((MON / "grafana" / "dashboards" / "kit.json").read_text())


def panel_exprs(d: dict) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in d["panels"] for t in p.get("targets", [])]


def test_grafana_is_provisioned_by_file():
    ds = yaml.safe_load((MON / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    prov = yaml.safe_load((MON / "grafana" / "provisioning" / "dashboards" / "kit.yml").read_text())
    assert prov["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    d = dashboard()
    uids = {p["datasource"]["uid"] for p in d["panels"] if "datasource" in p}
    assert uids == {source["uid"]}


def test_dashboard_shows_what_the_brief_names():
    d = dashboard()
    exprs = "\n".join(e for _, e in panel_exprs(d))
    for series in ("sglang:generation_tokens_total", "sglang:time_to_first_token_seconds_bucket",
                   "sglang:request_time_per_output_token_seconds_bucket", "sglang:spec_accept_length",
                   "sglang:num_running_reqs", "kit_server_state", "kit_plan_info", "kit_backend_active"):
        assert series in exprs, series
    for q in ("0.5", "0.99"):
        assert f"histogram_quantile({q}, sum by (le) (rate(sglang:time_to_first_token_seconds_bucket" in exprs
        assert f"histogram_quantile({q}, sum by (le) (rate(sglang:request_time_per_output_token_seconds_bucket" in exprs
    assert any(p["type"] == "state-timeline" and "kit_server_state" in p["targets"][0]["expr"] for p in d["panels"])
    (host,) = d["templating"]["list"]
    assert host["name"] == "host" and host["multi"] and host["includeAll"]
    assert [p["title"] for p in d["panels"] if p.get("repeat") == "host"] == ["Host $host"]
    plan = [a for a in d["annotations"]["list"] if a["name"] == "Plan"]
    assert plan and "kit_plan_info" in plan[0]["expr"] and "{{profile}}" in plan[0]["titleFormat"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))


@pytest.mark.stack
def test_dashboard_queries_parse(tmp_path):
    """Each panel's and annotation's PromQL, with Grafana's variables filled in, in a rule promtool checks."""
    d = dashboard()
    exprs = [e for _, e in panel_exprs(d)] + [a["expr"] for a in d["annotations"]["list"] if "expr" in a]
    rules = [{"record": f"dashboard:q{i}", "expr": grafana_to_promql(e)} for i, e in enumerate(exprs)]
    (tmp_path / "q.yml").write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": rules}]}))
    proc = run(promtool(), "check", "rules", str(tmp_path / "q.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def grafana_to_promql(expr: str, host: str = ".*") -> str:
    return (expr.replace("$__rate_interval", "1m").replace("$__range", "5m").replace("$host", host))


# ---- compose ---------------------------------------------------------------------------------------------------
def test_monitoring_profile_is_opt_in_pinned_and_on_loopback():
    cfg = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    svcs = cfg["services"]
    for name, image in (("prometheus", r"prom/prometheus:v2\.\d+\.\d+"), ("grafana", r"grafana/grafana:11\.\d+\.\d+")):
        assert svcs[name]["profiles"] == ["monitoring"]
        assert re.fullmatch(image, svcs[name]["image"]), svcs[name]["image"]
        assert all(p.startswith("${KIT_BIND_ADDR:-127.0.0.1}:") for p in svcs[name]["ports"])
    mounts = " ".join(svcs["prometheus"]["volumes"])
    for part in ("prometheus.yml", "rules", "targets"):
        assert f"./docker/monitoring/{part}:/etc/prometheus/{part}" in mounts
    assert "profiles" not in svcs["server"]
    text = (ROOT / "Makefile").read_text()
    assert re.search(r"^monitor:.*## ", text, re.M)


# ---- the stand-in speaks SGLang's names ------------------------------------------------------------------------
def sglang_families() -> dict[str, str]:
    """name -> type of every sglang:* family SGLang 0.5.23's metrics_collector.py declares."""
    import sglang

    src = (Path(sglang.__file__).parent / SGLANG_METRICS.removeprefix("sglang/")).read_text()
    out = {}
    for kind, name in re.findall(r"(Counter|Gauge|Histogram|Summary)\(\s*name=\"(sglang:[a-z_A-Z]+)\"", src):
        out[name.removesuffix("_total") if kind == "Counter" else name] = kind.lower()
    return out


def test_standin_metric_names_are_sglangs():
    from testsupport.standin.engine import Engine
    from testsupport.standin.metrics import render_metrics
    from testsupport.standin.server_args import parse_server_argv
    from testsupport.standin.settings import load_settings

    args = parse_server_argv(["--model-path", "/m", "--enable-metrics", "--speculative-algorithm", "EAGLE3",
                  "--speculative-draft-model-path", "/d", "--speculative-num-steps", "3",
                  "--speculative-num-draft-tokens", "4"])
    text = render_metrics(Engine(load_settings({}), args, {}))
    real = sglang_families()
    shown = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    assert shown, text
    for name, kind in shown.items():
        assert real.get(name) == kind, f"{name} ({kind}) is not a {kind} in SGLang 0.5.23's {SGLANG_METRICS}"
    for name in ("sglang:time_to_first_token_seconds", "sglang:request_time_per_output_token_seconds",
                 "sglang:inter_token_latency_seconds", "sglang:spec_accept_length", "sglang:gen_throughput",
                 "sglang:num_running_reqs", "sglang:generation_tokens"):
        assert name in shown, name
    assert 'is_streaming="' in text.split("sglang:time_to_first_token_seconds_bucket", 1)[1].split("\n", 1)[0]


@pytest.mark.parametrize("name", ["sglang:spec_accept_length", "sglang:time_to_first_token_seconds",
                                  "sglang:request_time_per_output_token_seconds", "sglang:inter_token_latency_seconds",
                                  "sglang:gen_throughput", "sglang:num_running_reqs", "sglang:generation_tokens"])
def test_names_the_rules_and_dashboard_use_exist_in_sglang(name):
    assert name in sglang_families()
