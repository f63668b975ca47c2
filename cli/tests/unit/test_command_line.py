"""The command line without a cluster: version, usage errors and exit codes, prompts that abort
before any API call."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from skyhook_cli import __version__
from skyhook_cli.main import root

# A kubeconfig that cannot be used: any command that reaches the API fails with exit 1.
BROKEN = ["--kubeconfig", "/nonexistent/kubeconfig"]


def run(*args: str, stdin: str = "") -> tuple[int, str, str]:
    result = CliRunner().invoke(root, list(args), input=stdin)
    return result.exit_code, result.stdout, result.stderr


def test_version_flag() -> None:
    assert run("--version") == (0, f"Skyhook plugin: {__version__}\n", "")


def test_version_client_only_does_not_need_a_cluster() -> None:
    assert run("version", "--client-only", *BROKEN) == (0, f"Skyhook plugin:\t{__version__}\n", "")


def test_client_failure_is_exit_1_with_the_upstream_prefix() -> None:
    code, out, err = run("version", *BROKEN)
    assert code == 1
    assert out == f"Skyhook plugin:\t{__version__}\n"
    assert err.startswith("initializing kubernetes client: ")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["node", "list"], 'required flag(s) "skyhook" not set', id="missing-required-flag"
        ),
        pytest.param(
            ["package", "rerun", "p"],
            'required flag(s) "node", "skyhook" not set',
            id="two-missing-flags",
        ),
        pytest.param(["pause"], "accepts 1 arg(s), received 0", id="missing-argument"),
        pytest.param(["pause", "a", "b"], "accepts 1 arg(s), received 2", id="extra-argument"),
        pytest.param(
            ["node", "ignore"], "requires at least 1 arg(s), only received 0", id="no-nodes"
        ),
        pytest.param(["bogus"], 'unknown command "bogus" for "skyhook"', id="unknown-command"),
        pytest.param(["node", "list", "--bogus"], "unknown flag: --bogus", id="unknown-flag"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args: list[str], message: str) -> None:
    code, out, err = run(*args)
    assert (code, out, err) == (2, "", message + "\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["-o", "xml", "node", "list", "--skyhook", "s"],
            'invalid output format "xml"',
            id="output",
        ),
        pytest.param(
            [
                "node",
                "list",
                "--skyhook",
                "s",
                "-s",
                "https://x",
                "--token",
                "t",
                "--username",
                "u",
            ],
            "initializing kubernetes client: --username and --password cannot be given with "
            "--token",
            id="basic-and-token",
        ),
        pytest.param(
            ["package", "logs", "p", "--skyhook", "s", "--stage", "uninstall"],
            'invalid stage "uninstall": must be one of apply, config, interrupt, post-interrupt',
            id="stage",
        ),
    ],
)
def test_bad_values_exit_1(args: list[str], message: str) -> None:
    code, _, err = run(*args, *BROKEN)
    assert code == 1
    assert err.startswith(message)


def test_global_flags_go_before_or_after_the_command() -> None:
    assert run("-o", "JSON", "version", "--client-only")[0] == 0
    assert run("version", "--client-only", "-o", "Wide")[0] == 0


@pytest.mark.parametrize("verb", ["pause", "resume", "disable", "enable"])
@pytest.mark.parametrize("stdin", ["", "n\n", "yes\n"], ids=["end-of-input", "no", "yes-is-not-y"])
def test_lifecycle_prompt_aborts_with_exit_0_before_any_api_call(verb: str, stdin: str) -> None:
    code, out, err = run(verb, "gpu-init", *BROKEN, stdin=stdin)
    assert (code, err) == (0, "")
    assert out == f'This will {verb} Skyhook "gpu-init". Continue? [y/N]: Aborted.\n'
