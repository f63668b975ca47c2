"""kubectl-skyhook: inspect and steer Skyhook rollouts from the command line.

Command lines, flags, output, prompts and exit codes follow upstream Skyhook's kubectl plugin,
so scripts written for it run unchanged; the deliberate differences are listed in
docs/upstream-differences.md.
"""

__version__ = "0.1.0"
