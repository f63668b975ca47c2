"""`deployment-policy reset <skyhook>` (alias `dp`): restart every compartment at batch 1."""

from __future__ import annotations

import click

from skyhook_cli import batch, candidates
from skyhook_cli.app import CliError, current_app, exactly_one, global_flags
from skyhook_cli.commands.reset import ask
from skyhook_cli.kube import KubeError
from skyhook_cli.patterns import quote


@click.group("deployment-policy", invoke_without_command=True)
@global_flags
@click.pass_context
def group(ctx: click.Context) -> None:
    """Deployment-policy batch state of a Skyhook."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


@group.command("reset", short_help="Reset batch state for a Skyhook")
@click.argument("args", nargs=-1, metavar="<skyhook-name>", shell_complete=candidates.skyhook_name)
@click.option("-y", "--confirm", is_flag=True, help="Skip confirmation prompt")
@global_flags
def reset(args: tuple[str, ...], confirm: bool) -> None:
    """Reset every compartment's batch state (batch 1, no failures, not stopped), so the
    next rollout starts fresh."""
    name = exactly_one(args)
    app = current_app()
    skyhook = app.kube.get_skyhook(name)
    compartments = batch.compartments(skyhook)
    if not compartments:
        app.say(f"Skyhook {quote(name)} has no compartment statuses to reset")
        return
    with_state = {
        compartment: status.batch_state
        for compartment, status in sorted(compartments.items())
        if status.batch_state
    }
    app.say(f"Skyhook: {name}")
    app.say(f"Compartments: {len(compartments)} total, {len(with_state)} with batch state")
    if with_state:
        app.say("\nCurrent batch state:")
        for compartment, state in with_state.items():
            app.say(
                f"  - {compartment}: batch {state.current_batch}, "
                f"{state.completed_nodes} completed, {state.failed_nodes} failed"
            )
    if app.dry_run:
        app.say("\n[dry-run] Would reset batch state to:")
        app.say("  - CurrentBatch: 1")
        app.say("  - ConsecutiveFailures: 0")
        app.say("  - CompletedNodes: 0")
        app.say("  - FailedNodes: 0")
        app.say("  - ShouldStop: false")
        app.say("\n[dry-run] No changes applied")
        return
    lines = [
        f"\nThis will reset the batch state for Skyhook {quote(name)}.",
        "The next reconciliation will start from batch 1.",
    ]
    if not confirm and not ask(app, lines):
        return
    try:
        app.kube.patch_skyhook_status(name, batch.reset_patch(skyhook))
    except KubeError as error:
        raise CliError(f"patching skyhook status: {error}") from None
    app.say(f"\nSuccessfully reset batch state for Skyhook {quote(name)}")
