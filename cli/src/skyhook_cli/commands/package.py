"""`package status|rerun|logs`: one package of a Skyhook across nodes."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click

from skyhook_cli import candidates, nodestate, output
from skyhook_cli.app import (
    CliError,
    current_app,
    exactly_one,
    global_flags,
    lists_names,
    require,
    write,
)
from skyhook_cli.commands.reset import ask
from skyhook_cli.kube import KubeError
from skyhook_cli.packagestate import runs_package, write_states
from skyhook_cli.patterns import PatternError, match_nodes, quote
from skyhook_schemas import keys
from skyhook_schemas.nodestate import IN_PROGRESS, Entries, decode_entries
from skyhook_schemas.podpackage import INTERRUPT_CONTAINER, decode_pod_package

# The operator cuts package names to this length in container names (63 with the suffix).
CONTAINER_PREFIX_LENGTH = 43


@click.group("package", invoke_without_command=True)
@global_flags
@click.pass_context
def group(ctx: click.Context) -> None:
    """Packages of a Skyhook on nodes."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def check_stage(stage: str) -> None:
    if stage and stage not in nodestate.USER_STAGES:
        raise CliError(
            f"invalid stage {quote(stage)}: must be one of {', '.join(nodestate.USER_STAGES)}"
        )


def matching(patterns: list[str], names: list[str]) -> list[str]:
    try:
        return match_nodes(patterns, names)
    except PatternError as error:
        raise CliError(f"matching nodes: {error}") from None


def states(skyhook: str) -> tuple[dict[str, Entries], list[Any]]:
    """Decoded nodeState of `skyhook` per node name (nodes without it left out)."""
    app = current_app()
    found: dict[str, Entries] = {}
    nodes = app.kube.list_nodes()
    for node in nodes:
        text = (node.metadata.annotations or {}).get(keys.node_state_key(skyhook))
        if text is None:
            continue
        try:
            found[node.metadata.name] = decode_entries(text)
        except ValueError as error:
            app.note(
                f"Warning: skipping node {quote(node.metadata.name)} - invalid annotation: {error}"
            )
    return found, nodes


@lists_names
@group.command("status", short_help="Query package status across nodes")
@click.argument("args", nargs=-1, metavar="<package-name>")
@click.option(
    "--skyhook",
    "--nodewright",
    "skyhook",
    default="",
    shell_complete=candidates.skyhook_name,
    help="Name of the Skyhook CR (required)",
)
@click.option(
    "--node",
    "nodes",
    multiple=True,
    shell_complete=candidates.node_names,
    help="Node name or regex pattern (repeatable)",
)
@global_flags
def status(args: tuple[str, ...], skyhook: str, nodes: tuple[str, ...]) -> None:
    """Show a package's stage and state on every node with state for the Skyhook."""
    package = exactly_one(args)
    require(skyhook=skyhook)
    app = current_app()
    scr = app.kube.get_skyhook(skyhook)
    found, node_objects = states(skyhook)
    names = set(matching(list(nodes), list(found))) if nodes else set(found)
    # Packages with an image compatibility artifact: the image each node was given.
    selected = {
        node.metadata.name: nodestate.image_selection(
            node.metadata.annotations or {}, skyhook, package
        )
        for node in node_objects
    }
    rows = sorted(
        (
            (node, entry)
            for node, state in found.items()
            if node in names
            for entry in state.values()
            if entry.name == package
        ),
        key=lambda item: (item[0], item[1].name),
    )
    if not rows:
        app.nothing(f"No package status found for skyhook {quote(skyhook)}")
        return
    if app.emit(
        [
            {**entry.to_json(), "nodeName": node, **_selection_fields(selected.get(node, {}))}
            for node, entry in rows
        ],
        names=output.names("node", [node for node, _ in rows]),
    ):
        return
    specs = (scr.get("spec") or {}).get("packages") or {}
    listed = sorted(f"{name}:{spec.get('version', '')}" for name, spec in specs.items())
    app.say(f"Skyhook: {scr['metadata']['name']}\nPackages: {', '.join(listed)}\n")
    wide = app.output == "wide"
    headers = ["NODE", "PACKAGE", "VERSION", "STAGE", "STATE"]
    if wide:
        headers += ["RESTARTS", "IMAGE"]
    table = []
    for node, entry in rows:
        row = [node, entry.name, entry.version, entry.stage, entry.state]
        image = selected.get(node, {}).get("image") or entry.image
        table.append(row + ([str(entry.restarts), image] if wide else []))
    app.say(output.table(headers, table), end="")


