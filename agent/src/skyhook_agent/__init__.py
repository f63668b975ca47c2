"""The Skyhook agent: runs one lifecycle stage of a package against a host root.

Entry points: ``skyhook_agent.controller`` (upstream-compatible argv, what stage pods run) and
``skyhook_agent.cli`` (``skyhook-agent validate`` / ``skyhook-agent run``).
"""

# The single source of the version (pyproject.toml reads it): importlib.metadata would cost
# a stage pod ~50 ms of imports on every start.
__version__ = "0.1.0"
