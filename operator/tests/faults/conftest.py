"""The fault suite (`tox -e faults`) runs on the integration suite's fixtures: one sandbox per
session, the operator as a real subprocess per test, nodes selected by a per-test label."""

from __future__ import annotations

import pytest

from ..integration.conftest import cluster, kube, start_operator, test_label

__all__ = ["cluster", "kube", "start_operator", "test_label"]

pytestmark = pytest.mark.sandbox
