"""The monitoring the chart ships (chart/files/monitoring/, linked from docs/monitoring/),
checked with the real Prometheus tools (built from the Go module proxy and cached,
ci/_prometheus.py).

- The alert rules pass `promtool check rules`, and `promtool test rules` runs a firing and a
  quiet case for every alert (ci/tests/data/prometheus-rules-test.yaml).
- The chart renders the dashboard ConfigMap and the PrometheusRule from those files, only when
  asked.
- On the sandbox, a real Prometheus scrapes the operator through a small rollout: every
  dashboard panel's query returns series, and the rules load and evaluate without error.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from skyhook_dev.harness import (
    OperatorProcess,
    apply_skyhook,
    ensure_namespace,
    install_crd,
    load_manifest,
    wait_until,
)
from skyhook_operator.kube.client import connect
from skyhook_sandbox.processes import free_port
from skyhook_sandbox.sandbox import Sandbox

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "chart"
MONITORING = CHART / "files" / "monitoring"
DASHBOARD = MONITORING / "grafana-dashboard.json"
RULES = MONITORING / "prometheus-rules.yaml"
RULES_TESTS = Path(__file__).with_name("data") / "prometheus-rules-test.yaml"
DEMO_SCR = REPO / "dev" / "src" / "skyhook_dev" / "demo-scr.yaml"
sys.path.insert(0, str(REPO / "ci"))
from _helm import ensure_helm  # noqa: E402
from _prometheus import ensure_prometheus_tools  # noqa: E402

Obj = dict[str, Any]


@pytest.fixture(scope="session")
def say(pytestconfig: pytest.Config) -> Callable[[str], None]:
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")

    def _say(line: str) -> None:  # build progress reaches the terminal even under capture
        with capture.global_and_fixture_disabled():
            print(f"[test_monitoring] {line}", file=sys.stderr, flush=True)

    return _say


@pytest.fixture(scope="session")
def prometheus_tools(say: Callable[[str], None]) -> dict[str, Path]:
    return ensure_prometheus_tools(say)


def alerts() -> list[Obj]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


# --- the rule file, with promtool --------------------------------------------------------------


def test_rules_pass_promtool_check(prometheus_tools: dict[str, Path]) -> None:
    result = subprocess.run(
        [str(prometheus_tools["promtool"]), "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in result.stdout + result.stderr


def test_rules_unit_tests_pass(prometheus_tools: dict[str, Path]) -> None:
    result = subprocess.run(
        [str(prometheus_tools["promtool"]), "test", "rules", str(RULES_TESTS)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_unit_test() -> None:
    suite = yaml.safe_load(RULES_TESTS.read_text())
    assert [(RULES_TESTS.parent / path).resolve() for path in suite["rule_files"]] == [RULES]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in suite["tests"]:
        for check in case.get("alert_rule_test", []):
            expected = check.get("exp_alerts") or []
            if not expected:
                # Quiet on nothing proves nothing: the case feeds the alert's metrics.
                assert case.get("input_series"), f"{case['name']}: quiet on no input series"
                quiet.add(check["alertname"])
            elif all(
                alert.get("exp_labels") and alert.get("exp_annotations") for alert in expected
            ):
                firing.add(check["alertname"])
    names = {rule["alert"] for rule in alerts()}
    assert names - firing == set(), "alerts without a firing case checking labels and annotations"
    assert names - quiet == set(), "alerts without a case where they stay quiet"
    assert (firing | quiet) - names == set(), "cases for alerts the rule file does not have"


# --- the chart ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def render(say: Callable[[str], None]) -> Callable[..., list[Obj]]:
    helm = ensure_helm(say)

    def _render(*sets: str, fails: bool = False) -> Any:
        args = [str(helm), "template", "sky", str(CHART), "--namespace", "skyhook"]
        for value in ("webhook.enable=false", *sets):
            args += ["--set", value]
        result = subprocess.run(args, capture_output=True, text=True)
        if fails:
            assert result.returncode != 0, f"helm accepted {sets}"
            return result.stderr
        assert result.returncode == 0, result.stderr
        return [doc for doc in yaml.safe_load_all(result.stdout) if doc]

    return _render


def monitoring_objects(documents: list[Obj]) -> dict[str, Obj]:
    return {
        doc["kind"]: doc
        for doc in documents
        if doc["kind"] == "PrometheusRule"
        or (doc["kind"] == "ConfigMap" and doc["metadata"]["name"].endswith("-dashboard"))
    }


def test_chart_ships_no_dashboard_or_rules_unless_asked(render: Callable[..., list[Obj]]) -> None:
    assert monitoring_objects(render()) == {}


def test_chart_dashboard_is_the_file_labelled_for_grafanas_sidecar(
    render: Callable[..., list[Obj]],
) -> None:
    default = monitoring_objects(render("metrics.dashboard.enabled=true"))["ConfigMap"]
    assert default["metadata"]["namespace"] == "skyhook"
    assert default["metadata"]["labels"]["grafana_dashboard"] == "1"
    (text,) = default["data"].values()
    assert json.loads(text) == json.loads(DASHBOARD.read_text())

    chosen = monitoring_objects(
        render(
            "metrics.dashboard.enabled=true",
            "metrics.dashboard.label=team_dashboards",
            "metrics.dashboard.labelValue=skyhook",
            "metrics.dashboard.namespace=monitoring",
            "metrics.dashboard.annotations.grafana_folder=Skyhook",
        )
    )["ConfigMap"]
    assert chosen["metadata"]["namespace"] == "monitoring"
    assert chosen["metadata"]["labels"]["team_dashboards"] == "skyhook"
    assert "grafana_dashboard" not in chosen["metadata"]["labels"]
    assert chosen["metadata"]["annotations"] == {"grafana_folder": "Skyhook"}


def test_chart_prometheus_rule_holds_the_rule_files_groups(
    render: Callable[..., list[Obj]],
) -> None:
    rule = monitoring_objects(
        render(
            "metrics.prometheusRule.enabled=true",
            "metrics.prometheusRule.labels.release=kube-prometheus-stack",
            "metrics.prometheusRule.namespace=monitoring",
        )
    )["PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


@pytest.mark.parametrize("shipped", ["dashboard", "prometheusRule"])
def test_chart_refuses_monitoring_without_the_skyhook_metrics(
    render: Callable[..., Any], shipped: str
) -> None:
    nodewright_only = ("apiGroup=nodewright.nvidia.com", "metrics.publishLegacy=false")
    error = render(*nodewright_only, f"metrics.{shipped}.enabled=true", fails=True)
    assert f"metrics.{shipped}.enabled: its queries read skyhook_* metrics" in error
    assert monitoring_objects(
        render("apiGroup=nodewright.nvidia.com", f"metrics.{shipped}.enabled=true")
    )


def test_docs_link_to_the_charts_files() -> None:
    docs = REPO / "docs" / "monitoring"
    for shipped in (DASHBOARD, RULES):
        link = docs / shipped.name
        assert link.is_symlink() and link.resolve() == shipped, f"{link} is not a link to {shipped}"


# --- a real Prometheus scraping the operator through a rollout ---------------------------------

GRAFANA_INTERVALS = {"$__rate_interval": "1m", "$__interval": "15s", "$__range": "5m"}
SCRAPE_INTERVAL = "1s"
SKYHOOKS = "skyhooks.skyhook.nvidia.com"
# A namespace of its own: the operator starting there finds no webhook Secret yet (a GET
# answered 404), so skyhook_operator_api_errors_total, which the alerts read, has series.
OPERATOR_NAMESPACE = "skyhook-monitoring"


def panel_queries(dashboard: Obj) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel, rows' nested panels included."""
    found: list[tuple[str, str]] = []

    def visit(panels: list[Obj]) -> None:
        for panel in panels:
            found.extend(
                (panel.get("title", ""), target["expr"])
                for target in panel.get("targets", [])
                if target.get("expr")
            )
            visit(panel.get("panels", []))

    visit(dashboard["panels"])
    return found


