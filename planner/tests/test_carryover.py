"""What carrying state over from the other API group writes (model/carryover.py). This process
speaks skyhook.nvidia.com, so the other group is nodewright.nvidia.com."""

from datetime import UTC, datetime

from skyhook_planner.model import carryover
from skyhook_schemas import keys

NW = "nodewright.nvidia.com/"
SK = "skyhook.nvidia.com/"


def node(
    annotations: dict[str, str], labels: dict[str, str] | None = None, **status: object
) -> dict:
    return {
        "metadata": {"name": "n1", "annotations": annotations, "labels": labels or {}},
        "status": status,
    }


def test_a_nodes_state_is_copied_where_we_have_none_and_the_other_groups_is_kept() -> None:
    found = node(
        {
            f"{NW}nodeState_demo": '{"p|1":{"state":"complete"}}',
            f"{NW}status_demo": "in_progress",
            f"{NW}version_demo": "v0.18.0",
            f"{NW}cordon_demo": "true",
            f"{NW}autoTaint_gpu": "true",
        },
        {f"{NW}status_demo": "in_progress", f"{NW}team": "users-own", f"{NW}ignore": "true"},
        conditions=[{"type": f"{NW}demo/NotReady", "status": "True", "reason": "Incomplete"}],
    )
    patch = carryover.node_patch(found, ["demo"], newer=False)
    assert patch == {
        "metadata": {
            "annotations": {
                f"{SK}nodeState_demo": '{"p|1":{"state":"complete"}}',
                f"{SK}status_demo": "in_progress",
                f"{SK}version_demo": "v0.18.0",
                f"{SK}cordon_demo": "true",
                f"{SK}autoTaint_gpu": "true",
            },
            # The user's own label under the other prefix is not the operator's to copy.
            "labels": {f"{SK}status_demo": "in_progress", f"{SK}ignore": "true"},
        },
        "status": {
            "conditions": [{"type": f"{SK}demo/NotReady", "status": "True", "reason": "Incomplete"}]
        },
    }


def test_our_state_stays_unless_the_other_group_was_spoken_last() -> None:
    found = node(
        {
            f"{NW}version_demo": "v1",
            f"{NW}status_demo": "complete",
            f"{SK}version_demo": "v1",
            f"{SK}status_demo": "in_progress",
            f"{SK}cordon_demo": "true",
        }
    )
    assert carryover.node_patch(found, ["demo"], newer=False) is None
    # Spoken last, the other group moved on: ours becomes its, down to a cordon it lifted.
    assert carryover.node_patch(found, ["demo"], newer=True) == {
        "metadata": {
            "annotations": {f"{SK}status_demo": "complete", f"{SK}cordon_demo": None},
        }
    }


def test_a_node_the_other_group_never_handled_is_left_alone() -> None:
    assert carryover.node_patch(node({f"{NW}status_other": "complete"}), ["demo"], True) is None


def test_a_mirror_keeps_name_spec_and_pause_and_is_stamped() -> None:
    other = {
        "metadata": {
            "name": "demo",
            "labels": {"team": "a"},
            "annotations": {
                f"{NW}pause": "true",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
            },
            "uid": "u1",
            "resourceVersion": "7",
        },
        "spec": {"packages": {"p": {"version": "1.0.0", "image": "img"}}},
        "status": {"status": "in_progress"},
    }
    body = carryover.mirrored(other, "Skyhook")
    assert body == {
        "apiVersion": "skyhook.nvidia.com/v1alpha1",
        "kind": "Skyhook",
        "metadata": {
            "name": "demo",
            "labels": {"team": "a"},
            "annotations": {f"{SK}pause": "true", f"{SK}mirrored-from": "demo"},
        },
        "spec": {"packages": {"p": {"version": "1.0.0", "image": "img"}}},
    }
    assert not carryover.user_managed(body)
    assert carryover.user_managed({"metadata": {"name": "demo"}})


def test_a_pod_is_adopted_once_beside_its_other_owner() -> None:
    owner = {"metadata": {"name": "demo", "uid": "ours"}}
    pod = {
        "metadata": {
            "name": "demo-p-apply",
            "resourceVersion": "5",
            "labels": {f"{NW}name": "demo", f"{NW}package": "p-1.0.0"},
            "annotations": {f"{NW}package": '{"name":"p"}'},
            "ownerReferences": [{"uid": "theirs", "kind": "NodeWright", "name": "demo"}],
        }
    }
    patch = carryover.adoption_patch(pod, owner)
    assert patch is not None
    meta = patch["metadata"]
    assert meta["labels"] == {f"{SK}name": "demo", f"{SK}package": "p-1.0.0"}
    assert meta["annotations"] == {f"{SK}package": '{"name":"p"}'}
    assert [r["uid"] for r in meta["ownerReferences"]] == ["theirs", "ours"]
    assert meta["resourceVersion"] == "5"
    for field in ("labels", "annotations"):
        pod["metadata"][field].update(meta[field])
    pod["metadata"]["ownerReferences"] = meta["ownerReferences"]
    assert carryover.adoption_patch(pod, owner) is None


def test_the_other_groups_finalizer_is_released_and_others_kept() -> None:
    other = {
        "metadata": {"finalizers": [f"{NW}nodewright", "example.com/x"], "resourceVersion": "3"}
    }
    assert carryover.finalizer_patch(other) == {
        "metadata": {"finalizers": ["example.com/x"], "resourceVersion": "3"}
    }
    assert carryover.finalizer_patch({"metadata": {}}) is None


