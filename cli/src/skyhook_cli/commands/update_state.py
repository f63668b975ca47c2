"""`update-state <skyhook> <package> <version> <stage> <state>`: set one package entry of a
Skyhook's nodeState by hand, on the nodes chosen by name and label, for repairs the operator
cannot make (an entry a lost node left behind, a stage to mark done after fixing it by hand)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from skyhook_cli import candidates
from skyhook_cli.app import App, CliError, current_app, global_flags
from skyhook_cli.commands.reset import ask
from skyhook_cli.kube import KubeError
from skyhook_cli.patterns import PatternError, match_nodes, quote
from skyhook_schemas import keys
from skyhook_schemas.nodestate import STAGES, STATES, PackageEntry, decode_entries, encode_entries


@click.command("update-state", short_help="Set a package's stage and state on nodes by hand")
@click.argument("skyhook", shell_complete=candidates.skyhook_name)
@click.argument("package")
@click.argument("version")
@click.argument("stage", shell_complete=candidates.choices(STAGES))
@click.argument("state", shell_complete=candidates.choices(STATES))
@click.option(
    "--node",
    "nodes",
    multiple=True,
    shell_complete=candidates.node_names,
    help="Node name or regex pattern (repeatable)",
)
@click.option("-l", "--selector", default="", help="Label selector the nodes must match")
@click.option(
    "--add", is_flag=True, help="Create the entry where it is missing (needs --node or -l)"
)
@click.option("-y", "--confirm", is_flag=True, help="Skip confirmation prompt")
@global_flags
def command(
    *,
    skyhook: str,
    package: str,
    version: str,
    stage: str,
    state: str,
    nodes: tuple[str, ...],
    selector: str,
    add: bool,
    confirm: bool,
) -> None:
    """Set the entry PACKAGE|VERSION of SKYHOOK's nodeState to STAGE and STATE on every node
    that has it (or only those --node and -l choose); --add also creates it on the chosen
    nodes that lack it. Each node is written only if nobody changed it since it was read, so
    an operator write in between is never lost: pause the Skyhook first, or run it again."""
    if stage not in STAGES:
        raise click.UsageError(f"invalid stage {quote(stage)}: must be one of {', '.join(STAGES)}")
    if state not in STATES:
        raise click.UsageError(f"invalid state {quote(state)}: must be one of {', '.join(STATES)}")
    if add and not (nodes or selector):
        raise click.UsageError("--add needs --node or -l/--selector: it creates entries")
    app = current_app()
    chosen = _chosen_nodes(app, list(nodes), selector)
    key = keys.package_key(package, version)
    annotation = keys.node_state_key(skyhook)
    writes: list[tuple[Any, dict[str, PackageEntry], str]] = []
    image = _image(app, skyhook, package) if add else ""  # for the entries --add creates
    for node in chosen:
        text = (node.metadata.annotations or {}).get(annotation)
        try:
            entries = decode_entries(text)
        except ValueError as error:
            app.warn(
                f"Warning: skipping node {quote(node.metadata.name)} - invalid annotation: {error}"
            )
            continue
        before = entries.get(key)
        if before is None and not add:
            continue
        if before is None:
            after = PackageEntry(package, version, image, stage, state)
            change = f"added at {stage} {state}"
        else:
            after = replace(before, stage=stage, state=state)
            change = f"{before.stage} {before.state or '-'} -> {stage} {state}"
        writes.append((node, {**entries, key: after}, change))
    if not writes:
        app.say(f"No chosen node has package {quote(key)} of Skyhook {quote(skyhook)}")
        return
    app.say(f"Skyhook: {skyhook}")
    app.say(f"Package: {package} (version {version})")
    app.say(f"Nodes to update ({len(writes)}):")
    for node, _, change in writes:
        app.say(f"  - {node.metadata.name} ({change})")
    if app.dry_run:
        app.say("\n[dry-run] No changes applied")
        return
    line = (
        f"\nThis will rewrite the nodeState of Skyhook {quote(skyhook)} on {len(writes)} "
        "node(s); the operator acts on it as on its own."
    )
    if not confirm and not ask(app, [line]):
        return
    failures = []
    for node, entries, _ in writes:
        patch = {
            "metadata": {
                "resourceVersion": node.metadata.resource_version,
                "annotations": {annotation: encode_entries(entries)},
            }
        }
        try:
            app.kube.patch_node(node.metadata.name, patch)
        except KubeError as error:
            failures.append(f"{node.metadata.name}: {error}")
    app.report_nodes(
        failures,
        len(writes),
        "updating",
        f"Successfully updated package {quote(key)} on {{done}} node(s)",
    )
    if failures:
        raise CliError(f"{len(failures)} of {len(writes)} node(s) could not be updated")


def _chosen_nodes(app: App, patterns: list[str], selector: str) -> list[Any]:
    listed = app.kube.list_nodes(selector)
    if not patterns:
        return listed
    try:
        names = set(match_nodes(patterns, [node.metadata.name for node in listed]))
    except PatternError as error:
        raise CliError(f"matching nodes: {error}") from None
    return [node for node in listed if node.metadata.name in names]


def _image(app: App, skyhook: str, package: str) -> str:
    """The image the Skyhook names for `package`, for a new entry ("" when it names none)."""
    try:
        spec = app.kube.get_skyhook(skyhook).get("spec") or {}
    except KubeError:
        return ""
    return str(((spec.get("packages") or {}).get(package) or {}).get("image") or "")
