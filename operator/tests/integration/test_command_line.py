"""`skyhook-operator run` as a user starts it: the kubeconfig given only by `--kubeconfig`,
stopped with Ctrl-C (SIGINT), and refusing to start half-way, saying why, when a port is taken
or the webhook certificate is missing."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path

from skyhook_dev.harness import OperatorProcess

from .helpers import Cluster, agentless


def test_kubeconfig_flag_alone_reaches_the_cluster(cluster: Cluster, tmp_path: Path) -> None:
    # No $KUBECONFIG and no ~/.kube/config: the client must use the flag.
    assert cluster.operator is not None
    cluster.operator.stop()
    home = tmp_path / "home"
    home.mkdir()
    cluster.operator = cluster.start_operator(kubeconfig_flag=True, HOME=str(home))
    cluster.add_nodes(1)
    cluster.skyhook("flag", {"flagged": agentless("1.0.0", sleep=0.2)})
    cluster.wait_complete("flag", timeout=90)
    assert "operator started" in cluster.operator.log_tail(200)


def test_sigint_stops_the_operator_cleanly(cluster: Cluster) -> None:
    operator = cluster.operator
    assert operator is not None and operator.process is not None
    operator.process.send_signal(2)  # SIGINT, as Ctrl-C sends it
    assert operator.process.wait(30) == 0, operator.log_tail()
    tail = operator.log_tail(100)
    assert "SIGINT received" in tail and "operator stopped" in tail, tail


def test_upstream_json_logging_makes_every_line_json(cluster: Cluster) -> None:
    """LOG_ENCODER=json as upstream's chart sets it: a log pipeline reads each line as a zap
    entry, the startup, a rollout's passes and the stop included."""
    assert cluster.operator is not None
    cluster.operator.stop()
    cluster.operator = cluster.start_operator(
        log_name="json.log", LOG_ENCODER="json", LOG_TIME_ENCODER="epoch"
    )
    cluster.add_nodes(1)
    cluster.skyhook("jsonlog", {"logged": agentless("1.0.0", sleep=0.2)})
    cluster.wait_complete("jsonlog", timeout=90)
    cluster.operator.stop()
    lines = [line for line in cluster.operator.log_tail(10_000).splitlines() if line.strip()]
    entries = [json.loads(line) for line in lines]
    messages = [e["msg"] for e in entries if e["logger"].startswith("skyhook_operator")]
    assert any(m.startswith("operator started") for m in messages), messages[:5]
    assert any(m.startswith("pass: ") for m in messages), messages[:20]
    assert all(isinstance(e["ts"], float) and e["level"] in {"info", "warn"} for e in entries)


def exited(start: Callable[..., OperatorProcess], **env: str) -> tuple[int, str]:
    """Start an operator expected to refuse to start: its exit code and its log."""
    operator = start(wait_ready=False, log_name="refused.log", **env)
    assert operator.process is not None
    code = operator.process.wait(60)
    return code, operator.log_tail(60)


def test_a_port_in_use_is_named_and_the_operator_exits(cluster: Cluster) -> None:
    assert cluster.operator is not None
    cluster.operator.stop()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, log = exited(cluster.start_operator, SKYHOOK_PROBE_PORT=f"127.0.0.1:{port}")
    assert code == 1, log
    assert "cannot serve metrics on '" in log and f"or probes on '127.0.0.1:{port}'" in log, log
    assert "address already in use" in log.lower(), log
    assert "operator started" not in log, log


def test_missing_webhook_certificate_files_are_named_and_the_operator_exits(
    cluster: Cluster, tmp_path: Path
) -> None:
    assert cluster.operator is not None
    cluster.operator.stop()
    empty = tmp_path / "no-certs"
    empty.mkdir()
    code, log = exited(
        cluster.start_operator,
        SKYHOOK_WEBHOOK_CERTS="cert-manager",
        SKYHOOK_WEBHOOK_CERT_DIR=str(empty),
    )
    assert code == 1, log
    assert f"admission webhooks: no tls.crt and tls.key in {empty}" in log, log
    assert "(cert-manager mode: is the certificate Secret mounted there?)" in log, log
