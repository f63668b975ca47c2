"""The `kubectl-skyhook` / `skyhook` entry point: the root command and exit codes.

Exit codes: 0 success, and also when the user declines a prompt (as upstream); 1 for an error
(one line on stderr); 2 for a usage error (unknown command or flag, wrong argument count,
missing required flag).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click

from skyhook_cli import __version__
from skyhook_cli.app import CliError, global_flags
from skyhook_cli.commands import register
from skyhook_cli.kube import KubeError
from skyhook_cli.patterns import quote

USAGE_ERROR = 2


class Root(click.Group):
    """Runs a command and turns every failure into one stderr line and an exit code."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            super().main(args, prog_name or "skyhook", complete_var, standalone_mode=False, **extra)
        except (CliError, KubeError) as error:
            click.echo(str(error), err=True)
            sys.exit(1)
        except click.exceptions.NoSuchOption as error:
            click.echo(unknown_flag(error.option_name), err=True)
            sys.exit(USAGE_ERROR)
        except click.UsageError as error:
            click.echo(error.format_message(), err=True)
            sys.exit(USAGE_ERROR)
        except click.ClickException as error:
            click.echo(error.format_message(), err=True)
            sys.exit(error.exit_code)
        except click.exceptions.Abort:
            click.echo("Aborted", err=True)
            sys.exit(1)
        except click.exceptions.Exit as done:
            sys.exit(done.exit_code)
        sys.exit(0)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            raise click.UsageError(
                f"unknown command {quote(name)} for {quote(ctx.info_name or '')}"
            )
        return super().resolve_command(ctx, args)


def unknown_flag(option: str) -> str:
    if option.startswith("--"):
        return f"unknown flag: {option}"
    return f"unknown shorthand flag: {quote(option[1:2])[1:-1]!r} in {option}"


@click.group(
    "skyhook",
    cls=Root,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, "--version", message="Skyhook plugin: %(version)s")
@global_flags
@click.pass_context
def root(ctx: click.Context) -> None:
    """Skyhook SRE plugin: kubectl-compatible helper for managing Skyhook deployments."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


register(root)


def main() -> None:
    root.main()
