"""Errors the agent reports as "bad input": one line per problem, and nothing changed."""

from collections.abc import Iterable


class InputError(Exception):
    """The invocation, the package or the host root is unusable; raised before any host write.

    Each problem is one self-contained line (``field.path: what is wrong``) so a user reading
    ``kubectl logs`` sees every problem at once instead of fixing them one run at a time.
    """

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))
