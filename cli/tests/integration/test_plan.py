"""`plan` on the sandbox: it writes nothing, and the operator then takes the nodes in the
order it predicted."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch

from skyhook_schemas import keys

from ..conftest import NAMESPACE, TEST_LABEL, Result, agentless, wait_for

pytestmark = pytest.mark.sandbox

Cli = Callable[..., Result]


def versions(core: client.CoreV1Api, names: list[str]) -> dict[str, str]:
    return {name: core.read_node(name).metadata.resource_version for name in names}


def our_pods(core: client.CoreV1Api, label: str) -> list[str]:
    selector = f"{keys.NAME_LABEL}={label}"
    return [
        p.metadata.name for p in core.list_namespaced_pod(NAMESPACE, label_selector=selector).items
    ]


def test_plan_by_name_writes_nothing(
    *,
    cli: Cli,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    nodes: Callable[[int], list[str]],
    skyhooks: Callable[..., Any],
    label: str,
) -> None:
    names = nodes(3)
    created = skyhooks(label, {"pkg": agentless("1.0.0")}, interruptionBudget={"count": 1})
    before = versions(core, names)

    shown = cli("plan", label, "-o", "json", "--stage-seconds", "5")
    assert shown.code == 0, shown.err
    forecast = json.loads(shown.out)
    assert [w["nodes"] for w in forecast["waves"]] == [[n] for n in names]
    assert forecast["estimatedSeconds"] == 3 * 2 * 5  # apply and config on each node in turn
    assert forecast["blocked"] == []

    table = cli("plan", label, "--stage-seconds", "5")
    assert table.code == 0, table.err
    assert "Estimated duration: 30s" in table.out
    assert f"Wave 1 (starts at +0s): {names[0]}" in table.out

    skyhook = custom.get_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PLURAL, label)
    assert skyhook["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert versions(core, names) == before
    assert our_pods(core, label) == []

    missing = cli("plan", "no-such-skyhook")
    assert missing.code == 1
    assert 'skyhooks.skyhook.nvidia.com "no-such-skyhook" not found' in missing.err
    assert cli("plan").code == 2


@pytest.mark.slow
def test_plan_predicts_the_order_the_operator_takes(
    *,
    cli: Cli,
    core: client.CoreV1Api,
    custom: client.CustomObjectsApi,
    nodes: Callable[[int], list[str]],
    skyhooks: Callable[..., Any],
    operator: Any,
    label: str,
    tmp_path: Path,
) -> None:
    names = nodes(6)
    spec = {
        "nodeSelectors": {"matchLabels": {TEST_LABEL: label}},
        "interruptionBudget": {"count": 2},
        "packages": {"pkg": agentless("1.0.0")},
    }
    manifest = tmp_path / "skyhook.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": keys.API_VERSION,
                "kind": keys.KIND,
                "metadata": {"name": label},
                "spec": spec,
            }
        )
    )
    before = versions(core, names)
    shown = cli("plan", "-f", str(manifest), "-o", "json")
    assert shown.code == 0, shown.err
    predicted = [set(w["nodes"]) for w in json.loads(shown.out)["waves"]]
    assert [len(w) for w in predicted] == [2, 2, 2]
    assert versions(core, names) == before
    with pytest.raises(client.ApiException):  # planning from a file does not apply it
        custom.get_cluster_custom_object(keys.GROUP, keys.VERSION, keys.PLURAL, label)

    # Roll out for real, then replay the pod events since just before the Skyhook was
    # created: the order in which nodes got their first stage pod.
    since = core.list_namespaced_pod(NAMESPACE, limit=1).metadata.resource_version
    skyhooks(label, spec["packages"], interruptionBudget={"count": 2})
    status_key = keys.node_status_key(label)
    wait_for(
        lambda: all(
            (core.read_node(n).metadata.annotations or {}).get(status_key) == "complete"
            for n in names
        ),
        240,
        "the rollout to complete on every node",
    )
    started: list[str] = []
    replay = watch.Watch()
    for event in replay.stream(
        core.list_namespaced_pod,
        NAMESPACE,
        label_selector=f"{keys.NAME_LABEL}={label}",
        resource_version=since,
        timeout_seconds=30,
    ):
        node = event["object"].spec.node_name
        if event["type"] == "ADDED" and node not in started:
            started.append(node)
        if len(started) == len(names):
            replay.stop()
    assert sorted(started) == names
    actual, rest = [], list(started)
    for wave in predicted:
        actual.append(set(rest[: len(wave)]))
        rest = rest[len(wave) :]
    assert actual == predicted
