"""Package ConfigMaps of one Skyhook: create them, delete stale ones, and accept a configMap edit
once no pod of that package runs, sending past-config nodes back to config.
"""

from __future__ import annotations

from dataclasses import replace

from skyhook_planner import podbuilder
from skyhook_planner.model.actions import DeleteConfigMap, UpsertConfigMap
from skyhook_planner.model.nodestate import NodeState
from skyhook_planner.model.snapshot import ConfigMapView, NodeView, PodView
from skyhook_planner.model.spec import Package
from skyhook_planner.passes.context import SkyhookContext
from skyhook_planner.passes.grouped import by_key
from skyhook_planner.passes.work import SkyhookWork, Step, WorkChanges
from skyhook_planner.rules import results, stages
from skyhook_schemas import keys
from skyhook_schemas.nodestate import CONFIG, IN_PROGRESS, INTERRUPT, POST_INTERRUPT

_PAST_CONFIG = {CONFIG, INTERRUPT, POST_INTERRUPT}


def reconcile(ctx: SkyhookContext, work: SkyhookWork) -> Step:
    """Create missing package ConfigMaps, take in configMap edits, delete ConfigMaps of
    packages and nodes this Skyhook no longer has."""
    decision = Step(
        changes=WorkChanges(config_updates={k: list(v) for k, v in work.config_updates.items()})
    )
    wanted_names = set()
    for package in ctx.spec.packages.values():
        if not package.config_map:
            continue
        name = keys.package_configmap_name(ctx.name, package.name, package.version)
        wanted_names.add(name)
        current = ctx.index.configmaps.get(name)
        if current is None:
            decision.out.first.append(
                UpsertConfigMap(podbuilder.build_package_configmap(ctx.settings, ctx.scr, package))
            )
        elif not current.holds(package.config_map):
            decision.merge(_config_edit(ctx, work, package, current, decision))
    grouped = ctx.index.grouped
    labelled = grouped.skyhook_configmaps.get(ctx.name, {})
    for key in sorted(labelled):
        if labelled[key].name not in wanted_names:
            decision.out.last.append(DeleteConfigMap(*key))
    # Node metadata ConfigMaps of nodes no longer selected, or not named for their node, go
    # unless named for another selected node; the common case is looked at by set difference.
    by_node = grouped.node_metadata.get(ctx.name, {})
    unselected = by_node.keys() - ctx.selected_names
    suspects = {by_key(cm): cm for node in unselected for cm in by_node[node]}
    suspects.update(grouped.misnamed_metadata.get(ctx.name, {}))
    if suspects:
        expected = {keys.node_metadata_configmap_name(ctx.name, n) for n in ctx.selected_names}
        for key in sorted(suspects):
            if suspects[key].name not in expected:
                decision.out.last.append(DeleteConfigMap(*key))
    return decision


def _config_edit(
    ctx: SkyhookContext, work: SkyhookWork, package: Package, current: ConfigMapView, so_far: Step
) -> Step:
    """A configMap edit is accepted once no pod of the package is running: every node past
    its config stage goes back to config, and the ConfigMap is rewritten after the nodes.
    `so_far` is what `reconcile` decided for the packages before this one."""

    def state(node: NodeView) -> NodeState:
        return (
            decision.changes.states.get(node.name)
            or so_far.changes.states.get(node.name)
            or work.state(node)
        )

    decision = Step(changes=WorkChanges(stale_config={package.name}))
    label = podbuilder.package_label(package.name, package.version)
    kept: list[PodView] = []  # finished pods of the stages that run again
    for pod in ctx.pods():
        if pod.labels.get(keys.PACKAGE_LABEL) != label or not work.present(pod):
            continue
        if not work.live(pod):
            pkg = ctx.index.pod_package(pod)
            if pkg is not None and pkg.stage in _PAST_CONFIG:
                kept.append(pod)
            continue
        pkg = ctx.index.pod_package(pod)
        failing = results.outcome(pod).result == results.FAILED
        if failing and pkg is not None and pkg.stage in _PAST_CONFIG:
            decision.delete_pod(pod, "superseded by a configMap edit")
        else:
            return decision  # wait for it: the edit must not change files under a running stage
    updates = dict(so_far.changes.config_updates or {})
    old = dict(current.data)
    changed = sorted(k for k, v in package.config_map.items() if old.get(k) != v)
    all_done = all(stages.is_complete(package, state(n).packages, updates) for n in ctx.matched)
    previous = [] if all_done else updates.get(package.name, [])
    updates[package.name] = sorted(set(previous) | set(changed))
    decision.changes.config_updates = updates
    # Their results are of the configuration before: the stages that run again must not take
    # them for their own, and need their names.
    for pod in kept:
        decision.delete_pod(pod, "superseded by a configMap edit")
    for node in ctx.matched:
        entry = state(node).packages.get(package.key)
        if entry is not None and entry.stage in _PAST_CONFIG:
            restarted = replace(entry, stage=CONFIG, state=IN_PROGRESS, restarts=0)
            decision.changes.states[node.name] = replace(
                state(node), entries={**state(node).packages, package.key: restarted}, error=""
            )
    decision.out.last.append(
        UpsertConfigMap(podbuilder.build_package_configmap(ctx.settings, ctx.scr, package))
    )
    return decision


def clear_on_version_change(ctx: SkyhookContext, work: SkyhookWork) -> Step:
    """Forget the config updates of packages that are gone or whose version changed: a node
    records another version and not yet the spec's (an older version's entry kept beside the
    spec's after a downgrade is no change)."""
    updates = dict(work.config_updates)
    for name in list(updates):
        package = ctx.spec.packages.get(name)
        if package is None or any(
            package.key not in work.state(n).packages
            and any(
                e.name == name and e.version != package.version
                for e in work.state(n).packages.values()
            )
            for n in ctx.matched
        ):
            del updates[name]
    return Step(changes=WorkChanges(config_updates=updates))
