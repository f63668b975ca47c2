"""`node list|status|ignore|unignore|reset`: Skyhook activity per node, and per-node control."""

from __future__ import annotations

from typing import Any

import click

from skyhook_cli import candidates, nodestate, output
from skyhook_cli.app import (
    App,
    CliError,
    at_least_one,
    current_app,
    global_flags,
    lists_names,
    require,
)
from skyhook_cli.commands.reset import ask, report, reset_nodes, resettable
from skyhook_cli.kube import KubeError
from skyhook_cli.patterns import PatternError, match_nodes, quote
from skyhook_schemas import keys
from skyhook_schemas.nodestate import COMPLETE, ERRORING, Entries, decode_entries, states_on_node


@click.group("node", invoke_without_command=True)
@global_flags
@click.pass_context
def group(ctx: click.Context) -> None:
    """Skyhook state on nodes."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def matching(patterns: list[str], names: list[str]) -> list[str]:
    try:
        return match_nodes(patterns, names)
    except PatternError as error:
        raise CliError(f"matching nodes: {error}") from None


def decoded(
    app: App, node: str, skyhook: str, text: str, shown_skyhook: bool = False
) -> Entries | None:
    try:
        return decode_entries(text)
    except ValueError as error:
        which = f" skyhook {quote(skyhook)}" if shown_skyhook else ""
        app.note(f"Warning: skipping node {quote(node)}{which} - invalid annotation: {error}")
        return None


@lists_names
@group.command("list", short_help="List all nodes targeted by a Skyhook")
@click.option(
    "--skyhook",
    "--nodewright",
    "skyhook",
    default="",
    shell_complete=candidates.skyhook_name,
    help="Name of the Skyhook CR (required)",
)
@global_flags
def list_(skyhook: str) -> None:
    """List the nodes that have state for a Skyhook, with package completion."""
    require(skyhook=skyhook)
    app = current_app()
    entries = []
    for node in sorted(app.kube.list_nodes(), key=lambda n: n.metadata.name):
        text = (node.metadata.annotations or {}).get(keys.node_state_key(skyhook))
        if text is None:
            continue
        state = decoded(app, node.metadata.name, skyhook, text)
        if state is None:
            continue
        rolled = nodestate.rollup(state)
        entries.append(
            {
                "nodeName": node.metadata.name,
                "status": rolled.status,
                "packagesComplete": rolled.complete,
                "packagesTotal": rolled.total,
                "restarts": rolled.restarts,
            }
        )
    if not entries:
        app.nothing(f"No nodes found for Skyhook {quote(skyhook)}")
        return
    listed = output.names("node", [entry["nodeName"] for entry in entries])
    if app.emit({"skyhookName": skyhook, "nodes": entries}, names=listed):
        return
    statuses = [entry["status"] for entry in entries]
    complete, erroring = statuses.count(COMPLETE), statuses.count(ERRORING)
    app.say(f"Skyhook: {skyhook}\n")
    app.say(
        f"Summary: {len(entries)} nodes ({complete} complete, {erroring} erroring, "
        f"{len(entries) - complete - erroring} in progress)\n"
    )
    wide = app.output == "wide"
    headers = ["NODE", "STATUS", "PACKAGES", *(["RESTARTS"] if wide else [])]
    rows = []
    for entry in entries:
        status = str(entry["status"])
        row = [
            str(entry["nodeName"]),
            status.upper() if status == ERRORING else status,
            f"{entry['packagesComplete']}/{entry['packagesTotal']}",
        ]
        rows.append(row + ([str(entry["restarts"])] if wide else []))
    app.say(output.table(headers, rows), end="")


@lists_names
@group.command("status", short_help="Show all Skyhook activity on specific node(s)")
@click.argument(
    "patterns", nargs=-1, metavar="[node-name...]", shell_complete=candidates.node_names
)
@click.option(
    "--skyhook",
    "--nodewright",
    "skyhook",
    default="",
    shell_complete=candidates.skyhook_name,
    help="Filter by Skyhook name",
)
@global_flags
def status(patterns: tuple[str, ...], skyhook: str) -> None:
    """Show every Skyhook's state on the given nodes (names or regexes; default all nodes)."""
    app = current_app()
    nodes = app.kube.list_nodes()
    names = [node.metadata.name for node in nodes]
    if patterns:
        targets = set(matching(list(patterns), names))
        if not targets:
            app.nothing("No nodes matched the specified patterns")
            return
    else:
        targets = set(names)
    summaries: list[dict[str, Any]] = []
    for node in nodes:
        if node.metadata.name not in targets:
            continue
        annotations = node.metadata.annotations or {}
        cordon = {
            "cordoned": bool(node.spec and node.spec.unschedulable),
            "runtimeRequiredCordon": keys.RUNTIME_REQUIRED_CORDON_ANNOTATION in annotations,
        }
        for name, text in states_on_node(annotations).items():
            if skyhook and name != skyhook:
                continue
            state = decoded(app, node.metadata.name, name, text, shown_skyhook=True)
            if state is None:
                continue
            rolled = nodestate.rollup(state)
            packages = [
                {
                    "name": package.name,
                    "version": package.version,
                    "stage": package.stage,
                    "state": package.state,
                    "restarts": package.restarts,
                    **({"image": package.image} if package.image else {}),
                }
                for package in sorted(state.values(), key=lambda p: p.name)
            ]
            summary: dict[str, Any] = {
                "nodeName": node.metadata.name,
                "skyhookName": name,
                "status": rolled.status,
                "packagesComplete": rolled.complete,
                "packagesTotal": rolled.total,
            }
            if packages:
                summary["packages"] = packages
            summary.update(cordon)
            summaries.append(summary)
    summaries.sort(key=lambda s: (s["nodeName"], s["skyhookName"]))
    if not summaries:
        app.nothing("No Skyhook activity found on specified nodes")
        return
    if app.emit(summaries, names=output.names("node", [s["nodeName"] for s in summaries])):
        return
    if app.output == "wide":
        headers = ["NODE", "SKYHOOK", "PACKAGE", "VERSION", "STAGE", "STATE", "RESTARTS", "IMAGE"]
        rows = [
            [
                s["nodeName"],
                s["skyhookName"],
                p["name"],
                p["version"],
                p["stage"],
                p["state"],
                str(p["restarts"]),
                p.get("image", ""),
                *_cordon_cells(s),
            ]
            for s in summaries
            for p in s.get("packages", [])
        ]
    else:
        headers = ["NODE", "SKYHOOK", "STATUS", "PACKAGES"]
        rows = [
            [
                s["nodeName"],
                s["skyhookName"],
                s["status"],
                f"{s['packagesComplete']}/{s['packagesTotal']}",
                *_cordon_cells(s),
            ]
            for s in summaries
        ]
    headers += ["CORDONED", "RUNTIME-REQUIRED-CORDON"]
    app.say(output.table(headers, rows), end="")


