"""The taint list the writer computes: remove by key+effect, add or update, keep order."""

import pytest

from skyhook_operator.kube.writer import _wanted_taints
from skyhook_planner.model.vocabulary import Taint

RUNTIME = Taint("skyhook.nvidia.com", "NoSchedule", "runtime-required")
GPU = Taint("gpu", "NoExecute", "true")


@pytest.mark.parametrize(
    ("current", "add", "remove", "wanted"),
    [
        pytest.param(
            [GPU, RUNTIME],
            [],
            [Taint("skyhook.nvidia.com", "NoSchedule")],
            [GPU],
            id="remove-by-key-effect",
        ),
        pytest.param([GPU], [RUNTIME], [], [GPU, RUNTIME], id="add"),
        pytest.param(
            [RUNTIME, GPU],
            [Taint("skyhook.nvidia.com", "NoSchedule", "v2")],
            [],
            [Taint("skyhook.nvidia.com", "NoSchedule", "v2"), GPU],
            id="update-keeps-position",
        ),
        pytest.param([GPU], [], [RUNTIME], [GPU], id="remove-absent-is-no-op"),
    ],
)
def test_wanted_taints(
    current: list[Taint], add: list[Taint], remove: list[Taint], wanted: list[Taint]
) -> None:
    assert _wanted_taints(current, add, remove) == wanted
