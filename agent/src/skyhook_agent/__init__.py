"""The Skyhook agent: runs one lifecycle stage of a package against a host root.

Entry points: ``skyhook_agent.controller`` (upstream-compatible argv, what stage pods run) and
``skyhook_agent.cli`` (``skyhook-agent validate`` / ``skyhook-agent run``).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("skyhook-agent")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0"
