#!/bin/bash
# apply-check and upgrade-check: tuned and tuned-adm are installed, and tuned.service is enabled
# and running (waits up to TUNED_START_TIMEOUT seconds, default 10, for it to come up).
# shellcheck source=tuned_lib.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuned_lib.sh"

problems=()
tuned_installed || problems+=("tuned / tuned-adm are not on PATH")
systemctl is-enabled --quiet tuned || problems+=("tuned.service is not enabled")
for ((waited = 0; ; waited++)); do
    systemctl is-active --quiet tuned && break
    if ((waited >= ${TUNED_START_TIMEOUT:-10})); then
        problems+=("tuned.service is not active after ${waited}s")
        break
    fi
    sleep 1
done
report "tuned is installed, enabled and running"
