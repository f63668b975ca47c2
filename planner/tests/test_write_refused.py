"""A write the apiserver refused as invalid (the operator puts it into the snapshot) shows as
the Skyhook's WriteRefused condition, naming the object and the apiserver's message, while the
spec stays at the generation it was refused for; it goes once the refusal is gone or the
spec changes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from skyhook_planner.model.actions import AddFinalizer
from skyhook_planner.model.snapshot import WriteRefusal
from skyhook_planner.passes.plan import plan
from skyhook_planner.sim.driver import Driver, package
from skyhook_schemas import keys

CONDITION = "skyhook.nvidia.com/WriteRefused"
MESSAGE = 'ConfigMap "scr-tools-1.0.0" is invalid: data[a b]: Invalid value: "a b"'


def refused(d: Driver) -> list[dict[str, Any]]:
    return [c for c in d.status("scr").get("conditions") or () if c["type"] == CONDITION]


def test_a_refused_write_is_a_condition_until_the_spec_changes() -> None:
    d = Driver(2)
    d.sim.add_skyhook("scr", {"packages": {"tools": package()}})
    generation = d.sim.skyhooks["scr"]["metadata"].get("generation", 0)
    refusals = [
        WriteRefusal("scr", "ConfigMap", "skyhook", "scr-tools-1.0.0", MESSAGE, generation),
        WriteRefusal("other", "Pod", "skyhook", "p", "not this Skyhook's", generation),
    ]
    d.planner = lambda snapshot, settings: plan(
        replace(snapshot, refusals=tuple(refusals)), settings
    )
    d.step()
    (condition,) = refused(d)
    assert (condition["status"], condition["reason"]) == ("True", "WriteRefused")
    assert condition["message"] == (
        "The apiserver refused 1 write(s) as invalid, not sent again until the spec changes: "
        f"ConfigMap skyhook/scr-tools-1.0.0: {MESSAGE}"
    )

    d.sim.skyhooks["scr"]["metadata"]["generation"] = generation + 1  # the spec changed
    d.step()
    assert refused(d) == []

    refusals[0] = replace(refusals[0], generation=generation + 1)  # refused again
    d.step()
    assert len(refused(d)) == 1
    refusals.clear()  # a later write of it went through
    d.step()
    assert refused(d) == []


def test_a_skyhook_whose_finalizer_is_refused_touches_no_node_until_the_spec_changes() -> None:
    """The operator adds its finalizer with the spec in the form it stores it in; with the
    webhooks off a spec may pass the CRD and that form not. Without the finalizer a deletion
    would leave the nodes as they are, so no node is touched, and the status says why."""
    d = Driver(2)
    d.sim.add_skyhook("scr", {"packages": {"tools": package()}})
    message = 'Skyhook.skyhook.nvidia.com "scr" is invalid: spec.packages.t.name: Invalid value'
    refusal = WriteRefusal("scr", "Skyhook", "", "scr", message, 1)
    refusals = [refusal]

    def operator(snapshot: Any, settings: Any) -> Any:  # as the writer holds a refused write
        made = plan(replace(snapshot, refusals=tuple(refusals)), settings)
        held = tuple(a for a in made.actions if not (refusals and isinstance(a, AddFinalizer)))
        return replace(made, actions=held)

    d.planner = operator
    for _ in range(3):
        d.step()
    assert d.stages_run() == [] and d.sim.skyhooks["scr"]["metadata"]["finalizers"] == []
    assert all(
        keys.node_status_key("scr") not in n["metadata"]["annotations"]
        for n in d.sim.nodes.values()
    )
    assert d.status("scr")["status"] == "blocked"
    (condition,) = refused(d)
    assert condition["reason"] == "WriteRefused" and message in condition["message"]
    assert any(e.reason == "WriteRefused" and e.type == "Warning" for e in d.sim.events)

    d.sim.skyhooks["scr"]["metadata"]["generation"] = 2  # the spec changed
    refusals.clear()  # and the finalizer went through
    d.run()
    assert d.sim.skyhooks["scr"]["metadata"]["finalizers"] == [keys.FINALIZER]
    assert {d.node_status("scr", n) for n in d.sim.nodes} == {"complete"}
    assert refused(d) == []
