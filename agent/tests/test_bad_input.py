"""Bad input: a clear line per problem, exit 2, and the host tree exactly as before."""

import copy
import json
import subprocess
from pathlib import Path

import pytest

from conftest import COPY_DIR, Host, config, marker_script, step
from skyhook_schemas.podpackage import encode_interrupt_argument as encode_interrupt

GOOD_MODES = {"apply": [step("a.sh")], "apply-check": [step("a_check.sh")]}
GOOD_SCRIPTS = {"a.sh": marker_script("a"), "a_check.sh": marker_script("a_check")}


def assert_rejected(host: Host, mode: str, *expected: str, extra: tuple[str, ...] = (),
                    **env: str) -> None:  # fmt: skip
    before = host.tree()
    result = host.run(mode, *extra, **env)
    assert result.returncode == 2, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    for line in expected:
        assert f"error: {line}" in errors, result.stderr
    assert errors[-1] == "error: nothing was changed on the host"
    assert host.tree() == before
    assert host.markers() == []


def test_missing_config_json(host: Host) -> None:
    host.write_package(None, GOOD_SCRIPTS, root_dir={"etc/x": "x"})
    assert_rejected(host, "apply", f"config.json: not found in package directory "
                                   f"{host.path(COPY_DIR)}")  # fmt: skip


def test_invalid_schema_reports_every_problem(host: Host) -> None:
    document = copy.deepcopy(config(GOOD_MODES, version="1.0"))
    del document["modes"]["apply"][0]["returncodes"]
    document["modes"]["apply-check"][0]["idempotence"] = "yes"
    host.write_package(document, GOOD_SCRIPTS, root_dir={"etc/x": "x"})
    before = host.tree()
    result = host.run("apply")
    assert result.returncode == 2
    assert "error: modes.apply[0].returncodes: required property missing" in result.stderr
    assert "package_version: '1.0' is not a strict semver version" in result.stderr
    assert "error: modes.apply-check[0].idempotence: expected a boolean" in result.stderr
    assert host.tree() == before


def test_step_path_not_in_skyhook_dir(host: Host) -> None:
    host.write_package(config(GOOD_MODES), {"a_check.sh": GOOD_SCRIPTS["a_check.sh"]},
                       root_dir={"etc/x": "x"})  # fmt: skip
    assert_rejected(host, "apply", "modes.apply[0].path: file not found in skyhook_dir/: a.sh")


def test_unknown_stage_is_an_error_not_a_silent_success(host: Host) -> None:
    # Upstream logs a warning and exits 0; a typo in a mode must not look like success.
    host.write_package(config(GOOD_MODES), GOOD_SCRIPTS, root_dir={"etc/x": "x"})
    assert_rejected(host, "deploy", "mode: 'deploy' is not a stage; expected one of: uninstall, "
                    "upgrade, apply, config, post-interrupt, uninstall-check, upgrade-check, "
                    "apply-check, config-check, post-interrupt-check, interrupt")  # fmt: skip


def test_missing_expected_config_file(host: Host) -> None:
    host.write_package(config(GOOD_MODES, expected=("settings", "extra")), GOOD_SCRIPTS,
                       configmaps={"extra": "1"}, root_dir={"etc/x": "x"})  # fmt: skip
    assert_rejected(host, "apply", "expected_config_files[0]: settings not found in "
                    f"{host.path(COPY_DIR)}/configmaps")  # fmt: skip


def test_root_dir_that_would_replace_a_host_directory(host: Host) -> None:
    host.path("/etc/demo.d").mkdir()
    host.write_package(config(GOOD_MODES), GOOD_SCRIPTS,
                       root_dir={"etc/demo.d": "a file", "etc/ok": "fine"})  # fmt: skip
    assert_rejected(host, "apply", "root_dir/etc/demo.d: is a file but the host has a directory "
                    "at /etc/demo.d")  # fmt: skip


def test_missing_host_root(tmp_path: Path) -> None:
    host = Host(tmp_path / "absent")
    result = host.run("apply")
    assert result.returncode == 2
    assert f"error: root_mount: {host.root} does not exist" in result.stderr
    assert not host.root.exists()


