#!/bin/bash
# config stage: make this package's drop-ins match the configMap, then apply what can be applied
# without an interrupt. Keys absent from the configMap have their drop-ins removed, so editing
# the CR is enough to undo a setting. Safe to rerun: unchanged files are left alone.
#
# Interrupts to declare in the CR (configInterrupts): grub.conf -> reboot; sysctl.conf ->
# restartAllServices or reboot; service_<svc>.conf -> service restart of <svc>; ulimit.conf ->
# none (new login sessions pick it up).
# shellcheck source=tuning_lib.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuning_lib.sh"
# shellcheck source=tuning_remove.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuning_remove.sh"

# Remember a key's live value the first time this package changes it, for uninstall.
backup_sysctl_values() {
    local key value proc
    mkdir -p "$STATE_DIR"
    touch "$SYSCTL_BACKUP"
    while IFS=$'\t' read -r key value; do
        [[ -n "$key" ]] || continue
        proc="$(sysctl_proc_path "$key")"
        if [[ -r "$proc" ]] && ! grep -q "^${key} = " "$SYSCTL_BACKUP"; then
            echo "${key} = $(squash "$(cat "$proc")")" >>"$SYSCTL_BACKUP"
        fi
    done <<<"$(sysctl_pairs "${CONFIGMAPS}/sysctl.conf")"
}

apply_sysctl() {
    sysctl_pairs "${CONFIGMAPS}/sysctl.conf" >/dev/null # reject bad lines before touching the host
    backup_sysctl_values
    render_sysctl | install_if_changed "$SYSCTL_DROPIN" || true
    echo "applying ${SYSCTL_DROPIN} to the running kernel"
    sysctl -p "$SYSCTL_DROPIN"
}

apply_limits() {
    local session
    render_limits >/dev/null # reject bad lines before touching the host
    render_limits | install_if_changed "$LIMITS_DROPIN" || true
    # limits.d only applies to sessions that load pam_limits.
    for session in /etc/pam.d/common-session*; do
        [[ -f "$session" ]] || continue
        if ! grep -Eq '^[[:space:]]*session[[:space:]].*pam_limits\.so' "$session"; then
            printf '%s\nsession required pam_limits.so\n' "$PAM_MARKER" >>"$session"
            echo "enabled pam_limits in ${session}"
        fi
    done
}

apply_services() {
    local services=() svc
    services=()
    while IFS= read -r svc; do [[ -z "$svc" ]] || services+=("$svc"); done <<<"$(configured_services)"
    for svc in "${services[@]}"; do
        if [[ ! "$svc" =~ ^[A-Za-z0-9:_.@-]+$ ]]; then
            echo "service_${svc}.conf: '${svc}' is not a systemd service name" >&2
            return 1
        fi
        render_service "$svc" | install_if_changed "$(service_dropin "$svc")" || true
    done
    remove_service_dropins "${services[@]}"
    if ((${#services[@]})); then
        # Always, not only on change: a previous run may have failed after writing the files.
        systemctl daemon-reload
    fi
}

apply_grub() {
    if ! command -v update-grub >/dev/null; then
        echo "grub.conf needs update-grub (Debian/Ubuntu GRUB); it is not on this host" >&2
        return 1
    fi
    grub_args >/dev/null # reject bad arguments before touching the host
    render_grub | install_if_changed "$GRUB_DROPIN" || true
    update-grub
}

if has_key sysctl.conf; then apply_sysctl; else remove_sysctl; fi
if has_key ulimit.conf; then apply_limits; else remove_limits; fi
apply_services
if has_key grub.conf; then apply_grub; else remove_grub; fi
echo "tuning config for '${OWNER}' is in place"
