#!/bin/bash
# shellcheck disable=SC2034 # the paths below are used by the scripts that source this file
# Shared by every tuning step (sourced, never run as a step itself).
#
# One configMap key maps to one drop-in file on the host, owned by this CR package:
#   sysctl.conf        -> /etc/sysctl.d/999-<owner>-tuning.conf
#   ulimit.conf        -> /etc/security/limits.d/999-<owner>-tuning.conf
#   service_<svc>.conf -> /etc/systemd/system/<svc>.service.d/999-<owner>-tuning.conf
#   grub.conf          -> /etc/default/grub.d/999-<owner>-tuning.cfg
# <owner> is the CR package name (second "_" field of SKYHOOK_RESOURCE_ID), so several tuning
# packages in one or more CRs keep separate files. The render_* functions print what a drop-in
# must contain; config writes that and config-check compares against it, so both agree by
# construction.

set -euo pipefail
if [[ -n "${SET_X:-}" && "${SET_X}" != 0 ]]; then
    set -x
fi

CONFIGMAPS="${SKYHOOK_DIR:?SKYHOOK_DIR is unset: run this step through the Skyhook agent}/configmaps"

tuning_owner() {
    local id="${SKYHOOK_RESOURCE_ID:?SKYHOOK_RESOURCE_ID is unset: run this step through the Skyhook agent}"
    local owner
    owner="$(cut -d_ -f2 <<<"$id")"
    if [[ "$id" != *_*_* || -z "$owner" ]]; then
        echo "SKYHOOK_RESOURCE_ID '$id' is not <id>_<package>_<version>" >&2
        return 1
    fi
    echo "$owner"
}

OWNER="$(tuning_owner)"
DROPIN_NAME="999-${OWNER}-tuning.conf"
SYSCTL_DROPIN="/etc/sysctl.d/${DROPIN_NAME}"
LIMITS_DROPIN="/etc/security/limits.d/${DROPIN_NAME}"
GRUB_DROPIN="/etc/default/grub.d/999-${OWNER}-tuning.cfg"
# Live sysctl values found before this package first changed them, restored on removal.
STATE_DIR="/var/lib/skyhook-tuning/${OWNER}"
SYSCTL_BACKUP="${STATE_DIR}/sysctl-before.conf"
PAM_MARKER="# skyhook-tuning: pam_limits applies /etc/security/limits.d (remove both lines together)"
LIMIT_ITEMS=" core data fsize memlock nofile rss stack cpu nproc as maxlogins maxsyslogins priority locks sigpending msgqueue nice rtprio "

header() {
    echo "# Written by the Skyhook tuning package for CR package '${OWNER}' from configMap key '$1'."
    echo "# Change the Skyhook CR, not this file: the next config stage overwrites it."
}

# Collapse runs of whitespace (newlines too) to one space and trim the ends; quotes stay as they are.
squash() {
    local text="${1//[$'\t\n\r']/ }" words=()
    read -r -a words <<<"$text" || true
    printf '%s\n' "${words[*]}"
}

has_key() { [[ -f "${CONFIGMAPS}/$1" ]]; }

