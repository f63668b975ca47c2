"""`python -m skyhook_dev` = the `skyhook-dev` command."""

from skyhook_dev.cli import main

main()
