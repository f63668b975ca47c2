"""A Skyhook's per-node status lists past their size limit: shortened to what a reader needs,
never failing the write, and back to whole once they fit again."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from skyhook_planner.admission import review_skyhook
from skyhook_planner.model import status_size
from skyhook_planner.sim.driver import SETTINGS, Driver, package
from skyhook_schemas.nodestate import COMPLETE, ERRORING, IN_PROGRESS, WAITING

UNINSTALLABLE: dict[str, Any] = {
    "packages": {"tools": package(uninstall={"enabled": True, "apply": False})},
    "interruptionBudget": {"count": 2},
}


def _entries(image: str = "ghcr.io/example/tools") -> dict[str, Any]:
    return {
        "tools|1.0.0": {
            "name": "tools",
            "version": "1.0.0",
            "image": image,
            "containerSHA": "sha256:" + "a" * 64,
            "stage": "post-interrupt",
            "state": "in_progress",
            "restarts": 2,
        }
    }


def _lists_bytes(lists: status_size.NodeLists) -> int:
    return sum(
        len(json.dumps(m, separators=(",", ":")))
        for m in (lists.node_status, lists.node_state, lists.boot_ids)
    )


def test_the_size_estimate_is_never_below_the_real_size_and_close_to_it() -> None:
    statuses = {f"node-{i:05d}": (COMPLETE, IN_PROGRESS, WAITING)[i % 3] for i in range(300)}
    state = {name: _entries() for name in statuses if name[-1] != "7"}
    whole = status_size.fit(statuses, state, {}, limit=10**9)
    real = _lists_bytes(whole)
    estimate = sum(status_size.node_bytes(n, s, state.get(n)) for n, s in statuses.items())
    assert real <= estimate <= real * 1.2


def test_lists_that_fit_are_written_whole() -> None:
    statuses = {"a": COMPLETE, "b": WAITING}
    lists = status_size.fit(statuses, {"a": _entries()}, {"a": "1", "b": "2"}, limit=10_000)
    assert not lists.shortened
    assert dict(lists.node_status) == statuses
    assert set(lists.boot_ids) == {"a", "b"}


def test_past_the_limit_the_lists_keep_the_pressing_nodes_and_every_package_count() -> None:
    statuses = {f"n{i:03d}": COMPLETE for i in range(200)}
    statuses |= {"a-late": WAITING, "m-busy": IN_PROGRESS, "z-broken": ERRORING}
    state = {name: _entries() for name in statuses}
    boot_ids = {name: f"boot-{name}" for name in statuses}
    lists = status_size.fit(statuses, state, boot_ids, limit=2_000)
    assert lists.shortened
    assert _lists_bytes(lists) <= 2_000
    # No complete node; the erroring and in-progress ones first.
    assert list(lists.node_status) == ["z-broken", "m-busy", "a-late"]
    assert set(lists.node_state) == {"z-broken", "m-busy", "a-late"}
    # The planner reads back the boot id only of a node that may be in an interrupt.
    assert set(lists.boot_ids) == {"z-broken", "m-busy"}
    assert dict(lists.package_nodes or {}) == {"tools|1.0.0": 203}
    assert "3 of 203 nodes" in lists.message()


def test_the_most_pressing_nodes_are_listed_when_not_even_the_pending_ones_fit() -> None:
    statuses = {f"w{i:03d}": WAITING for i in range(100)} | {"z-broken": ERRORING}
    lists = status_size.fit(statuses, {}, {}, limit=400)
    assert lists.shortened
    assert next(iter(lists.node_status)) == "z-broken"
    assert 1 < len(lists.node_status) < 100
    assert _lists_bytes(lists) <= 400


def test_every_boot_id_is_kept_when_a_reboot_of_a_complete_node_reapplies_it() -> None:
    statuses = {f"n{i:03d}": COMPLETE for i in range(100)}
    boot_ids = {name: f"boot-{name}" for name in statuses}
    lists = status_size.fit(statuses, {}, boot_ids, limit=1_000, every_boot_id=True)
    assert lists.shortened
    assert lists.boot_ids == boot_ids


def _driver(nodes: int, limit: int) -> Driver:
    return Driver(nodes, settings=replace(SETTINGS, status_node_lists_bytes=limit))


def test_a_rollout_past_the_limit_completes_with_a_shortened_status_then_whole_again() -> None:
    d = _driver(12, 600)
    d.sim.add_skyhook("scr", UNINSTALLABLE)
    d.run()
    status = d.status("scr")
    assert status["status"] == COMPLETE
    assert status["completeNodes"] == "12/12"
    assert status["nodeStatus"] == {}  # every node complete: none listed
    assert status["nodeState"] == {}
    assert status["nodesPerPackage"] == {"tools|1.0.0": 12}
    shortened = [
        c for c in status["conditions"] if c["type"] == status_size.CONDITION_NODE_LISTS_SHORTENED
    ]
    assert shortened and shortened[0]["status"] == "True"
    assert "0 of 12 nodes" in shortened[0]["message"]
    # The nodes keep every record: nothing was lost by shortening the status.
    assert all(d.node_status("scr", node) == COMPLETE for node in d.sim.nodes)

    # A larger limit: the lists are whole again, the count and condition gone.
    d.settings = replace(d.settings, status_node_lists_bytes=status_size.NODE_LISTS_BYTES)
    d.sim.skyhooks["scr"]["metadata"]["generation"] += 1
    d.run()
    status = d.status("scr")
    assert set(status["nodeStatus"]) == set(d.sim.nodes)
    assert set(status["nodeState"]) == set(d.sim.nodes)
    assert "nodesPerPackage" not in status
    assert all(
        c["type"] != status_size.CONDITION_NODE_LISTS_SHORTENED for c in status["conditions"]
    )


def test_removing_an_installed_uninstallable_package_is_refused_from_a_shortened_status() -> None:
    d = _driver(12, 600)
    d.sim.add_skyhook("scr", UNINSTALLABLE)
    d.run()
    old = d.sim.skyhooks["scr"]
    assert old["status"]["nodeState"] == {}
    new = {**old, "spec": {**old["spec"], "packages": {}}}
    verdict = review_skyhook("UPDATE", new, old, ())
    assert not verdict.allowed
    assert "tools" in verdict.message


def test_a_blocked_skyhook_counts_its_complete_nodes_from_the_nodes_not_the_short_lists() -> None:
    d = _driver(12, 600)
    d.sim.add_skyhook("scr", UNINSTALLABLE)
    d.run()
    assert d.status("scr")["nodeStatus"] == {}
    spec = d.sim.skyhooks["scr"]["spec"]
    del spec["interruptionBudget"]
    spec["deploymentPolicy"] = "missing"
    d.sim.skyhooks["scr"]["metadata"]["generation"] += 1
    d.step()
    status = d.status("scr")
    assert status["status"] == "blocked"
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert "12/12 nodes complete" in ready["message"], ready["message"]