def _selection_fields(record: dict[str, str]) -> dict[str, str]:
    """JSON fields for a node given an image by our operator's image compatibility
    selection; none otherwise, so upstream's shape is unchanged."""
    names = {"image": "selectedImage", "matched": "matchedCandidate", "unmatched": "unmatched"}
    return {names[k]: v for k, v in record.items() if k in names}


@group.command("rerun", short_help="Force a package to re-run on specific node(s)")
@click.argument("args", nargs=-1, metavar="<package-name>")
@click.option(
    "--skyhook",
    "--nodewright",
    "skyhook",
    default="",
    shell_complete=candidates.skyhook_name,
    help="Name of the Skyhook CR (required)",
)
@click.option(
    "--node",
    "nodes",
    multiple=True,
    shell_complete=candidates.node_names,
    help="Node name or regex pattern (repeatable, required)",
)
@click.option(
    "--stage",
    default="",
    shell_complete=candidates.choices(nodestate.USER_STAGES),
    help="Re-run from stage: apply, config, interrupt, post-interrupt",
)
@click.option("-y", "--confirm", is_flag=True, help="Skip confirmation prompt")
@global_flags
def rerun(
    args: tuple[str, ...], skyhook: str, nodes: tuple[str, ...], stage: str, confirm: bool
) -> None:
    """Make the operator run a package again on the given nodes: from the beginning (its
    state entry is removed) or, with --stage, from that stage."""
    package = exactly_one(args)
    require(skyhook=skyhook, node=nodes)
    check_stage(stage)
    app = current_app()
    spec = ((app.kube.get_skyhook(skyhook).get("spec") or {}).get("packages") or {}).get(package)
    if spec is None:
        raise CliError(f"package {quote(package)} not found in skyhook {quote(skyhook)}")
    version = str(spec.get("version", ""))
    key = keys.package_key(package, version)
    found, _ = states(skyhook)
    matched = matching(list(nodes), list(found))
    if not matched:
        app.say("No nodes matched the specified patterns")
        return
    chosen = [node for node in matched if key in found[node]]
    if not chosen:
        app.say(f"Package {quote(package)} (version {version}) has no state on matched nodes")
        return
    app.say(f"Package: {package} (version {version})")
    app.say(f"Skyhook: {skyhook}")
    if stage:
        app.say(f"Re-run from stage: {stage}")
    app.say(f"Nodes to reset ({len(chosen)}):")
    for node in chosen:
        entry = found[node][key]
        app.say(f"  - {node} (current state: {entry.state}, stage: {entry.stage})")
    if app.dry_run:
        app.say("\n[dry-run] No changes applied")
        return
    if stage:
        line = f"\nThis will reset package state to re-run from the '{stage}' stage."
    else:
        line = (
            "\nThis will remove package state from node annotations and cause the package "
            "to re-run from the beginning."
        )
    if not confirm and not ask(app, [line]):
        return
    failures = apply_rerun(skyhook, {node: found[node] for node in chosen}, key, stage)
    app.report_nodes(
        failures,
        len(chosen),
        "updating",
        f"Successfully reset package {quote(package)} on {{done}} node(s)",
    )
    if failures:
        raise CliError(f"{len(failures)} of {len(chosen)} node(s) could not be updated")


def rerun_state(state: Entries, key: str, stage: str) -> Entries:
    """The node's state after a rerun: the entry back at `stage` in progress with no failed
    attempts (a fresh retry budget), or gone."""
    state = dict(state)
    if stage:
        state[key] = replace(state[key], stage=stage, state=IN_PROGRESS, restarts=0)
    else:
        del state[key]
    return state


def apply_rerun(skyhook: str, states: dict[str, Entries], key: str, stage: str) -> list[str]:
    """Write each node's state after the rerun; the failures."""
    package = key.split("|", maxsplit=1)[0]
    after = {node: rerun_state(state, key, stage) for node, state in states.items()}
    return write_states(current_app(), skyhook, after, package)


