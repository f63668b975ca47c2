"""Admin cordons kept (docs/fleet-safety.md#admin-cordons-kept): a node someone else cordoned
before the rollout stays cordoned after it; every node a Skyhook cordoned is uncordoned, by the
last Skyhook whose `cordon_<scr>` marker is on it; across interrupts, reboots, operator
restarts, several Skyhooks and deletion."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skyhook_planner import telemetry
from skyhook_planner.model.actions import CreatePod, EmitEvent
from skyhook_planner.passes import report
from skyhook_planner.sim.driver import Driver, package, pod_stage
from skyhook_schemas import keys

SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
REBOOT = {"type": "reboot"}
SERVICE = {"type": "service", "services": ["cron"]}


def _cordoned(d: Driver, node: str) -> bool:
    return bool(d.sim.nodes[node]["spec"].get("unschedulable"))


def _markers(d: Driver, node: str) -> set[str]:
    annotations = d.sim.nodes[node]["metadata"]["annotations"]
    prefix = keys.cordon_key("")
    return {k[len(prefix) :] for k, v in annotations.items() if k.startswith(prefix) and v}


def _interrupts_only_when_cordoned(d: Driver) -> None:
    """Called after every pass: every interrupt pod runs on a cordoned node."""
    for pod in d.sim.pods.values():
        node, _, stage = pod_stage(pod)
        if stage in {"interrupt", "uninstall-interrupt"} and node in d.sim.nodes:
            assert _cordoned(d, node), f"an interrupt runs on {node}, which is not cordoned"


def _spec(interrupt: dict[str, Any] | None = REBOOT, **extra: Any) -> dict[str, Any]:
    fields = {"interrupt": interrupt} if interrupt else {}
    return {**SEL, "packages": {"kernel": package(**fields)}, **extra}


def test_an_admin_cordon_stays_through_a_reboot_and_is_reported() -> None:
    d = Driver(2, {"role": "gpu"})
    d.sim.nodes["node-0000"]["spec"]["unschedulable"] = True
    d.sim.add_skyhook("scr", _spec())
    first = d.step()
    condition = next(
        c for c in d.status("scr")["conditions"] if c["type"] == report.CONDITION_ADMIN_CORDONS
    )
    assert condition["message"].startswith("Node [node-0000] was cordoned by someone else")
    assert ("scr", "node-0000") not in first.waiting or all(
        r.blocker != "drain" or "cordoned" not in r.message
        for r in first.waiting[("scr", "node-0000")]
    )
    events: list[EmitEvent] = []
    d.run(
        on_step=lambda d: events.extend(a for a in d.plans[-1].actions if isinstance(a, EmitEvent))
    )
    assert [s for n, _, s in d.stages_run() if n == "node-0000"][-2:] == [
        "interrupt",
        "post-interrupt",
    ]
    assert _cordoned(d, "node-0000"), "the administrator's cordon is kept"
    assert not _cordoned(d, "node-0001"), "our own cordon is lifted"
    assert _markers(d, "node-0000") == _markers(d, "node-0001") == set()
    kept = [e for e in events if e.reason == report.ADMIN_CORDON_KEPT]
    assert [(e.name, e.message) for e in kept] == [
        ("node-0000", "cordoned by someone else before [skyhook:scr] ran: left cordoned")
    ]
    # The condition stays while the node is cordoned, and goes once someone uncordons it.
    types = {c["type"] for c in d.status("scr")["conditions"]}
    assert report.CONDITION_ADMIN_CORDONS in types
    d.sim.nodes["node-0000"]["spec"]["unschedulable"] = False
    d.step()
    types = {c["type"] for c in d.status("scr")["conditions"]}
    assert report.CONDITION_ADMIN_CORDONS not in types


def test_two_skyhooks_share_a_cordon_and_the_last_lifts_it() -> None:
    """The first Skyhook's cordon is not an administrator's to the second: the node stays
    cordoned through both interrupts, and is uncordoned once both are done."""
    d = Driver(1, {"role": "gpu"})
    d.sim.add_skyhook("first", _spec(priority=1))
    d.sim.add_skyhook("second", _spec(SERVICE, priority=2))
    d.run(on_step=_interrupts_only_when_cordoned)
    stages = [(p.split("|")[0], s) for _, p, s in d.stages_run()]
    assert stages.count(("kernel", "interrupt")) == 2
    assert not _cordoned(d, "node-0000")
    assert _markers(d, "node-0000") == set()


def test_two_skyhooks_keep_an_admin_cordon() -> None:
    d = Driver(1, {"role": "gpu"})
    d.sim.nodes["node-0000"]["spec"]["unschedulable"] = True
    d.sim.add_skyhook("first", _spec(priority=1))
    d.sim.add_skyhook("second", _spec(SERVICE, priority=2))
    d.run(on_step=_interrupts_only_when_cordoned)
    assert _cordoned(d, "node-0000")
    assert _markers(d, "node-0000") == set()


def test_an_operator_restart_after_every_pass_changes_nothing() -> None:
    d = Driver(2, {"role": "gpu"})
    d.sim.nodes["node-0001"]["spec"]["unschedulable"] = True
    d.sim.add_skyhook("scr", _spec(interruptionBudget={"count": 2}))
    d.run(replan=True, on_step=_interrupts_only_when_cordoned)
    assert [_cordoned(d, n) for n in ("node-0000", "node-0001")] == [False, True]


def test_a_cordon_lifted_by_someone_else_mid_rollout_is_put_back() -> None:
    """Our cordon, uncordoned by hand before the interrupt ran: the interrupt still gets a
    cordoned node, and our marker means we lift it at the end."""
    d = Driver(1, {"role": "gpu"})
    d.sim.add_skyhook("scr", _spec())
    seen = []

    def uncordon_once(d: Driver) -> None:
        _interrupts_only_when_cordoned(d)
        if _markers(d, "node-0000") and not seen:
            seen.append(True)
            d.sim.nodes["node-0000"]["spec"]["unschedulable"] = False

    d.run(on_step=uncordon_once)
    assert seen
    assert not _cordoned(d, "node-0000")


def test_deleting_a_skyhook_keeps_an_admin_cordon_and_lifts_its_own() -> None:
    d = Driver(2, {"role": "gpu"})
    d.sim.nodes["node-0000"]["spec"]["unschedulable"] = True
    d.sim.add_skyhook("scr", _spec(interruptionBudget={"count": 2}))
    for _ in range(3):  # cordoned, drained, interrupt pods out
        d.step()
    assert _markers(d, "node-0001") == {"scr"}
    d.sim.skyhooks["scr"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z"
    d.run()
    assert "scr" not in d.sim.skyhooks
    assert [_cordoned(d, n) for n in ("node-0000", "node-0001")] == [True, False]


def test_deleting_one_of_two_skyhooks_leaves_the_other_s_cordon() -> None:
    d = Driver(1, {"role": "gpu"})
    d.sim.add_skyhook("first", _spec(priority=1))
    d.sim.add_skyhook("second", _spec(priority=2))
    for _ in range(40):
        d.step()
        if _markers(d, "node-0000") == {"second"}:
            break
        for key in d.pending_pods():
            node, _, stage = pod_stage(d.sim.pods[key])
            if stage == "interrupt":
                d.sim.reboot(node, f"boot-{d.now.timestamp()}")
            d.sim.finish_pod(key)
    # Both markers at once: the second takes the first's cordon as a shared one.
    d.sim.nodes["node-0000"]["metadata"]["annotations"][keys.cordon_key("first")] = "true"
    d.sim.skyhooks["first"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:10Z"
    d.step()
    assert _cordoned(d, "node-0000"), "the second Skyhook still holds its cordon"
    d.run(on_step=_interrupts_only_when_cordoned)
    assert not _cordoned(d, "node-0000")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    admin=st.lists(st.booleans(), min_size=1, max_size=4),
    interrupts=st.lists(st.sampled_from([None, REBOOT, SERVICE]), min_size=1, max_size=2),
    restarts=st.booleans(),
    budget=st.integers(1, 3),
)
def test_admin_cordons_are_kept_and_ours_lifted(
    admin: list[bool],
    interrupts: list[dict[str, Any] | None],
    restarts: bool,
    budget: int,
) -> None:
    """Whatever the Skyhooks, interrupts and restarts: every interrupt runs on a cordoned node,
    and at the end exactly the nodes cordoned before the rollout are cordoned, with no marker
    left."""
    d = Driver(len(admin), {"role": "gpu"})
    for node, cordoned in zip(sorted(d.sim.nodes), admin, strict=True):
        d.sim.nodes[node]["spec"]["unschedulable"] = cordoned
    for index, interrupt in enumerate(interrupts):
        spec = _spec(interrupt, priority=index + 1, interruptionBudget={"count": budget})
        d.sim.add_skyhook(f"scr-{index}", spec)
    d.run(replan=restarts, on_step=_interrupts_only_when_cordoned)
    for node, cordoned in zip(sorted(d.sim.nodes), admin, strict=True):
        assert _cordoned(d, node) == cordoned, node
        assert _markers(d, node) == set(), node
    created = [a for p in d.plans for a in p.actions if isinstance(a, CreatePod)]
    assert created


def test_the_admin_cordoned_nodes_are_counted() -> None:
    d = Driver(3, {"role": "gpu"})
    d.sim.nodes["node-0000"]["spec"]["unschedulable"] = True
    d.sim.add_skyhook("scr", _spec(interruptionBudget={"count": 3}))
    d.step()  # the other two are cordoned by us now: not counted

    def count() -> float:
        families = telemetry.skyhook_families(d.sim.snapshot(d.now))
        family = next(f for f in families if f.name == "skyhook_admin_cordoned_nodes")
        return sum(s.value for s in family.samples)

    assert _markers(d, "node-0001") == {"scr"}
    assert count() == 1
    d.sim.nodes["node-0000"]["spec"]["unschedulable"] = False
    assert count() == 0
