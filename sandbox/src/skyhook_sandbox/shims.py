"""Stand-ins for the commands that would act on this machine: reboot, shutdown, systemctl,
service, sysctl, update-grub and friends, plus a small simulated kernel and init behind them.

Packages and the agent run these commands inside a node's host root. The shims record each
request in that host root and act on a simulated machine kept there (see `simkernel`):
- sysctl reads and writes `/var/lib/skyhook-sandbox/kernel/sys`, which containers see at
  `/proc/sys` of the host root;
- update-grub writes the next kernel command line into `/boot/grub/grub.cfg`; the boot step
  makes it `/proc/cmdline`;
- systemctl/service keep unit state (enabled, active, MainPID) under
  `/var/lib/skyhook-sandbox/systemd`; a started unit gets a `/proc/<MainPID>/limits` computed
  from its drop-ins' Limit* lines;
- reboot and friends ask the node for a simulated reboot.
They never reach the real kernel or init system.
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
KERNEL_DIR = "var/lib/skyhook-sandbox/kernel"
SYSTEMD_DIR = "var/lib/skyhook-sandbox/systemd"
BOOT_SCRIPT = "usr/lib/skyhook-sandbox/boot"
# A unit every node starts with, as a GPU node's container runtime would be.
PRESEEDED_UNITS = ("containerd.service",)
# Part of the shim layer's cache key: bump when the layer's content changes but the script not.
LAYER_VERSION = "2"

# Inside the host root the shim computes nothing from its own path: ROOT is "/" there. The
# copies bound over the machine's own binaries in containers get the node's host root path.
# POSIX sh + awk only: the plain host root has dash and mawk, no bash features are assumed.
SHIM_TEMPLATE = r"""#!/bin/sh
# skyhook-sandbox shim: acts on the node's simulated kernel and init, never on the real machine.
ROOT='@ROOT@'
KERNEL="$ROOT/@KERNEL_DIR@"
UNITS="$ROOT/@SYSTEMD_DIR@"
TAB=$(printf '\t')
cmd=$(basename "$0")
mkdir -p "$ROOT/@LOG_DIR@" "$ROOT/$(dirname @REBOOT_REQUEST@)"
printf '%s %s\n' "$cmd" "$*" >> "$ROOT/@LOG_DIR@/$cmd.log"

# ---- sysctl ---------------------------------------------------------------------------------
sysctl_path() { printf '%s/sys/%s' "$KERNEL" "$(printf '%s' "$1" | tr . /)"; }

