"""`plan [<skyhook>] [-f FILE]`: forecast a Skyhook's rollout on the live cluster; writes nothing.

The plugin reads Skyhooks, DeploymentPolicies, Nodes, pods bound to nodes and our ConfigMaps,
puts the given Skyhook (from the cluster, or from a file, replacing the one of the same name)
into an in-memory copy, and runs the operator's own planner forward in simulated time
(`skyhook_planner.sim.forecast`). Every API call here is a read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import yaml

from skyhook_cli import candidates, output
from skyhook_cli.app import App, CliError, current_app, global_flags
from skyhook_cli.patterns import quote
from skyhook_planner.model.settings import PlannerSettings
from skyhook_planner.sim.cluster import SimCluster
from skyhook_planner.sim.forecast import Forecast, Timing, forecast, observed_durations
from skyhook_schemas import keys


@click.command("plan", short_help="Forecast a Skyhook's rollout without changing anything")
@click.argument(
    "args", nargs=-1, metavar="[<skyhook-name>]", shell_complete=candidates.skyhook_name
)
@click.option(
    "-f",
    "--filename",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A Skyhook manifest (YAML or JSON; may also hold DeploymentPolicies) to plan as if "
    "applied.",
)
@click.option(
    "--stage-seconds",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="How long a stage takes when no finished stage pod of that package shows it.",
)
@click.option(
    "--reboot-seconds",
    type=click.FloatRange(min=0),
    default=120.0,
    show_default=True,
    help="How long a reboot interrupt takes until the node is back.",
)
@global_flags
def command(
    args: tuple[str, ...], filename: Path | None, stage_seconds: float, reboot_seconds: float
) -> None:
    """Show which nodes a Skyhook would run which stage on, wave by wave, which nodes stay
    blocked and why, and how long the rollout would take. Nothing is written."""
    if len(args) > 1:
        raise click.UsageError(f"accepts at most 1 arg(s), received {len(args)}")
    if not args and filename is None:
        raise click.UsageError("give a Skyhook name or -f/--filename")
    app = current_app()
    given_skyhook, given_policies = read_manifest(filename) if filename else (None, [])
    if given_skyhook is not None:
        name = str(given_skyhook["metadata"]["name"])
        if args and args[0] != name:
            raise click.UsageError(
                f"the Skyhook in {filename} is named {quote(name)}, not {quote(args[0])}"
            )
    else:
        name = args[0]
    cluster = _read_cluster(app, name, given_skyhook, given_policies)
    timing = Timing(stage_seconds, reboot_seconds, observed_durations(cluster.pods.values()))
    result = forecast(
        cluster,
        name,
        settings=PlannerSettings(namespace=app.namespace),
        timing=timing,
        start=datetime.now(UTC),
    )
    if not app.emit(result.to_json()):
        app.say(render(result), end="")


def read_manifest(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    except (OSError, yaml.YAMLError) as error:
        raise CliError(f"reading {path}: {error}") from None
    skyhooks, policies = [], []
    for document in documents:
        kind = document.get("kind") if isinstance(document, Mapping) else None
        if kind == keys.KIND:
            skyhooks.append(document)
        elif kind == keys.POLICY_KIND:
            policies.append(document)
        else:
            raise CliError(
                f"{path}: kind {quote(str(kind))} is neither Skyhook nor DeploymentPolicy"
            )
    if len(skyhooks) != 1:
        raise CliError(f"{path}: expected exactly one Skyhook, found {len(skyhooks)}")
    for document in (*skyhooks, *policies):
        if not (document.get("metadata") or {}).get("name"):
            raise CliError(f"{path}: a {document['kind']} without metadata.name")
    return skyhooks[0], policies


def _read_cluster(
    app: App,
    name: str,
    given: Mapping[str, Any] | None,
    given_policies: Sequence[Mapping[str, Any]],
) -> SimCluster:
    kube = app.kube
    skyhooks = {s["metadata"]["name"]: s for s in kube.list_skyhooks()}
    if given is None and name not in skyhooks:
        kube.get_skyhook(name)  # fails with the apiserver's own "not found" message
    if given is not None:
        live = skyhooks.get(name)
        if live is None:  # a new Skyhook starts with no status
            skyhooks[name] = {"metadata": dict(given["metadata"]), "spec": given.get("spec") or {}}
        else:  # a change to a live one: its status and control annotations carry on
            skyhooks[name] = {**live, "spec": given.get("spec") or {}}
    policies = {p["metadata"]["name"]: p for p in kube.list_policies()}
    policies.update({p["metadata"]["name"]: dict(p) for p in given_policies})
    ours = [
        c
        for c in kube.list_configmaps(app.namespace)
        if {keys.NAME_LABEL, keys.NODE_META_LABEL} & set(c["metadata"].get("labels") or {})
    ]
    return SimCluster.from_objects(
        nodes=[kube.as_json(n) for n in kube.list_nodes()],
        pods=kube.list_bound_pods(),
        configmaps=ours,
        skyhooks=skyhooks.values(),
        policies=policies.values(),
    )


def duration(seconds: float) -> str:
    """Go's time.Duration text rounded to seconds: 0s, 45s, 3m0s, 1h2m5s."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def render(result: Forecast) -> str:
    lines = [
        f"Skyhook: {result.skyhook}",
        f"Selected nodes: {len(result.selected)} (at most {result.ceiling} at once), "
        f"already complete: {len(result.already_complete)}, blocked: {len(result.blocked)}",
        f"Estimated duration: {duration(result.total_s)}",
    ]
    text = "\n".join(lines) + "\n"
    for wave in result.waves:
        text += f"\nWave {wave.number} (starts at +{duration(wave.start_s)}): "
        text += ", ".join(wave.nodes) + "\n"
        rows = [
            [r.node, keys.package_key(r.package, r.version), r.stage, f"+{duration(r.start_s)}"]
            for r in wave.runs
        ]
        text += output.table(["NODE", "PACKAGE", "STAGE", "START"], rows)
    if result.blocked:
        text += "\nBlocked:\n"
        text += output.table(["NODE", "REASON"], [[b.node, b.reason] for b in result.blocked])
    if not result.waves and not result.blocked:
        text += "\nNothing to do: every selected node is complete.\n"
    return text
