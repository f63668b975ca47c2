#!/bin/bash
# Removal of each kind of drop-in, shared by config (a key left the configMap) and uninstall.
# Sourced after tuning_lib.sh. Each function is a no-op when there is nothing to remove.

# Delete the sysctl drop-in and put back the live values it replaced.
remove_sysctl() {
    if [[ -f "$SYSCTL_DROPIN" ]]; then
        rm -f "$SYSCTL_DROPIN"
        echo "removed ${SYSCTL_DROPIN}"
    fi
    if [[ -s "$SYSCTL_BACKUP" ]]; then
        echo "restoring the sysctl values found before tuning changed them"
        sysctl -p "$SYSCTL_BACKUP"
    fi
    rm -f "$SYSCTL_BACKUP"
}

# Delete the limits drop-in; drop the pam_limits lines we added once no tuning package needs them.
remove_limits() {
    local others session
    if [[ -f "$LIMITS_DROPIN" ]]; then
        rm -f "$LIMITS_DROPIN"
        echo "removed ${LIMITS_DROPIN}"
    fi
    others="$(find /etc/security/limits.d -maxdepth 1 -name '999-*-tuning.conf' 2>/dev/null | head -1)"
    [[ -z "$others" ]] || return 0
    for session in /etc/pam.d/common-session*; do
        if [[ ! -f "$session" ]] || ! grep -qxF "$PAM_MARKER" "$session"; then continue; fi
        sed -i "\\|^${PAM_MARKER}\$|{N;d}" "$session"
        echo "removed the pam_limits line tuning added to ${session}"
    done
}

# Delete this owner's service drop-ins except for the services given as arguments, and reload
# systemd if any went. Prints nothing and reloads nothing when none were removed.
remove_service_dropins() {
    local keep=" $* " svc dropin removed=0
    while IFS= read -r svc; do
        [[ -n "$svc" ]] || continue
        [[ "$keep" == *" $svc "* ]] && continue
        dropin="$(service_dropin "$svc")"
        rm -f "$dropin"
        rmdir --ignore-fail-on-non-empty "$(dirname "$dropin")"
        echo "removed ${dropin}"
        removed=1
    done <<<"$(installed_services)"
    if ((removed)); then
        systemctl daemon-reload
    fi
}

remove_grub() {
    [[ -f "$GRUB_DROPIN" ]] || return 0
    rm -f "$GRUB_DROPIN"
    echo "removed ${GRUB_DROPIN}; regenerating the boot configuration"
    update-grub
}
