"""``skyhook-agent``: validate a package, or run a stage (same engine as ``controller``)."""

import os
import sys
from pathlib import Path

import click

from skyhook_agent import __version__
from skyhook_agent.console import Console
from skyhook_agent.errors import InputError
from skyhook_agent.invocation import LEGACY_ROOT_MOUNT, Invocation
from skyhook_agent.package import validate_package
from skyhook_agent.settings import AgentSettings
from skyhook_agent.signals import StopSignal
from skyhook_agent.stage import EXIT_BAD_INPUT, EXIT_FAILED, execute


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="skyhook-agent")
def main() -> None:
    """Run Skyhook package stages against a host root, or validate a package."""


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
def validate(path: Path) -> None:
    """Check PATH (a package directory or its config.json): schema v1, step rules, step
    files present, every *.sh executable. Prints every problem with its field path."""
    errors, warnings = validate_package(path)
    for warning in warnings:
        click.echo(f"warning: {warning}")
    if errors:
        for error in errors:
            click.echo(f"error: {error}", err=True)
        click.echo(f"{path}: {len(errors)} problem(s)", err=True)
        sys.exit(EXIT_FAILED)
    click.echo(f"{path}: valid")


@main.command()
@click.argument("mode")
@click.argument("copy_dir")
@click.option(
    "--root-mount",
    type=click.Path(path_type=Path),
    default=LEGACY_ROOT_MOUNT,
    show_default=True,
    help="Where the host's / is mounted.",
)
@click.option(
    "--interrupt",
    "interrupt_b64",
    default=None,
    help="Base64 JSON interrupt payload (interrupt mode).",
)
def run(mode: str, copy_dir: str, root_mount: Path, interrupt_b64: str | None) -> None:
    """Run MODE (e.g. apply, apply-check, interrupt) for the package copied to COPY_DIR
    (a host path). Settings come from the SKYHOOK_* environment, as for `controller`."""
    console = Console()
    try:
        settings = AgentSettings.from_env(os.environ)
    except InputError as exc:
        console.problems(exc.problems)
        sys.exit(EXIT_BAD_INPUT)
    stop = StopSignal()
    stop.install()
    invocation = Invocation(mode, root_mount, copy_dir, interrupt_b64)
    sys.exit(execute(invocation, settings, dict(os.environ), console, stop))
