"""`skyhook-dev`: development commands. `demo` brings up a sandbox cluster, runs the operator
against it and shows a package rolling out (demo.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from skyhook_dev.demo import run_demo


@click.group()
def main() -> None:
    """Skyhook development tools."""


@main.command()
@click.argument("scr", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--nodes", default=3, show_default=True, help="Simulated nodes to start.")
@click.option(
    "--keep", is_flag=True, help="Leave the sandbox running at the end (prints how to reach it)."
)
@click.option(
    "--timeout", default=600.0, show_default=True, help="Seconds to wait for the rollout."
)
def demo(scr: Path | None, nodes: int, keep: bool, timeout: float) -> None:
    """Sandbox cluster, operator, the demo SCR (or SCR), live progress, final node states."""
    sys.exit(run_demo(scr, nodes=nodes, keep=keep, timeout=timeout))
