"""A write the apiserver refuses as invalid (HTTP 422) is reported, not retried every pass.

With the webhooks off (they would refuse the Skyhook itself), a Skyhook whose name is longer
than a label value may be (63 characters) is stored, and the planner decodes it; but its
package ConfigMap carries that name in a label, and the apiserver refuses it. The operator
records the refusal: one Warning Event on the Skyhook naming the ConfigMap and the field, the
condition `skyhook.nvidia.com/WriteRefused` in its status, and the write is not sent again
while the spec stays the same.
"""

from __future__ import annotations

import re
import time
from typing import Any

from skyhook_dev.harness import wait_until
from skyhook_operator.kube.client import Kube
from skyhook_schemas import keys

from .helpers import SHELLSCRIPT, Cluster

NAME = "refused-" + "x" * 60  # a valid object name, too long for a label value
CONDITION = f"{keys.GROUP}/WriteRefused"
SPEC_INVALID = f"{keys.GROUP}/SpecInvalid"
WATCHED_S = 30.0


def refused_applies(kube: Kube, resource: str = "configmaps", verb: str = "APPLY") -> int:
    """Writes of `resource` the apiserver answered 422 so far (its own request counter)."""
    text = kube.get_text("/metrics")
    total = 0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{") and all(
            f'{label}="{value}"' in line
            for label, value in (("code", "422"), ("resource", resource), ("verb", verb))
        ):
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def refused_events(kube: Kube, name: str = NAME) -> list[dict[str, Any]]:
    query = {"fieldSelector": f"involvedObject.kind=Skyhook,involvedObject.name={name}"}
    events = kube.request("GET", kube.namespaced_path("events", "default"), query=query)
    return [e for e in events["items"] if e["reason"] == "WriteRefused"]


def condition(cluster: Cluster, name: str = NAME, kind: str = CONDITION) -> dict[str, Any] | None:
    status = cluster.get_skyhook(name).get("status") or {}
    found = (
        c for c in status.get("conditions") or () if c["type"] == kind and c["status"] == "True"
    )
    return next(found, None)


def test_a_configmap_the_apiserver_refuses_is_reported_once_and_not_retried(
    cluster: Cluster,
) -> None:
    assert cluster.operator is not None
    cluster.operator.stop()
    cluster.operator = cluster.start_operator(ENABLE_WEBHOOKS="false")
    before = refused_applies(cluster.kube)
    package = {
        "name": "tools",
        "version": "1.0.0",
        "image": SHELLSCRIPT,
        "configMap": {"apply.sh": "#!/bin/bash\ntrue\n"},
    }
    cluster.skyhook(NAME, {"tools": package})  # selects no node: the ConfigMap is its one write
    created = time.monotonic()

    found = wait_until(lambda: condition(cluster), 60, "the WriteRefused condition")
    assert found["status"] == "True"
    assert found["reason"] == "WriteRefused"
    configmap = keys.package_configmap_name(NAME, "tools", "1.0.0")
    assert f"ConfigMap skyhook/{configmap}: " in found["message"]
    assert "metadata.labels" in found["message"]
    generation = cluster.get_skyhook(NAME)["metadata"]["generation"]
    assert found["observedGeneration"] == generation

    time.sleep(max(0.0, created + WATCHED_S - time.monotonic()))
    attempts = refused_applies(cluster.kube) - before
    print(f"{attempts} refused ConfigMap writes in {WATCHED_S:.0f} s")
    assert 1 <= attempts <= 2, f"{attempts} refused ConfigMap writes in {WATCHED_S:.0f} s"
    events = refused_events(cluster.kube)
    assert len(events) == 1, events
    (event,) = events
    assert (event["type"], event["count"]) == ("Warning", 1)
    assert re.search(
        rf"ConfigMap skyhook/{configmap}: the apiserver refused metadata\.labels", event["message"]
    )
    assert cluster.get_skyhook(NAME)["metadata"]["generation"] == generation
    assert condition(cluster) == found  # still reported, unchanged


def test_a_spec_the_crd_admits_and_the_operator_cannot_read_touches_no_node(
    cluster: Cluster,
) -> None:
    """With the webhooks off, a package key of one letter passes the CRD, but not the
    operator's reading of the spec (a package name has at least two characters). The finalizer
    is a metadata-only write, so the apiserver takes it (it once rewrote the spec with the name
    filled in, which the CRD's pattern refused, and was sent again every two seconds); the
    status names the field, and no node is touched until the spec changes."""
    assert cluster.operator is not None
    cluster.operator.stop()
    cluster.operator = cluster.start_operator(ENABLE_WEBHOOKS="false")
    (node,) = cluster.add_nodes(1)
    name = "short-key"
    before = refused_applies(cluster.kube, "skyhooks", "PATCH")
    package = {"version": "1.0.0", "image": SHELLSCRIPT}
    cluster.skyhook(name, {"t": package})
    created = time.monotonic()

    invalid = wait_until(lambda: condition(cluster, name, SPEC_INVALID), 60, "SpecInvalid")
    assert "spec.packages.t" in invalid["message"]
    time.sleep(max(0.0, created + WATCHED_S - time.monotonic()))
    assert refused_applies(cluster.kube, "skyhooks", "PATCH") == before, "a write was refused"
    skyhook = cluster.get_skyhook(name)
    assert skyhook["status"]["status"] == "blocked"
    assert skyhook["metadata"]["finalizers"] == [keys.FINALIZER]
    assert skyhook["metadata"]["generation"] == 1
    assert cluster.pods(name) == []
    annotations = cluster.node(node)["metadata"].get("annotations") or {}
    assert keys.node_state_key(name) not in annotations, "the node is not touched"

    cluster.patch_skyhook(name, {"spec": {"packages": {"t": None, "tools": package}}})
    wait_until(
        lambda: condition(cluster, name, SPEC_INVALID) is None, 60, "the SpecInvalid condition gone"
    )
