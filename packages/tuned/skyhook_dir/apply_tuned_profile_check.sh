#!/bin/bash
# config-check: tuned runs, the deployed profiles and scripts match the configMap, tuned_profile
# is the active profile and `tuned-adm verify` passes. With env INTERRUPT=true (the CR will
# reboot next) a failed verify is only reported: settings such as the kernel command line take
# effect after the interrupt, and post-interrupt-check insists.
# shellcheck source=tuned_lib.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuned_lib.sh"

problems=()
check_tuned_state no
report "tuned profile '$(requested_profiles)' is deployed and active"
