"""A deleted Skyhook's cleanup: its node keys, conditions and cordon, its pods and ConfigMaps,
then the finalizer.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from skyhook_planner.model import nodestate
from skyhook_planner.model.actions import DeleteConfigMap, RemoveFinalizer
from skyhook_planner.model.snapshot import SkyhookView
from skyhook_planner.passes.context import PassIndex
from skyhook_planner.passes.decision import Decision, NodeOut, PodKey
from skyhook_schemas import keys


def cleanup(
    index: PassIndex,
    scr: SkyhookView,
    deleted: Set[PodKey],
    earlier: Mapping[str, NodeOut] | None = None,
) -> Decision:
    """Remove the Skyhook's keys and conditions from nodes, uncordon what it cordoned (unless
    another Skyhook's cordon marker is still there, counting what the Skyhooks before it in the
    pass wrote: `earlier`), delete its pods (but those in `deleted`, already going) and
    ConfigMaps, then let it go."""
    decision = Decision()
    for node in index.snap.nodes:
        out = decision.node(node.name)
        out.changes = nodestate.removal(node, scr.name)
        pending = earlier.get(node.name) if earlier else None
        markers = {**node.annotations, **(pending.changes.annotations if pending else {})}
        if node.annotations.get(keys.cordon_key(scr.name)) == "true" and not (
            nodestate.cordoned_by(markers) - {scr.name}
        ):
            out.unschedulable = False
        types = {keys.not_ready_condition(scr.name), keys.erroring_condition(scr.name)}
        out.drop_conditions += [c.type for c in node.conditions if c.type in types]
    for pod in index.skyhook_pods.get(scr.name, ()):
        if (pod.namespace, pod.name) not in deleted:
            decision.delete_pod(pod, f"Skyhook {scr.name} deleted")
    for cm in index.snap.configmaps:
        if (
            cm.labels.get(keys.NAME_LABEL) == scr.name
            or cm.labels.get(keys.NODE_META_LABEL) == scr.name
        ):
            decision.last.append(DeleteConfigMap(cm.namespace, cm.name))
    if keys.FINALIZER in scr.finalizers:
        decision.last.append(RemoveFinalizer(scr.name, keys.FINALIZER))
    return decision
