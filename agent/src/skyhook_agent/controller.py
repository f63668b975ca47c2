"""Upstream-compatible entry point: ``python -m skyhook_agent.controller <mode> <root_mount>
<copy_dir> [<interrupt_b64>]`` (and the legacy forms, see invocation.py); console script
``controller``. Kept free of click so a stage pod's startup stays fast.
"""

import os
import sys
from collections.abc import Sequence

from skyhook_agent.console import Console
from skyhook_agent.errors import InputError
from skyhook_agent.invocation import parse_controller_argv
from skyhook_agent.settings import AgentSettings
from skyhook_agent.signals import StopSignal
from skyhook_agent.stage import EXIT_BAD_INPUT, execute


def main(argv: Sequence[str] | None = None) -> int:
    console = Console()
    try:
        invocation = parse_controller_argv(sys.argv[1:] if argv is None else argv)
        settings = AgentSettings.from_env(os.environ)
    except InputError as exc:
        console.problems(exc.problems)
        return EXIT_BAD_INPUT
    stop = StopSignal()
    stop.install()
    return execute(invocation, settings, dict(os.environ), console, stop)


if __name__ == "__main__":
    sys.exit(main())
