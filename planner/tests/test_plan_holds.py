"""Whole passes with a maintenance window or an alert gate: what waits, what does not, and what
the status and the plan say about it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from skyhook_planner.model.actions import CreatePod, DeletePod, PatchNode, Plan
from skyhook_planner.model.alerts import Alert, AlertReading
from skyhook_planner.model.spec import SpecError, decode_spec
from skyhook_planner.passes.plan import plan
from skyhook_planner.rules import holds
from skyhook_planner.sim.driver import START, Driver, package, pod_stage

SEL = {"nodeSelectors": {"matchLabels": {"role": "gpu"}}}
LABELS = {"role": "gpu"}
REBOOT = {"kernel": package(interrupt={"type": "reboot"})}
# START is Thursday 2026-01-01 00:00 UTC: this window first opens Saturday 22:00.
SATURDAY_NIGHT = {"days": ["sat"], "start": "22:00", "end": "04:00", "timeZone": "UTC"}
OPENS = datetime(2026, 1, 3, 22, 0, tzinfo=UTC)
PROMETHEUS = "http://prometheus.test:9090"


def condition(d: Driver, kind: str) -> dict:
    found = [c for c in d.status("scr").get("conditions", []) if c["type"] == kind]
    assert len(found) == 1, d.status("scr").get("conditions")
    return found[0]


def cordons(result: Plan) -> bool:
    return any(isinstance(a, PatchNode) and a.unschedulable for a in result.actions)


def test_a_closed_window_holds_the_interrupt_package_until_it_opens() -> None:
    d = Driver(2, LABELS)
    d.sim.add_skyhook("scr", {**SEL, "maintenanceWindow": SATURDAY_NIGHT, "packages": REBOOT})
    first = d.step()
    assert not cordons(first)
    assert not any(isinstance(a, CreatePod) for a in first.actions)
    assert {(h.node, h.reason) for h in first.held} == {
        ("node-0000", holds.WINDOW_CLOSED),
        ("node-0001", holds.WINDOW_CLOSED),
    }
    assert first.requeue_after == (OPENS - START).total_seconds()
    closed = condition(d, holds.CONDITION_WINDOW)
    assert closed["status"] == "True"
    assert "until it opens at 2026-01-03T22:00:00+00:00" in closed["message"]
    d.run()  # the driver moves its clock by each requeue: to the opening
    assert d.now >= OPENS
    assert [s for n, _, s in d.stages_run() if n == "node-0000"] == [
        "apply",
        "config",
        "interrupt",
        "post-interrupt",
    ]
    assert condition(d, holds.CONDITION_WINDOW)["status"] == "False"


def test_packages_without_an_interrupt_do_not_wait() -> None:
    d = Driver(1, LABELS)
    spec = {**SEL, "maintenanceWindow": SATURDAY_NIGHT, "packages": {"tuning": package()}}
    d.sim.add_skyhook("scr", spec)
    d.run()
    assert d.now < OPENS
    assert d.entries("scr", "node-0000") == {"tuning|1.0.0": ("config", "complete")}


def test_applies_to_all_holds_every_stage() -> None:
    d = Driver(1, LABELS)
    window = {**SATURDAY_NIGHT, "appliesTo": "all"}
    d.sim.add_skyhook(
        "scr", {**SEL, "maintenanceWindow": window, "packages": {"tuning": package()}}
    )
    first = d.step()
    assert not any(isinstance(a, CreatePod) for a in first.actions)
    assert [h.node for h in first.held] == ["node-0000"]
    d.run()
    assert min(d.now, OPENS) == OPENS


def test_a_running_interrupt_is_never_cut_short() -> None:
    """The window closes while the interrupt pod runs: it finishes, post-interrupt runs and
    the node is uncordoned, all outside the window."""
    d = Driver(1, LABELS)
    window = {"start": "00:00", "end": "00:10", "timeZone": "UTC"}
    d.sim.add_skyhook("scr", {**SEL, "maintenanceWindow": window, "packages": REBOOT})
    for _ in range(20):
        d.step()
        if any(pod_stage(p)[2] == "interrupt" for p in d.sim.pods.values()):
            break
        for key in d.pending_pods():
            d.sim.finish_pod(key, 0, at=d.now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert any(pod_stage(p)[2] == "interrupt" for p in d.sim.pods.values())
    d.now = START + timedelta(minutes=30)  # closed
    held = d.step()
    assert not any(isinstance(a, DeletePod) for a in held.actions)
    d.run()
    assert d.now < START + timedelta(days=1)
    assert d.entries("scr", "node-0000") == {"kernel|1.0.0": ("post-interrupt", "complete")}
    assert d.sim.nodes["node-0000"]["spec"]["unschedulable"] is False


def test_a_deployment_policy_window_applies_to_its_skyhooks() -> None:
    d = Driver(1, LABELS)
    d.sim.add_policy(
        "weekends",
        {
            "default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
            "maintenanceWindow": SATURDAY_NIGHT,
        },
    )
    d.sim.add_skyhook("scr", {**SEL, "deploymentPolicy": "weekends", "packages": REBOOT})
    assert [h.reason for h in d.step().held] == [holds.WINDOW_CLOSED]


def readings(*found: AlertReading) -> list[AlertReading]:
    return list(found)


def step_with(d: Driver, alerts: list[AlertReading]) -> Plan:
    result = plan(replace(d.sim.snapshot(d.now), alerts=tuple(alerts)), d.settings)
    d.sim.apply(result.actions)
    return result


FIRING = AlertReading(PROMETHEUS, START, (Alert("NodeDown", "firing"), Alert("Disk", "pending")))


@pytest.mark.parametrize(
    ("gate", "alerts", "reason", "message"),
    [
        ({}, [FIRING], holds.ALERTS_FIRING, "alerts fire at http://prometheus.test:9090: NodeDown"),
        ({"matchAlerts": "^Disk"}, [FIRING], None, "No matching alert fires"),
        ({"ignoreAlerts": "Down$"}, [FIRING], None, "No matching alert fires"),
        (
            {},
            [AlertReading(PROMETHEUS, START, error="GET ...: HTTP 503: unavailable")],
            holds.ALERT_QUERY_FAILED,
            "failed: GET ...: HTTP 503: unavailable",
        ),
        ({}, [], holds.ALERTS_NOT_READ, "have not been read yet"),
    ],
    ids=["firing", "match-excludes", "ignored", "query-failed", "not-read"],
)
def test_the_alert_gate(gate: dict, alerts: list, reason: str | None, message: str) -> None:
    d = Driver(1, LABELS)
    spec = {**SEL, "alertGate": {"prometheusURL": PROMETHEUS, **gate}, "packages": REBOOT}
    d.sim.add_skyhook("scr", spec)
    result = step_with(d, alerts)
    assert [h.reason for h in result.held] == ([reason] if reason else [])
    assert cordons(result) is (reason is None)
    found = condition(d, holds.CONDITION_ALERTS)
    assert found["status"] == ("True" if reason else "False")
    assert message in found["message"]
    if reason:
        assert result.requeue_after == d.settings.alert_recheck_s


def test_removing_the_gate_removes_its_condition() -> None:
    d = Driver(1, LABELS)
    spec = {**SEL, "alertGate": {"prometheusURL": PROMETHEUS}, "packages": REBOOT}
    d.sim.add_skyhook("scr", spec)
    step_with(d, [FIRING])
    d.sim.skyhooks["scr"]["spec"].pop("alertGate")
    step_with(d, [])
    types = {c["type"] for c in d.status("scr")["conditions"]}
    assert holds.CONDITION_ALERTS not in types


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"prometheusURL": "prometheus:9090"}, "spec.alertGate.prometheusURL: 'prometheus:9090'"),
        ({}, "spec.alertGate.prometheusURL: None is not an http"),
        (
            {"prometheusURL": PROMETHEUS, "matchAlerts": "(["},
            "spec.alertGate.matchAlerts: '([' is not a regular expression",
        ),
        ({"prometheusURL": PROMETHEUS, "ignoreAlerts": 3}, "spec.alertGate.ignoreAlerts: 3 is"),
    ],
    ids=["no-scheme", "missing-url", "bad-regex", "not-a-string"],
)
def test_a_bad_alert_gate_names_its_field(raw: dict, message: str) -> None:
    with pytest.raises(SpecError) as error:
        decode_spec({"alertGate": raw})
    assert any(m.startswith(message) for m in error.value.messages), error.value.messages
