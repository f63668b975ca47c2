"""SIGTERM handling: finish the running step, then stop before the next one and fail.

Killing a step half-way could leave the host in a worse state than letting it finish; the
pod's grace period bounds how long that takes. Installed by the entry points, never at import.
"""

import signal
from types import FrameType


class StopSignal:
    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True
        # Said at once, so `kubectl logs` shows why the pod is still busy after the SIGTERM.
        print("SIGTERM received: finishing the running step, then stopping", flush=True)
