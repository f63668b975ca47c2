"""`python -m skyhook_operator` = the `skyhook-operator` command."""

from skyhook_operator.cli import main

main()
