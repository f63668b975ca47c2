"""`version`: the plugin's version and, unless --client-only, the operator's."""

from __future__ import annotations

import click

from skyhook_cli import __version__, operator_version
from skyhook_cli.app import current_app, global_flags
from skyhook_cli.kube import KubeError, parse_duration


@click.command("version", short_help="Show plugin and Skyhook operator versions")
@click.option("--client-only", is_flag=True, help="Only print the plugin version.")
@click.option(
    "--timeout", default="10s", show_default=True, help="Time limit for contacting the API."
)
@global_flags
def command(client_only: bool, timeout: str) -> None:
    """Show the plugin's version and the version of the operator in -n (default skyhook)."""
    app = current_app()
    try:
        seconds = parse_duration(timeout)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="'--timeout'") from None
    app.say(f"Skyhook plugin:\t{__version__}")
    if client_only:
        return
    kube = app.kube
    if seconds:
        kube.timeout = seconds
    try:
        found = operator_version.discover(kube, app.namespace)
    except (KubeError, operator_version.VersionNotFound) as error:
        app.say(f"Skyhook operator:\tunknown ({error})")
        return
    app.say(f"Skyhook operator:\t{found}")