def with_variables(query: str, variables: dict[str, str]) -> str:
    """The query as Grafana sends it: its `$name`, `${name}` and `[[name]]` replaced."""
    values = {**GRAFANA_INTERVALS, **{f"${name}": value for name, value in variables.items()}}

    def value(match: re.Match[str]) -> str:
        name = "$" + (match.group(1) or match.group(2) or match.group(3))
        if name not in values:
            raise AssertionError(f"{query!r} uses {name}, which the dashboard does not define")
        return values[name]

    return re.sub(r"\$\{(\w+)\}|\[\[(\w+)\]\]|\$(\w+)", value, query)


class Prometheus:
    """A Prometheus server in its own process group, scraping `target` every second."""

    def __init__(self, binary: Path, work: Path, target: str) -> None:
        self.url = f"http://127.0.0.1:{free_port()}"
        config = {
            "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [
                {"job_name": "skyhook-operator", "static_configs": [{"targets": [target]}]}
            ],
        }
        (work / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = work / "prometheus.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    str(binary),
                    f"--config.file={work / 'prometheus.yml'}",
                    f"--storage.tsdb.path={work / 'data'}",
                    f"--web.listen-address={self.url.removeprefix('http://')}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def get(self, path: str, **query: str) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(query)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as error:
            body = json.load(error)
        assert body["status"] == "success", f"{path} {query}: {body}"
        return body["data"]

    def ready(self) -> bool:
        assert self.process.poll() is None, f"prometheus exited:\n{self.log.read_text()[-2000:]}"
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


def quick_demo(name: str, label: tuple[str, str]) -> Obj:
    """dev's demo Skyhook (the shellscript package, every stage), without its sleeps."""
    manifest = load_manifest(DEMO_SCR)
    manifest["metadata"]["name"] = name
    manifest["spec"]["nodeSelectors"] = {"matchLabels": dict([label])}
    for package in manifest["spec"]["packages"].values():
        package["configMap"] = {
            step: "\n".join(line for line in script.splitlines() if not line.startswith("sleep"))
            for step, script in package["configMap"].items()
        }
    return manifest


def kubectl(kubeconfig: Path, *args: str) -> str:
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True
    )
    assert result.returncode == 0, f"kubectl {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.fixture
