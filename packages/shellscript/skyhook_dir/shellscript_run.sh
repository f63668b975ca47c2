#!/bin/bash
# Runs the bash snippet the Skyhook CR supplied for one lifecycle stage.
#
# Usage: shellscript_run.sh <stage>   (apply, apply_check, config, config_check, post_interrupt,
#                                      post_interrupt_check, uninstall, uninstall_check)
#
# The snippet is the configMap key "<stage>.sh", which the operator mounts at
# $SKYHOOK_DIR/configmaps/<stage>.sh. It is sourced, not executed, so its shebang does not matter,
# it sees this shell's environment (SKYHOOK_DIR, STEP_ROOT, SKYHOOK_RESOURCE_ID, the CR env) and
# "exit N" inside it ends the step with N. A stage without a snippet is a success: a CR only
# supplies the stages it needs.

stage="${1:?usage: shellscript_run.sh <stage>, e.g. apply or apply_check}"
snippet="${SKYHOOK_DIR:?SKYHOOK_DIR is unset: run this step through the Skyhook agent}/configmaps/${stage}.sh"

if [[ ! -f "$snippet" ]]; then
    echo "shellscript: nothing to run for stage '${stage}': no '${stage}.sh' key in the package configMap (${snippet} missing)"
    exit 0
fi

echo "shellscript: running ${stage}.sh from the package configMap"
# shellcheck source=/dev/null
source "$snippet"