# Lines of a configMap value without blanks, comments and surrounding whitespace.
content_lines() {
    sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' -e '/^$/d' -e '/^[#;]/d' "$1"
}

# Print "key<TAB>value" per sysctl line ("k = v", "k=v", optional leading "-"), whitespace
# inside the value collapsed to single spaces as the kernel prints it.
sysctl_pairs() {
    local line key value
    while IFS= read -r line; do
        [[ -n "$line" ]] || continue
        if [[ "$line" != *=* ]]; then
            echo "sysctl.conf: '$line' is not key = value" >&2
            return 1
        fi
        key="${line%%=*}"
        key="${key#-}"
        key="$(squash "$key")"
        value="$(squash "${line#*=}")"
        printf '%s\t%s\n' "$key" "$value"
    done <<<"$(content_lines "$1")"
}

# systemd limit value (number, K/M/G/T/P/E suffix, infinity) -> what /proc/<pid>/limits shows.
proc_limit_value() {
    local value="$1" number suffix power prefix units=KMGTPE
    if [[ "$value" == infinity ]]; then
        echo unlimited
        return
    fi
    if [[ ! "$value" =~ ^([0-9]+)([KMGTPE]?)$ ]]; then
        return 1
    fi
    number="$((10#${BASH_REMATCH[1]}))" # base 10 even with leading zeros
    suffix="${BASH_REMATCH[2]}"
    power=0
    if [[ -n "$suffix" ]]; then
        prefix="${units%%"$suffix"*}"
        power=$(((${#prefix} + 1) * 10))
    fi
    if ((number > (0x7fffffffffffffff >> power))); then
        return 1 # beyond what a 64-bit limit can hold
    fi
    echo $((number << power))
}

sysctl_proc_path() { echo "/proc/sys/${1//.//}"; }

# Print "name<TAB>value" per ulimit.conf line, rejecting names limits.conf does not know.
ulimit_pairs() {
    local line name value
    while IFS= read -r line; do
        [[ -n "$line" ]] || continue
        name="$(squash "${line%%=*}")"
        value="$(squash "${line#*=}")"
        if [[ "$line" != *=* || "$LIMIT_ITEMS" != *" $name "* ]]; then
            echo "ulimit.conf: '$line' must be <item>=<value> with item one of:${LIMIT_ITEMS}" >&2
            return 1
        fi
        if [[ ! "$value" =~ ^(-?[0-9]+|unlimited|infinity)$ ]]; then
            echo "ulimit.conf: '$line': value must be a number, unlimited or infinity" >&2
            return 1
        fi
        printf '%s\t%s\n' "$name" "$value"
    done <<<"$(content_lines "$1")"
}

grub_args() {
    local args
    args="$(squash "$(content_lines "${CONFIGMAPS}/grub.conf")")"
    if [[ "$args" == *[\"\$\`\\]* ]]; then
        echo "grub.conf: kernel arguments must not contain quotes, \$, backquotes or backslashes" >&2
        return 1
    fi
    echo "$args"
}

render_sysctl() {
    header sysctl.conf
    cat "${CONFIGMAPS}/sysctl.conf"
}

render_limits() {
    local name value
    header ulimit.conf
    ulimit_pairs "${CONFIGMAPS}/ulimit.conf" | while IFS=$'\t' read -r name value; do
        [[ -n "$name" ]] || continue
        echo "* hard ${name} ${value}"
    done
}

render_service() {
    header "service_$1.conf"
    cat "${CONFIGMAPS}/service_$1.conf"
}

render_grub() {
    header grub.conf
    # Keeps the distro's defaults (e.g. "quiet") and appends ours.
    echo "GRUB_CMDLINE_LINUX_DEFAULT=\"\${GRUB_CMDLINE_LINUX_DEFAULT:-} $(grub_args)\""
}

# Services named by service_<svc>.conf keys, one per line.
configured_services() {
    local key
    for key in "${CONFIGMAPS}"/service_*.conf; do
        [[ -f "$key" ]] || continue
        key="$(basename "$key" .conf)"
        echo "${key#service_}"
    done
}

service_dropin() { echo "/etc/systemd/system/$1.service.d/${DROPIN_NAME}"; }

# Services that currently have this owner's drop-in, one per line.
installed_services() {
    local dropin dir
    for dropin in /etc/systemd/system/*.service.d/"${DROPIN_NAME}"; do
        [[ -f "$dropin" ]] || continue
        dir="$(basename "$(dirname "$dropin")")"
        echo "${dir%.service.d}"
    done
}

# Write stdin to $1 only if it differs; exit status 0 = changed, 1 = already up to date.
install_if_changed() {
    local target="$1" tmp
    mkdir -p "$(dirname "$target")"
    tmp="$(mktemp "${target}.XXXXXX")"
    cat >"$tmp"
    chmod 0644 "$tmp"
    if [[ -f "$target" ]] && cmp -s "$tmp" "$target"; then
        rm -f "$tmp"
        return 1
    fi
    mv -f "$tmp" "$target"
    echo "wrote ${target}"
}

# "ok" if file $1 holds exactly what render function $2 (args follow) prints, else a reason.
dropin_status() {
    local file="$1"
    shift
    if [[ ! -f "$file" ]]; then
        echo "missing ${file}"
    elif ! "$@" | cmp -s "$file" -; then
        echo "${file} differs from the configMap"
    else
        echo ok
    fi
}
