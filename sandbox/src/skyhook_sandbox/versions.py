"""The one place where the control-plane releases are pinned.

The sandbox runs one Kubernetes release per process: the oldest supported unless
`SKYHOOK_KUBERNETES` names another, as a minor version (`1.37`) or as one of the releases below
(`v1.37.2`). Each release is built once and cached apart (binaries.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# The newest patch release of each supported minor version the Go module proxy serves.
KUBERNETES_RELEASES = {
    "1.34": "v1.34.4",
    "1.35": "v1.35.4",
    "1.36": "v1.36.3",
    "1.37": "v1.37.2",
}
_MINORS = sorted(KUBERNETES_RELEASES, key=lambda minor: tuple(map(int, minor.split("."))))
OLDEST, NEWEST = _MINORS[0], _MINORS[-1]
VERSION_VARIABLE = "SKYHOOK_KUBERNETES"
ETCD_VERSION = "v3.6.16"


def kubernetes_release(environ: Mapping[str, str] | None = None) -> str:
    """The release `SKYHOOK_KUBERNETES` asks for (the oldest supported when unset)."""
    asked = (os.environ if environ is None else environ).get(VERSION_VARIABLE, "").strip()
    if not asked:
        return KUBERNETES_RELEASES[OLDEST]
    release = KUBERNETES_RELEASES.get(asked.removeprefix("v"))
    if release is None and asked in KUBERNETES_RELEASES.values():
        release = asked
    if release is None:
        supported = ", ".join(f"{m} ({r})" for m, r in KUBERNETES_RELEASES.items())
        raise ValueError(f"{VERSION_VARIABLE}={asked!r}: the sandbox runs {supported}")
    return release


KUBERNETES_VERSION = kubernetes_release()
