"""Fixtures shared by the package tests: a real minimal Debian host root and our agent.

Each test gets a fresh copy of the cached debootstrap root (skyhook_sandbox.debian_root) with the
package copied in as the operator's init container does, and runs stages through
``python -m skyhook_agent.controller <mode> <root> <copy_dir>`` exactly as a stage pod would.

Safety: steps and interrupts call systemctl, reboot, service, sysctl and update-grub inside the
chroot. Before any step runs, those commands are replaced in the root by shims that only append
their argv to ``/var/log/skyhook-test/calls.log`` (dpkg diversions keep them in place even when a
test installs systemd or procps with apt), so nothing reaches this machine's kernel or init.
Tests assert the requested commands from that log instead of pretending the effect happened.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from skyhook_sandbox.debian_root import debian_root, debian_rootfs_tarball
from skyhook_schemas.podpackage import encode_interrupt_argument

PACKAGES_DIR = Path(__file__).resolve().parent
SCR_NAME = "pkgtest"
SCR_UID = "0b7c5a4e-1d2f-4c55-9a61-7f0e6c3d2b10"
STATE_DIR = f"/var/lib/skyhook/{SCR_NAME}"
LOG_DIR = f"/var/log/skyhook/{SCR_NAME}"
CALLS_LOG = "/var/log/skyhook-test/calls.log"
CALL_PASSED = pytest.StashKey[bool]()
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# Package path of each shimmed command in Debian bookworm (pre-usrmerge names dpkg uses).
SHIMMED = (
    "/bin/systemctl",
    "/sbin/reboot",
    "/sbin/shutdown",
    "/sbin/halt",
    "/sbin/poweroff",
    "/sbin/sysctl",
    "/usr/sbin/service",
    "/usr/sbin/update-grub",
)

SHIM = r"""#!/bin/bash
# Test shim (packages/conftest.py): records this call; never touches the kernel or init.
log=__CALLS_LOG__
mkdir -p "${log%/*}"
name="$(basename "$0")"
{ printf '%q ' "$name" "$@"; echo; } >>"$log"
case "$name" in
systemctl)
    # Service state the test controls: /run/skyhook-test/active/<unit> means "the init
    # system runs it". Starting never sets it (nothing really runs); stopping clears it.
    # Enablement is remembered from enable/disable calls.
    verb="" units=()
    for arg in "$@"; do
        case "$arg" in -*) ;; *) if [[ -z "$verb" ]]; then verb="$arg"; else units+=("${arg%.service}"); fi ;; esac
    done
    mkdir -p /run/skyhook-test/active /var/lib/skyhook-test/enabled /run/skyhook-test/mainpid
    case "$verb" in
    is-active)
        [[ -e "/run/skyhook-test/active/${units[0]}" ]] && { echo active; exit 0; }
        echo inactive; exit 3 ;;
    is-enabled)
        [[ -e "/var/lib/skyhook-test/enabled/${units[0]}" ]] && { echo enabled; exit 0; }
        echo disabled; exit 1 ;;
    enable) for u in "${units[@]}"; do touch "/var/lib/skyhook-test/enabled/$u"; done ;;
    disable)
        for u in "${units[@]}"; do rm -f "/var/lib/skyhook-test/enabled/$u"; done
        [[ " $* " != *" --now "* ]] || for u in "${units[@]}"; do rm -f "/run/skyhook-test/active/$u"; done ;;
    stop) for u in "${units[@]}"; do rm -f "/run/skyhook-test/active/$u"; done ;;
    status) [[ -e "/run/skyhook-test/active/${units[0]}" ]] || exit 3 ;;
    show) cat "/run/skyhook-test/mainpid/${units[0]}" 2>/dev/null || echo 0 ;;
    esac ;;
sysctl)
    case "${1:-}" in
    -p|--load|-w|--write|--system) ;;
    *) echo "sysctl test shim: only apply requests are recorded, not '$*'" >&2; exit 2 ;;
    esac ;;
