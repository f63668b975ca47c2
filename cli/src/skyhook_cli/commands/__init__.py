"""One module per verb; `register` adds them all to the root command.

`plan` (a preview of the operator's next steps) is to be added as `commands/plan.py` on top of
the operator's planner, and registered here.
"""

from __future__ import annotations

import click

from skyhook_cli.commands import deployment_policy, lifecycle, node, package, reset, version


def register(root: click.Group) -> None:
    root.add_command(version.command)
    for command in lifecycle.commands:
        root.add_command(command)
    root.add_command(reset.command)
    root.add_command(deployment_policy.group, "deployment-policy")
    root.add_command(deployment_policy.group, "dp")
    root.add_command(node.group)
    root.add_command(package.group)
