#!/bin/bash
# apply and upgrade: install tuned with the host's package manager (only if it is missing),
# then enable and start tuned.service. Installs only tuned and what it depends on: no system-wide
# package upgrade. Safe to rerun.
# shellcheck source=tuned_lib.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuned_lib.sh"

install_with_apt() {
    local before
    export DEBIAN_FRONTEND=noninteractive
    before="$(mktemp)"
    dpkg-query -W -f='${Package}\n' | sort >"$before"
    apt-get update
    apt-get install -y -o DPkg::Lock::Timeout=60 tuned
    # Record what the install added, so uninstall can take exactly that away again.
    dpkg-query -W -f='${Package}\n' | sort | comm -13 "$before" - >"$INSTALLED_PACKAGES"
    rm -f "$before"
}

manager="$(package_manager)"
mkdir -p "$STATE_DIR"
if tuned_installed; then
    echo "tuned is already installed: $(tuned --version 2>&1)"
    [[ -f "$INSTALLED_PACKAGES" ]] || touch "$PREINSTALLED"
else
    echo "installing tuned with ${manager}"
    case "$manager" in
    apt) install_with_apt ;;
    dnf | yum)
        "$manager" install -y tuned
        echo tuned >"$INSTALLED_PACKAGES"
        ;;
    esac
fi
systemctl enable --now tuned
echo "tuned is installed and tuned.service enabled"