# "key<TAB>value" per line of a sysctl.conf file; a leading "-" (ignore errors) is dropped.
sysctl_pairs() {
    awk -v tab="$TAB" '
        { sub(/^[ \t]+/, ""); sub(/[ \t\r]+$/, "") }
        $0 == "" || /^[#;]/ { next }
        {
            i = index($0, "=")
            if (!i) { printf "sysctl: %s:%d: line is not key = value\n", FILENAME, NR > "/dev/stderr"; next }
            k = substr($0, 1, i - 1); v = substr($0, i + 1)
            sub(/^-/, "", k); gsub(/^[ \t]+|[ \t]+$/, "", k)
            gsub(/^[ \t]+|[ \t]+$/, "", v); gsub(/[ \t]+/, " ", v)
            print k tab v
        }' "$1"
}

sysctl_set() { # key value [quiet]
    path=$(sysctl_path "$1")
    if [ ! -f "$path" ]; then
        echo "sysctl: cannot stat /proc/sys/$(printf '%s' "$1" | tr . /): No such file or directory" >&2
        return 1
    fi
    # The first change of a key keeps the boot-time value, which the next boot restores.
    saved="$KERNEL/boot-defaults/$(printf '%s' "$1" | tr . /)"
    if [ ! -f "$saved" ]; then mkdir -p "$(dirname "$saved")" && cp "$path" "$saved"; fi
    printf '%s\n' "$2" > "$path"
    [ -n "${3:-}" ] || printf '%s = %s\n' "$1" "$2"
}

sysctl_get() { # key name_too
    path=$(sysctl_path "$1")
    if [ ! -f "$path" ]; then
        echo "sysctl: cannot stat /proc/sys/$(printf '%s' "$1" | tr . /): No such file or directory" >&2
        return 1
    fi
    if [ "$2" = 1 ]; then printf '%s = %s\n' "$1" "$(cat "$path")"; else cat "$path"; fi
}

sysctl_load() { # file [quiet]
    if [ ! -r "$ROOT$1" ]; then echo "sysctl: cannot open \"$1\": No such file or directory" >&2; return 1; fi
    rc=0
    pairs=$(sysctl_pairs "$ROOT$1") || rc=1
    while IFS="$TAB" read -r key value; do
        [ -n "$key" ] || continue
        sysctl_set "$key" "$value" "${2:-}" || rc=1
    done <<EOF
$pairs
EOF
    return $rc
}

# systemd-sysctl's order: *.conf by file name over these dirs (the first dir holding a name
# wins), then /etc/sysctl.conf.
sysctl_system() { # [quiet]
    rc=0
    for file in $(for dir in /etc/sysctl.d /run/sysctl.d /usr/local/lib/sysctl.d /usr/lib/sysctl.d /lib/sysctl.d; do
                      for f in "$ROOT$dir"/*.conf; do [ -f "$f" ] && basename "$f"; done
                  done | sort -u); do
        for dir in /etc/sysctl.d /run/sysctl.d /usr/local/lib/sysctl.d /usr/lib/sysctl.d /lib/sysctl.d; do
            if [ -f "$ROOT$dir/$file" ]; then
                [ -n "${1:-}" ] || echo "* Applying $dir/$file ..."
                sysctl_load "$dir/$file" "${1:-}" || rc=1
                break
            fi
        done
    done
    if [ -f "$ROOT/etc/sysctl.conf" ]; then
        [ -n "${1:-}" ] || echo "* Applying /etc/sysctl.conf ..."
        sysctl_load /etc/sysctl.conf "${1:-}" || rc=1
    fi
    return $rc
}

sysctl_main() {
    quiet="" names=1 rc=0 write=""
    while [ $# -gt 0 ]; do
        case "$1" in
        -q|--quiet) quiet=1 ;;
        -n|--values) names=0 ;;
        -w|--write) write=1 ;;
        -e|--ignore|-N|--names) ;;
        --system) sysctl_system "$quiet"; return ;;
        -p|--load) shift; sysctl_load "${1:-/etc/sysctl.conf}" "$quiet"; return ;;
        -p*) sysctl_load "${1#-p}" "$quiet"; return ;;
        --load=*) sysctl_load "${1#--load=}" "$quiet"; return ;;
        -a|-A|-X|--all)
            (cd "$KERNEL/sys" && find . -type f | sed 's|^\./||' | sort) | while read -r p; do
                sysctl_get "$(printf '%s' "$p" | tr / .)" "$names"
            done
            return ;;
        -*) echo "sysctl: unknown option '$1'" >&2; return 2 ;;
        *=*) sysctl_set "${1%%=*}" "${1#*=}" "$quiet" || rc=255 ;;
        *)
            if [ -n "$write" ]; then echo "sysctl: \"$1\" must be of the form name=value" >&2; rc=255
            else sysctl_get "$1" "$names" || rc=255; fi ;;
        esac
        shift
    done
    return $rc
}

# ---- update-grub ----------------------------------------------------------------------------
# The arguments update-grub would put on the kernel command line, read as grub-mkconfig does:
# /etc/default/grub then /etc/default/grub.d/*.cfg sourced in a subshell.
grub_cmdline() {
    (
        GRUB_CMDLINE_LINUX="" GRUB_CMDLINE_LINUX_DEFAULT=""
        if [ -f "$ROOT/etc/default/grub" ]; then . "$ROOT/etc/default/grub"; fi
        for cfg in "$ROOT"/etc/default/grub.d/*.cfg; do
            if [ -f "$cfg" ]; then . "$cfg"; fi
        done
        echo $GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT
    )
}

update_grub_main() {
    echo "Generating grub configuration file ..." >&2
    args=$(grub_cmdline) || { echo "update-grub: reading /etc/default/grub failed" >&2; return 1; }
    mkdir -p "$ROOT/boot/grub"
    printf '%s\n' "# Written by the skyhook-sandbox update-grub shim." \
        "menuentry 'skyhook-sandbox' {" \
        "	linux	/boot/vmlinuz-sandbox root=/dev/sda1 ro $args" "}" > "$ROOT/boot/grub/grub.cfg"
    echo "done" >&2
}

# ---- systemd --------------------------------------------------------------------------------
unit_name() { case "$1" in *.*) echo "$1" ;; *) echo "$1.service" ;; esac; }
unit_active() { [ -f "$UNITS/active/$1" ]; }
unit_enabled() { [ -f "$UNITS/enabled/$1" ]; }
unit_pid() { if unit_active "$1"; then cat "$UNITS/active/$1"; else echo 0; fi; }

# The unit file and its drop-ins' lines, in systemd's order (drop-ins by file name).
unit_config() {
    for dir in /lib/systemd/system /usr/lib/systemd/system /run/systemd/system /etc/systemd/system; do
        if [ -f "$ROOT$dir/$1" ]; then cat "$ROOT$dir/$1"; fi
    done
    for name in $(for dir in /lib/systemd/system /usr/lib/systemd/system /run/systemd/system /etc/systemd/system; do
                      for f in "$ROOT$dir/$1.d"/*.conf; do [ -f "$f" ] && basename "$f"; done
                  done | sort -u); do
        for dir in /etc/systemd/system /run/systemd/system /usr/lib/systemd/system /lib/systemd/system; do
            if [ -f "$ROOT$dir/$1.d/$name" ]; then cat "$ROOT$dir/$1.d/$name"; break; fi
        done
    done
}

# /proc/<pid>/limits of a process started with the unit's Limit* settings (systemd's defaults
# for the rest); a single value sets soft and hard, infinity is unlimited, K/M/G/... are 1024-based.
render_limits() {
    unit_config "$1" | awk '
        function size(v,   n, s, p) {
            if (v == "infinity") return "unlimited"
            if (!match(v, /^[0-9]+[KMGTPE]?$/)) return ""
            s = substr(v, length(v)); n = v
            p = index("KMGTPE", s)
            if (p) { n = substr(v, 1, length(v) - 1); return sprintf("%.0f", n * 1024 ^ p) }
            return sprintf("%.0f", n)
        }
        BEGIN {
            split("CPU FSIZE DATA STACK CORE RSS NPROC NOFILE MEMLOCK AS LOCKS SIGPENDING MSGQUEUE NICE RTPRIO RTTIME", order, " ")
            row["CPU"] = "Max cpu time"; unit["CPU"] = "seconds"
            row["FSIZE"] = "Max file size"; unit["FSIZE"] = "bytes"
            row["DATA"] = "Max data size"; unit["DATA"] = "bytes"
            row["STACK"] = "Max stack size"; unit["STACK"] = "bytes"; soft["STACK"] = 8388608
            row["CORE"] = "Max core file size"; unit["CORE"] = "bytes"; soft["CORE"] = 0
            row["RSS"] = "Max resident set"; unit["RSS"] = "bytes"
            row["NPROC"] = "Max processes"; unit["NPROC"] = "processes"; soft["NPROC"] = hard["NPROC"] = 127402
            row["NOFILE"] = "Max open files"; unit["NOFILE"] = "files"; soft["NOFILE"] = 1024; hard["NOFILE"] = 524288
            row["MEMLOCK"] = "Max locked memory"; unit["MEMLOCK"] = "bytes"; soft["MEMLOCK"] = hard["MEMLOCK"] = 8388608
            row["AS"] = "Max address space"; unit["AS"] = "bytes"
            row["LOCKS"] = "Max file locks"; unit["LOCKS"] = "locks"
            row["SIGPENDING"] = "Max pending signals"; unit["SIGPENDING"] = "signals"; soft["SIGPENDING"] = hard["SIGPENDING"] = 127402
            row["MSGQUEUE"] = "Max msgqueue size"; unit["MSGQUEUE"] = "bytes"; soft["MSGQUEUE"] = hard["MSGQUEUE"] = 819200
            row["NICE"] = "Max nice priority"; unit["NICE"] = ""; soft["NICE"] = hard["NICE"] = 0
            row["RTPRIO"] = "Max realtime priority"; unit["RTPRIO"] = ""; soft["RTPRIO"] = hard["RTPRIO"] = 0
            row["RTTIME"] = "Max realtime timeout"; unit["RTTIME"] = "us"
            for (k in row) { if (!(k in soft)) soft[k] = "unlimited"; if (!(k in hard)) hard[k] = "unlimited" }
        }
        /^[ \t]*Limit[A-Z]+[ \t]*=/ {
            line = $0; sub(/^[ \t]*Limit/, "", line)
            i = index(line, "="); name = substr(line, 1, i - 1); value = substr(line, i + 1)
            gsub(/[ \t\r]/, "", name); gsub(/[ \t\r]/, "", value)
            if (!(name in row)) next
            j = index(value, ":")
            if (j) { s = size(substr(value, 1, j - 1)); h = size(substr(value, j + 1)) }
            else { s = size(value); h = s }
            if (s == "" || h == "") { printf "Limit%s=%s: not a number, size or infinity\n", name, value > "/dev/stderr"; next }
            soft[name] = s; hard[name] = h
        }
        END {
            printf "%-25s %-20s %-20s %-10s\n", "Limit", "Soft Limit", "Hard Limit", "Units"
            for (i = 1; i <= 16; i++) {
                k = order[i]
                printf "%-25s %-20s %-20s %-10s\n", row[k], soft[k], hard[k], unit[k]
            }
        }'
}

# A started unit's main process: a pid from the node's pool (a pid /proc always has, so the
# pods' view can show this unit's limits file there) and its limits.
unit_start() {
    count=$(cat "$UNITS/started" 2>/dev/null || echo 0)
    pool=$(grep -c . "$KERNEL/pid-pool" 2>/dev/null || echo 0)
    if [ "$pool" -eq 0 ]; then echo "systemctl: no pid pool in $KERNEL (node not booted?)" >&2; return 1; fi
    pid=$(sed -n "$((count % pool + 1))p" "$KERNEL/pid-pool")
    echo $((count + 1)) > "$UNITS/started"
    unit_stop "$1"
    mkdir -p "$KERNEL/proc/$pid" "$UNITS/active"
    render_limits "$1" > "$KERNEL/proc/$pid/limits"
    echo "$pid" > "$UNITS/active/$1"
}

unit_stop() {
    if unit_active "$1"; then
        rm -rf "$KERNEL/proc/$(cat "$UNITS/active/$1")"
        rm -f "$UNITS/active/$1"
    fi
}

unit_show() { # unit property
    case "$2" in
    MainPID|ExecMainPID) unit_pid "$1" ;;
    ActiveState) if unit_active "$1"; then echo active; else echo inactive; fi ;;
    SubState) if unit_active "$1"; then echo running; else echo dead; fi ;;
    UnitFileState) if unit_enabled "$1"; then echo enabled; else echo disabled; fi ;;
    Id|Names) echo "$1" ;;
    *) echo "" ;;
    esac
}

systemctl_main() {
    verb="" units="" props="" value="" now=""
    while [ $# -gt 0 ]; do
        case "$1" in
        --value) value=1 ;;
        --now) now=1 ;;
        -p|--property) shift; props="$props $(echo "$1" | tr , ' ')" ;;
        --property=*) props="$props $(echo "${1#--property=}" | tr , ' ')" ;;
        -*) ;;
        *) if [ -z "$verb" ]; then verb="$1"; else units="$units $(unit_name "$1")"; fi ;;
        esac
        shift
    done
    mkdir -p "$UNITS/enabled" "$UNITS/active"
    rc=0
    case "$verb" in
    daemon-reload|daemon-reexec) date +%s > "$UNITS/reloaded" ;;
    start) for u in $units; do unit_active "$u" || unit_start "$u" || rc=1; done ;;
    restart|reload-or-restart|force-reload) for u in $units; do unit_start "$u" || rc=1; done ;;
    try-restart|condrestart) for u in $units; do if unit_active "$u"; then unit_start "$u" || rc=1; fi; done ;;
    reload) for u in $units; do unit_active "$u" || { echo "Job for $u failed: not active" >&2; rc=1; }; done ;;
    stop|kill) for u in $units; do unit_stop "$u"; done ;;
    enable)
        for u in $units; do
            touch "$UNITS/enabled/$u"
            if [ -n "$now" ] && ! unit_active "$u"; then unit_start "$u" || rc=1; fi
        done ;;
    disable)
        for u in $units; do rm -f "$UNITS/enabled/$u"; [ -z "$now" ] || unit_stop "$u"; done ;;
    is-active)
        for u in $units; do if unit_active "$u"; then echo active; else echo inactive; rc=3; fi; done ;;
    is-enabled)
        for u in $units; do if unit_enabled "$u"; then echo enabled; else echo disabled; rc=1; fi; done ;;
    status)
        for u in $units; do
            if unit_active "$u"; then
                printf '* %s\n     Active: active (running)\n   Main PID: %s\n' "$u" "$(unit_pid "$u")"
            else
                printf '* %s\n     Active: inactive (dead)\n' "$u"; rc=3
            fi
        done ;;
    show)
        for u in $units; do
            for p in ${props:-Id MainPID ActiveState SubState UnitFileState}; do
                if [ -n "$value" ]; then unit_show "$u" "$p"; else echo "$p=$(unit_show "$u" "$p")"; fi
            done
        done ;;
    esac
    return $rc
}

# ---- boot -----------------------------------------------------------------------------------
# Run by the node at each (simulated) boot, after it refreshed $KERNEL/pid-pool.
boot_main() {
    if [ -d "$KERNEL/boot-defaults" ]; then
        (cd "$KERNEL/boot-defaults" && find . -type f) | while read -r key; do
            cp "$KERNEL/boot-defaults/$key" "$KERNEL/sys/$key"
        done
    fi
    sysctl_system quiet || echo "boot: some sysctl settings could not be applied" >&2
    args=""
    if [ -f "$ROOT/boot/grub/grub.cfg" ]; then
        args=$(sed -n 's/^[[:space:]]*linux[[:space:]][[:space:]]*[^[:space:]]*[[:space:]]*root=[^[:space:]]*[[:space:]]*ro[[:space:]]*//p' "$ROOT/boot/grub/grub.cfg" | head -n 1)
    fi
    echo "BOOT_IMAGE=/boot/vmlinuz-sandbox root=/dev/sda1 ro${args:+ $args}" > "$KERNEL/cmdline"
    rm -rf "$KERNEL/proc"
    mkdir -p "$KERNEL/proc" "$UNITS/enabled" "$UNITS/active"
    # Enabled units start; units running before the reboot come back too.
    for u in $( (ls "$UNITS/enabled"; ls "$UNITS/active") | sort -u); do
        rm -f "$UNITS/active/$u"
        unit_start "$u"
    done
}

case "$cmd $*" in
  reboot*|shutdown*|halt*|poweroff*|"telinit 6"*|"telinit 0"*|\
  "systemctl reboot"*|"systemctl poweroff"*|"systemctl halt"*|"systemctl kexec"*)
    printf '%s %s\n' "$cmd" "$*" > "$ROOT/@REBOOT_REQUEST@"
    # A real reboot kills the caller before it returns; wait here for the node to do so.
    sleep "${SKYHOOK_SANDBOX_REBOOT_WAIT:-60}"
    exit 0 ;;
  "service procps "*) sysctl_system quiet; exit ;;
  service\ *\ *) exec_unit="$1"; shift; systemctl_main "$1" "$exec_unit"; exit ;;
  sysctl*) sysctl_main "$@"; exit ;;
  update-grub*) update_grub_main; exit ;;
  systemctl*) systemctl_main "$@"; exit ;;
  boot*) boot_main; exit ;;