def test_host_root_that_is_a_file(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("not a root")
    result = Host(target).run("apply")
    assert result.returncode == 2
    assert f"error: root_mount: {target} is not a directory" in result.stderr
    assert target.read_text() == "not a root"


def test_read_only_host_root(host: Host) -> None:
    # The host root bind-mounted read-only onto itself (we are root; root bypasses modes).
    host.write_package(config(GOOD_MODES), GOOD_SCRIPTS)
    root = str(host.root)
    subprocess.run(["mount", "--bind", root, root], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", root], check=True)
        assert_rejected(host, "apply", f"root_mount: {root} is not readable and writable by "
                                       "the agent")  # fmt: skip
    finally:
        subprocess.run(["umount", root], check=True)


def test_wrong_argument_count(host: Host) -> None:
    result = subprocess.run(host.agent_argv("apply")[:4], env=host.agent_env(),
                            capture_output=True, text=True)  # fmt: skip
    assert result.returncode == 2
    assert "error: expected 2 to 4 arguments, got 1; usage: controller" in result.stderr


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("not base64!", 'interrupt: argument is not base64-encoded JSON like {"type": '
                        '"node_restart"}'),
        (encode_interrupt("power_cycle"), "interrupt.type: unknown type 'power_cycle'; expected "
         "one of: node_restart, service_restart, restart_all_services, no_op, script_interrupt"),
        (encode_interrupt("service_restart", services="kubelet"),
         "interrupt.services: must be a list of service names"),
        (encode_interrupt("node_restart", when="now"), "interrupt.when: not a field of "
                                                       "node_restart"),
    ],
    ids=["not-base64", "unknown-type", "services-not-a-list", "unknown-field"],
)  # fmt: skip
def test_bad_interrupt_payload(host: Host, payload: str, message: str) -> None:
    assert_rejected(host, "interrupt", message, extra=(payload,))
    assert host.path("/shim-calls.log").exists() is False


def test_interrupt_needs_a_well_formed_resource_id(host: Host) -> None:
    assert_rejected(
        host,
        "interrupt",
        "SKYHOOK_RESOURCE_ID: 'broken' must be <scr>-<uid>-<generation>_<package>_<version> "
        "(three non-empty parts separated by '_')",
        extra=(encode_interrupt("no_op"),),
        SKYHOOK_RESOURCE_ID="broken",
    )


def test_bad_setting(host: Host) -> None:
    host.write_package(config(GOOD_MODES), GOOD_SCRIPTS)
    before = host.tree()
    result = host.run("apply", SKYHOOK_AGENT_BUFFER_LIMIT="lots", SKYHOOK_LOG_DIR="var/log")
    assert result.returncode == 2
    assert "error: SKYHOOK_AGENT_BUFFER_LIMIT: 'lots' is not a positive number of bytes" in (
        result.stderr
    )
    assert "error: SKYHOOK_LOG_DIR: 'var/log' must be an absolute path" in result.stderr
    assert host.tree() == before


def test_config_json_that_is_not_json(host: Host) -> None:
    package = host.write_package(None, GOOD_SCRIPTS)
    (package / "config.json").write_text("{oops")
    before = host.tree()
    result = host.run("apply")
    assert result.returncode == 2
    assert "not valid JSON" in result.stderr
    assert host.tree() == before
    json.dumps(before)  # the listing is plain data (sanity for the comparisons above)


def test_state_dir_blocked_by_a_file(host: Host) -> None:
    host.write_package(config(GOOD_MODES), GOOD_SCRIPTS)
    host.path("/var/lib/skyhook-state").write_text("not a directory")
    assert_rejected(host, "apply", "SKYHOOK_ROOT_DIR: /var/lib/skyhook-state/demo: "
                    "/var/lib/skyhook-state on the host is not a directory",
                    SKYHOOK_ROOT_DIR="/var/lib/skyhook-state/demo")  # fmt: skip