def test_only_an_edit_our_twin_decides_is_refused_on_the_other_groups_object() -> None:
    old = {
        "metadata": {"name": "demo", "annotations": {f"{NW}pause": "true"}, "labels": {}},
        "spec": {"packages": {"p": {"version": "1.0.0"}}},
    }
    relabelled = {**old, "metadata": {**old["metadata"], "labels": {"team": "a"}}}
    assert carryover.frozen_edit("NodeWright", old, relabelled) is None
    unpaused = {**old, "metadata": {**old["metadata"], "annotations": {}}}
    bumped = {**old, "spec": {"packages": {"p": {"version": "1.0.1"}}}}
    for edit in (unpaused, bumped):
        assert carryover.frozen_edit("NodeWright", old, edit) == (
            'nodewright.nvidia.com NodeWright "demo" is carried over to skyhook.nvidia.com '
            'Skyhook and is read-only; edit Skyhook "demo" instead (its spec, or kubectl '
            "skyhook pause/disable/...)"
        )
    assert 'DeploymentPolicy "demo"' in (
        carryover.frozen_edit("DeploymentPolicy", old, bumped) or ""
    )


def test_the_other_groups_copies_are_removed_and_ours_and_the_users_kept() -> None:
    found = node(
        {
            f"{NW}nodeState_demo": "{}",
            f"{NW}version_demo": "v1",
            f"{NW}status_other": "complete",
            f"{SK}nodeState_demo": "{}",
        },
        {f"{NW}status_demo": "complete", f"{NW}team": "users-own"},
        conditions=[{"type": f"{NW}demo/NotReady", "status": "False"}, {"type": "Ready"}],
    )
    assert carryover.prune_node_patch(found, ["demo"]) == {
        "metadata": {
            "annotations": {f"{NW}nodeState_demo": None, f"{NW}version_demo": None},
            "labels": {f"{NW}status_demo": None},
        },
        "status": {"conditions": [{"type": f"{NW}demo/NotReady", "$patch": "delete"}]},
    }
    assert carryover.prune_node_patch(node({f"{SK}status_demo": "x"}), ["demo"]) is None
    configmap = {"metadata": {"labels": {f"{NW}name": "demo", f"{SK}name": "demo"}}}
    assert carryover.unlabel_patch(configmap) == {"metadata": {"labels": {f"{NW}name": None}}}


def _other_scr(spec: dict, conditions: list | None = None) -> dict:
    body = {
        "metadata": {"name": "s", "uid": "u1", "generation": 2, "resourceVersion": "7"},
        "spec": spec,
    }
    if conditions is not None:
        body["status"] = {"conditions": conditions}
    return body


def test_an_object_that_does_not_decode_is_not_mirrored_and_its_fields_are_named() -> None:
    bad = {"packages": {"marker": {"version": "latest", "image": "example.com/marker"}}}
    problems = carryover.mirror_problems(_other_scr(bad), carryover.OTHER_KIND)
    assert problems and all(p.startswith("spec.packages.marker.version") for p in problems)
    good = {"packages": {"marker": {"version": "1.0.0", "image": "example.com/marker"}}}
    assert carryover.mirror_problems(_other_scr(good), carryover.OTHER_KIND) == ()
    policy = {
        "metadata": {"name": "p"},
        "spec": {
            "default": {"budget": {"count": 1}, "strategy": {"fixed": {}}},
            "topology": {"key": "not a label key", "maxPerDomain": 1},
        },
    }
    (problem,) = carryover.mirror_problems(policy, keys.POLICY_KIND)
    assert problem.startswith("spec.topology.key")


def test_not_carried_over_is_said_once_per_reason_and_removed_once_carried() -> None:
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    kept = {"type": "Other", "status": "True"}
    other = _other_scr({}, [kept])
    patch = carryover.not_carried_patch(other, carryover.SPEC_INVALID, "spec.x: bad", now)
    assert patch is not None
    assert patch["metadata"] == {"resourceVersion": "7"}  # a change since: looked at again
    said = patch["status"]["conditions"]
    assert said[0] == kept
    assert said[1]["type"] == carryover.CONDITION_NOT_CARRIED_OVER
    assert (said[1]["status"], said[1]["reason"], said[1]["message"]) == (
        "True",
        carryover.SPEC_INVALID,
        "spec.x: bad",
    )
    assert said[1]["observedGeneration"] == 2
    told = _other_scr({}, said)
    # The same again: nothing written (and so no second Event); a new problem is said.
    later = datetime(2026, 1, 2, 4, 0, 0, tzinfo=UTC)
    assert carryover.not_carried_patch(told, carryover.SPEC_INVALID, "spec.x: bad", later) is None
    again = carryover.not_carried_patch(told, carryover.SPEC_INVALID, "spec.y: bad", later)
    assert again is not None and len(again["status"]["conditions"]) == 2
    # Carried over: the condition goes, the others stay.
    assert carryover.carried_patch(told) == {
        "metadata": {"resourceVersion": "7"},
        "status": {"conditions": [kept]},
    }
    assert carryover.carried_patch(other) is None


def test_a_failed_node_write_holds_back_the_scrs_whose_state_it_carries() -> None:
    node = {
        "metadata": {
            "annotations": {
                carryover.theirs(keys.version_key("a")): "1",
                carryover.theirs(keys.version_key("c")): "1",
            }
        }
    }
    assert carryover.state_on(node, ["a", "b", "c"]) == {"a", "c"}
    assert carryover.state_on({"metadata": {}}, ["a"]) == set()
