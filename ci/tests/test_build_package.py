"""ci/build-package in dry-run (no container engine here): tag checks and the exact command."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "ci" / "build-package"
PACKAGES = ("shellscript", "tuning", "tuned")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SKYHOOK_")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=base | (env or {}),
        cwd=REPO,
        check=False,
    )


def load_script() -> types.ModuleType:
    sys.path.insert(0, str(SCRIPT.parent))
    loader = importlib.machinery.SourceFileLoader("build_package", str(SCRIPT))
    spec = importlib.util.spec_from_loader("build_package", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_package"] = module
    loader.exec_module(module)
    return module


build_package = load_script()


def config_version(package: str) -> str:
    return json.loads((REPO / "packages" / package / "config.json").read_text())["package_version"]


@pytest.mark.parametrize("package", PACKAGES)
def test_dry_run_prints_the_multi_arch_push_command(package):
    version = config_version(package)
    result = run("--dry-run", f"{package}/{version}")
    assert result.returncode == 0, result.stderr
    assert shlex.split(result.stdout) == [
        "docker", "buildx", "build", "--platform", "linux/amd64,linux/arm64",
        "-f", f"packages/{package}/Dockerfile",
        "-t", f"ghcr.io/nvidia/skyhook-packages/{package}:{version}",
        "--push", f"packages/{package}",
    ]  # fmt: skip


def test_registry_and_platforms_from_flags_and_env():
    tag = f"tuning/{config_version('tuning')}"
    by_env = run("--dry-run", tag, env={
        "SKYHOOK_PACKAGES_REGISTRY": "localhost:5000/skyhook-packages",
        "SKYHOOK_PLATFORMS": "linux/arm64",
    })  # fmt: skip
    argv = shlex.split(by_env.stdout)
    assert argv[argv.index("--platform") + 1] == "linux/arm64"
    assert argv[argv.index("-t") + 1] == f"localhost:5000/skyhook-packages/{tag.replace('/', ':')}"

    by_flag = run(
        "--dry-run", "--registry", "registry.example.com/team/", "--platforms",
        "linux/amd64, linux/arm/v7", tag, env={"SKYHOOK_PACKAGES_REGISTRY": "ignored.io/x"},
    )  # fmt: skip
    argv = shlex.split(by_flag.stdout)
    assert argv[argv.index("--platform") + 1] == "linux/amd64,linux/arm/v7"
    assert argv[argv.index("-t") + 1].startswith("registry.example.com/team/tuning:")


def test_build_args_pass_through_in_order():
    tag = f"shellscript/{config_version('shellscript')}"
    result = run(
        "--dry-run", tag, "--registry", "127.0.0.1:5000",
        "--build-arg", "BASE_IMAGE=127.0.0.1:5000/base/busybox:1.35", "--build-arg", "X=a=b",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    argv = shlex.split(result.stdout)
    assert argv[argv.index("-t") + 1] == tag.replace("shellscript/", "127.0.0.1:5000/shellscript:")
    assert [argv[i + 1] for i, word in enumerate(argv) if word == "--build-arg"] == [
        "BASE_IMAGE=127.0.0.1:5000/base/busybox:1.35",
        "X=a=b",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--registry", "Not A Registry"], "--registry: 'Not A Registry' is not host[:port]/path"),
        (["--platforms", "amd64"], "--platforms: amd64 not os/arch"),
        (["--build-arg", "BASE_IMAGE"], "--build-arg: BASE_IMAGE not NAME=VALUE"),
    ],
)
def test_bad_options_exit_2_naming_the_option(args, message):
    result = run("--dry-run", *args, "shellscript/1.1.1")
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("tag", "message"),
    [
        ("shellscript/1.1.0", "package_version: "),
        ("shellscript/v1.1.1", "drop the leading 'v'"),
        ("shellscript/1.1", "tag 'shellscript/1.1'"),
        ("shellscript", "must look like <package>/<version>"),
        ("kdump/1.0.0", "no package 'kdump'"),
    ],
    ids=["version-differs", "v-prefix", "short-version", "no-version", "unknown-package"],
)
def test_bad_tags_are_refused_before_any_build(tag, message):
    result = run("--dry-run", tag)
    assert result.returncode == 1
    assert f"refusing to release {tag}" in result.stderr
    assert message in result.stderr
    assert "docker" not in result.stdout


@settings(max_examples=30, deadline=None)
@given(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30)))
def test_any_version_but_the_configs_is_refused(parts):
    version = ".".join(map(str, parts))
    problems = build_package.tag_problems(f"shellscript/{version}", REPO / "packages")
    if version == config_version("shellscript"):
        assert problems == []
    else:
        assert any(problem.startswith("package_version: ") for problem in problems)


def copy_package(tmp_path: Path, package: str = "shellscript") -> Path:
    root = tmp_path / "packages"
    shutil.copytree(
        REPO / "packages" / package, root / package, ignore=shutil.ignore_patterns("tests")
    )
    return root


def _drop_returncodes(config: dict) -> None:
    del config["modes"]["apply"][0]["returncodes"]


def _point_at_missing_script(config: dict) -> None:
    config["modes"]["config"][0]["path"] = "missing.sh"


@pytest.mark.parametrize(
    ("break_config", "message"),
    [
        (_drop_returncodes, "modes.apply[0].returncodes: required property missing"),
        (_point_at_missing_script, "missing.sh"),
    ],
    ids=["schema", "step-path"],
)
def test_invalid_config_is_refused_naming_the_field(tmp_path, break_config, message):
    root = copy_package(tmp_path)
    config_path = root / "shellscript" / "config.json"
    config = json.loads(config_path.read_text())
    break_config(config)
    config_path.write_text(json.dumps(config))
    result = run("--dry-run", "--packages-root", str(root), "shellscript/1.1.1")
    assert result.returncode == 1
    assert message in result.stderr
    assert "docker" not in result.stdout


def test_non_executable_script_is_refused(tmp_path):
    root = copy_package(tmp_path)
    (root / "shellscript" / "skyhook_dir" / "shellscript_run.sh").chmod(0o644)
    result = run("--dry-run", "--packages-root", str(root), "shellscript/1.1.1")
    assert result.returncode == 1
    assert "skyhook_dir/shellscript_run.sh: not executable" in result.stderr


def test_package_outside_the_repo_builds_from_its_absolute_path(tmp_path):
    root = copy_package(tmp_path)
    result = run("--dry-run", "--packages-root", str(root), "shellscript/1.1.1")
    assert result.returncode == 0, result.stderr
    assert shlex.split(result.stdout)[-1] == str((root / "shellscript").resolve())


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_script_is_executable_in_git(package):
    assert build_package.script_problems(REPO / "packages" / package) == []


def test_without_docker_a_real_build_fails_with_a_hint(tmp_path):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    result = run("shellscript/1.1.1", env={"PATH": str(empty_bin)})
    assert result.returncode == 2
    assert "docker is not on PATH" in result.stderr
