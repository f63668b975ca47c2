"""``python -m skyhook_agent`` = ``skyhook-agent``."""

from skyhook_agent.cli import main

main()
