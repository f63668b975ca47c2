"""`skyhook-sandbox`: start, inspect and stop a local sandbox cluster from a shell."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from skyhook_sandbox.binaries import BuildError, ensure_binaries
from skyhook_sandbox.kubeapi import ready_nodes
from skyhook_sandbox.processes import is_running
from skyhook_sandbox.sandbox import Sandbox, SandboxError, default_state_dir
from skyhook_sandbox.versions import KUBERNETES_VERSION, VERSION_VARIABLE


def _labels(pairs: tuple[str, ...]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r}: expected key=value", param_hint="--label")
        labels[key] = value
    return labels


def _taints(specs: tuple[str, ...]) -> list[dict[str, str]]:
    taints = []
    for spec in specs:
        key_value, sep, effect = spec.rpartition(":")
        key, _, value = key_value.partition("=")
        if not sep or not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise click.BadParameter(f"{spec!r}: expected key[=value]:Effect", param_hint="--taint")
        taints.append(
            {"key": key, "value": value, "effect": effect}
            if value
            else {"key": key, "effect": effect}
        )
    return taints


state_dir_option = click.option(
    "--state-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where the sandbox keeps its state (default $SKYHOOK_SANDBOX_DIR or /var/tmp/skyhook-sandbox/default).",
)


@click.group()
def main() -> None:
    """A local Kubernetes sandbox: real kube-apiserver, etcd and controller-manager, and
    simulated nodes that run pods' containers as local processes."""


@main.command()
@state_dir_option
@click.option(
    "--nodes", "count", type=int, default=1, show_default=True, help="Simulated nodes to start."
)
@click.option("--label", "labels", multiple=True, help="Node label key=value (repeatable).")
@click.option(
    "--taint", "taints", multiple=True, help="Node taint key[=value]:Effect (repeatable)."
)
@click.option("--prefix", default="node", show_default=True, help="Node name prefix.")
@click.option(
    "--host-root", type=click.Choice(["plain", "debian"]), default="plain", show_default=True
)
@click.option("--image-map", type=click.Path(exists=True, path_type=Path), default=None,
              help="YAML image map checked before the defaults (see README).")  # fmt: skip
@click.option("--backoff", type=float, default=1.0, show_default=True,
              help="First restart back-off in seconds (kubelet: 10).")  # fmt: skip
def up(**options: Any) -> None:
    """Start the control plane and COUNT Ready nodes, then return (they keep running)."""
    count = options["count"]
    try:
        sandbox = Sandbox(
            options["state_dir"], image_map=options["image_map"], backoff_initial=options["backoff"]
        ).start()
        started = time.monotonic()
        names = sandbox.add_nodes(
            count,
            labels=_labels(options["labels"]),
            taints=_taints(options["taints"]),
            prefix=options["prefix"],
            host_root=options["host_root"],
            wait_ready=False,
        )
        sandbox.wait_ready(names, timeout=max(120.0, count * 1.5))
        seconds = time.monotonic() - started
    except SandboxError as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"{len(names)} node(s) Ready in {seconds:.1f} s")
    click.echo(f"kubeconfig: {sandbox.kubeconfig}")
    click.echo(f"export KUBECONFIG={sandbox.kubeconfig}")


@main.command()
def build() -> None:
    """Build the control plane into the cache, or find it there, without starting it: a later
    `up` or test session starts at once. The release is the one SKYHOOK_KUBERNETES names (the
    oldest supported when unset)."""
    try:
        binaries = ensure_binaries()
    except BuildError as error:
        raise click.ClickException(str(error)) from error
    done = "built" if binaries.built else "already built"
    click.echo(f"Kubernetes {KUBERNETES_VERSION} ({VERSION_VARIABLE}): {done}")
    for path in (binaries.kube_apiserver, binaries.kube_controller_manager, binaries.etcd):
        click.echo(f"  {path}")


@main.command()
@state_dir_option
def down(state_dir: Path | None) -> None:
    """Stop everything `up` started and unmount the node host roots."""
    try:
        Sandbox.attach(state_dir).stop()
    except SandboxError as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"stopped the sandbox in {state_dir or default_state_dir()}")


@main.command()
@state_dir_option
def status(state_dir: Path | None) -> None:
    """Print the kubeconfig path, the processes and the nodes."""
    try:
        sandbox = Sandbox.attach(state_dir)
    except SandboxError as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"kubeconfig: {sandbox.kubeconfig}")
    click.echo(f"server: {sandbox.server}")
    procs = [*(sandbox.control_plane.processes if sandbox.control_plane else []), sandbox.nodehost]
    for proc in procs:
        if proc is not None:
            state = "running" if is_running(proc) else "STOPPED"
            click.echo(f"{proc.name}: pid {proc.pid} {state} (log {proc.log})")
    try:
        ready = ready_nodes(sandbox)
        for node in sandbox.nodes():
            flag = "Ready" if node["name"] in ready else "NotReady"
            click.echo(f"node {node['name']}: {flag}, boot {node['boot_id'][:8]}, "
                       f"{len(node['pods'])} pod(s), host root {node['host_root']}")  # fmt: skip
    except (SandboxError, OSError) as error:
        click.echo(f"nodes: unavailable ({error})")
        sys.exit(1)


@main.group()
def nodes() -> None:
    """Add, reboot, remove or list simulated nodes of a running sandbox."""


@nodes.command("add")
@state_dir_option
@click.option("--nodes", "count", type=int, default=1, show_default=True)
@click.option("--label", "labels", multiple=True, help="key=value (repeatable)")
@click.option("--taint", "taints", multiple=True, help="key[=value]:Effect (repeatable)")
@click.option("--prefix", default="extra", show_default=True)
@click.option(
    "--host-root", type=click.Choice(["plain", "debian"]), default="plain", show_default=True
)
def nodes_add(**options: Any) -> None:
    """Add Ready nodes to a running sandbox; prints their names."""
    count, prefix = options["count"], options["prefix"]
    try:
        sandbox = Sandbox.attach(options["state_dir"])
        existing = {n["name"] for n in sandbox.nodes()}
        names: list[str] = []
        index = 0
        while len(names) < count:
            index += 1
            if f"{prefix}-{index}" not in existing:
                names.append(f"{prefix}-{index}")
        sandbox.add_nodes(
            names=names,
            labels=_labels(options["labels"]),
            taints=_taints(options["taints"]),
            host_root=options["host_root"],
        )
    except SandboxError as error:
        raise click.ClickException(str(error)) from error
    click.echo("\n".join(names))


@nodes.command("reboot")
@state_dir_option
@click.argument("name")
def nodes_reboot(state_dir: Path | None, name: str) -> None:
    try:
        boot_id = Sandbox.attach(state_dir).reboot(name)
    except SandboxError as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"{name} rebooted, boot id {boot_id}")


@nodes.command("remove")
@state_dir_option
@click.argument("names", nargs=-1, required=True)
def nodes_remove(state_dir: Path | None, names: tuple[str, ...]) -> None:
    try:
        Sandbox.attach(state_dir).remove_nodes(list(names))
    except SandboxError as error:
        raise click.ClickException(str(error)) from error


@nodes.command("list")
@state_dir_option
def nodes_list(state_dir: Path | None) -> None:
    try:
        for node in Sandbox.attach(state_dir).nodes():
            click.echo(f"{node['name']}\t{node['host_root']}")
    except SandboxError as error:
        raise click.ClickException(str(error)) from error
