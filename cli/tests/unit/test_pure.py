"""Pure parts of the plugin: patterns, tables, node-state roll-up, prompts, patches."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skyhook_cli import batch, cleanup, nodestate, operator_version, output, prompts
from skyhook_cli.commands import lifecycle
from skyhook_cli.commands.package import rerun_state
from skyhook_cli.kube import parse_duration
from skyhook_cli.packagestate import runs_package
from skyhook_cli.patterns import PatternError, is_regex, match_nodes
from skyhook_schemas import keys
from skyhook_schemas.nodestate import decode_entries, encode_entries

NODES = ["worker-1", "worker-2", "worker-10", "gpu-a", "node.example.com", "nodeXexample.com"]


@pytest.mark.parametrize(
    ("patterns", "expected"),
    [
        pytest.param(["worker-1"], ["worker-1"], id="exact-name-only"),
        pytest.param(["worker-.*"], ["worker-1", "worker-10", "worker-2"], id="regex-anchored"),
        pytest.param(["worker-1."], ["worker-10"], id="dot-makes-regex"),
        pytest.param(
            ["node.example.com"],
            ["node.example.com", "nodeXexample.com"],
            id="dotted-name-is-regex",
        ),
        pytest.param(["orker-1"], [], id="no-substring-match"),
        pytest.param(["gpu-a", "worker-2", "gpu-a"], ["gpu-a", "worker-2"], id="several-once-each"),
        pytest.param(["missing"], [], id="nothing"),
    ],
)
def test_node_patterns(patterns: list[str], expected: list[str]) -> None:
    assert match_nodes(patterns, NODES) == expected


def test_bad_regex_names_the_pattern() -> None:
    with pytest.raises(PatternError, match=r'^invalid regex pattern "worker-\[": '):
        match_nodes(["worker-["], NODES)


@given(st.text(alphabet="abcdef-0123456789", min_size=1))
def test_plain_names_match_only_themselves(name: str) -> None:
    assert not is_regex(name)
    assert match_nodes([name], [name, name + "x", "x" + name]) == [name]


def test_table_pads_columns_by_two_and_underlines_headers() -> None:
    rendered = output.table(
        ["NODE", "STATUS", "PACKAGES"], [["worker-1", "complete", "2/2"], ["w2", "ERRORING", "0/1"]]
    )
    assert rendered == (
        "NODE      STATUS    PACKAGES\n"
        "----      ------    --------\n"
        "worker-1  complete  2/2\n"
        "w2        ERRORING  0/1\n"
    )


@given(st.lists(st.lists(st.text(alphabet="ab c", max_size=6), min_size=3, max_size=3), max_size=5))
def test_table_columns_line_up(rows: list[list[str]]) -> None:
    headers = ["A", "BB", "CCC"]
    lines = output.table(headers, rows).splitlines()
    starts = {len(line) - len(line[line.index("-") :]) if "-" in line else 0 for line in lines[1:2]}
    assert starts == {0}
    second_column = max(len(cell[0]) for cell in [headers, *rows]) + 2
    assert all(len(line) >= second_column for line in lines)


def test_yaml_sorts_keys_like_upstream() -> None:
    assert output.to_yaml(
        {"skyhookName": "s", "nodes": [{"nodeName": "n", "status": "complete"}]}
    ) == ("nodes:\n- nodeName: n\n  status: complete\nskyhookName: s\n")


def entry(name: str, state: str, restarts: int = 0) -> dict[str, object]:
    raw: dict[str, object] = {
        "name": name,
        "version": "1.0.0",
        "image": "img",
        "stage": "apply",
        "state": state,
    }
    if restarts:
        raw["restarts"] = restarts
    return raw


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        pytest.param([], "unknown", id="no-packages"),
        pytest.param(["complete", "complete"], "complete", id="all-complete"),
        pytest.param(["complete", "erroring"], "erroring", id="any-erroring-wins"),
        pytest.param(["complete", "skipped"], "in_progress", id="some-complete"),
        pytest.param(["in_progress", "skipped"], "in_progress", id="one-in-progress"),
        pytest.param(["skipped"], "unknown", id="only-skipped"),
    ],
)
def test_rollup(states: list[str], expected: str) -> None:
    raw = {f"p{i}|1.0.0": entry(f"p{i}", s, restarts=i) for i, s in enumerate(states)}
    rolled = nodestate.rollup(decode_entries(json.dumps(raw)))
    assert (rolled.status, rolled.total, rolled.restarts) == (
        expected,
        len(states),
        sum(range(len(states))),
    )


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{", id="not-json"),
        pytest.param("[1]", id="not-object"),
        pytest.param('{"a|1": 3}', id="entry-not-object"),
    ],
)
def test_decode_rejects_bad_annotations(text: str) -> None:
    with pytest.raises(ValueError):
        decode_entries(text)


def test_encode_round_trips_the_operator_shape() -> None:
    text = '{"a|1.0.0":{"name":"a","version":"1.0.0","image":"i","containerSHA":"sha256:x","stage":"config","state":"complete","restarts":2},"b|2.0.0":{"name":"b","version":"2.0.0","image":"i","stage":"apply"}}'
    assert encode_entries(decode_entries(text)) == text


@pytest.mark.parametrize(
    ("answer", "lifecycle", "reset"),
    [
        pytest.param("y\n", True, True, id="y"),
        pytest.param("Y\n", True, True, id="Y"),
        pytest.param("yes\n", False, True, id="yes-only-for-reset"),
        pytest.param("YES\n", False, True, id="YES-any-case"),
        pytest.param("n\n", False, False, id="n"),
        pytest.param("\n", False, False, id="empty-line"),
        pytest.param("y", True, True, id="answer-without-newline"),
    ],
)
def test_prompt_answers(answer: str, lifecycle: bool, reset: bool) -> None:
    assert prompts.lifecycle_confirmed(io.StringIO(answer)) is lifecycle
    assert prompts.confirmed(io.StringIO(answer)) is reset


def test_end_of_input_is_no_for_lifecycle_and_an_error_for_resets() -> None:
    assert prompts.lifecycle_confirmed(io.StringIO("")) is False
    with pytest.raises(prompts.NoAnswer):
        prompts.confirmed(io.StringIO(""))


def test_batch_reset_writes_explicit_zeros_for_every_compartment() -> None:
    skyhook = {
        "status": {
            "compartmentStatuses": {
                "a": {"batchState": {"currentBatch": 4, "shouldStop": True}},
                "__default__": {"matched": 1},
            }
        }
    }
    patch = batch.reset_patch(skyhook)
    states = patch["status"]["compartmentStatuses"]
    assert set(states) == {"a", "__default__"}
    assert states["a"]["batchState"] == {
        "currentBatch": 1,
        "consecutiveFailures": 0,
        "completedNodes": 0,
        "failedNodes": 0,
        "shouldStop": False,
        "lastBatchSize": 0,
        "lastBatchFailed": False,
    }


AUTO = keys.auto_taint_key(keys.RUNTIME_REQUIRED_TAINT_KEY)


@pytest.mark.parametrize(
    ("annotations", "unschedulable", "removed", "uncordon"),
    [
        pytest.param(
            {
                keys.node_state_key("s"): "{}",
                keys.cordon_key("s"): "true",
                keys.version_key("s"): "v",
                AUTO: "true",
            },
            True,
            {keys.node_state_key("s"), keys.cordon_key("s"), keys.version_key("s"), AUTO},
            True,
            id="only-skyhook-uncordons-and-drops-autotaint",
        ),
        pytest.param(
            {keys.node_state_key("s"): "{}", keys.node_state_key("other"): "{}", AUTO: "true"},
            False,
            {keys.node_state_key("s")},
            False,
            id="autotaint-kept-while-another-skyhook-has-state",
        ),
        pytest.param(
            {
                keys.node_state_key("s"): "{}",
                keys.cordon_key("s"): "true",
                keys.cordon_key("other"): "true",
            },
            True,
            {keys.node_state_key("s"), keys.cordon_key("s")},
            False,
            id="cordon-kept-for-another-skyhook",
        ),
        pytest.param(
            {
                keys.node_state_key("s"): "{}",
                keys.cordon_key("s"): "true",
                keys.RUNTIME_REQUIRED_CORDON_ANNOTATION: "true",
            },
            True,
            {keys.node_state_key("s"), keys.cordon_key("s")},
            False,
            id="runtime-required-cordon-kept",
        ),
        pytest.param(
            {keys.node_state_key("s"): "{}"},
            True,
            {keys.node_state_key("s")},
            False,
            id="admin-cordon-kept",
        ),
    ],
)
def test_node_reset_patch(
    annotations: dict[str, str], unschedulable: bool, removed: set[str], uncordon: bool
) -> None:
    labels = {keys.node_status_key("s"): "complete", "keep": "x"}
    patch = cleanup.reset_patch("s", annotations, labels, unschedulable)
    assert patch["metadata"]["annotations"] == dict.fromkeys(removed)
    assert patch["metadata"]["labels"] == {keys.node_status_key("s"): None}
    assert ("spec" in patch) is uncordon


def test_a_cordon_the_rerun_will_lift_is_kept_and_is_no_state_of_its_own() -> None:
    annotations = {keys.node_state_key("s"): "{}", keys.cordon_key("s"): "true"}
    patch = cleanup.reset_patch("s", annotations, {}, True, keep_cordon=True)
    assert patch["metadata"]["annotations"] == {keys.node_state_key("s"): None}
    assert "spec" not in patch  # still cordoned
    # Where the Skyhook still selects the node the re-run lifts it; elsewhere it is an orphan
    # cordon for reset to clear.
    assert not cleanup.has_state({keys.cordon_key("s"): "true"}, {}, "s", cordon_counts=False)
    assert cleanup.has_state({keys.cordon_key("s"): "true"}, {}, "s")


def test_node_selectors_read_as_a_label_selector_query() -> None:
    selectors = {
        "matchLabels": {"role": "gpu"},
        "matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["a", "b"]},
            {"key": "pool", "operator": "NotIn", "values": ["x"]},
            {"key": "ready", "operator": "Exists"},
            {"key": "broken", "operator": "DoesNotExist"},
        ],
    }
    assert cleanup.selector_text(selectors) == (
        "role=gpu,zone in (a,b),pool notin (x),ready,!broken"
    )
    assert cleanup.selector_text({}) == ""


@pytest.mark.parametrize(
    ("image", "tag"),
    [
        pytest.param("ghcr.io/nvidia/skyhook/operator:v1.2.3", "v1.2.3", id="tag"),
        pytest.param(
            "ghcr.io/nvidia/skyhook/operator:v1.2.3@sha256:abc", "v1.2.3", id="tag-and-digest"
        ),
        pytest.param("ghcr.io/nvidia/skyhook/operator", "", id="no-tag"),
        pytest.param("registry:5000/skyhook", "5000/skyhook", id="port-read-as-tag-like-upstream"),
    ],
)
def test_image_tag(image: str, tag: str) -> None:
    assert operator_version.image_tag(image) == tag


class Obj:
    def __init__(self, **fields: object) -> None:
        self.__dict__.update(fields)


def pod(label: str, annotation: str | None = None) -> Obj:
    annotations = {keys.PACKAGE_ANNOTATION: annotation} if annotation else {}
    return Obj(metadata=Obj(labels={keys.PACKAGE_LABEL: label}, annotations=annotations))


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        pytest.param(pod("foo-1.2.3"), True, id="label-name-version"),
        pytest.param(pod("foo"), True, id="label-name-only"),
        pytest.param(pod("foo-bar-1.2.3"), False, id="other-package-with-prefix"),
        pytest.param(
            pod("foo-bar-1.2.3", json.dumps({"name": "foo-bar"})), False, id="annotation-other"
        ),
        pytest.param(pod("x", json.dumps({"name": "foo"})), True, id="annotation-decides"),
    ],
)
def test_package_logs_match_only_that_package(candidate: Obj, expected: bool) -> None:
    assert runs_package(candidate, "foo") is expected


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("0", 0.0, id="zero"),
        pytest.param("5", 5.0, id="bare-seconds"),
        pytest.param("10s", 10.0, id="seconds"),
        pytest.param("1m30s", 90.0, id="minutes-and-seconds"),
        pytest.param("2h", 7200.0, id="hours"),
        pytest.param("500ms", 0.5, id="milliseconds"),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_bad_duration_says_what_is_accepted() -> None:
    with pytest.raises(ValueError, match="invalid duration 'soon'"):
        parse_duration("soon")


@pytest.mark.parametrize(
    ("version", "refused"),
    [
        pytest.param("v0.7.2", True, id="upstream-before-annotations"),
        pytest.param("v0.5.0", True, id="first-upstream-writing-the-annotation"),
        pytest.param("v0.8.0", False, id="upstream-with-annotations"),
        pytest.param("v0.13.0", False, id="upstream-current"),
        pytest.param("v1.0.0", False, id="ours"),
        pytest.param("v0.1.0", False, id="ours-before-its-first-release"),
    ],
)
def test_only_upstream_operators_before_v0_8_are_refused(version: str, refused: bool) -> None:
    assert lifecycle.older_than_annotations(version) is refused


def test_a_rerun_from_a_stage_gives_the_package_a_fresh_retry_budget() -> None:
    """The operator counts failed attempts in `restarts`: a rerun starts the count over."""
    before = decode_entries(
        json.dumps(
            {
                "aa|1.0.0": {
                    "name": "aa", "version": "1.0.0", "image": "ghcr.io/x/aa",
                    "stage": "apply", "state": "erroring", "restarts": 4,
                }
            }
        )
    )  # fmt: skip
    after = rerun_state(before, "aa|1.0.0", "config")["aa|1.0.0"]
    assert (after.stage, after.state, after.restarts) == ("config", "in_progress", 0)
    assert rerun_state(before, "aa|1.0.0", "") == {}