esac
exit 0
""".replace("__CALLS_LOG__", CALLS_LOG)


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("package tests chroot into a Debian root and need uid 0", pytrace=False)


def add_shim(root: Path, host_path: str) -> None:
    """Put the recording shim at ``host_path`` in ``root``."""
    shim = root / host_path.lstrip("/")
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(SHIM)
    shim.chmod(0o755)


def install_shims(root: Path) -> None:
    """Divert and replace every command that could reach the real kernel or init system."""
    for package_path in SHIMMED:
        subprocess.run(
            ["chroot", str(root), "dpkg-divert", "--local", "--no-rename", "--quiet", "--divert",
             f"{package_path}.distrib", "--add", package_path],
            check=True,
        )  # fmt: skip
        add_shim(root, package_path)


def remove_root(root: Path) -> None:
    """Delete a test root (nothing is ever mounted in it); rm is faster than shutil.rmtree."""
    subprocess.run(["rm", "-rf", "--one-file-system", str(root)], check=False)


def interrupt_payload(kind: str, services: tuple[str, ...] = ()) -> str:
    """The base64 JSON the operator passes to an interrupt pod: the interrupt type in the agent's words, services omitted when empty."""
    return encode_interrupt_argument(kind, **({"services": list(services)} if services else {}))


@dataclass
class PackageHost:
    """A Debian host root with one package copied in, driven through our agent."""

    root: Path
    package: str
    cr_name: str
    cr_version: str
    generation: int = 1
    env: dict[str, str] = field(default_factory=dict)

    @property
    def copy_dir(self) -> str:
        return f"{STATE_DIR}/{self.cr_name}-{self.cr_version}-{SCR_UID}-{self.generation}"

    @property
    def resource_id(self) -> str:
        return f"{SCR_NAME}-{SCR_UID}-{self.generation}_{self.cr_name}_{self.cr_version}"

    def path(self, host_path: str) -> Path:
        """Where a host path (``/etc/...``) lives in the test root."""
        return self.root / host_path.lstrip("/")

    def copy_package(self) -> None:
        """What the package-copy init container does: ``cp -rf /skyhook-package/* <copy_dir>``."""
        target = self.path(self.copy_dir)
        target.mkdir(parents=True, exist_ok=True)
        source = PACKAGES_DIR / self.package
        ignore = shutil.ignore_patterns("tests", "__pycache__")
        for entry in source.iterdir():
            if entry.name in {"tests", "__pycache__"}:
                continue
            if entry.is_dir():
                shutil.copytree(entry, target / entry.name, dirs_exist_ok=True, ignore=ignore)
            else:
                shutil.copy2(entry, target / entry.name)

    def set_configmap(self, values: Mapping[str, str]) -> None:
        """Replace the mounted configMap (one file per key), as an SCR edit would."""
        configmaps = self.path(self.copy_dir) / "configmaps"
        shutil.rmtree(configmaps, ignore_errors=True)
        configmaps.mkdir(parents=True)
        for key, value in values.items():
            (configmaps / key).write_text(value)

    def agent_env(self) -> dict[str, str]:
        return {
            **self.env,
            "PATH": CHROOT_PATH,
            "LANG": "C.UTF-8",
            "SKYHOOK_LOG_DIR": LOG_DIR,
            "SKYHOOK_ROOT_DIR": STATE_DIR,
            "COPY_RESOLV": "false",
            "SKYHOOK_RESOURCE_ID": self.resource_id,
        }

    def run(self, mode: str, interrupt: str | None = None) -> subprocess.CompletedProcess[str]:
        """One agent container: ``controller <mode> <root> <copy_dir> [<b64>]``."""
        argv = [sys.executable, "-m", "skyhook_agent.controller", mode, str(self.root)]
        argv += [self.copy_dir] if interrupt is None else [self.copy_dir, interrupt]
        result = subprocess.run(
            argv, env=self.agent_env(), capture_output=True, text=True, timeout=600, check=False
        )
        print(f"--- {mode} rc={result.returncode}\n{result.stdout}\n{result.stderr}")
        return result

    def stage(self, stage: str) -> tuple[int, int]:
        """A stage pod: the stage, then (only if it passed) its check. Returns both exit codes."""
        action = self.run(stage).returncode
        check = self.run(f"{stage}-check").returncode if action == 0 else -1
        return action, check

    def interrupt(self, kind: str, *services: str) -> subprocess.CompletedProcess[str]:
        return self.run("interrupt", interrupt_payload(kind, services))

    def calls(self) -> list[list[str]]:
        """Shimmed commands the steps asked for, in order, as argv lists."""
        log = self.path(CALLS_LOG)
        if not log.exists():
            return []
        return [shlex.split(line) for line in log.read_text().splitlines() if line.strip()]

    def clear_calls(self) -> None:
        self.path(CALLS_LOG).unlink(missing_ok=True)

    def add_shim(self, host_path: str) -> None:
        """Record calls to ``host_path`` (e.g. a package manager) instead of running it."""
        add_shim(self.root, host_path)

    def enable_network(self) -> None:
        """Let apt inside the root resolve deb.debian.org (the operator sets COPY_RESOLV=false)."""
        shutil.copy2("/etc/resolv.conf", self.path("/etc/resolv.conf"))

    def chroot(self, script: str) -> subprocess.CompletedProcess[str]:
        """Run a bash snippet in the root directly (test setup and inspection, not steps)."""
        return subprocess.run(
            ["chroot", str(self.root), "bash", "-c", script],
            env={"PATH": CHROOT_PATH, "LANG": "C.UTF-8"},
            capture_output=True,
            text=True,
            check=False,
        )

    def set_service_active(self, unit: str, active: bool = True) -> None:
        """Stand in for the init system's view of ``unit`` (read by the systemctl shim)."""
        marker = self.path(f"/run/skyhook-test/active/{unit}")
        marker.parent.mkdir(parents=True, exist_ok=True)
        if active:
            marker.touch()
        else:
            marker.unlink(missing_ok=True)

    def snapshot(self, *host_dirs: str) -> dict[str, bytes]:
        """Contents of every file under ``host_dirs``, to compare a host before and after."""
        files: dict[str, bytes] = {}
        for host_dir in host_dirs:
            base = self.path(host_dir)
            for file in sorted(base.rglob("*")):
                if file.is_file() and not file.is_symlink():
                    files["/" + str(file.relative_to(self.root))] = file.read_bytes()
        return files


