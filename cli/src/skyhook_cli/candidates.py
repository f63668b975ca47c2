"""What shell completion offers for a parameter: names read from the cluster (Skyhooks, nodes)
with the plugin's own client, and fixed choices.

Names are read with the connection flags given earlier on the line (--kubeconfig, --context,
...). A cluster that cannot be reached, or a kubeconfig that cannot be used, offers nothing:
completion never prints an error into the user's shell.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import click
from click.shell_completion import CompletionItem

from skyhook_cli.app import CliError, app_for
from skyhook_cli.kube import Kube, KubeError

Completer = Callable[[click.Context, click.Parameter, str], list[CompletionItem]]

# How long completion waits for the apiserver unless --request-timeout says otherwise: a shell
# blocked on an unreachable server is worse than no candidates.
TIMEOUT_SECONDS = 5.0


def _read(ctx: click.Context, names: Callable[[Kube], list[str]]) -> list[str]:
    try:
        kube = app_for(ctx).kube
        kube.timeout = kube.timeout or TIMEOUT_SECONDS
        return sorted(names(kube))
    except (CliError, KubeError):
        return []


def _given(ctx: click.Context, param: click.Parameter) -> tuple[str, ...]:
    """The values already given to a repeatable parameter."""
    value = ctx.params.get(param.name or "")
    return tuple(value) if isinstance(value, tuple) else ()


def _offer(names: Sequence[str], incomplete: str, given: Sequence[str]) -> list[CompletionItem]:
    return [CompletionItem(n) for n in names if n.startswith(incomplete) and n not in given]


def _skyhooks(kube: Kube) -> list[str]:
    return [str(s["metadata"]["name"]) for s in kube.list_skyhooks()]


def _nodes(kube: Kube) -> list[str]:
    return [str(node.metadata.name) for node in kube.list_nodes()]


def skyhook_name(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """One Skyhook's name (a --skyhook flag, or the one name argument of a command)."""
    if _given(ctx, param):
        return []
    return _offer(_read(ctx, _skyhooks), incomplete, ())


def node_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[CompletionItem]:
    """Node names, leaving out those already given."""
    return _offer(_read(ctx, _nodes), incomplete, _given(ctx, param))


def choices(values: Sequence[str]) -> Completer:
    """A fixed set of values (a stage, a state)."""

    def complete(
        ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        return _offer(values, incomplete, ())

    return complete
