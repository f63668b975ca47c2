#!/bin/bash
# config-check: every drop-in holds exactly what the configMap asks for, and no drop-in remains
# for a key the configMap no longer has. Lists every problem, then fails if there was one.
# shellcheck source=tuning_lib.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuning_lib.sh"

problems=()
expect() { # <file> <configMap key> <render function> [args]
    local file="$1" key="$2" status
    shift 2
    if has_key "$key"; then
        status="$(dropin_status "$file" "$@")"
        [[ "$status" == ok ]] || problems+=("$key: $status")
    elif [[ -e "$file" ]]; then
        problems+=("$key is not in the configMap but ${file} still exists")
    fi
}

expect "$SYSCTL_DROPIN" sysctl.conf render_sysctl
expect "$LIMITS_DROPIN" ulimit.conf render_limits
expect "$GRUB_DROPIN" grub.conf render_grub
configured=" $(configured_services | tr '\n' ' ') "
for svc in $configured; do
    expect "$(service_dropin "$svc")" "service_${svc}.conf" render_service "$svc"
done
while IFS= read -r svc; do
    [[ -n "$svc" ]] || continue
    [[ "$configured" == *" $svc "* ]] || problems+=("stale drop-in $(service_dropin "$svc")")
done <<<"$(installed_services)"

if has_key ulimit.conf; then
    for session in /etc/pam.d/common-session*; do
        [[ -f "$session" ]] || continue
        grep -Eq '^[[:space:]]*session[[:space:]].*pam_limits\.so' "$session" ||
            problems+=("ulimit.conf: ${session} does not load pam_limits.so")
    done
fi

if ((${#problems[@]})); then
    printf 'config-check failed: %s\n' "${problems[@]}" >&2
    exit 1
fi
echo "all tuning drop-ins for '${OWNER}' match the configMap"
