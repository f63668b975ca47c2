"""The shellscript package run through our agent in a chroot of a real minimal Debian root."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

PACKAGE_DIR = Path(__file__).resolve().parents[1]
DEMO_SCR = Path("/work/shared/examples/demo-scr.yaml")
FLAG_DIR = "/var/lib/skyhook/pkgtest/flags/shellscript/1.1.1"
ALL_STAGES = ("apply", "config", "post-interrupt", "uninstall")


def readme_scr() -> dict:
    """The SCR in the package README, parsed from its yaml block."""
    block = re.search(r"```yaml\n(.*?)```", (PACKAGE_DIR / "README.md").read_text(), re.S)
    assert block, "README.md has no yaml example"
    return yaml.safe_load(block.group(1))


def scr_package(scr: dict) -> tuple[str, dict]:
    ((name, package),) = scr["spec"]["packages"].items()
    return name, package


def host_for(package_host, scr: dict):
    name, package = scr_package(scr)
    env = {item["name"]: item["value"] for item in package.get("env", [])}
    host = package_host("shellscript", cr_name=name, cr_version=package["version"], env=env)
    host.set_configmap(package["configMap"])
    return host


@pytest.mark.chroot
def test_demo_scr_writes_and_appends_the_hello_file(package_host):
    # The shared demo SCR, unchanged (version 1.1.0 runs this package, whose config says 1.1.1).
    host = host_for(package_host, yaml.safe_load(DEMO_SCR.read_text()))

    assert host.stage("apply") == (0, 0)
    assert host.path("/skyhook-hello-world").read_text() == "hello world\n"
    assert host.stage("config") == (0, 0)
    assert host.path("/skyhook-hello-world").read_text() == "hello world\na config is run\n"

    # Host state is named after config.json, as upstream's e2e tests expect.
    assert host.path(f"{FLAG_DIR}/shellscript_run.sh_WydhcHBseSddX1swXQ==").is_file()
    history = json.loads(host.path("/var/lib/skyhook/pkgtest/history/shellscript.json").read_text())
    assert history["current-version"] == "1.1.1"


@pytest.mark.chroot
def test_readme_scr_full_lifecycle_is_idempotent_and_uninstalls(package_host):
    host = host_for(package_host, readme_scr())
    marker = host.path("/skyhook-hello-world")

    assert host.stage("apply") == (0, 0)
    assert host.stage("config") == (0, 0)
    expected = "hello from skyhook\nconfig ran\n"
    assert marker.read_text() == expected

    # A rerun of every stage (edited SCR, restarted pod) leaves the host as it was.
    assert host.stage("apply") == (0, 0)
    assert host.stage("config") == (0, 0)
    assert host.stage("config") == (0, 0)
    assert marker.read_text() == expected

    assert host.stage("uninstall") == (0, 0)
    assert not marker.exists()
    history = json.loads(host.path("/var/lib/skyhook/pkgtest/history/shellscript.json").read_text())
    assert history["current-version"] == "uninstalled"


@pytest.mark.chroot
def test_check_fails_when_the_host_is_not_as_expected(package_host):
    host = host_for(package_host, readme_scr())
    assert host.stage("apply") == (0, 0)

    host.path("/skyhook-hello-world").unlink()  # someone undid the change
    assert host.run("apply-check").returncode != 0
    assert host.run("uninstall-check").returncode == 0


@pytest.mark.chroot
def test_snippet_exit_code_fails_the_step_and_stops_the_stage(package_host):
    host = package_host("shellscript", cr_name="fail", cr_version="1.1.1")
    host.set_configmap(
        {"apply.sh": "echo before\nexit 3\necho after > /after\n", "apply_check.sh": "true\n"}
    )
    result = host.run("apply")
    assert result.returncode != 0
    assert "before" in result.stdout
    assert not host.path("/after").exists()  # exit in the sourced snippet ends the step


@pytest.mark.chroot
@pytest.mark.parametrize("stage", ALL_STAGES)
def test_stage_without_a_snippet_succeeds_and_says_so(package_host, stage):
    host = package_host("shellscript", cr_name="empty", cr_version="1.1.1")
    host.set_configmap({})
    result = host.run(stage)
    assert result.returncode == 0
    snippet = stage.replace("-", "_")
    assert f"no '{snippet}.sh' key in the package configMap" in result.stdout
    assert host.run(f"{stage}-check").returncode == 0


@pytest.mark.chroot
def test_snippet_sees_step_env_cr_env_and_other_configmap_keys(package_host):
    host = package_host("shellscript", cr_name="envs", cr_version="1.1.1", env={"FOO": "bar"})
    host.set_configmap(
        {
            "post_interrupt.sh": (
                "#!/bin/sh\n"  # ignored: the snippet is sourced by bash
                'printf "%s\\n" "$SKYHOOK_DIR" "$STEP_ROOT" "$FOO" "$1" "${BASH_VERSION:+bash}" '
                '"$(cat "$SKYHOOK_DIR/configmaps/extra.txt")" > /env-seen\n'
            ),
            "extra.txt": "extra value",
        }
    )
    assert host.run("post-interrupt").returncode == 0
    assert host.path("/env-seen").read_text().splitlines() == [
        host.copy_dir,
        f"{host.copy_dir}/skyhook_dir",
        "bar",
        "post_interrupt",
        "bash",
        "extra value",
    ]
