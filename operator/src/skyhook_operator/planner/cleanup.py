"""A deleted Skyhook's cleanup plan: its node keys, conditions and cordon, its pods and
ConfigMaps, then the finalizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyhook_operator import nodestate
from skyhook_operator.planner.model import (
    DeleteConfigMap,
    RemoveFinalizer,
    SkyhookView,
)
from skyhook_schemas import keys

if TYPE_CHECKING:
    from skyhook_operator.planner.plan import Pass


def cleanup(run: Pass, scr: SkyhookView) -> None:
    """A deleted Skyhook: remove its keys and conditions from nodes, uncordon what it
    cordoned, delete its pods and ConfigMaps, then let it go."""
    for node in run.snap.nodes:
        out = run.out[node.name]
        nodestate.removal_into(out.changes, node, scr.name)
        if node.annotations.get(keys.cordon_key(scr.name)) == "true":
            out.unschedulable = False
        types = {keys.not_ready_condition(scr.name), keys.erroring_condition(scr.name)}
        out.drop_conditions += [c.type for c in node.conditions if c.type in types]
    for pod in run.skyhook_pods.get(scr.name, ()):
        run.delete_pod(pod, f"Skyhook {scr.name} deleted")
    for cm in run.snap.configmaps:
        if (
            cm.labels.get(keys.NAME_LABEL) == scr.name
            or cm.labels.get(keys.NODE_META_LABEL) == scr.name
        ):
            run.last.append(DeleteConfigMap(cm.namespace, cm.name))
    if keys.FINALIZER in scr.finalizers:
        run.last.append(RemoveFinalizer(scr.name, keys.FINALIZER))
