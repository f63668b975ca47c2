#!/bin/bash
# post-interrupt-check: after the interrupt the same as config-check, and `tuned-adm verify`
# must pass whatever INTERRUPT says.
# shellcheck source=tuned_lib.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuned_lib.sh"

problems=()
check_tuned_state yes
report "tuned profile '$(requested_profiles)' is active and verified after the interrupt"
