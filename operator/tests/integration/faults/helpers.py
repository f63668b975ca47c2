"""What every fault test checks at its end, and the package whose steps leave a trace.

Each step of the marker package appends one line `<step> <version> <tag>` to a file in the
node's host root when it finishes (after its work, so a step killed part-way leaves nothing),
where `tag` stands for the package's config: a completed stage that ran twice for the same
version and config shows as a repeated line. The same line goes to a second file when the
step begins, so a test can act while a step is known to be running.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import urllib3

from skyhook_dev.harness import WaitTimeout, node_state, node_status, wait_until, watch
from skyhook_operator.kube.client import ApiError, Json
from skyhook_schemas import keys

from ..helpers import SHELLSCRIPT, TEST_LABEL, Cluster, Recording

MARKERS = "/skyhook-fault-markers"
BEGUN = "/skyhook-fault-begun"
PACKAGE = "markers"


def marker_package(version: str = "1.0.0", tag: str = "a", sleep: float = 1) -> dict[str, Any]:
    scripts = {}
    for step in ("apply", "config"):
        line = f"{step} {version} {tag}"
        scripts[f"{step}.sh"] = (
            f"#!/bin/bash\necho '{line}' >> {BEGUN}\nsleep {sleep}\necho '{line}' >> {MARKERS}\n"
        )
        scripts[f"{step}_check.sh"] = f"#!/bin/bash\ngrep -qx '{line}' {MARKERS}\n"
    return {"version": version, "image": SHELLSCRIPT, "configMap": scripts}


def record(cluster: Cluster, scr: str, seconds: float = 900) -> Recording:
    """Like Cluster.record, but each watch starts again (a fresh list) when it breaks, so the
    recording outlives an apiserver restart or an etcd outage."""
    recording = Recording()
    sources = [
        ("node", "/api/v1/nodes", {"labelSelector": f"{TEST_LABEL}={cluster.label}"}),
        ("pod", "/api/v1/pods", {"labelSelector": f"{keys.NAME_LABEL}={scr}"}),
    ]
    synced = [threading.Event() for _ in sources]
    deadline = time.monotonic() + seconds

    def pump(what: str, path: str, query: dict[str, str], flag: threading.Event) -> None:
        while time.monotonic() < deadline:
            try:
                for kind, obj in watch(cluster.kube, path, query, deadline - time.monotonic()):
                    if kind == "SYNCED":
                        flag.set()
                    else:
                        recording.add(what, kind, obj)
            except (ApiError, OSError, urllib3.exceptions.HTTPError):
                time.sleep(0.5)  # the apiserver is down: try again shortly

    for (what, path, query), flag in zip(sources, synced, strict=True):
        threading.Thread(target=pump, args=(what, path, query, flag), daemon=True).start()
    for flag in synced:
        assert flag.wait(30), "watch did not start"
    return recording


def live_stage_pod(cluster: Cluster, scr: str, stage: str) -> Callable[[], Json | None]:
    """A condition: some pod of `scr` at `stage` that exists and is not being deleted."""

    def find() -> Json | None:
        for pod in cluster.pods(scr):
            text = pod["metadata"].get("annotations", {}).get(keys.PACKAGE_ANNOTATION, "{}")
            if f'"stage":"{stage}"' in text and not pod["metadata"].get("deletionTimestamp"):
                return pod
        return None

    return find


def peak_in_progress(recording: Recording, scr: str) -> int:
    """The most nodes the recorded node versions ever showed in progress at once."""
    in_progress: dict[str, bool] = {}
    peak = 0
    for _, kind, node in recording.of("node"):
        name = node["metadata"]["name"]
        in_progress[name] = kind != "DELETED" and node_status(node, scr) in (
            "in_progress",
            "erroring",
        )
        peak = max(peak, sum(in_progress.values()))
    return peak


def marker_lines(cluster: Cluster, node: str) -> list[str]:
    return cluster.host_file(node, MARKERS).splitlines()


def assert_rolled_out(
    cluster: Cluster,
    scr: str,
    recording: Recording,
    *,
    version: str,
    tag: str = "a",
    budget: int,
    timeout: float = 300,
    rerun_allowed: Iterable[str] = (),
) -> None:
    """Every selected node complete with the final spec, no completed stage run twice for the
    same version and config (except on `rerun_allowed` nodes, which lost their state on
    purpose), the budget never exceeded, no node left cordoned or tainted, SCR complete."""
    cluster.wait_complete(scr, timeout=timeout)
    for name in cluster.nodes:
        entry = node_state(cluster.node(name), scr).get(keys.package_key(PACKAGE, version)) or {}
        assert (entry.get("stage"), entry.get("state")) == ("config", "complete"), (name, entry)
        lines = marker_lines(cluster, name)
        assert lines and lines[-1] == f"config {version} {tag}", (name, lines)
        if name not in rerun_allowed:
            repeated = sorted({line for line in lines if lines.count(line) > 1})
            assert not repeated, f"{name}: stages completed twice: {repeated} in {lines}"
    assert_nodes_released(cluster)
    peak = peak_in_progress(recording, scr)
    assert 1 <= peak <= budget, f"peak nodes in progress {peak}, budget {budget}"


def assert_nodes_released(cluster: Cluster) -> None:
    for name in cluster.nodes:
        node = cluster.node(name)
        assert not node["spec"].get("unschedulable"), f"{name} left cordoned"
        ours = [t for t in node["spec"].get("taints") or [] if "skyhook" in t["key"]]
        assert not ours, f"{name} left tainted: {ours}"


def wait_gone(cluster: Cluster, scr: str, timeout: float = 120) -> None:
    def gone() -> bool:
        try:
            cluster.get_skyhook(scr)
        except ApiError as error:
            return error.status == 404
        return False

    wait_until(gone, timeout, f"Skyhook {scr} deleted")


__all__ = ["WaitTimeout", "node_status"]
