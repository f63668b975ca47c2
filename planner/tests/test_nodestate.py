"""The node annotation codecs: byte-compatible with upstream's Go json.Marshal output."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyhook_planner.model import nodestate
from skyhook_planner.model.nodestate import NodeState, NodeStateError, PackageEntry
from skyhook_planner.model.snapshot import NodeView
from skyhook_schemas import keys

UPSTREAM_EXAMPLE = (
    '{"dexter|1.2.3":{"name":"dexter","version":"1.2.3","image":"ghcr.io/nvidia/skyhook/agentless",'
    '"stage":"config","state":"complete"},'
    '"failure|1.2.3":{"name":"failure","version":"1.2.3","image":"ghcr.io/nvidia/skyhook/agentless",'
    '"stage":"apply","state":"erroring","restarts":3},'
    '"foobar|1.2":{"name":"foobar","version":"1.2","image":"ghcr.io/nvidia/skyhook/agentless",'
    '"containerSHA":"sha256:a9cc","stage":"config","state":"complete"}}'
)


def test_upstream_annotation_round_trips_byte_for_byte() -> None:
    entries = nodestate.decode_entries(UPSTREAM_EXAMPLE)
    assert entries["failure|1.2.3"].restarts == 3
    assert entries["foobar|1.2"].container_sha == "sha256:a9cc"
    assert nodestate.encode_entries(entries) == UPSTREAM_EXAMPLE


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        pytest.param("<a&b>", '"\\u003ca\\u0026b\\u003e"', id="html-escaped"),
        pytest.param("é", '"é"', id="utf8-kept"),
        pytest.param("a\nb\tc", '"a\\nb\\tc"', id="short-escapes"),
        pytest.param("\b\f", '"\\u0008\\u000c"', id="go-long-escapes"),
        pytest.param("back\\b", '"back\\\\b"', id="escaped-backslash-then-b"),
        pytest.param("\u2028", '"\\u2028"', id="line-separator"),
    ],
)
def test_go_json_string_escapes(value: str, encoded: str) -> None:
    assert nodestate.go_json(value) == encoded


def test_empty_state_is_an_empty_object() -> None:
    assert nodestate.encode_entries({}) == "{}"
    assert nodestate.decode_entries("{}") == {}
    assert nodestate.decode_entries(None) == {}


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("not json", id="not-json"),
        pytest.param("[]", id="not-object"),
        pytest.param('{"a|1":"x"}', id="entry-not-object"),
        pytest.param('{"a|1":{"name":"a","version":"1","stage":"dance"}}', id="bad-stage"),
    ],
)
def test_bad_annotations_are_rejected(text: str) -> None:
    with pytest.raises(NodeStateError):
        nodestate.decode_entries(text)


def test_a_corrupt_annotation_reads_as_an_error_not_as_empty() -> None:
    node = NodeView("n", annotations={keys.node_state_key("scr"): "{"})
    state = nodestate.read(node, "scr")
    assert state.entries is None
    assert state.error.startswith("skyhook.nvidia.com/nodeState_scr: not JSON")


text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
entries_strategy = st.dictionaries(
    st.tuples(
        st.from_regex(r"[a-z][-a-z0-9]{0,6}[a-z]", fullmatch=True),
        st.from_regex(r"[0-9]\.[0-9]\.[0-9]", fullmatch=True),
    ),
    st.tuples(
        text,
        st.sampled_from(nodestate.STAGES),
        st.sampled_from(["", "complete", "in_progress", "skipped", "erroring", "unknown"]),
        text,
        st.integers(0, 1000),
    ),
    max_size=5,
)


@given(entries_strategy)
def test_entries_round_trip(raw: dict) -> None:
    entries = {
        f"{n}|{v}": PackageEntry(n, v, image, stage, state, sha, restarts)
        for (n, v), (image, stage, state, sha, restarts) in raw.items()
    }
    encoded = nodestate.encode_entries(entries)
    assert nodestate.decode_entries(encoded) == entries
    assert nodestate.encode_entries(nodestate.decode_entries(encoded)) == encoded
    assert "<" not in encoded and ">" not in encoded and "&" not in encoded


def test_diff_writes_only_what_changed_and_mirrors_status_to_the_label() -> None:
    entry = PackageEntry("tuning", "1.0.0", "img", "apply", "complete")
    node = NodeView(
        "n",
        labels={keys.node_status_key("scr"): "in_progress"},
        annotations={
            keys.node_state_key("scr"): nodestate.encode_entries({entry.key: entry}),
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
