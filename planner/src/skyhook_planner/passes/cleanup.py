"""A deleted Skyhook's cleanup: its node keys, conditions and cordon, its pods and ConfigMaps,
then the finalizer.
"""

from __future__ import annotations

from skyhook_planner.model import nodestate
from skyhook_planner.model.actions import DeleteConfigMap, RemoveFinalizer
from skyhook_planner.model.snapshot import SkyhookView
from skyhook_planner.passes.context import PassIndex
from skyhook_planner.passes.decision import Decision
from skyhook_planner.passes.earlier import Earlier
from skyhook_schemas import keys


def cleanup(index: PassIndex, scr: SkyhookView, earlier: Earlier) -> Decision:
    """Remove the Skyhook's keys and conditions from nodes, uncordon what it cordoned (unless
    another Skyhook's cordon marker is still there, counting what the Skyhooks before it in the
    pass wrote: `earlier`), delete its pods (but those `earlier` deleted, already going) and
    ConfigMaps, then let it go."""
    decision = Decision()
    for node in index.snap.nodes:
        out = decision.node(node.name)
        out.changes = nodestate.removal(node, scr.name)
        _, holders = earlier.cordon_of(node)
        if node.annotations.get(keys.cordon_key(scr.name)) == "true" and not (holders - {scr.name}):
            out.unschedulable = False
        types = {keys.not_ready_condition(scr.name), keys.erroring_condition(scr.name)}
        out.drop_conditions += [c.type for c in node.conditions if c.type in types]
    for pod in index.pods_of(scr.name):
        if (pod.namespace, pod.name) not in earlier.deleted:
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
