"""Stand-ins for the commands that would act on this machine: reboot, shutdown, systemctl,
service, sysctl, update-grub and friends. Packages and the agent run them inside a node's host root; the shims
record each request in that host root and turn a reboot into a request the simulated node
acts on. They never reach the real init system.
"""

from __future__ import annotations

from pathlib import Path

# sysctl is here because a container shares this machine's kernel: `sysctl -w` in a package
# step would retune the real host. update-grub would rewrite a boot loader that is not there.
SHIMMED_COMMANDS = (
    "reboot",
    "shutdown",
    "halt",
    "poweroff",
    "systemctl",
    "service",
    "telinit",
    "sysctl",
    "update-grub",
)
REBOOT_REQUEST = "var/lib/skyhook-sandbox/reboot-request"
LOG_DIR = "var/log/skyhook-sandbox"

# Inside the host root the shim computes nothing from its own path: ROOT is "/" there. The
# copies bound over the machine's own binaries in containers get the node's host root path.
SHIM_TEMPLATE = """#!/bin/sh
# skyhook-sandbox shim: records the request, never touches the real machine.
ROOT='{root}'
cmd=$(basename "$0")
mkdir -p "$ROOT/{log_dir}" "$ROOT/$(dirname {reboot_request})"
printf '%s %s\\n' "$cmd" "$*" >> "$ROOT/{log_dir}/$cmd.log"
case "$cmd $*" in
  reboot*|shutdown*|halt*|poweroff*|"telinit 6"*|"telinit 0"*|\\
  "systemctl reboot"*|"systemctl poweroff"*|"systemctl halt"*|"systemctl kexec"*)
    printf '%s %s\\n' "$cmd" "$*" > "$ROOT/{reboot_request}"
    # A real reboot kills the caller before it returns; wait here for the node to do so.
    sleep "${{SKYHOOK_SANDBOX_REBOOT_WAIT:-60}}"
    ;;
esac
exit 0
"""


def shim_script(root: str = "") -> str:
    return SHIM_TEMPLATE.format(root=root, log_dir=LOG_DIR, reboot_request=REBOOT_REQUEST)


def write_shims(layer: Path, base: Path) -> None:
    """Put shims in the layer above `base`, in each bin dir that is a real directory in `base`.

    On a merged-/usr base (/sbin -> usr/sbin) a real /sbin in the upper layer would hide the
    base's symlink, so only the directories the base really has get shims.
    """
    script = shim_script()
    for directory in ("bin", "sbin", "usr/bin", "usr/sbin"):
        base_dir = base / directory
        if base_dir.is_symlink() or not base_dir.is_dir():
            continue
        target = layer / directory
        target.mkdir(parents=True, exist_ok=True)
        for command in SHIMMED_COMMANDS:
            shim = target / command
            shim.write_text(script)
            shim.chmod(0o755)
    (layer / LOG_DIR).mkdir(parents=True, exist_ok=True)
    (layer / REBOOT_REQUEST).parent.mkdir(parents=True, exist_ok=True)


def machine_command_paths() -> list[str]:
    """Real files on this machine that the shimmed command names resolve to (deduplicated)."""
    found: list[str] = []
    for directory in ("/bin", "/sbin", "/usr/bin", "/usr/sbin"):
        for command in SHIMMED_COMMANDS:
            path = Path(directory) / command
            if path.exists():
                real = str(path.resolve())
                if real not in found:
                    found.append(real)
    return found
