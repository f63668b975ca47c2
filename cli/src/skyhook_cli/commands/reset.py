"""`reset <skyhook>`: forget a Skyhook on every node that has state for it, so it reruns.

Also resets the deployment-policy batch state unless `--skip-batch-reset`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from skyhook_cli import batch, candidates, cleanup, prompts
from skyhook_cli.app import App, CliError, current_app, exactly_one, global_flags
from skyhook_cli.kube import KubeError
from skyhook_cli.packagestate import write_states
from skyhook_cli.patterns import quote
from skyhook_schemas import keys
from skyhook_schemas.nodestate import Entries, decode_entries


def ask(app: App, lines: Sequence[str]) -> bool:
    """Print `lines`, ask to continue; False (after printing Aborted) unless the user agrees."""
    for line in lines:
        app.say(line)
    app.say("Continue? [y/N]: ", end="")
    try:
        agreed = prompts.confirmed(app.stdin)
    except prompts.NoAnswer:
        raise CliError("reading confirmation: EOF") from None
    if not agreed:
        app.say("Aborted")
    return agreed


def selected_now(app: App, skyhook: str) -> set[str] | None:
    """The nodes the Skyhook selects now (none when it is gone); None when it cannot be read."""
    try:
        found = [s for s in app.kube.list_skyhooks() if s["metadata"]["name"] == skyhook]
        if not found:
            return set()
        selector = cleanup.selector_text(found[0].get("spec", {}).get("nodeSelectors") or {})
        return {node.metadata.name for node in app.kube.list_nodes(selector)}
    except KubeError as error:
        app.warn(f"Warning: {error}; the Skyhook's cordons are kept")
        return None


def resettable(
    app: App, nodes: Sequence[Any], skyhook: str
) -> tuple[list[tuple[Any, int]], set[str] | None]:
    """The nodes with anything of `skyhook` to reset, each with its package count (0 for a
    nodeState that does not read: it is reset to nothing), and the nodes the Skyhook selects
    now (None: it could not be read), asked only when a node carries its cordon marker. A
    cordon marker alone counts only where no re-run will come to lift it."""
    cordon = keys.cordon_key(skyhook)
    marked = any(cordon in (n.metadata.annotations or {}) for n in nodes)
    selected = selected_now(app, skyhook) if marked else set()
    chosen = []
    for node in nodes:
        annotations, labels = node.metadata.annotations or {}, node.metadata.labels or {}
        kept = selected is None or node.metadata.name in selected
        if not cleanup.has_state(annotations, labels, skyhook, cordon_counts=not kept):
            continue
        packages = 0
        text = annotations.get(keys.node_state_key(skyhook))
        if text is not None:
            try:
                packages = len(decode_entries(text))
            except ValueError as error:
                app.note(
                    f"Warning: node {quote(node.metadata.name)} has invalid node state "
                    f"annotation; resetting metadata with empty package state: {error}"
                )
        chosen.append((node, packages))
    return chosen, selected


def reset_nodes(
    app: App, nodes: Sequence[Any], skyhook: str, selected: set[str] | None
) -> list[str]:
    """Patch each node; returns the failures as `<node>: <error>` lines. A node the Skyhook
    cordoned keeps that cordon where the Skyhook still selects it (`selected`; None: every
    node): its re-run lifts it."""
    failures = []
    for node in nodes:
        patch = cleanup.reset_patch(
            skyhook,
            node.metadata.annotations or {},
            node.metadata.labels or {},
            bool(node.spec and node.spec.unschedulable),
            keep_cordon=selected is None or node.metadata.name in selected,
        )
        try:
            app.kube.patch_node(node.metadata.name, patch)
        except KubeError as error:
            failures.append(f"{node.metadata.name}: {error}")
    return failures


def report(app: App, failures: Sequence[str], what: str, total: int) -> None:
    app.report_nodes(
        failures,
        total,
        "resetting",
        f"Successfully reset {{done}} node(s) for Skyhook {quote(what)}",
    )


def reset_batch_state(app: App, name: str) -> None:
    """Best effort, as part of `reset`: the batch state (with a DeploymentPolicy), then the node
    order (status.nodePriority and nodeOrderOffset), so numbering starts again at 0. Warnings
    on stderr, never a failure."""
    try:
        skyhook = app.kube.get_skyhook(name)
    except KubeError as error:
        app.warn(f"Warning: failed to get skyhook for batch reset: {error}")
        return
    if batch.compartments(skyhook):
        try:
            app.kube.patch_skyhook_status(name, batch.reset_patch(skyhook))
        except KubeError as error:
            app.warn(f"Warning: failed to reset batch state: {error}")
        else:
            app.say(f"Batch state reset for Skyhook {quote(name)}")
    try:
        app.kube.patch_skyhook_status(name, batch.NODE_ORDER_RESET)
    except KubeError as error:
        app.warn(f"Warning: failed to reset node ordering: {error}")


@click.command("reset", short_help="Reset all nodes for a Skyhook")
@click.argument("args", nargs=-1, metavar="<skyhook-name>", shell_complete=candidates.skyhook_name)
@click.option("-y", "--confirm", is_flag=True, help="Skip confirmation prompt")
@click.option(
    "--skip-batch-reset", is_flag=True, help="Skip resetting deployment policy batch state"
)
@click.option(
    "--package",
    default="",
    metavar="NAME[:VERSION]",
    help="Reset only this package (every version, or only VERSION); batch state is kept",
)
@global_flags
def command(args: tuple[str, ...], confirm: bool, skip_batch_reset: bool, package: str) -> None:
    """Remove a Skyhook's state from every node that has it, so all its packages rerun
    from the beginning; by default the deployment-policy batch state restarts at batch 1.
    With --package, only that package's state goes, and the batch state stays."""
    name = exactly_one(args)
    app = current_app()
    if package:
        reset_package(app, name, package, confirm)
        return
    chosen, selected = resettable(app, app.kube.list_nodes(), name)
    if not chosen:
        app.say(f"No nodes have state for Skyhook {quote(name)}")
        return
    app.say(f"Skyhook: {name}")
    app.say(f"Nodes to reset ({len(chosen)}):")
    for node, packages in chosen:
        app.say(f"  - {node.metadata.name} ({packages} packages)")
    if not skip_batch_reset:
        app.say("\nBatch state will also be reset (use --skip-batch-reset to preserve)")
    if app.dry_run:
        app.say("\n[dry-run] No changes applied")
        return
    lines = [
        f"\nThis will remove ALL package state for Skyhook {quote(name)} on {len(chosen)} node(s).",
        "All packages will re-run from the beginning.",
    ]
    if not skip_batch_reset:
        lines.append("Batch state will be reset to start from batch 1.")
    if not confirm and not ask(app, lines):
        return
    failures = reset_nodes(app, [node for node, _ in chosen], name, selected)
    report(app, failures, name, len(chosen))
    if not skip_batch_reset:
        reset_batch_state(app, name)
    if failures:
        raise CliError(f"{len(failures)} of {len(chosen)} node(s) could not be reset")


