"""The generation a user reads after creating a Skyhook, with and without the webhooks: the
mutating webhook stores the spec in the form it is read in (each package named by its key,
images without a tag); without it the spec stays as written. The operator's finalizer is a
metadata-only write, as upstream's newest makes it: the generation stays 1 either way."""

from __future__ import annotations

from skyhook_schemas import keys

from .helpers import SHELLSCRIPT, Cluster, agentless


def tagged_package() -> dict:
    package = agentless("1.0.0", sleep=0.1)
    package["image"] = f"{SHELLSCRIPT}:1.0.0"
    return {"tools": package}


def test_a_new_skyhook_is_stored_normalised_with_and_without_webhooks(cluster: Cluster) -> None:
    cluster.add_nodes(1)
    cluster.skyhook("hooked", tagged_package())
    cluster.wait_complete("hooked", timeout=120)
    stored = cluster.get_skyhook("hooked")
    assert stored["spec"]["packages"]["tools"]["name"] == "tools"
    assert stored["spec"]["packages"]["tools"]["image"] == SHELLSCRIPT
    assert stored["metadata"]["generation"] == 1
    assert stored["status"]["observedGeneration"] == 1

    assert cluster.operator is not None
    cluster.operator.stop()
    cluster.operator = cluster.start_operator(ENABLE_WEBHOOKS="false")
    cluster.skyhook("plain", tagged_package())
    cluster.wait_complete("plain", timeout=120)
    stored = cluster.get_skyhook("plain")
    assert stored["metadata"]["finalizers"] == [keys.FINALIZER]
    assert "name" not in stored["spec"]["packages"]["tools"]
    assert stored["spec"]["packages"]["tools"]["image"] == f"{SHELLSCRIPT}:1.0.0"
    assert stored["metadata"]["generation"] == 1
    assert stored["status"]["observedGeneration"] == 1