def scraped_rollout(
    sandbox: Sandbox,
    sandbox_nodes: Callable[..., list[str]],
    prometheus_tools: dict[str, Path],
    tmp_path: Path,
) -> Iterator[tuple[Prometheus, str]]:
    """A real Prometheus that scraped the operator through a finished two-node rollout, and
    the Skyhook's name."""
    kube = connect(str(sandbox.kubeconfig))
    install_crd(kube)
    ensure_namespace(kube, OPERATOR_NAMESPACE)
    operator = OperatorProcess(
        sandbox.kubeconfig,
        tmp_path / "operator.log",
        env={"SKYHOOK_NAMESPACE": OPERATOR_NAMESPACE, "SKYHOOK_RETRY_INTERVAL": "1"},
    ).start()
    prometheus: Prometheus | None = None
    name = "monitored"
    try:
        operator.wait_ready()
        assert not operator.metrics_secure  # the harness serves plain HTTP unless asked
        prometheus = Prometheus(prometheus_tools["prometheus"], tmp_path, operator.metrics_address)
        wait_until(prometheus.ready, 60, "Prometheus ready")
        label = ("skyhook-monitoring", "yes")
        sandbox_nodes(2, labels=dict([label]))
        apply_skyhook(kube, quick_demo(name, label))
        status = ("get", SKYHOOKS, name, "-o", "jsonpath={.status.status}")
        wait_until(
            lambda: kubectl(sandbox.kubeconfig, *status) == "complete",
            300,
            f"Skyhook {name} complete",
            interval=1,
        )
        time.sleep(5)  # a few scrapes of the finished rollout
        yield prometheus, name
    finally:
        if prometheus is not None:
            prometheus.stop()
        # While the operator runs, to remove its finalizer: no Skyhook is left to later tests.
        kubectl(sandbox.kubeconfig, "delete", SKYHOOKS, name, "--ignore-not-found", "--timeout=60s")
        operator.stop()
        kube.close()
        if prometheus is not None:
            print(f"--- prometheus log (tail) ---\n{prometheus.log.read_text()[-3000:]}")
        print(f"--- operator log (tail) ---\n{operator.log_tail()}")


@pytest.mark.sandbox
def test_every_dashboard_panel_and_rule_works_on_a_scraped_rollout(
    scraped_rollout: tuple[Prometheus, str],
) -> None:
    prometheus, name = scraped_rollout
    targets = prometheus.get("/api/v1/targets")["activeTargets"]
    assert [t["health"] for t in targets] == ["up"], targets

    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    # The Skyhook picker lists the Skyhook: label_values(skyhook_status, skyhook_name).
    picker = re.fullmatch(r"label_values\((\w+), (\w+)\)", variables["skyhook"]["definition"])
    assert picker, variables["skyhook"]["definition"]
    metric, label = picker.groups()
    assert name in prometheus.get(f"/api/v1/label/{label}/values", **{"match[]": metric})

    empty = []
    for title, query in panel_queries(dashboard):
        promql = with_variables(query, {"skyhook": re.escape(name), "datasource": ""})
        result = prometheus.get("/api/v1/query", query=promql)["result"]
        if not result:
            empty.append(f"{title}: {promql}")
    assert not empty, "dashboard panels whose query returns no series:\n" + "\n".join(empty)

    groups = prometheus.get("/api/v1/rules")["groups"]
    loaded = {rule["name"]: rule for group in groups for rule in group["rules"]}
    assert set(loaded) == {rule["alert"] for rule in alerts()}

    # Evaluated (health "unknown" until the first evaluation) without error.
    def evaluated() -> list[Obj]:
        rules = [r for g in prometheus.get("/api/v1/rules")["groups"] for r in g["rules"]]
        return rules if all(r["health"] != "unknown" for r in rules) else []

    for rule in wait_until(evaluated, 30, "every rule evaluated once"):
        assert (rule["health"], rule.get("lastError", "")) == ("ok", ""), rule
    for rule in alerts():
        prometheus.get("/api/v1/query", query=rule["expr"])  # parses and evaluates
        # Every metric the alert reads is one the operator serves.
        for selector in selectors(prometheus.get("/api/v1/parse_query", query=rule["expr"])):
            assert prometheus.get("/api/v1/series", **{"match[]": selector}), (
                f"{rule['alert']} reads {selector}, which the operator does not serve"
            )


def selectors(node: Any) -> list[str]:
    """`{__name__="..."}` of every metric a parsed query (parse_query's tree) selects."""
    found: list[str] = []
    if isinstance(node, dict):
        if node.get("type") in {"vectorSelector", "matrixSelector"} and node.get("name"):
            found.append(f'{{__name__="{node["name"]}"}}')
        for child in node.values():
            found += selectors(child)
    elif isinstance(node, list):
        for child in node:
            found += selectors(child)
    return sorted(set(found))