esac
exit 0
"""


def shim_script(root: str = "") -> str:
    replacements = {
        "@ROOT@": root,
        "@LOG_DIR@": LOG_DIR,
        "@REBOOT_REQUEST@": REBOOT_REQUEST,
        "@KERNEL_DIR@": KERNEL_DIR,
        "@SYSTEMD_DIR@": SYSTEMD_DIR,
    }
    script = SHIM_TEMPLATE
    for placeholder, value in replacements.items():
        script = script.replace(placeholder, value)
    return script


def write_shims(layer: Path, base: Path) -> None:
    """Put shims in the layer above `base`, in each bin dir that is a real directory in `base`,
    plus the boot step and the initial state of the simulated init (`PRESEEDED_UNITS` enabled).

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
    boot = layer / BOOT_SCRIPT
    boot.parent.mkdir(parents=True, exist_ok=True)
    boot.write_text(script)
    boot.chmod(0o755)
    enabled = layer / SYSTEMD_DIR / "enabled"
    enabled.mkdir(parents=True, exist_ok=True)
    for unit in PRESEEDED_UNITS:
        (enabled / unit).touch()
    (layer / LOG_DIR).mkdir(parents=True, exist_ok=True)
    (layer / REBOOT_REQUEST).parent.mkdir(parents=True, exist_ok=True)
    _divert_from_dpkg(layer, base)