@pytest.fixture(scope="session")
def debian_tarball() -> Path:
    """The cached debootstrap tarball, built (with progress lines) on first use."""
    _require_root()
    return debian_rootfs_tarball()


@pytest.fixture
def debian_host(
    request: pytest.FixtureRequest, tmp_path: Path, debian_tarball: Path
) -> Iterator[Path]:
    """A fresh, shimmed Debian root for one test; deleted when the test passes (~175 MB each),
    kept for inspection when it fails."""
    root = debian_root(tmp_path / "root")
    install_shims(root)
    yield root
    if request.node.stash.get(CALL_PASSED, False):
        remove_root(root)


def _host_factory(root: Path) -> Callable[..., PackageHost]:
    def make(package: str, *, cr_name: str, cr_version: str, **kwargs: object) -> PackageHost:
        host = PackageHost(root, package, cr_name, cr_version, **kwargs)  # type: ignore[arg-type]
        host.copy_package()
        return host

    return make


@pytest.fixture
def package_host(debian_host: Path) -> Callable[..., PackageHost]:
    """Factory: ``package_host("tuning", cr_name="tuning", cr_version="1.1.4", env={...})``."""
    return _host_factory(debian_host)


@pytest.fixture(scope="module")
def module_package_host(
    tmp_path_factory: pytest.TempPathFactory, debian_tarball: Path
) -> Iterator[Callable[..., PackageHost]]:
    """Like ``package_host`` on one root shared by a module's tests (for slow setup like apt)."""
    root = debian_root(tmp_path_factory.mktemp("module-root") / "root")
    install_shims(root)
    yield _host_factory(root)
    remove_root(root)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Remember whether the test body passed, so its root can be kept for a failure."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.stash[CALL_PASSED] = report.passed
