#!/bin/bash
# uninstall-check: no profile or script this package deployed remains, and tuned is gone and its
# service neither enabled nor active, unless tuned was on the host before the package came.
# shellcheck source=tuned_lib.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuned_lib.sh"

problems=()
[[ ! -f "$DEPLOYED" ]] || problems+=("profiles or scripts listed in ${DEPLOYED} remain")
[[ ! -f "$INSTALLED_PACKAGES" ]] || problems+=("packages listed in ${INSTALLED_PACKAGES} were not removed")
if [[ ! -f "$PREINSTALLED" ]]; then
    ! tuned_installed || problems+=("tuned is still installed")
    ! systemctl is-active --quiet tuned || problems+=("tuned.service is still active")
    ! systemctl is-enabled --quiet tuned 2>/dev/null || problems+=("tuned.service is still enabled")
fi
report "tuned is uninstalled"
