"""Fixtures: a real minimal host root per test, packages written into it, the agent run as
the stage pods run it (``python -m skyhook_agent.controller <mode> <root> <copy_dir>``)."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from skyhook_agent.testing import build_host_root, clone_host_root

COPY_DIR = "/var/lib/skyhook/demo/demo-pkg-1.0.0-uid-1"
STATE_DIR = "/var/lib/skyhook/demo"
LOG_DIR = "/var/log/skyhook/demo"
RESOURCE_ID = "demo-uid-1_demo-pkg_1.0.0"


def step(
    path: str,
    *arguments: str,
    returncodes: tuple[int, ...] = (0,),
    idempotence: bool = False,
    on_host: bool = True,
    env: Mapping[str, str] | None = None,
    upgrade_step: bool = False,
) -> dict[str, Any]:
    """A config.json step; idempotence=False means the agent's flags decide (upstream 'auto')."""
    entry: dict[str, Any] = {
        "name": path.replace("/", "_"),
        "path": path,
        "arguments": list(arguments),
        "returncodes": list(returncodes),
        "on_host": on_host,
        "idempotence": idempotence,
        "upgrade_step": upgrade_step,
    }
    if env:
        entry["env"] = dict(env)
    return entry


def config(
    modes: Mapping[str, list[dict[str, Any]]],
    name: str = "demo-pkg",
    version: str = "1.0.0",
    expected: tuple[str, ...] = (),
) -> dict[str, Any]:
    return {
        "schema_version": "v1",
        "package_name": name,
        "package_version": version,
        "expected_config_files": list(expected),
        "modes": dict(modes),
    }


@dataclass
class Host:
    """A host root directory plus helpers to read it the way a step sees it."""

    root: Path
    copy_dir: str = COPY_DIR
    env: dict[str, str] = field(default_factory=dict)

    def path(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")

    def read(self, host_path: str) -> str:
        return self.path(host_path).read_text()

    def markers(self) -> list[str]:
        marker = self.path("/markers")
        return marker.read_text().splitlines() if marker.exists() else []

    @property
    def state(self) -> Path:
        return self.path(STATE_DIR)

    @property
    def logs(self) -> Path:
        return self.path(LOG_DIR)

    def tree(self) -> dict[str, tuple[Any, ...]]:
        """Every path under the root with type, mode, size and mtime: a change detector."""
        listing: dict[str, tuple[Any, ...]] = {".": _stat(self.root)}
        for current, dirs, files in os.walk(self.root):
            for name in dirs + files:
                full = Path(current, name)
                listing[str(full.relative_to(self.root))] = _stat(full)
        return listing

    def write_package(
        self,
        document: Mapping[str, Any] | None,
        scripts: Mapping[str, str],
        configmaps: Mapping[str, str] | None = None,
        root_dir: Mapping[str, str] | None = None,
        copy_dir: str | None = None,
    ) -> Path:
        """Write a package where the init container would have copied it."""
        package = self.path(copy_dir or self.copy_dir)
        (package / "skyhook_dir").mkdir(parents=True, exist_ok=True)
        if document is not None:
            (package / "config.json").write_text(json.dumps(document, indent=2))
        for name, body in scripts.items():
            script = package / "skyhook_dir" / name
            script.parent.mkdir(parents=True, exist_ok=True)
            script.write_text(body)
            script.chmod(0o755)
        for name, body in (configmaps or {}).items():
            (package / "configmaps").mkdir(exist_ok=True)
            (package / "configmaps" / name).write_text(body)
        for name, body in (root_dir or {}).items():
            target = package / "root_dir" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
        return package

    def agent_env(self, **extra: str) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "COPY_RESOLV": "false",
            "SKYHOOK_RESOURCE_ID": RESOURCE_ID,
            "SKYHOOK_ROOT_DIR": STATE_DIR,
            "SKYHOOK_LOG_DIR": LOG_DIR,
            **self.env,
            **extra,
        }

    def agent_argv(self, mode: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "skyhook_agent.controller", mode, str(self.root),
                self.copy_dir, *extra]  # fmt: skip

    def run(self, mode: str, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Run one agent invocation to completion (30 s deadline)."""
        return subprocess.run(
            self.agent_argv(mode, *extra),
            env=self.agent_env(**env),
            capture_output=True,
            text=True,
            timeout=30,
        )


def _stat(path: Path) -> tuple[Any, ...]:
    info = path.lstat()
    return (info.st_mode, info.st_size, info.st_mtime_ns)


# A script appending "<label> <args>" to /markers, so tests see exactly what ran, in order.
def marker_script(label: str, extra: str = "", exit_code: int = 0) -> str:
    return f'#!/bin/bash\necho "{label} $*" >> /markers\n{extra}\nexit {exit_code}\n'


@pytest.fixture(scope="session")
def host_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.geteuid() != 0:
        pytest.fail("the agent tests chroot into a host root and must run as root (uid 0)")
    root = tmp_path_factory.mktemp("template") / "root"
    return build_host_root(root)


@pytest.fixture
def host(host_template: Path, tmp_path: Path) -> Iterator[Host]:
    yield Host(clone_host_root(host_template, tmp_path / "host"))
