"""Table tests for the small planner modules: budget, interrupts, stages, results, drain."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from skyhook_planner.model import status as statuses
from skyhook_planner.model.snapshot import ContainerStatusView, ContainerView, NodeView, PodView
from skyhook_planner.model.spec import Budget, Interrupt, Package
from skyhook_planner.model.vocabulary import LabelSelector
from skyhook_planner.rules import budget, drain, interrupts, results, stages
from skyhook_schemas.nodestate import PackageEntry

Pkg = Package


@pytest.mark.parametrize(
    ("given", "nodes", "ceiling"),
    [
        pytest.param(Budget(percent=20), 2, 1, id="20%-of-2"),
        pytest.param(Budget(percent=20), 6, 1, id="20%-of-6"),
        pytest.param(Budget(percent=20), 10, 2, id="20%-of-10"),
        pytest.param(Budget(percent=20), 15, 3, id="20%-of-15"),
        pytest.param(Budget(percent=0), 15, 1, id="0%-is-1"),
        pytest.param(Budget(count=0), 6, 1, id="count-0-is-1"),
        pytest.param(Budget(count=2), 6, 2, id="count-2-of-6"),
        pytest.param(Budget(count=9), 6, 6, id="count-capped"),
        pytest.param(Budget(percent=29), 100, 28, id="float-quirk-29%"),
        pytest.param(Budget(percent=58), 50, 28, id="float-quirk-58%"),
        pytest.param(Budget(), 7, 7, id="default-100%"),
        pytest.param(Budget(percent=50), 0, 1, id="no-nodes"),
    ],
)
def test_ceiling(given: Budget, nodes: int, ceiling: int) -> None:
    assert budget.ceiling(given, nodes) == ceiling


def test_reported_ceiling_uses_upstream_formula() -> None:
    assert budget.reported_ceiling(Budget(count=3), 6) == 3
    assert budget.reported_ceiling(Budget(count=9), 6) == 9
    assert budget.reported_ceiling(Budget(percent=50), 0) == 0


def test_admit_keeps_occupied_slots() -> None:
    assert budget.admit(["a", "b"], ["c", "d", "e"], 3) == (["c"], ["d", "e"])
    assert budget.admit(["a", "b", "c"], ["d"], 2) == ([], ["d"])


def p(name: str, interrupt: Interrupt | None = None, **extra: object) -> Package:
    return Package(name=name, version="1.0.0", image="img", interrupt=interrupt, **extra)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("packages", "merged", "chosen"),
    [
        pytest.param(
            [
                p("aa", Interrupt("service", ("cron",))),
                p("bb", Interrupt("service", ("containerd", "foobar"))),
            ],
            Interrupt("service", ("containerd", "cron", "foobar")),
            "aa",
            id="services-union",
        ),
        pytest.param(
            [p("aa", Interrupt("service", ("cron",))), p("bb", Interrupt("reboot"))],
            Interrupt("reboot"),
            "bb",
            id="reboot-wins",
        ),
        pytest.param(
            [p("aa", Interrupt("noop")), p("bb", Interrupt("restartAllServices"))],
            Interrupt("restartAllServices"),
            "bb",
            id="priority",
        ),
        pytest.param([p("aa"), p("bb", Interrupt("noop"))], Interrupt("noop"), "bb", id="only-one"),
    ],
)
def test_merge(packages: list[Package], merged: Interrupt, chosen: str) -> None:
    result = interrupts.merge(packages, {})
    assert result is not None
    assert (result.interrupt, result.chosen.name) == (merged, chosen)


def test_config_updates_select_config_interrupts() -> None:
    pkg = p(
        "aa",
        Interrupt("reboot"),
        config_interrupts={"*.conf": Interrupt("service", ("x",))},
        config_map={"a.conf": "", "b.sh": ""},
    )
    assert interrupts.wanted_interrupts(pkg, ["a.conf"]) == (Interrupt("service", ("x",)),)
    assert interrupts.wanted_interrupts(pkg, ["b.sh"]) == ()
    assert interrupts.wanted_interrupts(pkg, []) == (Interrupt("reboot"),)


def e(stage: str, state: str, version: str = "1.0.0", name: str = "aa") -> PackageEntry:
    return PackageEntry(name, version, "img", stage, state)


@pytest.mark.parametrize(
    ("package", "entries", "expected"),
    [
        pytest.param(p("aa"), {}, "apply", id="fresh"),
        pytest.param(p("aa"), {"aa|1.0.0": e("apply", "complete")}, "config", id="apply-done"),
        pytest.param(p("aa"), {"aa|1.0.0": e("config", "complete")}, None, id="complete"),
        pytest.param(
            p("aa", Interrupt("reboot")),
            {"aa|1.0.0": e("config", "complete")},
            "interrupt",
            id="to-interrupt",
        ),
        pytest.param(
            p("aa", Interrupt("reboot")),
            {"aa|1.0.0": e("interrupt", "complete")},
            "post-interrupt",
            id="to-post",
        ),
        pytest.param(p("aa"), {"aa|1.0.0": e("apply", "erroring")}, "apply", id="erroring-reruns"),
        pytest.param(
            p("aa"), {"aa|0.9.0": e("config", "complete", "0.9.0")}, "upgrade", id="upgrade"
        ),
        pytest.param(
            p("aa"),
            {"aa|2.0.0": e("config", "complete", "2.0.0")},
            "apply",
            id="downgrade-installs-from-scratch",
        ),
        pytest.param(
            p("aa"), {"aa|1.0.0": e("uninstall", "complete")}, "apply", id="after-uninstall"
        ),
        pytest.param(
            p("aa"),
            {"aa|1.0.0": e("post-interrupt", "complete")},
            None,
            id="post-interrupt-is-done",
        ),
    ],
)
def test_next_stage(
    package: Package, entries: dict[str, PackageEntry], expected: str | None
) -> None:
    assert stages.next_stage(package, entries, {}) == expected


def test_node_work_leaves_removed_and_downgraded_entries_alone() -> None:
    entries = {
        "aa|2.0.0": e("config", "complete", "2.0.0"),
        "gone|1.0.0": e("config", "complete", name="gone"),
    }
    work = stages.node_work({"aa": p("aa")}, entries, {})
    assert work.due == {"aa": "apply"}
    assert not work.renames
    installed = {**entries, "aa|1.0.0": e("config", "complete")}
    assert stages.node_work({"aa": p("aa")}, installed, {}).complete


def test_node_work_renames_same_version_spelling() -> None:
    pkg = Package(name="aa", version="1.0.0+b2", image="img")
    work = stages.node_work({"aa": pkg}, {"aa|1.0.0+b1": e("config", "complete", "1.0.0+b1")}, {})
    assert work.renames == {"aa|1.0.0+b1": "aa|1.0.0+b2"}


@pytest.mark.parametrize(
    ("previous", "stage", "legal"),
    [
        (None, "apply", True),
        (None, "config", False),
        ("apply", "config", True),
        ("config", "post-interrupt", False),
        ("interrupt", "post-interrupt", True),
        ("post-interrupt", "config", True),
        ("apply", "apply", True),
    ],
)
def test_legal_successor(previous: str | None, stage: str, legal: bool) -> None:
    assert stages.legal_successor(previous, stage) is legal


def status(
    state: str, code: int | None = None, reason: str = "", restarts: int = 0
) -> ContainerStatusView:
    return ContainerStatusView("c", state, reason, code, restarts, datetime(2026, 1, 1, tzinfo=UTC))


THREE = (ContainerView("a"), ContainerView("b"), ContainerView("c"))


@pytest.mark.parametrize(
    ("statuses", "phase", "result", "restarts"),
    [
        pytest.param((), "Pending", "waiting", 0, id="nothing-yet"),
        pytest.param(
            (status("terminated", 0), status("running")), "Pending", "waiting", 0, id="partial"
        ),
        pytest.param((status("terminated", 0),) * 3, "Running", "succeeded", 0, id="all-done"),
        pytest.param(
            (status("terminated", 0), status("terminated", 2, restarts=4)),
            "Running",
            "failed",
            4,
            id="failed",
        ),
        pytest.param(
            (
                status("terminated", 0),
                status("waiting", reason="CrashLoopBackOff", restarts=3),
                status("waiting"),
            ),
            "Pending",
            "failed",
            3,
            id="crash-loop",
        ),
        pytest.param(
            (status("terminated", 0), status("terminated", 0), status("running")),
            "Running",
            "running",
            0,
            id="running",
        ),
    ],
)
def test_outcome(
    statuses: tuple[ContainerStatusView, ...], phase: str, result: str, restarts: int
) -> None:
    pod = PodView("p", "ns", "n", phase=phase, init_containers=THREE, init_statuses=statuses)
    got = results.outcome(pod)
    assert (got.result, got.restarts) == (result, restarts)


def test_backoff_doubles_and_caps() -> None:
    assert [results.backoff_s(r, 10, 300) for r in range(7)] == [10, 20, 40, 80, 160, 300, 300]


def pod(name: str, phase: str = "Running", **extra: object) -> PodView:
    return PodView(name, "default", "n", phase=phase, **extra)  # type: ignore[arg-type]


def test_gate_fails_closed_and_spares_daemonsets() -> None:
    selector = LabelSelector({"critical": "yes"})
    pods = [
        pod("blocker", "Unknown", labels={"critical": "yes"}),
        pod("done", "Succeeded", labels={"critical": "yes"}),
        pod("web"),
        pod("leaving", deleting=True),
        pod("ds", controller_kind="DaemonSet"),
        pod("tolerant", tolerates_unschedulable=True),
        PodView("sys", "kube-system", "n", phase="Running"),
        PodView("ours", "skyhook", "n", labels={"skyhook.nvidia.com/name": "scr"}),
        # Our labels copied onto a pod elsewhere do not make it ours: drained like any other.
        pod("forged", labels={"skyhook.nvidia.com/name": "scr"}),
    ]
    result = drain.check(NodeView("n", unschedulable=True), pods, selector, "skyhook")
    assert [x.name for x in result.protected] == ["blocker"]
    assert result.to_remove == (), "nothing is evicted while a protected pod is alive"
    assert not result.open
    result = drain.check(NodeView("n", unschedulable=True), pods[1:], selector, "skyhook")
    assert result.protected == ()
    assert [x.name for x in result.to_remove] == ["web", "forged"]
    assert [x.name for x in result.leaving] == ["leaving"]
    assert not result.open
    assert drain.check(NodeView("n", unschedulable=True), [], selector, "skyhook").open
    assert not drain.check(NodeView("n"), [], selector, "skyhook").open, "not cordoned yet"


def test_composing_status_patches_leaves_each_patch_as_it_was() -> None:
    patches = [{"m": {"x": 1}}, {"m": {"y": 2}}, {"m": {"z": {"k": 1}}}, {"m": {"z": {"j": 2}}}]
    before = copy.deepcopy(patches)
    composed = statuses.compose_merge_patches(patches)
    assert composed == {"m": {"x": 1, "y": 2, "z": {"k": 1, "j": 2}}}
    assert patches == before  # a queued patch is also what the snapshot replays


@pytest.mark.parametrize(
    ("first", "second", "composed"),
    [
        pytest.param({"a": 1}, {"b": 2}, {"a": 1, "b": 2}, id="disjoint"),
        pytest.param({"a": 1}, {"a": 2}, {"a": 2}, id="later-wins"),
        pytest.param({"m": {"x": 1}}, {"m": {"y": 2}}, {"m": {"x": 1, "y": 2}}, id="nested"),
        pytest.param({"m": {"x": 1}}, {"m": {"x": None}}, {"m": {"x": None}}, id="removal"),
        pytest.param({"m": {"x": 1}}, {"m": None}, {"m": None}, id="object-removed"),
    ],
)
def test_composed_status_patches_do_what_both_do(
    first: dict[str, Any], second: dict[str, Any], composed: dict[str, Any]
) -> None:
    assert statuses.compose_merge_patches([first, second]) == composed
    target = {"m": {"x": 0, "z": 9}, "a": 0}
    untouched = copy.deepcopy(target)
    one = statuses.merge_patched(statuses.merge_patched(target, first), second)
    assert one == statuses.merge_patched(target, composed)
    assert target == untouched  # the patched document is a new one
