"""A real Prometheus (Debian's `prometheus`) on loopback scraping a real kit stack (serve, supervisord,
control API, the SIMULATED stand-in as SGLang) through the shipped prometheus.yml, rules and targets writer:
a good switch, a failing one, then through Prometheus's HTTP API the switch counts, the plan, the
KitSwitchRolledBack alert and every dashboard query. Stands in for `make e2e`'s monitoring profile where
no image registry can be reached. Fails, never skips, without the binary.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.test_monitoring import MON, dashboard, grafana_to_promql, panel_exprs, rules_dir
from testsupport.net import free_port, until
from testsupport.stack import KitStack, stop_group

pytestmark = pytest.mark.stack  # every test here starts a process


def prometheus_bin() -> str:
    found = shutil.which("prometheus")
    assert found, "prometheus is not installed: apt-get install prometheus (.ci/run installs it)"
    return found


def query(url: str, expr: str) -> list[dict]:
    r = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10).json()
    assert r["status"] == "success", (expr, r)
    return r["data"]["result"]


def wait_for(what: str, fn, timeout: float = 30):
    return until(fn, timeout, what)


@pytest.fixture()
def stack(tmp_path: Path):
    s = KitStack(tmp_path, profile="baseline", spec="off").start()
    yield s
    s.stop()


def test_prometheus_scrapes_the_kit_and_fires_on_a_rollback(tmp_path: Path, stack: KitStack):
    prom_port = free_port()
    fleet = tmp_path / "lab.toml"
    fleet.write_text(f'[router]\nurl = "http://127.0.0.1:{free_port()}"\nprometheus = "127.0.0.1:{free_port()}"\n'
                     f'[[host]]\nname = "h0"\nserver = "{stack.server_url}"\ncontrol = "{stack.control_url}"\n')
    targets = tmp_path / "targets"
    proc = subprocess.run([sys.executable, str(MON / "targets.py"), "--fleet", str(fleet), "--out", str(targets)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rules = rules_dir(tmp_path)  # shipped rules + breakeven.yml for custom-ar/eagle3 from bench predict
    cfg = yaml.safe_load((MON / "prometheus.yml").read_text())
    cfg["global"].update(scrape_interval="1s", evaluation_interval="1s")
    cfg["rule_files"] = [str(rules / "*.yml")]
    for job in cfg["scrape_configs"]:
        for sd in job.get("file_sd_configs", []):
            sd["files"] = [str(targets / Path(f).name) for f in sd["files"]]
        for st in job.get("static_configs", []):
            st["targets"] = [f"127.0.0.1:{prom_port}"]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen([prometheus_bin(), f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{prom_port}"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{prom_port}"
    def ready() -> bool:
        try:
            return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            assert prom.poll() is None, (tmp_path / "prometheus.log").read_text()[-3000:]
            return False

    try:
        wait_for("Prometheus ready", ready, 60)
        wait_for("both kit targets up", lambda: len(query(url, 'up{job=~"sglang|kit-control"} == 1')) == 2, 60)
        good = stack.switch("custom-ar", "eagle3").json()
        assert good["outcome"] == "switched", good
        wait_for("the switched count", lambda: query(url, 'kit_switch_total{outcome="switched"} == 1'))
        bad = stack.switch("crashy", "eagle3").json()
        assert bad["outcome"] == "rolled_back", bad
        stack.wait_state({"rolled_back", "serving"})

        # traffic on the server that serves after the rollback, while Prometheus scrapes it
        stop = threading.Event()

        def load() -> None:
            body = {"text": "hello", "sampling_params": {"max_new_tokens": 16}, "stream": True}
            while not stop.is_set():
                with httpx.stream("POST", f"{stack.server_url}/generate", json=body, timeout=30) as r:
                    for _ in r.iter_lines():
                        pass

        workers = [threading.Thread(target=load, daemon=True) for _ in range(2)]
        for w in workers:
            w.start()
        try:
            wait_for("requests counted", lambda: query(url, "rate(sglang:generation_tokens_total[30s]) > 0"), 60)
            rolled = wait_for("kit_switch_total{outcome=rolled_back}",
                              lambda: query(url, 'kit_switch_total{outcome="rolled_back"}'))
            assert [float(r["value"][1]) for r in rolled] == [1.0]
            plan = query(url, "kit_plan_info == 1")
            assert [(p["metric"]["profile"], p["metric"]["spec"], p["metric"]["host"]) for p in plan] == [
                ("custom-ar", "eagle3", "h0")]

            def firing():
                alerts = httpx.get(f"{url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
                return [a for a in alerts if a["labels"]["alertname"] == "KitSwitchRolledBack"
                        and a["state"] == "firing"]
            (alert,) = wait_for("KitSwitchRolledBack firing", firing)
            assert alert["labels"]["host"] == "h0" and alert["labels"]["fleet"] == "lab"

            # the rollback started the server again: the accept length's 10-minute mean (SpeculationNotPaying)
            # is not recorded while its window still holds the server before, though EAGLE-3 generates now
            changed = query(url, 'time() - kit_server_changed_timestamp_seconds{host="h0"} < 600')
            assert len(changed) == 1, changed
            unquiet = ("avg by (fleet, host) (avg_over_time((sglang:spec_accept_length > 0)[10m:])) and on (fleet, host)"
                       " (sum by (fleet, host) (rate(sglang:generation_tokens_total[10m])) > 0)")
            wait_for("the mean the quiet window holds back", lambda: query(url, unquiet), 60)
            time.sleep(3)  # rules are evaluated every second
            assert query(url, "kit:sglang_spec_accept_length:avg10m") == []

            d = dashboard()
            checks = [(t, e) for t, e in panel_exprs(d)] + [(a["name"], a["expr"]) for a in d["annotations"]["list"]
                                                            if "expr" in a]
            empty: list[tuple[str, str]] = []

            def every_query_has_series() -> bool:  # rates need a few scrapes of the traffic first
                empty[:] = [(t, e) for t, e in checks if not query(url, grafana_to_promql(e).replace("[1m]", "[30s]"))]
                return not empty

            try:
                wait_for("every dashboard query with series", every_query_has_series, 60)
            except AssertionError:
                raise AssertionError(f"dashboard queries without series: {empty}") from None
        finally:
            stop.set()
            for w in workers:
                w.join(timeout=35)
    finally:
        stop_group(prom, 10)
        log.close()
