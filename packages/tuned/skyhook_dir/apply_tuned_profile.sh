#!/bin/bash
# config: deploy the configMap's custom profiles and scripts under /etc/tuned, remove the ones a
# previous config deployed that the configMap no longer has, then activate tuned_profile.
# Safe to rerun.
# shellcheck source=tuned_lib.sh
source "${STEP_ROOT:-$(dirname "$0")}/tuned_lib.sh"

deploy() { # <configMap key> <target file> <mode>
    mkdir -p "$(dirname "$2")"
    install -m "$3" "${CONFIGMAPS}/$1" "$2"
    echo "deployed $1 -> $2"
}

mkdir -p "$TUNED_DIR" "$SCRIPTS_DIR" "$STATE_DIR"
deployed=()
while IFS= read -r key; do
    [[ -n "$key" ]] || continue
    deploy "$key" "${SCRIPTS_DIR}/${key}" 0755
    # Profiles usually reference the script without the suffix; keep both names working.
    ln -sfn "$key" "${SCRIPTS_DIR}/${key%_script}"
    deployed+=("${SCRIPTS_DIR}/${key}" "${SCRIPTS_DIR}/${key%_script}")
done <<<"$(tuned_scripts)"
while IFS= read -r key; do
    [[ -n "$key" ]] || continue
    if [[ ! "$key" =~ ^[A-Za-z0-9][A-Za-z0-9_.-]*$ ]]; then
        echo "configMap key '${key}' is not a usable tuned profile name" >&2
        exit 1
    fi
    deploy "$key" "${TUNED_DIR}/${key}/tuned.conf" 0644
    deployed+=("${TUNED_DIR}/${key}")
done <<<"$(custom_profiles)"

# Remove what an earlier config deployed and this configMap no longer has.
if [[ -f "$DEPLOYED" ]]; then
    while IFS= read -r old; do
        [[ -n "$old" && " ${deployed[*]} " != *" ${old} "* ]] || continue
        rm -rf "$old"
        echo "removed ${old}: no longer in the configMap"
    done <"$DEPLOYED"
fi
printf '%s\n' "${deployed[@]}" >"$DEPLOYED"

wanted="$(requested_profiles)"
if [[ -z "$wanted" ]]; then
    echo "warning: no tuned_profile key in the configMap; the active profile is left as it is"
    exit 0
fi
read -r -a names <<<"$wanted"
if ((${#names[@]} > 1)) && ! tuned_at_least "$MULTI_PROFILE_MIN_VERSION"; then
    echo "tuned_profile lists ${#names[@]} profiles (${wanted}); that needs tuned >= ${MULTI_PROFILE_MIN_VERSION}, this host has $(tuned --version 2>&1)" >&2
    exit 1
fi
available=" $(available_profiles | tr '\n' ' ') "
for name in "${names[@]}"; do
    if [[ "$available" != *" ${name} "* ]]; then
        echo "tuned_profile: profile '${name}' is neither a tuned profile on this host nor a key of the configMap" >&2
        exit 1
    fi
done
tuned-adm profile "${names[@]}"
echo "requested tuned profile '${wanted}'"
