"""`skyhook-operator run` as a user starts it: the kubeconfig given only by `--kubeconfig`."""

from __future__ import annotations

from pathlib import Path

from .helpers import Cluster, agentless


def test_kubeconfig_flag_alone_reaches_the_cluster(cluster: Cluster, tmp_path: Path) -> None:
    # No $KUBECONFIG and no ~/.kube/config: kopf's login and our client must both use the flag.
    assert cluster.operator is not None
    cluster.operator.stop()
    home = tmp_path / "home"
    home.mkdir()
    cluster.operator = cluster.start_operator(kubeconfig_flag=True, HOME=str(home))
    cluster.add_nodes(1)
    cluster.skyhook("flag", {"flagged": agentless("1.0.0", sleep=0.2)})
    cluster.wait_complete("flag", timeout=90)
    assert "operator started" in cluster.operator.log_tail(200)
