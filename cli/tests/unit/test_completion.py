"""Shell completion as kubectl asks a plugin for it (`kubectl_complete-skyhook <words>`, cobra's
`__complete` answer), and `-o name`, without a cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from skyhook_cli import output
from skyhook_cli.completion import complete
from skyhook_cli.main import root

COMPLETE_SKYHOOK = Path(sys.executable).parent / "kubectl_complete-skyhook"


def candidates(*words: str) -> tuple[list[str], str]:
    """The candidate lines and the directive line of the answer to `words`."""
    answer = complete(root, "skyhook", list(words))
    assert answer.endswith("\n")
    *lines, directive = answer.removesuffix("\n").split("\n")
    return lines, directive


def values(*words: str) -> list[str]:
    lines, directive = candidates(*words)
    assert directive == ":4"  # ShellCompDirectiveNoFileComp: only our candidates
    return [line.split("\t")[0] for line in lines]


def test_commands_complete_with_their_summary_as_description() -> None:
    lines, directive = candidates("")
    assert directive == ":4"
    assert "pause\tPause a Skyhook from processing" in lines
    assert "node\tSkyhook state on nodes." in lines
    assert values("p") == ["package", "pause", "plan"]
    assert values("node", "") == ["ignore", "list", "reset", "status", "unignore"]
    assert values("node", "st") == ["status"]


def test_flags_complete_for_the_command_on_the_line() -> None:
    lines, _ = candidates("node", "list", "--")
    assert "--skyhook\tName of the Skyhook CR (required)" in lines
    assert "--kubeconfig\tPath to the kubeconfig file to use for CLI requests." in lines
    assert values("package", "rerun", "--st") == ["--stage"]
    # Global flags before the command count: the subcommand still completes.
    assert values("--context", "x", "-o", "json", "node", "li") == ["list"]


def test_flag_values_complete_from_their_choices() -> None:
    assert values("-o", "") == ["table", "json", "yaml", "wide", "name"]
    assert values("node", "status", "--output=n") == ["name"]
    assert values("package", "logs", "p", "--stage", "") == [
        "apply",
        "config",
        "interrupt",
        "post-interrupt",
    ]
    assert values("update-state", "s", "p", "1.0.0", "apply", "") == [
        "complete",
        "in_progress",
        "skipped",
        "erroring",
        "unknown",
    ]


def test_a_path_flag_leaves_completion_to_the_shell() -> None:
    # ShellCompDirectiveDefault (0): the shell completes file names.
    assert candidates("--kubeconfig", "") == ([], ":0")
    assert candidates("plan", "-f", "my") == ([], ":0")


def test_an_unknown_command_completes_nothing() -> None:
    assert candidates("bogus", "") == ([], ":4")


@pytest.mark.parametrize(
    "words",
    [
        ["node", "status", "--kubeconfig", "/nonexistent/kubeconfig", ""],
        ["--server", "https://127.0.0.1:1", "node", "status", ""],
        ["--server", "https://127.0.0.1:1", "node", "list", "--skyhook", ""],
        ["--server", "https://127.0.0.1:1", "pause", ""],
    ],
    ids=["no-kubeconfig", "refused", "refused-flag", "refused-argument"],
)
def test_names_from_an_unreachable_cluster_complete_nothing_silently(words: list[str]) -> None:
    done = subprocess.run([COMPLETE_SKYHOOK, *words], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, ":4\n", "")


def test_kubectl_nodewright_has_its_own_helper() -> None:
    helper = COMPLETE_SKYHOOK.with_name("kubectl_complete-nodewright")
    done = subprocess.run(
        [helper, "node", "list", "--n"], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert [line.split("\t")[0] for line in done.stdout.splitlines()] == [
        "--nodewright",
        "--namespace",
        ":4",
    ]


def test_name_output_is_kind_slash_name_once_each_in_listed_order() -> None:
    assert output.names("node", ["b", "a", "b"]) == ["node/b", "node/a"]
    assert output.names("node", []) == []


@pytest.mark.parametrize(
    "args",
    [["node", "ignore", "x"], ["pause", "x", "-y"], ["plan", "x"], ["version"]],
    ids=["node-ignore", "pause", "plan", "version"],
)
def test_name_output_is_refused_where_nothing_is_listed(args: list[str]) -> None:
    result = CliRunner().invoke(root, [*args, "-o", "name", "--kubeconfig", "/nonexistent"])
    command = " ".join(["skyhook", *args[:2]] if args[0] == "node" else ["skyhook", args[0]])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        f'output format "name" is not supported by "{command}": it lists no objects '
        "(use one of table|json|yaml|wide)\n"
    )


def test_output_help_names_every_format() -> None:
    result = CliRunner().invoke(root, ["node", "list", "--help"])
    assert "table|json|yaml|wide|name" in " ".join(result.stdout.split())
