#!/bin/bash
# uninstall-check: nothing this CR package wrote is left on the host.
# shellcheck source=tuning_lib.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuning_lib.sh"

leftovers=()
for file in "$SYSCTL_DROPIN" "$LIMITS_DROPIN" "$GRUB_DROPIN" "$SYSCTL_BACKUP"; do
    [[ ! -e "$file" ]] || leftovers+=("$file")
done
while IFS= read -r svc; do [[ -z "$svc" ]] || leftovers+=("$(service_dropin "$svc")"); done <<<"$(installed_services)"

if ((${#leftovers[@]})); then
    printf 'uninstall-check failed: still present: %s\n' "${leftovers[@]}" >&2
    exit 1
fi
echo "no tuning files for '${OWNER}' remain"
