"""The two spellings of the API: `skyhook.nvidia.com` (upstream until v0.17) and
`nodewright.nvidia.com` (upstream from v0.18), chosen per process by SKYHOOK_API_GROUP."""

import json
import os
import subprocess
import sys

import yaml

from skyhook_schemas.crds import CRD_PATHS_BY_GROUP, generated
from skyhook_schemas.keys import NODEWRIGHT_GROUP, SKYHOOK_GROUP

_SPOKEN = """
import json
from skyhook_schemas import keys
print(json.dumps({
    "api_version": keys.API_VERSION, "kind": keys.KIND, "plural": keys.PLURAL,
    "finalizer": keys.FINALIZER, "node_state": keys.node_state_key("demo"),
    "label": keys.NAME_LABEL, "taint": keys.RUNTIME_REQUIRED_TAINT,
    "meta": keys.NODE_META_LABEL, "not_ready": keys.not_ready_condition("demo"),
}))
"""


def _spoken(group: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SKYHOOK_API_GROUP"}
    if group is not None:
        env["SKYHOOK_API_GROUP"] = group
    return subprocess.run(
        [sys.executable, "-c", _SPOKEN], env=env, capture_output=True, text=True, check=False
    )


def test_a_process_speaks_skyhook_unless_told_otherwise() -> None:
    names = json.loads(_spoken(None).stdout)
    assert names["api_version"] == "skyhook.nvidia.com/v1alpha1"
    assert names["finalizer"] == "skyhook.nvidia.com/skyhook"
    assert names["node_state"] == "skyhook.nvidia.com/nodeState_demo"


def test_nodewright_keys_are_upstreams_newest() -> None:
    names = json.loads(_spoken(NODEWRIGHT_GROUP).stdout)
    assert names == {
        "api_version": "nodewright.nvidia.com/v1alpha1",
        "kind": "NodeWright",
        "plural": "nodewrights",
        "finalizer": "nodewright.nvidia.com/nodewright",
        "node_state": "nodewright.nvidia.com/nodeState_demo",
        "label": "nodewright.nvidia.com/name",
        "taint": "nodewright.nvidia.com=runtime-required:NoSchedule",
        # The suffix stayed when upstream moved the prefix.
        "meta": "nodewright.nvidia.com/skyhook-node-meta",
        "not_ready": "nodewright.nvidia.com/demo/NotReady",
    }


def test_an_unknown_group_is_refused_naming_the_variable() -> None:
    result = _spoken("example.com")
    assert result.returncode != 0
    assert "SKYHOOK_API_GROUP='example.com': must be one of" in result.stderr


def test_the_nodewright_crds_are_generated_from_ours_and_current() -> None:
    sources = CRD_PATHS_BY_GROUP[SKYHOOK_GROUP]
    for source, target in zip(sources, CRD_PATHS_BY_GROUP[NODEWRIGHT_GROUP], strict=True):
        assert target.read_text() == generated(source, NODEWRIGHT_GROUP), (
            f"{target.name} is stale: run python -m skyhook_schemas.crds"
        )


def test_a_nodewright_crd_is_ours_renamed() -> None:
    ours, theirs = (
        yaml.safe_load(p.read_text())
        for p in CRD_PATHS_BY_GROUP[SKYHOOK_GROUP][:1] + CRD_PATHS_BY_GROUP[NODEWRIGHT_GROUP][:1]
    )
    assert theirs["metadata"]["name"] == "nodewrights.nodewright.nvidia.com"
    assert theirs["spec"]["names"]["kind"] == "NodeWright"
    schema = json.dumps(theirs["spec"]["versions"][0]["schema"])
    assert "skyhook.nvidia.com/" not in schema
    assert schema == json.dumps(ours["spec"]["versions"][0]["schema"]).replace(
        "skyhook.nvidia.com/", "nodewright.nvidia.com/"
    )
    columns = [c["name"] for c in theirs["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == [
        "Status",
        "Priority",
        "Age",
        "Nodes In-Progress",
        "Complete Nodes",
        "Packages",
        "Policy",
    ]
