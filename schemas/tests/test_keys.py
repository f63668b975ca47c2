import pytest

from skyhook_schemas import keys


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        pytest.param(
            (63, "metadata", "kind-worker"), "metadata-kind-worker-8bfc3f3a", id="metadata-volume"
        ),
    ],
)
def test_safe_name_matches_upstream(parts: tuple, expected: str) -> None:
    assert keys.safe_name(*parts) == expected


def test_safe_name_respects_the_limit_and_stays_unique() -> None:
    long_node = "node-" + "x" * 80
    first = keys.safe_name(63, "scr", "pkg", "1.2.3", "apply", long_node + "a")
    second = keys.safe_name(63, "scr", "pkg", "1.2.3", "apply", long_node + "b")
    assert len(first) == 63 and len(second) == 63
    assert first != second
    assert len(keys.safe_name(63, "skyhook1", "node1", "metadata")) == 32


def test_node_keys_match_upstream_spelling() -> None:
    assert keys.node_state_key("demo") == "skyhook.nvidia.com/nodeState_demo"
    assert keys.node_status_key("demo") == "skyhook.nvidia.com/status_demo"
    assert keys.cordon_key("demo") == "skyhook.nvidia.com/cordon_demo"
    assert keys.RUNTIME_REQUIRED_TAINT == "skyhook.nvidia.com=runtime-required:NoSchedule"
    assert keys.package_configmap_name("Simple", "dexter", "1.2.3") == "simple-dexter-1.2.3"
