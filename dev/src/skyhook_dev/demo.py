"""`skyhook-dev demo` (`tox -e demo`): a package rolling out across a sandbox cluster, live.

Steps, each shown as it happens: build (first run only) and start the sandbox control plane;
start simulated nodes labelled for the demo SCR; install the CRD; start the operator as a
subprocess; apply the SCR (the embedded demo-scr.yaml unless a path is given); show a live
table per node and package from watches; print each node's final nodeState and the file the
package wrote into its host root; tear everything down.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.panel import Panel

from skyhook_dev.harness import (
    OperatorProcess,
    apply_skyhook,
    ensure_namespace,
    install_crd,
    load_manifest,
    node_state,
)
from skyhook_dev.progress import NodeRow, RolloutView, Watchers
from skyhook_operator.kube.client import Kube, connect
from skyhook_operator.settings import load_settings
from skyhook_sandbox.progress import BuildProgress
from skyhook_sandbox.sandbox import Sandbox

DEFAULT_SCR = Path(__file__).with_name("demo-scr.yaml")
DEMO_LABEL = ("skyhook.nvidia.com/test-node", "demo")
# What the demo SCR's apply and config steps write on each node.
HELLO_FILE = "skyhook-hello-world"


def run_demo(
    scr_path: Path | None, nodes: int = 3, keep: bool = False, timeout: float = 600
) -> int:
    """Run the whole demo; returns the process exit code (0 when every node completed)."""
    console = Console()
    manifest = load_manifest(scr_path or DEFAULT_SCR)
    with _workdir(keep) as workdir:
        console.rule("[bold]Skyhook demo")
        console.print("starting the sandbox (the first run builds the control plane: minutes)")
        cluster = Sandbox(workdir / "sandbox", progress=BuildProgress(console)).start()
        try:
            return _run(console, cluster, manifest, nodes=nodes, timeout=timeout, workdir=workdir)
        finally:
            if keep:
                console.print(f"sandbox left running: export KUBECONFIG={cluster.kubeconfig}")
                console.print(f"stop it with: skyhook-sandbox down --state-dir {cluster.state_dir}")
            else:
                with console.status("tearing the sandbox down"):
                    cluster.stop()
                console.print("[green]✓[/green] sandbox stopped")


def _run(
    console: Console,
    cluster: Sandbox,
    manifest: dict[str, Any],
    *,
    nodes: int,
    timeout: float,
    workdir: Path,
) -> int:
    scr = manifest["metadata"]["name"]
    console.print(f"[green]✓[/green] control plane up ({cluster.server})")
    with console.status(f"starting {nodes} simulated nodes"):
        names = cluster.add_nodes(nodes, labels=dict([DEMO_LABEL]), prefix="demo")
    console.print(
        f"[green]✓[/green] nodes Ready: {', '.join(names)} ({DEMO_LABEL[0]}={DEMO_LABEL[1]})"
    )
    kube = connect(str(cluster.kubeconfig))
    with console.status("installing the Skyhook CRD"):
        install_crd(kube)
        ensure_namespace(kube, load_settings().namespace)
    console.print("[green]✓[/green] CRD skyhooks.skyhook.nvidia.com established")
    operator = OperatorProcess(cluster.kubeconfig, workdir / "operator.log").start()
    with console.status("starting the operator and its admission webhooks"):
        operator.wait_ready()
    console.print(f"[green]✓[/green] operator started (log: {operator.log_path})")
    try:
        apply_skyhook(kube, manifest)
        console.print(f"[green]✓[/green] Skyhook [bold]{scr}[/bold] applied")
        view = RolloutView(scr, {name: NodeRow() for name in names})
        watchers = Watchers(kube, scr, timeout).start()
        deadline = time.monotonic() + timeout
        if console.is_terminal:
            with Live(view.table(), console=console, refresh_per_second=4) as live:
                while not view.done and time.monotonic() < deadline and operator.running:
                    watchers.drain_into(view, wait=0.25)
                    live.update(view.table())
        else:  # a log or a pipe: a line whenever a node's row changes
            shown: dict[str, str] = {}
            while not view.done and time.monotonic() < deadline and operator.running:
                watchers.drain_into(view, wait=0.25)
                for name, line in view.lines().items():
                    if shown.get(name) != line:
                        console.print(
                            f"{time.monotonic() - view.started:5.0f}s  {line}", soft_wrap=True
                        )
                        shown[name] = line
        if not view.done:
            reason = "the operator exited" if not operator.running else f"{timeout:.0f} s passed"
            console.print(Panel(operator.log_tail(), title=f"not complete: {reason}"))
            return 1
        elapsed = time.monotonic() - view.started
        console.print(f"[bold green]rollout complete on {len(names)} nodes in {elapsed:.0f} s[/]")
        _print_results(console, kube, scr, names, cluster)
    finally:
        operator.stop()
        kube.close()
    return 0


def _print_results(
    console: Console, kube: Kube, scr: str, names: list[str], cluster: Sandbox
) -> None:
    for name in names:
        node = kube.request("GET", kube.node_path(name))
        state = json.dumps(node_state(node, scr), indent=2, sort_keys=True)
        hello = cluster.host_root(name) / HELLO_FILE
        content = hello.read_text() if hello.exists() else "(missing)"
        console.print(
            Panel(
                f"[bold]nodeState_{scr}[/bold]\n{state}\n\n[bold]/{HELLO_FILE}[/bold] "
                f"(in the node's host root)\n{content}",
                title=name,
            )
        )


@contextmanager
def _workdir(keep: bool) -> Iterator[Path]:
    if keep:
        yield Path(tempfile.mkdtemp(prefix="skyhook-demo-"))
        return
    with tempfile.TemporaryDirectory(prefix="skyhook-demo-") as path:
        yield Path(path)
