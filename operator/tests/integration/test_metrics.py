"""Metrics and probes of a running operator, read over HTTP as Prometheus and the kubelet would:
upstream's metric lines with upstream's values (printed `2`, not `2.0`) while a rollout runs
and once it completes, no series left behind by a deleted SCR, and probes that say when the
operator is alive and when it has seen the whole cluster."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping

import urllib3

from skyhook_dev.harness import CRD_PATH, OperatorProcess, install_crd, serves, wait_until
from skyhook_schemas import keys

from .helpers import Cluster, agentless

HTTP = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=1.0, read=5.0))
LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def scrape(operator: OperatorProcess) -> list[str]:
    response = HTTP.request("GET", operator.metrics_url)
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return response.data.decode().splitlines()


def printed(lines: list[str], name: str, **labels: str) -> list[str]:
    """The printed values of every `name` series whose labels include `labels`, as text."""
    found = []
    for line in lines:
        match = LINE.match(line)
        if match is None or match["name"] != name:
            continue
        pairs = dict(PAIR.findall(match["labels"] or ""))
        if labels.items() <= pairs.items():
            found.append(match["value"])
    return found


def shows(
    operator: OperatorProcess, expected: Mapping[tuple[str, tuple[tuple[str, str], ...]], str]
) -> Callable[[], bool]:
    """A condition: every (name, labels) series is printed with exactly the expected text."""

    def check() -> bool:
        lines = scrape(operator)
        return all(
            printed(lines, name, **dict(labels)) == [value]
            for (name, labels), value in expected.items()
        )

    return check


def series(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def probe(operator: OperatorProcess, path: str) -> int | None:
    """The probe's HTTP status, or None while nothing listens yet."""
    try:
        return int(HTTP.request("GET", operator.probe_url(path)).status)
    except urllib3.exceptions.HTTPError:
        return None


def wait_ready(operator: OperatorProcess, answers: list[int] | None = None) -> None:
    """Poll `/readyz` until 200, keeping each change of answer in `answers`."""
    seen = [] if answers is None else answers

    def ready() -> bool:
        status = probe(operator, "/readyz")
        if status is not None and (not seen or seen[-1] != status):
            seen.append(status)
        return status == 200

    wait_until(ready, 60, f"/readyz to answer 200 (answers so far: {seen})", interval=0.002)


def test_readiness_waits_for_the_full_view_and_liveness_answers(cluster: Cluster) -> None:
    # Readiness comes once every watched kind has been listed. An operator started before the
    # DeploymentPolicy CRD exists cannot list policies: alive, not ready, until the CRD is
    # installed.
    assert cluster.operator is not None
    cluster.operator.stop()
    crd = f"{CRD_PATH}/{keys.POLICY_PLURAL}.{keys.GROUP}"
    cluster.kube.request("DELETE", crd)
    try:
        policies = cluster.kube.policy_path()
        wait_until(
            lambda: not serves(cluster.kube, policies), 60, "the policy kind no longer served"
        )
        operator = cluster.start_operator(wait_ready=False)
        answers: list[int] = []
        wait_until(lambda: probe(operator, "/healthz") == 200, 60, "/healthz to answer 200")
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            answer = probe(operator, "/readyz")
            if answer is not None and answer not in answers:
                answers.append(answer)
            time.sleep(0.05)
        assert answers == [503]
        # The log names the missing CRD, once however often the LIST is tried again.
        missing = f"{keys.POLICY_PLURAL}.{keys.GROUP} is not served"
        assert operator.log_path.read_text().count(missing) == 1, operator.log_tail()
    finally:
        install_crd(cluster.kube)
    wait_ready(operator, answers)
    assert answers == [503, 200]
    assert probe(operator, "/healthz") == 200
    assert f"{policies} listed again" in operator.log_path.read_text()


def test_rollout_metrics_match_upstream_lines(cluster: Cluster) -> None:
    operator = cluster.operator
    assert operator is not None
    nodes = cluster.add_nodes(2)
    wait_ready(operator)
    cluster.skyhook("metrics", {"dexter": agentless("1.2.3", sleep=3)})
    scr = {"skyhook_name": "metrics"}
    pkg = {**scr, "package_name": "dexter", "package_version": "1.2.3"}
    rollout = {
        **scr,
        "policy_name": "legacy",
        "compartment_name": "__default__",
        "strategy": "fixed",
    }

    # Applying: both nodes in progress at the apply stage (budget 100%).
    wait_until(
        shows(
            operator,
            {
                series("skyhook_status", **scr, status="in_progress"): "1",
                series("skyhook_status", **scr, status="complete"): "0",
                series("skyhook_node_target_count", **scr): "2",
                series("skyhook_node_status_count", **scr, status="in_progress"): "2",
                series("skyhook_package_state_count", **pkg, state="in_progress"): "2",
                series("skyhook_package_stage_count", **pkg, stage="apply"): "2",
                series("skyhook_rollout_matched_nodes", **rollout): "2",
                series("skyhook_rollout_in_progress", **rollout): "2",
                series("skyhook_rollout_completed", **rollout): "0",
            },
        ),
        60,
        "in-progress metrics while apply runs",
        interval=0.2,
    )

    cluster.wait_complete("metrics", timeout=120, nodes=nodes)
    ceiling = cluster.get_skyhook("metrics")["status"]["compartmentStatuses"]["__default__"][
        "ceiling"
    ]
    wait_until(
        shows(
            operator,
            {
                series("skyhook_status", **scr, status="complete"): "1",
                series("skyhook_status", **scr, status="in_progress"): "0",
                series("skyhook_node_status_count", **scr, status="complete"): "2",
                series("skyhook_node_status_count", **scr, status="unknown"): "0",
                series("skyhook_package_state_count", **pkg, state="complete"): "2",
                series("skyhook_package_stage_count", **pkg, stage="config"): "2",
                series("skyhook_package_stage_count", **pkg, stage="apply"): "0",
                series("skyhook_package_restarts_count", **pkg): "0",
                series("skyhook_rollout_ceiling", **rollout): str(ceiling),
                series("skyhook_rollout_in_progress", **rollout): "0",
                series("skyhook_rollout_completed", **rollout): "2",
                series("skyhook_rollout_progress_percent", **rollout): "100",
                series("skyhook_rollout_current_batch", **rollout): "0",
                series("skyhook_rollout_consecutive_failures", **rollout): "0",
                series("skyhook_rollout_should_stop", **rollout): "0",
            },
        ),
        30,
        "complete metrics",
    )
    lines = scrape(operator)
    assert int(printed(lines, "skyhook_operator_pass_duration_seconds_count")[0]) > 0
    # A node's annotations, labels and conditions go out as one patch of nodes/status.
    node_patches = printed(
        lines, "skyhook_operator_api_requests_total", verb="PATCH", resource="nodes/status"
    )
    assert int(node_patches[0]) > 0
    # apply -> config on each node is a hand-off the operator measures.
    assert int(printed(lines, "skyhook_operator_stage_handoff_seconds_count")[0]) >= 1
    assert printed(lines, "skyhook_operator_write_queue_depth") == ["0"]

    cluster.kube.request("DELETE", cluster.kube.skyhook_path("metrics"))
    wait_until(
        lambda: not any('skyhook_name="metrics"' in line for line in scrape(operator)),
        60,
        "every series of the deleted SCR to go",
    )
