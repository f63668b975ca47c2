"""A package's env reads only the Secrets the operator's settings name: stage pods run in the
operator's namespace, beside the webhook's serving key."""

from __future__ import annotations

import dataclasses
from typing import Any

from skyhook_planner.admission import review_skyhook
from skyhook_planner.sim.driver import SETTINGS, Driver

FIELD = "spec.packages.foo.env[1].valueFrom.secretKeyRef.name"


def reading(secret: str) -> dict[str, Any]:
    env = [
        {"name": "PLAIN", "value": "x"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}}},
        {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}},
    ]
    return {"packages": {"foo": {"version": "1.0.0", "image": "example.com/foo", "env": env}}}


def skyhook(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "scr"}, "spec": spec}


def test_a_secret_not_allowed_is_refused_at_admission_naming_the_field() -> None:
    verdict = review_skyhook(
        "CREATE", skyhook(reading("webhook-cert")), None, set(), namespace="skyhook"
    )
    assert not verdict.allowed
    assert verdict.message == (
        f"{FIELD}: Secret 'webhook-cert' of the operator's namespace 'skyhook' is not one "
        "packages may read (allowed: none; the chart's packageSecrets, SKYHOOK_PACKAGE_SECRETS)"
    )
    allowed = {"license"}
    other = review_skyhook("UPDATE", skyhook(reading("other")), skyhook(reading("license")), set(),
                           readable_secrets=allowed, namespace="skyhook")  # fmt: skip
    assert not other.allowed
    assert "(allowed: license;" in other.message


def test_an_allowed_secret_is_admitted() -> None:
    verdict = review_skyhook(
        "CREATE", skyhook(reading("license")), None, set(), readable_secrets={"license"}
    )
    assert verdict.allowed, verdict.message


def test_a_metadata_only_update_of_a_skyhook_reading_a_secret_is_admitted() -> None:
    """Its finalizer must still come off, whatever it reads."""
    stored = skyhook(reading("webhook-cert"))
    updated = {**stored, "metadata": {"name": "scr", "finalizers": []}}
    assert review_skyhook("UPDATE", updated, stored, set()).allowed


def test_with_the_webhook_off_the_planner_runs_nothing_that_reads_a_secret_not_allowed() -> None:
    settings = dataclasses.replace(SETTINGS, package_secrets=frozenset({"license"}))
    driver = Driver(1, settings=settings)
    driver.sim.add_skyhook("scr", reading("webhook-cert"))
    driver.run()
    assert driver.sim.created_pods == []
    status = driver.status("scr")
    invalid = [c["message"] for c in status["conditions"] if c["type"].endswith("SpecInvalid")]
    assert invalid and invalid[0].startswith(f"{FIELD}: Secret 'webhook-cert'")


def test_an_allowed_secret_reaches_the_stage_pod() -> None:
    settings = dataclasses.replace(SETTINGS, package_secrets=frozenset({"license"}))
    driver = Driver(1, settings=settings)
    driver.sim.add_skyhook("scr", reading("license"))
    driver.run()
    assert driver.sim.created_pods
    token = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "license", "key": "token"}}}
    containers = driver.sim.created_pods[0]["spec"]["initContainers"]
    assert any(token in container.get("env", ()) for container in containers)


def test_a_planner_that_does_not_know_the_allowed_secrets_does_not_judge() -> None:
    """The CLI's forecast: it cannot know the operator's settings."""
    driver = Driver(1)
    assert driver.settings.package_secrets is None
    driver.sim.add_skyhook("scr", reading("anything"))
    driver.run()
    assert driver.sim.created_pods
