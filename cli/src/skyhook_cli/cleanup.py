"""What resetting a node for one Skyhook removes, as one merge patch per node.

Removed: the Skyhook's nodeState, status (annotation and label), cordon and version keys, and
its drain's start and blockers (so a node whose drain timed out starts its drain clock again).
Two things upstream's plugin leaves wrong are set right here:

- The operator marks auto-tainted nodes with `autoTaint_<taint key>` (not `autoTaint_<skyhook>`).
  The marker is about the node, not one Skyhook, so it is removed only when no other Skyhook
  keeps state on the node; the node then looks new to the operator again.
- A node this Skyhook cordoned (its cordon marker is set) and still selects keeps the cordon
  and the marker: the re-run finds it cordoned and lets go of it when done, so no workload
  returns in between. A node it no longer selects (or a Skyhook gone) is uncordoned, unless
  another Skyhook's cordon marker is also set: without the marker the operator would take
  the cordon for an administrator's and never lift it. A kept cordon alone is not state to
  reset.

The runtime-required cordon (`runtimeRequiredCordon`, spec.runtimeRequiredCordonAfter) is
neither removed nor lifted: it is no Skyhook's to lift.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyhook_schemas import keys

AUTO_TAINT_PREFIX = keys.auto_taint_key("")
CORDON_PREFIX = keys.cordon_key("")
NODE_STATE_PREFIX = keys.node_state_key("")


def owned_annotations(skyhook: str) -> tuple[str, ...]:
    return (
        keys.node_state_key(skyhook),
        keys.node_status_key(skyhook),
        keys.cordon_key(skyhook),
        keys.version_key(skyhook),
        keys.drain_start_key(skyhook),
        keys.drain_blocked_key(skyhook),
    )


def has_state(
    annotations: Mapping[str, str],
    labels: Mapping[str, str],
    skyhook: str,
    *,
    cordon_counts: bool = True,
) -> bool:
    """Is there anything of `skyhook` to reset on the node? `cordon_counts` False: its cordon
    marker alone is not (the Skyhook still selects the node, and its re-run will lift it)."""
    cordon = keys.cordon_key(skyhook)
    owned = [key for key in owned_annotations(skyhook) if cordon_counts or key != cordon]
    return any(key in annotations for key in owned) or keys.node_status_key(skyhook) in labels


def selector_text(node_selectors: Mapping[str, Any]) -> str:
    """A Skyhook's nodeSelectors as a label selector query (`a=b,c in (d,e),!f`)."""
    parts = [f"{key}={value}" for key, value in (node_selectors.get("matchLabels") or {}).items()]
    for expression in node_selectors.get("matchExpressions") or ():
        key, operator = expression.get("key", ""), expression.get("operator", "")
        values = ",".join(expression.get("values") or ())
        parts.append(
            {
                "In": f"{key} in ({values})",
                "NotIn": f"{key} notin ({values})",
                "Exists": key,
                "DoesNotExist": f"!{key}",
            }.get(operator, f"{key} {operator} ({values})")  # the apiserver names a bad one
        )
    return ",".join(parts)


def reset_patch(
    skyhook: str,
    annotations: Mapping[str, str],
    labels: Mapping[str, str],
    unschedulable: bool,
    *,
    keep_cordon: bool = False,
) -> dict[str, Any]:
    """The merge patch that forgets `skyhook` on a node with these annotations and labels.
    `keep_cordon`: the Skyhook still selects the node (or could not be read), so its re-run
    will let go of its cordon."""
    owned = [key for key in owned_annotations(skyhook) if key in annotations]
    if keep_cordon:
        owned = [key for key in owned if key != keys.cordon_key(skyhook)]
    remove: dict[str, Any] = dict.fromkeys(owned)
    others_with_state = [
        key
        for key in annotations
        if key.startswith(NODE_STATE_PREFIX) and key != keys.node_state_key(skyhook)
    ]
    if not others_with_state:
        remove.update({key: None for key in annotations if key.startswith(AUTO_TAINT_PREFIX)})
    metadata: dict[str, Any] = {"annotations": remove}
    if keys.node_status_key(skyhook) in labels:
        metadata["labels"] = {keys.node_status_key(skyhook): None}
    patch: dict[str, Any] = {"metadata": metadata}
    other_cordons = [
        key
        for key in annotations
        if key.startswith(CORDON_PREFIX) and key != keys.cordon_key(skyhook)
    ]
    if (
        not keep_cordon
        and keys.cordon_key(skyhook) in annotations
        and unschedulable
        and not other_cordons
        and keys.RUNTIME_REQUIRED_CORDON_ANNOTATION not in annotations
    ):
        patch["spec"] = {"unschedulable": None}
    return patch
