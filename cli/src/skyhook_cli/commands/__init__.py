"""One module per verb; `register` adds them all to the root command."""

from __future__ import annotations

import click

from skyhook_cli.commands import (
    deployment_policy,
    lifecycle,
    node,
    package,
    plan,
    reset,
    update_state,
    version,
)


def register(root: click.Group) -> None:
    root.add_command(version.command)
    for command in lifecycle.commands:
        root.add_command(command)
    root.add_command(reset.command)
    root.add_command(update_state.command)
    root.add_command(deployment_policy.group, "deployment-policy")
    root.add_command(deployment_policy.group, "dp")
    root.add_command(node.group)
    root.add_command(package.group)
    root.add_command(plan.command)