def shadow_image_commands(layer: Path, image: Path, script: str) -> None:
    """Replace the image's own shimmed commands with `script`, in a writable layer above it.

    Only the commands the image has (a file or a symlink, e.g. to busybox) and only in its real
    bin dirs, so the image keeps its layout and gains no command it did not ship.
    """
    for directory in ("bin", "sbin", "usr/bin", "usr/sbin"):
        image_dir = image / directory
        if image_dir.is_symlink() or not image_dir.is_dir():
            continue
        for command in SHIMMED_COMMANDS:
            if not (image_dir / command).is_symlink() and not (image_dir / command).exists():
                continue
            shim = layer / directory / command
            shim.parent.mkdir(parents=True, exist_ok=True)
            shim.write_text(script)
            shim.chmod(0o755)


def _divert_from_dpkg(layer: Path, base: Path) -> None:
    """On a dpkg base, local diversions keep the shims in place when a package step installs
    systemd, procps or grub with apt (dpkg then writes the real binary as `<path>.distrib`)."""
    diversions = base / "var/lib/dpkg/diversions"
    if not diversions.is_file():
        return
    text = diversions.read_text()
    for directory in ("/bin", "/sbin", "/usr/bin", "/usr/sbin"):
        for command in SHIMMED_COMMANDS:
            path = f"{directory}/{command}"
            if f"{path}\n{path}.distrib\n" not in text:
                text += f"{path}\n{path}.distrib\n:\n"
    target = layer / "var/lib/dpkg/diversions"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


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
