"""`kubectl_complete-skyhook` and `kubectl_complete-nodewright`: shell completion for the
plugins through kubectl's own (kubectl 1.26+).

kubectl completing `kubectl skyhook <words>` runs `kubectl_complete-skyhook <words>` from PATH,
the word being completed last (possibly ""), and reads cobra's `__complete` answer: one
candidate a line (`value` or `value<TAB>description`), then `:<directive>`. click's completion
finds the candidates: commands, flags, and the parameters' own `shell_complete` (Skyhook and
node names from the cluster, see candidates.py).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import click
from click.shell_completion import CompletionItem, ShellComplete

from skyhook_cli.nodewright import speak_nodewright

# cobra's ShellCompDirective bits.
DEFAULT = 0  # the shell may complete file names
NO_FILE_COMP = 4
FILTER_DIRS = 16


class CobraComplete(ShellComplete):
    """click's completion answering as cobra's hidden `__complete` command does."""

    def __init__(self, cli: click.Command, prog_name: str, words: Sequence[str]) -> None:
        super().__init__(cli, {}, prog_name, complete_var="")
        self.words = list(words) or [""]

    def get_completion_args(self) -> tuple[list[str], str]:
        return self.words[:-1], self.words[-1]

    def format_completion(self, item: CompletionItem) -> str:
        help_text = " ".join((item.help or "").split())  # one line, no tabs
        return f"{item.value}\t{help_text}" if help_text else str(item.value)

    def complete(self) -> str:
        args, incomplete = self.get_completion_args()
        try:
            items = self.get_completions(args, incomplete)
        except click.ClickException:  # an unknown command earlier on the line: nothing
            items = []
        # A path: no candidates of ours, the shell completes file (or directory) names.
        paths = {item.type for item in items} & {"file", "dir"}
        directive = FILTER_DIRS if paths == {"dir"} else DEFAULT if paths else NO_FILE_COMP
        lines = [self.format_completion(item) for item in items if item.type == "plain"]
        return "".join(line + "\n" for line in [*lines, f":{directive}"])


def complete(cli: click.Command, prog_name: str, words: Sequence[str]) -> str:
    return CobraComplete(cli, prog_name, words).complete()


def main() -> None:
    from skyhook_cli.main import root  # noqa: PLC0415 (imported here: nodewright_main sets the group first)

    sys.stdout.write(complete(root, "skyhook", sys.argv[1:]))


def nodewright_main() -> None:
    speak_nodewright()
    from skyhook_cli.main import root  # noqa: PLC0415 (after the group is set)

    sys.stdout.write(complete(root, "nodewright", sys.argv[1:]))
