"""The bad-input tables (tests/data/bad-*.yaml) as objects ready to send: shared by the pure
admission tests and the ones through the sandbox apiserver."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DATA = Path(__file__).parent.parent / "data"


@dataclass(frozen=True)
class Case:
    id: str
    field: str  # what the refusal must name
    body: dict[str, Any]


def cases(file_name: str) -> list[Case]:
    table = yaml.safe_load((DATA / file_name).read_text())
    found = []
    for case in table["cases"]:
        body = copy.deepcopy(table["base"])
        body["spec"] = case["spec"]
        body["metadata"]["name"] = case.get("name", f"{body['metadata']['name']}-{case['id']}")[:63]
        found.append(Case(case["id"], case["field"], body))
    return found


BAD_SKYHOOKS = cases("bad-skyhooks.yaml")
BAD_POLICIES = cases("bad-policies.yaml")
