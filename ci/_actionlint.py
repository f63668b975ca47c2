"""A pinned actionlint, built from the Go module proxy once and cached (ci/_gotool.py).

    python ci/_actionlint.py          build actionlint if needed, then lint .github/workflows

actionlint checks the GitHub Actions workflows: their syntax, expressions, action inputs, and
(with shellcheck on PATH) every `run:` script. $SKYHOOK_ACTIONLINT names one to use instead.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from _gotool import GoTool, GoToolBuildError, Say

ACTIONLINT = GoTool(
    name="actionlint",
    module="github.com/rhysd/actionlint",
    package="github.com/rhysd/actionlint/cmd/actionlint",
    version="v1.7.12",
    version_args=("-version",),
)


def ensure_actionlint(say: Say = print) -> Path:
    """The cached actionlint, built first when missing. `say` receives progress lines."""
    return ACTIONLINT.ensure(say)


def main() -> int:
    try:
        actionlint = ensure_actionlint(lambda line: print(line, file=sys.stderr, flush=True))
    except GoToolBuildError as error:
        print(f"ci/_actionlint.py: {error}", file=sys.stderr)
        return 1
    repo = Path(__file__).resolve().parent.parent
    return subprocess.run([str(actionlint)], cwd=repo).returncode


if __name__ == "__main__":
    sys.exit(main())