def reset_package(app: App, skyhook: str, wanted: str, confirm: bool) -> None:
    """`reset --package NAME[:VERSION]`: remove that package's entries (every version, or the
    one named) from the Skyhook's nodeState on every node, so the operator runs it again from
    the beginning there; the other packages and the batch state are left as they are."""
    package, _, version = wanted.partition(":")
    if not package:
        raise click.UsageError(f"--package {wanted!r}: give a package name, NAME or NAME:VERSION")
    state_key = keys.node_state_key(skyhook)
    kept: dict[str, Entries] = {}
    removed: dict[str, list[str]] = {}
    for node in app.kube.list_nodes():
        text = (node.metadata.annotations or {}).get(state_key)
        if text is None:
            continue
        try:
            entries = decode_entries(text)
        except ValueError as error:
            app.note(
                f"Warning: skipping node {quote(node.metadata.name)} - invalid annotation: {error}"
            )
            continue
        going = [
            entry
            for entry in entries.values()
            if entry.name == package and (not version or entry.version == version)
        ]
        if going:
            kept[node.metadata.name] = {k: e for k, e in entries.items() if e not in going}
            removed[node.metadata.name] = [f"{e.version}: {e.stage} {e.state}" for e in going]
    if not removed:
        app.say(f"No nodes have state for package {quote(wanted)} of Skyhook {quote(skyhook)}")
        return
    app.say(f"Skyhook: {skyhook}")
    app.say(f"Package: {wanted}")
    app.say(f"Nodes to reset ({len(removed)}):")
    for node, shown in removed.items():
        app.say(f"  - {node} ({'; '.join(shown)})")
    app.say("\nBatch state is kept (a package reset never resets it)")
    if app.dry_run:
        app.say("\n[dry-run] No changes applied")
        return
    line = (
        f"\nThis will remove the state of package {quote(wanted)} for Skyhook {quote(skyhook)} "
        f"on {len(removed)} node(s); it re-runs from the beginning there."
    )
    if not confirm and not ask(app, [line]):
        return
    failures = write_states(app, skyhook, kept, package)
    app.report_nodes(
        failures,
        len(removed),
        "resetting",
        f"Successfully reset package {quote(wanted)} on {{done}} node(s)",
    )
    if failures:
        raise CliError(f"{len(failures)} of {len(removed)} node(s) could not be reset")
