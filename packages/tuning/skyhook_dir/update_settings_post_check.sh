#!/bin/bash
# post-interrupt-check: after the interrupt, the settings are live, not just written:
# - each sysctl.conf key has its value in /proc/sys;
# - each Limit* line of a service_<svc>.conf drop-in holds for the service's running main
#   process (/proc/<MainPID>/limits), including infinity (= unlimited) and soft:hard pairs;
# - each grub.conf argument is on the running kernel's command line (/proc/cmdline).
# shellcheck source=tuning_lib.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuning_lib.sh"

problems=()

check_sysctl() {
    local key expected proc actual
    while IFS=$'\t' read -r key expected; do
        [[ -n "$key" ]] || continue
        proc="$(sysctl_proc_path "$key")"
        if [[ ! -r "$proc" ]]; then
            problems+=("sysctl ${key}: ${proc} does not exist on the running kernel")
            continue
        fi
        actual="$(squash "$(cat "$proc")")"
        [[ "$actual" == "$expected" ]] || problems+=("sysctl ${key} is '${actual}', expected '${expected}'")
    done <<<"$(sysctl_pairs "${CONFIGMAPS}/sysctl.conf")"
}

# systemd Limit* name -> row label in /proc/<pid>/limits
declare -A LIMIT_ROWS=(
    [LimitCPU]="Max cpu time" [LimitFSIZE]="Max file size" [LimitDATA]="Max data size"
    [LimitSTACK]="Max stack size" [LimitCORE]="Max core file size" [LimitRSS]="Max resident set"
    [LimitNPROC]="Max processes" [LimitNOFILE]="Max open files"
    [LimitMEMLOCK]="Max locked memory" [LimitAS]="Max address space" [LimitLOCKS]="Max file locks"
    [LimitSIGPENDING]="Max pending signals" [LimitMSGQUEUE]="Max msgqueue size"
    [LimitRTPRIO]="Max realtime priority" [LimitRTTIME]="Max realtime timeout"
)

check_service_limits() {
    local svc="$1" dropin line name value soft hard pid limits row actual_soft actual_hard
    dropin="$(service_dropin "$svc")"
    grep -Eq '^[[:space:]]*Limit[A-Z]+=' "$dropin" || return 0
    pid="$(systemctl show --property=MainPID --value "${svc}.service")"
    limits="/proc/${pid}/limits"
    if [[ -z "$pid" || "$pid" == 0 || ! -r "$limits" ]]; then
        problems+=("service ${svc}: not running (MainPID '${pid}'), so its limits cannot be verified")
        return
    fi
    while IFS= read -r line; do
        [[ -n "$line" ]] || continue
        name="$(squash "${line%%=*}")"
        value="$(squash "${line#*=}")"
        row="${LIMIT_ROWS[$name]:-}"
        if [[ -z "$row" ]]; then
            echo "note: ${svc} ${name} is not compared (no /proc limits row for it)"
            continue
        fi
        soft="${value%%:*}"
        hard="${value#*:}"
        if ! soft="$(proc_limit_value "$soft")" || ! hard="$(proc_limit_value "$hard")"; then
            problems+=("service ${svc}: ${name}=${value} is not a number, K/M/G/T/P/E size or infinity")
            continue
        fi
        read -r actual_soft actual_hard _ <<<"$(grep "^${row} " "$limits" | sed "s/^${row}//")" || true
        if [[ "$actual_soft" != "$soft" || "$actual_hard" != "$hard" ]]; then
            problems+=("service ${svc}: ${name} is soft ${actual_soft:-?} hard ${actual_hard:-?}, expected soft ${soft} hard ${hard}")
        fi
    done <<<"$(grep -E '^[[:space:]]*Limit[A-Z]+=' "$dropin")"
}

check_cmdline() {
    local arg cmdline
    cmdline=" $(cat /proc/cmdline 2>/dev/null || true) "
    for arg in $(grub_args); do
        [[ "$cmdline" == *" ${arg} "* ]] || problems+=("kernel command line lacks '${arg}' (reboot pending?)")
    done
}

if has_key sysctl.conf; then check_sysctl; fi
while IFS= read -r svc; do [[ -z "$svc" ]] || check_service_limits "$svc"; done <<<"$(configured_services)"
if has_key grub.conf; then check_cmdline; fi

if ((${#problems[@]})); then
    printf 'post-interrupt-check failed: %s\n' "${problems[@]}" >&2
    exit 1
fi
echo "tuning settings for '${OWNER}' are live"
