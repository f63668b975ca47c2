"""What to run: mode, root mount, copy dir and interrupt payload, from upstream's argv forms.

| argv                                       | meaning                                   |
|--------------------------------------------|-------------------------------------------|
| ``<mode> <root_mount> <copy_dir>``         | what stage pods pass                      |
| ``<mode> <root_mount> <copy_dir> <b64>``   | with interrupt data (interrupt pods)      |
| ``<mode> <copy_dir>``                      | legacy; root mount ``/root``              |
| ``interrupt <copy_dir> <b64>``             | legacy interrupt form; root mount ``/root``|
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from skyhook_agent.errors import InputError

LEGACY_ROOT_MOUNT = Path("/root")
USAGE = (
    "usage: controller <mode> <root_mount> <copy_dir> [<interrupt_b64>]  "
    "(legacy: <mode> <copy_dir> | interrupt <copy_dir> <interrupt_b64>)"
)


@dataclass(frozen=True)
class Invocation:
    mode: str
    root_mount: Path
    copy_dir: str
    interrupt_b64: str | None = None


def parse_controller_argv(args: Sequence[str]) -> Invocation:
    """Map the argv after the program name to an Invocation (InputError on a wrong count)."""
    match list(args):
        case [mode, copy_dir]:
            return Invocation(mode, LEGACY_ROOT_MOUNT, copy_dir)
        case ["interrupt", copy_dir, payload]:
            return Invocation("interrupt", LEGACY_ROOT_MOUNT, copy_dir, payload)
        case [mode, root_mount, copy_dir]:
            return Invocation(mode, Path(root_mount), copy_dir)
        case [mode, root_mount, copy_dir, payload]:
            return Invocation(mode, Path(root_mount), copy_dir, payload)
    raise InputError([f"expected 2 to 4 arguments, got {len(args)}; {USAGE}"])
