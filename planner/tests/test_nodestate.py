"""The node annotation codecs: byte-compatible with upstream's Go json.Marshal output."""

from __future__ import annotations

from skyhook_planner.model import nodestate
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.snapshot import NodeView
from skyhook_schemas import keys
from skyhook_schemas.nodestate import PackageEntry, encode_entries


def test_a_corrupt_annotation_reads_as_an_error_not_as_empty() -> None:
    node = NodeView("n", annotations={keys.node_state_key("scr"): "{"})
    state = nodestate.read(node, "scr")
    assert state.entries is None
    assert state.error.startswith("skyhook.nvidia.com/nodeState_scr: not JSON")


def test_diff_writes_only_what_changed_and_mirrors_status_to_the_label() -> None:
    entry = PackageEntry("tuning", "1.0.0", "img", "apply", "complete")
    node = NodeView(
        "n",
        labels={keys.node_status_key("scr"): "in_progress"},
        annotations={
            keys.node_state_key("scr"): encode_entries({entry.key: entry}),
            keys.node_status_key("scr"): "in_progress",
        },
    )
    before = nodestate.read(node, "scr")
    assert not nodestate.diff(node, "scr", before, before)
    after = NodeState(entries=before.entries, status="complete", cordoned=True)
    changes = nodestate.diff(node, "scr", before, after)
    assert changes.annotations == {
        keys.node_status_key("scr"): "complete",
        keys.cordon_key("scr"): "true",
    }
    assert changes.labels == {keys.node_status_key("scr"): "complete"}


def test_conditions_replaced_whenever_they_differ() -> None:
    wanted = nodestate.conditions_for("scr", complete=True, erroring=False)
    assert wanted[0].status == "False" and wanted[0].reason == "Complete"
    assert wanted[1].status == "False" and wanted[1].reason == "Not Erroring"
    node = NodeView("n", conditions=(wanted[0],))
    assert nodestate.stale_conditions(node, wanted) == (wanted[1],)


def test_image_selection_annotation_round_trips_and_is_removed_with_the_rest() -> None:
    key = keys.image_selection_key("scr")
    images = {"tuning": {"matched": "compatibilities[0]", "image": "repo/p:1"}}
    changes = nodestate.diff(NodeView(name="n"), "scr", NodeState(), NodeState(images=images))
    assert changes.annotations[key] == (
        '{"tuning":{"image":"repo/p:1","matched":"compatibilities[0]"}}'
    )
    node = NodeView(name="n", annotations={key: changes.annotations[key]})
    assert nodestate.read(node, "scr").images == images
    assert nodestate.removal(node, "scr").annotations == {key: None}
    unreadable = NodeView(name="n", annotations={key: "not json"})
    assert nodestate.read(unreadable, "scr").images is None
