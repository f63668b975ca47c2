#!/bin/bash
# uninstall: remove every drop-in this CR package wrote and undo its effects where that is
# possible without an interrupt: restore the sysctl values it replaced, reload systemd, regenerate
# the GRUB configuration, drop the pam_limits lines it added. Services and the kernel command
# line return to their old settings at the next restart / reboot. Safe to rerun.
# shellcheck source=tuning_lib.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuning_lib.sh"
# shellcheck source=tuning_remove.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuning_remove.sh"

remove_sysctl
remove_limits
remove_service_dropins "" # keep none
remove_grub
rmdir --ignore-fail-on-non-empty "$STATE_DIR" 2>/dev/null || true
echo "tuning for '${OWNER}' is uninstalled"
