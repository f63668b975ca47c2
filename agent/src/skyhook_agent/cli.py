"""``skyhook-agent``: validate a package, or run a stage (same engine as ``controller``)."""

import os
import sys
from pathlib import Path

import click

from skyhook_agent import __version__
from skyhook_agent.console import Console
from skyhook_agent.errors import InputError
from skyhook_agent.invocation import LEGACY_ROOT_MOUNT, Invocation
from skyhook_agent.package import CONFIG_NAME, validate_package
from skyhook_agent.settings import AgentSettings
from skyhook_agent.signals import StopSignal
from skyhook_agent.stage import EXIT_BAD_INPUT, EXIT_FAILED, execute


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="skyhook-agent")
def main() -> None:
    """Run Skyhook package stages against a host root, or validate a package."""


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--base",
    "base_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="A base package directory this one is built FROM; repeat for each layer, bottom "
    "first. Files of PATH hide the same files of its bases, as in the image.",
)
@click.option(
    "--config-only",
    is_flag=True,
    help="Check config.json alone and list the step files left unchecked.",
)
def validate(path: Path, base_dirs: tuple[Path, ...], config_only: bool) -> None:
    """Check PATH (a package directory or its config.json): schema v1, step rules, step
    files present, every *.sh executable. Prints every problem with its field path."""
    if config_only and base_dirs:
        raise click.UsageError("--config-only checks no files, so it takes no --base")
    result = validate_package(path, base_dirs, config_only=config_only)
    own_config = path / CONFIG_NAME if path.is_dir() else path
    if result.config_source is not None and result.config_source != own_config:
        click.echo(f"{CONFIG_NAME}: inherited from {result.config_source}")
    for warning in result.warnings:
        click.echo(f"warning: {warning}")
    for step_file in result.unchecked:
        click.echo(f"not checked: {step_file} (--config-only)")
    if result.errors:
        for error in result.errors:
            click.echo(f"error: {error}", err=True)
        click.echo(f"{path}: {len(result.errors)} problem(s)", err=True)
        sys.exit(EXIT_FAILED)
    click.echo(f"{path}: valid" + (" (config.json only)" if config_only else ""))


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