def _cordon_cells(summary: dict[str, Any]) -> list[str]:
    """The node's cordon and whether it is the runtime-required one (spec.unschedulable, and
    the annotation that marks a cordon no Skyhook lifts)."""
    return [str(summary["cordoned"]).lower(), str(summary["runtimeRequiredCordon"]).lower()]


def set_ignore(patterns: tuple[str, ...], ignore: bool) -> None:
    wanted = at_least_one(patterns)
    app = current_app()
    nodes = {node.metadata.name: node for node in app.kube.list_nodes()}
    matched = matching(wanted, list(nodes))
    if not matched:
        app.say("No nodes matched the specified patterns")
        return
    app.say(f"{'Ignoring' if ignore else 'Unignoring'} {len(matched)} node(s):")
    for name in matched:
        app.say(f"  - {name}")
    if app.dry_run:
        app.say("\n[dry-run] No changes applied")
        return
    failures, done = [], 0
    for name in matched:
        ignored = (nodes[name].metadata.labels or {}).get(keys.IGNORE_LABEL) == "true"
        if ignored == ignore:
            app.say(f"  {name}: {'already ignored' if ignore else 'not ignored'}")
            continue
        value = "true" if ignore else None
        try:
            app.kube.patch_node(name, {"metadata": {"labels": {keys.IGNORE_LABEL: value}}})
        except KubeError as error:
            failures.append(f"{name}: {error}")
            continue
        done += 1
    verb = "ignored" if ignore else "unignored"
    app.report_nodes(
        failures, done + len(failures), "updating", f"Successfully {verb} {{done}} node(s)"
    )
    if failures:
        raise CliError(f"{len(failures)} of {len(matched)} node(s) could not be updated")


@group.command("ignore", short_help="Ignore node(s) from Skyhook processing")
@click.argument(
    "patterns", nargs=-1, metavar="<node-name...>", shell_complete=candidates.node_names
)
@global_flags
def ignore(patterns: tuple[str, ...]) -> None:
    """Label nodes skyhook.nvidia.com/ignore=true: no Skyhook works on them (all Skyhooks)."""
    set_ignore(patterns, True)


@group.command("unignore", short_help="Remove ignore label from node(s)")
@click.argument(
    "patterns", nargs=-1, metavar="<node-name...>", shell_complete=candidates.node_names
)
@global_flags
def unignore(patterns: tuple[str, ...]) -> None:
    """Remove the skyhook.nvidia.com/ignore label, so Skyhooks work on the nodes again."""
    set_ignore(patterns, False)


@group.command("reset", short_help="Reset all package state on node(s) for a Skyhook")
@click.argument(
    "patterns", nargs=-1, metavar="<node-name...>", shell_complete=candidates.node_names
)
@click.option(
    "--skyhook",
    "--nodewright",
    "skyhook",
    default="",
    shell_complete=candidates.skyhook_name,
    help="Name of the Skyhook CR (required)",
)
@click.option("-y", "--confirm", is_flag=True, help="Skip confirmation prompt")
@global_flags
def reset(patterns: tuple[str, ...], skyhook: str, confirm: bool) -> None:
    """Forget a Skyhook on the given nodes (names or regexes), so all its packages rerun there."""
    wanted = at_least_one(patterns)
    require(skyhook=skyhook)
    app = current_app()
    nodes = {node.metadata.name: node for node in app.kube.list_nodes()}
    matched = matching(wanted, list(nodes))
    if not matched:
        app.say("No nodes matched the specified patterns")
        return
    chosen, selected = resettable(app, [nodes[name] for name in matched], skyhook)
    if not chosen:
        app.say(f"No nodes have state for Skyhook {quote(skyhook)}")
        return
    app.say(f"Skyhook: {skyhook}")
    app.say(f"Nodes to reset ({len(chosen)}):")
    for node, packages in chosen:
        app.say(f"  - {node.metadata.name} ({packages} packages)")
    if app.dry_run:
        app.say("\n[dry-run] No changes applied")
        return
    lines = [
        f"\nThis will remove ALL package state for Skyhook {quote(skyhook)} on these nodes.",
        "All packages will re-run from the beginning.",
    ]
    if not confirm and not ask(app, lines):
        return
    failures = reset_nodes(app, [node for node, _ in chosen], skyhook, selected)
    report(app, failures, skyhook, len(chosen))
    if failures:
        raise CliError(f"{len(failures)} of {len(chosen)} node(s) could not be reset")