def containers_to_show(pod: Any, package: str, stage: str) -> list[str]:
    declared = [c.name for c in (pod.spec.init_containers or [])]
    declared += [c.name for c in (pod.spec.containers or [])]
    if stage:
        wanted = f"{package[:CONTAINER_PREFIX_LENGTH]}-{stage}"
        if wanted in declared:
            return [wanted]
        # An interrupt pod's container is named for the interrupt, not the package: its
        # package annotation says which stage it runs.
        if INTERRUPT_CONTAINER in declared and _annotated_stage(pod) == stage:
            return [INTERRUPT_CONTAINER]
        return []
    statuses = (pod.status.init_container_statuses if pod.status else None) or []
    started = [s for s in statuses if s.state is None or s.state.waiting is None]
    chosen = [s.name for s in started if not s.name.endswith("-init")]
    if chosen:
        return chosen
    chosen = [s.name for s in started if s.state and (s.state.running or s.state.terminated)]
    if chosen:
        return chosen
    init = pod.spec.init_containers or []
    return [init[0].name] if init else []


def _annotated_stage(pod: Any) -> str:
    found = decode_pod_package(pod.metadata.labels or {}, pod.metadata.annotations or {})
    return found.stage if found is not None else ""


def container_status(pod: Any, name: str) -> Any:
    if pod.status is None:
        return None
    for status in (pod.status.init_container_statuses or []) + (
        pod.status.container_statuses or []
    ):
        if status.name == name:
            return status
    return None


def describe(status: Any) -> str:
    if status is None or status.state is None:
        return ""
    if status.state.waiting is not None:
        return f" [{status.state.waiting.reason or 'Waiting'}]"
    if status.state.running is not None:
        return " [Running]"
    if status.state.terminated is not None:
        code = status.state.terminated.exit_code
        return " [Completed]" if code == 0 else f" [Exit: {code}]"
    return ""


@group.command("logs", short_help="Retrieve logs from Skyhook package pods")
@click.argument("args", nargs=-1, metavar="<package-name>")
@click.option(
    "--skyhook",
    "--nodewright",
    "skyhook",
    default="",
    shell_complete=candidates.skyhook_name,
    help="Name of the Skyhook CR (required)",
)
@click.option(
    "--node",
    default="",
    shell_complete=candidates.node_names,
    help="Filter by node name (or regex)",
)
@click.option(
    "--stage",
    default="",
    shell_complete=candidates.choices(nodestate.USER_STAGES),
    help="Filter by stage (apply, config, interrupt, post-interrupt)",
)
@click.option("-f", "--follow", is_flag=True, help="Follow log output")
@click.option("--tail", default=-1, type=int, help="Lines from the end of logs (-1 for all)")
@global_flags
def logs(
    *, args: tuple[str, ...], skyhook: str, node: str, stage: str, follow: bool, tail: int
) -> None:
    """Print the logs of a package's stage pods in -n (default skyhook), newest pod first."""
    package = exactly_one(args)
    require(skyhook=skyhook)
    check_stage(stage)
    app = current_app()
    pods = app.kube.list_pods(app.namespace, f"{keys.NAME_LABEL}={skyhook}")
    if not pods:
        app.say(f"No pods found for skyhook {quote(skyhook)} in namespace {quote(app.namespace)}")
        return
    chosen = [
        pod
        for pod in pods
        if runs_package(pod, package) and (not node or matching([node], [pod.spec.node_name or ""]))
    ]
    chosen.sort(key=lambda pod: pod.metadata.creation_timestamp, reverse=True)
    # Only the pods with a container to show: --stage leaves out the other stages' pods.
    shown = [(pod, containers_to_show(pod, package, stage)) for pod in chosen]
    shown = [(pod, containers) for pod, containers in shown if containers]
    if not shown:
        app.say("No pods matched the specified filters")
        return
    for index, (pod, containers) in enumerate(shown):
        if index:
            app.say("\n---")
        for position, container in enumerate(containers):
            if len(containers) > 1:
                if position:
                    app.say()
                app.say(f"=== Container: {container} ===")
            show_log(pod, container, follow, tail)


def show_log(pod: Any, container: str, follow: bool, tail: int) -> None:
    app = current_app()
    status = container_status(pod, container)
    app.say(
        f"==> Pod: {pod.metadata.name}, Container: {container}{describe(status)}, "
        f"Node: {pod.spec.node_name or ''} <=="
    )
    if status is not None and status.state is not None and status.state.waiting is not None:
        waiting = status.state.waiting
        message = waiting.message or "Container has not started yet"
        app.say(f"(no logs available: {waiting.reason or ''} - {message})")
        return
    try:
        for chunk in app.kube.pod_log(
            app.namespace, pod.metadata.name, container, follow, tail if tail >= 0 else None
        ):
            write(chunk)
    except KubeError as error:
        app.say(f"Error getting logs for {pod.metadata.name}/{container}: {error}")
