#!/bin/bash
# uninstall: remove the profiles and scripts config deployed; if this package installed tuned,
# stop and disable it, then remove tuned and exactly the packages its install pulled in that
# nothing else needs. A tuned that was on the host before is left installed. Safe to rerun.
# shellcheck source=tuned_lib.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuned_lib.sh"

# Purge the given packages if that removes nothing but packages the install added.
purge_if_only_ours() {
    local ours="$1" package
    shift
    for package in $(apt-get -s purge "$@" | awk '/^Purg /{print $2}'); do
        [[ "$ours" == *" ${package} "* ]] || return 1
    done
    apt-get purge -y -o DPkg::Lock::Timeout=60 "$@"
}

# Remove tuned and what its install added; keep any of those another package now depends on.
remove_with_apt() {
    local ours remaining package
    export DEBIAN_FRONTEND=noninteractive
    ours=" $(tr '\n' ' ' <"$INSTALLED_PACKAGES") "
    # shellcheck disable=SC2086 # one argument per package name
    read -r -a remaining <<<"$(dpkg-query -W -f='${Package} ${Status}\n' $ours 2>/dev/null |
        awk '$NF == "installed" {printf "%s ", $1}')"
    ((${#remaining[@]})) || return 0
    purge_if_only_ours "$ours" "${remaining[@]}" && return 0
    for package in "${remaining[@]}"; do
        if dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q ' installed$'; then
            purge_if_only_ours "$ours" "$package" || echo "keeping ${package}: other packages need it"
        fi
    done
}

if [[ -f "$DEPLOYED" ]]; then
    while IFS= read -r path; do
        [[ -n "$path" ]] || continue
        rm -rf "$path"
        echo "removed ${path}"
    done <"$DEPLOYED"
    rm -f "$DEPLOYED"
fi

if [[ -f "$INSTALLED_PACKAGES" ]]; then
    if tuned_installed; then
        systemctl disable --now tuned
        case "$(package_manager)" in
        apt) remove_with_apt ;;
        dnf) dnf remove -y tuned ;;
        yum) yum remove -y tuned ;;
        esac
        # What is left is tuned's runtime state (active_profile, bootcmdline, ...).
        rm -rf "$TUNED_DIR"
    fi
    rm -f "$INSTALLED_PACKAGES"
elif [[ -f "$PREINSTALLED" ]]; then
    echo "tuned was installed before this package; leaving it installed"
fi
rmdir --ignore-fail-on-non-empty "$SCRIPTS_DIR" "$STATE_DIR" 2>/dev/null || true
echo "tuned package uninstalled"
