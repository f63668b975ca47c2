"""The nodeState annotation codec: byte-for-byte upstream's Go JSON, round trips, and refusal of
annotations that are not package entries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyhook_schemas import nodestate
from skyhook_schemas.gojson import go_json
from skyhook_schemas.nodestate import NodeStateError, PackageEntry

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
    assert go_json(value) == encoded


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
