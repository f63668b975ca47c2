"""Package ConfigMaps of one Skyhook: create them, delete stale ones, and accept a configMap edit
(operator.md §4.6) once no pod of that package runs, sending past-config nodes back to config.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from skyhook_operator import podbuilder
from skyhook_operator.nodestate import (
    CONFIG,
    IN_PROGRESS,
    INTERRUPT,
    POST_INTERRUPT,
)
from skyhook_operator.planner import learning, stages
from skyhook_operator.planner.model import (
    ConfigMapView,
    DeleteConfigMap,
    UpsertConfigMap,
)
from skyhook_operator.spec import Package
from skyhook_schemas import keys

if TYPE_CHECKING:
    from skyhook_operator.planner.skyhook import SkyhookPass


def reconcile(sky: SkyhookPass) -> None:
    wanted_names = set()
    for package in sky.spec.packages.values():
        if not package.config_map:
            continue
        name = keys.package_configmap_name(sky.name, package.name, package.version)
        wanted_names.add(name)
        current = sky.p.configmaps.get(name)
        if current is None:
            sky.p.first.append(
                UpsertConfigMap(podbuilder.build_package_configmap(sky.settings, sky.scr, package))
            )
        elif dict(current.data) != dict(package.config_map):
            _config_edit(sky, package, current)
    for cm in sky.p.snap.configmaps:
        if cm.labels.get(keys.NAME_LABEL) == sky.name and cm.name not in wanted_names:
            sky.p.last.append(DeleteConfigMap(cm.namespace, cm.name))
    matched = {keys.node_metadata_configmap_name(sky.name, n.name) for n in sky.matched}
    for cm in sky.p.snap.configmaps:
        if cm.labels.get(keys.NODE_META_LABEL) == sky.name and cm.name not in matched:
            sky.p.last.append(DeleteConfigMap(cm.namespace, cm.name))


def _config_edit(sky: SkyhookPass, package: Package, current: ConfigMapView) -> None:
    """A configMap edit is accepted once no pod of the package is running: every node past
    its config stage goes back to config, and the ConfigMap is rewritten after the nodes."""
    sky.stale_config.add(package.name)
    label = podbuilder.package_label(package.name, package.version)
    for pod in sky.pods():
        if pod.labels.get(keys.PACKAGE_LABEL) != label or not sky.p.live(pod):
            continue
        pkg = sky.p.pod_package(pod)
        failing = learning.outcome(pod).result == learning.FAILED
        if failing and pkg is not None and pkg.stage in {CONFIG, INTERRUPT, POST_INTERRUPT}:
            sky.p.delete_pod(pod, "superseded by a configMap edit")
        else:
            return  # wait for it: the edit must not change files under a running stage
    old = dict(current.data)
    changed = sorted(k for k, v in package.config_map.items() if old.get(k) != v)
    all_done = all(
        stages.is_complete(package, sky.entries(n), sky.config_updates) for n in sky.matched
    )
    previous = [] if all_done else sky.config_updates.get(package.name, [])
    sky.config_updates[package.name] = sorted(set(previous) | set(changed))
    for node in sky.matched:
        entries = sky.entries(node)
        entry = entries.get(package.key)
        if entry is not None and entry.stage in {CONFIG, INTERRUPT, POST_INTERRUPT}:
            entries[package.key] = replace(entry, stage=CONFIG, state=IN_PROGRESS, restarts=0)
            sky.set_entries(node, entries)
    sky.p.last.append(
        UpsertConfigMap(podbuilder.build_package_configmap(sky.settings, sky.scr, package))
    )


def clear_on_version_change(sky: SkyhookPass) -> None:
    for name in list(sky.config_updates):
        package = sky.spec.packages.get(name)
        if package is None or any(
            e.name == name and e.version != package.version
            for n in sky.matched
            for e in sky.entries(n).values()
        ):
            del sky.config_updates[name]
