#!/bin/bash
# shellcheck disable=SC2034 # the names below are used by the scripts that source this file
# Shared by every tuned step (sourced, never run as a step itself).
#
# configMap keys:
#   tuned_profile   profile name(s) to activate, whitespace separated (several need tuned >= 2.24)
#   <name>_script   executable deployed as /etc/tuned/scripts/<name>_script, plus the alias
#                   /etc/tuned/scripts/<name> that profiles usually reference
#   anything else   a custom profile body, deployed as /etc/tuned/<key>/tuned.conf
#
# What this package changed on the host is recorded under STATE_DIR so uninstall removes exactly
# that: the packages the install pulled in (nothing when tuned was already there) and the
# profiles and scripts config deployed.

set -euo pipefail
if [[ -n "${SET_X:-}" && "${SET_X}" != 0 ]]; then
    set -x
fi

CONFIGMAPS="${SKYHOOK_DIR:?SKYHOOK_DIR is unset: run this step through the Skyhook agent}/configmaps"
TUNED_DIR=/etc/tuned
SCRIPTS_DIR=/etc/tuned/scripts
STATE_DIR=/var/lib/skyhook-tuned
INSTALLED_PACKAGES="${STATE_DIR}/installed-packages" # written when this package installed tuned
PREINSTALLED="${STATE_DIR}/preinstalled"             # tuned was on the host before this package
DEPLOYED="${STATE_DIR}/deployed"                     # profile dirs and scripts config created
MULTI_PROFILE_MIN_VERSION=2.24

# apt, dnf or yum for this host, from /etc/os-release (ID, then ID_LIKE); fails if unsupported.
package_manager() {
    local id="" id_like="" word
    # shellcheck source=/dev/null
    [[ -r /etc/os-release ]] && id="$(. /etc/os-release && echo "${ID:-}")" &&
        id_like="$(. /etc/os-release && echo "${ID_LIKE:-}")"
    for word in $id $id_like; do
        case "$word" in
        debian | ubuntu)
            echo apt
            return
            ;;
        fedora | rhel | redhat | centos | rocky | almalinux | ol | amzn)
            if command -v dnf >/dev/null; then echo dnf; else echo yum; fi
            return
            ;;
        esac
    done
    echo "unsupported distribution '${id:-unknown}' (ID_LIKE '${id_like}'): tuned installs on Debian/Ubuntu, RHEL-family and Fedora" >&2
    return 1
}

tuned_installed() { command -v tuned >/dev/null && command -v tuned-adm >/dev/null; }

# Keys of the configMap, one per line (none when the CR has no configMap).
configmap_keys() {
    local file
    for file in "$CONFIGMAPS"/*; do
        [[ -f "$file" ]] && basename "$file"
    done
    return 0
}

custom_profiles() { configmap_keys | grep -v -e '_script$' -e '^tuned_profile$' || true; }
tuned_scripts() { configmap_keys | grep '_script$' || true; }

requested_profiles() {
    [[ -f "${CONFIGMAPS}/tuned_profile" ]] || return 0
    local names=()
    read -r -d '' -a names <"${CONFIGMAPS}/tuned_profile" || true
    echo "${names[*]}"
}

# Profiles tuned knows about (system and custom), one per line.
available_profiles() { tuned-adm list | sed -n 's/^- \([^ ]*\).*/\1/p'; }

# Succeeds when tuned --version is at least $1.
tuned_at_least() {
    local have
    have="$(tuned --version 2>&1 | grep -Eo '[0-9]+(\.[0-9]+)+' | head -1)"
    [[ -n "$have" && "$(printf '%s\n%s\n' "$1" "$have" | sort -V | head -1)" == "$1" ]]
}

# Profiles currently active according to the running daemon ("" if none or not running).
active_profiles() {
    tuned-adm active 2>/dev/null | sed -n 's/^Current active profile: //p'
}

# Appends to the caller's "problems" array everything that shows the configMap is not in effect.
# $1 = strict: "yes" makes a failed `tuned-adm verify` a problem even when INTERRUPT=true.
check_tuned_state() {
    local strict="$1" key profiles wanted name
    tuned_installed || problems+=("tuned / tuned-adm are not installed")
    systemctl is-active --quiet tuned || problems+=("tuned.service is not active")
    while IFS= read -r key; do
        [[ -n "$key" ]] || continue
        if [[ ! -x "${SCRIPTS_DIR}/${key}" ]]; then
            problems+=("script ${SCRIPTS_DIR}/${key} is missing or not executable")
        elif ! cmp -s "${CONFIGMAPS}/${key}" "${SCRIPTS_DIR}/${key}"; then
            problems+=("script ${SCRIPTS_DIR}/${key} differs from configMap key ${key}")
        fi
    done <<<"$(tuned_scripts)"
    while IFS= read -r key; do
        [[ -n "$key" ]] || continue
        cmp -s "${CONFIGMAPS}/${key}" "${TUNED_DIR}/${key}/tuned.conf" ||
            problems+=("profile ${TUNED_DIR}/${key}/tuned.conf is missing or differs from configMap key ${key}")
    done <<<"$(custom_profiles)"
    wanted="$(requested_profiles)"
    [[ -n "$wanted" ]] || return 0
    tuned_installed || return 0
    profiles=" $(available_profiles | tr '\n' ' ') "
    for name in $wanted; do
        [[ "$profiles" == *" ${name} "* ]] || problems+=("profile '${name}' is not known to tuned")
    done
    if [[ "$(active_profiles)" != "$wanted" ]]; then
        problems+=("active profile is '$(active_profiles)', expected '${wanted}' (is the tuned daemon running?)")
        return 0
    fi
    if ! tuned-adm verify; then
        if [[ "$strict" != yes && "${INTERRUPT:-}" == true ]]; then
            echo "tuned-adm verify failed; accepted before the interrupt (INTERRUPT=true), post-interrupt-check will insist"
        else
            tail -n 30 /var/log/tuned/tuned.log 2>/dev/null || true
            problems+=("tuned-adm verify: the system does not match profile '${wanted}'")
        fi
    fi
}

report() { # <what passed>; fails listing the caller's "problems"
    if ((${#problems[@]})); then
        echo "$(basename "$0" .sh) failed:" >&2
        printf '  - %s\n' "${problems[@]}" >&2
        exit 1
    fi
    echo "$1"
}
