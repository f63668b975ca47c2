"""Where `kubectl nodewright` looks for the operator when -n is not given, and what either
plugin says when the cluster does not serve its API group."""

import json
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from skyhook_cli.app import operator_namespace
from skyhook_cli.kube import Kube, KubeError


def deployment(image: str, namespace: str = "") -> Any:
    container = SimpleNamespace(image=image)
    spec = SimpleNamespace(template=SimpleNamespace(spec=SimpleNamespace(containers=[container])))
    return SimpleNamespace(spec=spec, metadata=SimpleNamespace(labels={}, namespace=namespace))


class Listing:
    """The deployments per namespace; a namespace absent from `allowed` may not be listed."""

    def __init__(self, found: dict[str, list[Any]], refused: set[str] = frozenset()) -> None:
        self.found, self.refused = found, refused

    def list_deployments(self, namespace: str) -> list[Any]:
        """ "" lists every namespace, as the cluster-wide list does."""
        if namespace in self.refused:
            raise KubeError(f"listing deployments in namespace {namespace!r}: forbidden")
        if not namespace:
            return [
                deployment(d.spec.template.spec.containers[0].image, where)
                for where, found in self.found.items()
                for d in found
            ]
        return self.found.get(namespace, [])


OPERATOR = deployment("ghcr.io/nvidia/skyhook/operator:v0.1.0")


def test_the_nodewright_namespace_first_then_skyhook_saying_so() -> None:
    said: list[str] = []
    both = Listing({"nodewright": [OPERATOR], "skyhook": [OPERATOR]})
    assert operator_namespace(both, said.append) == "nodewright" and said == []  # type: ignore[arg-type]
    only_skyhook = Listing({"nodewright": [deployment("nginx")], "skyhook": [OPERATOR]})
    assert operator_namespace(only_skyhook, said.append) == "skyhook"  # type: ignore[arg-type]
    assert said == ['using the operator in namespace "skyhook" (pass -n to choose)']


def test_elsewhere_the_cluster_wide_list_finds_it_saying_so() -> None:
    said: list[str] = []
    elsewhere = Listing({"web": [deployment("nginx")], "platform-ops": [OPERATOR]})
    assert operator_namespace(elsewhere, said.append) == "platform-ops"  # type: ignore[arg-type]
    assert said == ['using the operator in namespace "platform-ops" (pass -n to choose)']


def test_nothing_found_or_nothing_listable_means_nodewright() -> None:
    said: list[str] = []
    assert operator_namespace(Listing({}), said.append) == "nodewright"  # type: ignore[arg-type]
    hidden = Listing({"skyhook": [OPERATOR]}, refused={"nodewright", "skyhook", ""})
    assert operator_namespace(hidden, said.append) == "nodewright"  # type: ignore[arg-type]
    assert said == []


def _not_found(details: dict[str, str]) -> Exception:
    error = ApiException(status=404, reason="Not Found")
    message = "the server could not find the requested resource"
    error.body = json.dumps({"message": message, "reason": "NotFound", "details": details})
    return error


def test_a_group_the_cluster_does_not_serve_is_named_with_the_plugin_that_speaks_the_other() -> (
    None
):
    kube = Kube.__new__(Kube)
    kube.timeout = None

    def unserved() -> None:
        raise _not_found({})

    with pytest.raises(KubeError) as caught:
        kube._call("listing skyhooks", unserved)
    assert str(caught.value) == (
        "listing skyhooks: the server could not find the requested resource (this plugin "
        "speaks skyhook.nvidia.com, which the cluster does not serve; an operator speaking "
        "nodewright.nvidia.com is reached with kubectl nodewright)"
    )

    def missing() -> None:
        raise _not_found({"name": "gpu-init", "kind": "skyhooks"})

    with pytest.raises(KubeError) as caught:
        kube._call('getting skyhook "gpu-init"', missing)
    assert "this plugin speaks" not in str(caught.value)
