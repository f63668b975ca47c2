"""The secure `/metrics` of a running operator, scraped as Prometheus would: over HTTPS with a
ServiceAccount token, the operator asking the sandbox's apiserver who the token is (TokenReview)
and whether they may `get /metrics` (SubjectAccessReview). Bound to the chart's metrics-reader
rules: 200 with the metrics; a ServiceAccount without them: 403; no token or a made-up one: 401.
The answers are cached: scraping again asks the apiserver nothing."""

from __future__ import annotations

import base64
import datetime as dt
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import urllib3

from skyhook_dev.harness import OperatorProcess, wait_until
from skyhook_operator.kube import webhooks
from skyhook_operator.kube.client import ApiError, Kube

from .conftest import NAMESPACE

RBAC = "/apis/rbac.authorization.k8s.io/v1"
# The chart's `<fullname>-metrics-reader` rules (ci/tests/test_chart.py holds the chart to them).
READER_RULES = [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def reviews_made(body: str) -> dict[str, int]:
    """POSTs the operator made, by resource, as its own metrics count them."""
    found = re.findall(
        r'^skyhook_operator_api_requests_total\{resource="([^"]+)",verb="POST"\} (\d+)$',
        body,
        re.MULTILINE,
    )
    wanted = ("tokenreviews", "subjectaccessreviews")
    return {resource: int(count) for resource, count in found if resource in wanted}


@pytest.fixture
def accounts(kube: Kube, test_label: str) -> Iterator[tuple[str, str]]:
    """Two ServiceAccounts: one bound to the metrics-reader rules, one bound to nothing."""
    reader, stranger = f"{test_label[:30]}-reader", f"{test_label[:30]}-stranger"
    for name in (reader, stranger):
        kube.request(
            "POST",
            kube.namespaced_path("serviceaccounts", NAMESPACE),
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
        )
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}
    kube.request(
        "POST",
        f"{RBAC}/clusterroles",
        {**role, "metadata": {"name": reader}, "rules": READER_RULES},
    )
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": reader},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
        "subjects": [{"kind": "ServiceAccount", "name": reader, "namespace": NAMESPACE}],
    }
    kube.request("POST", f"{RBAC}/clusterrolebindings", binding)
    yield reader, stranger
    for path in (
        f"{RBAC}/clusterrolebindings/{reader}",
        f"{RBAC}/clusterroles/{reader}",
        kube.namespaced_path("serviceaccounts", NAMESPACE, reader),
        kube.namespaced_path("serviceaccounts", NAMESPACE, stranger),
    ):
        try:
            kube.request("DELETE", path)
        except ApiError as error:
            if error.status != 404:
                raise


def token(kube: Kube, account: str) -> str:
    """A token for `account` from the TokenRequest API (what `kubectl create token` does)."""
    path = kube.namespaced_path("serviceaccounts", NAMESPACE, account, "token")
    request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
    return str(kube.request("POST", path, request)["status"]["token"])


def may_read_metrics(kube: Kube, account: str) -> bool:
    """The apiserver's own answer, so the scrape does not race RBAC's cache."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{NAMESPACE}:{account}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
            "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
        },
    }
    answer = kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
    return bool(answer["status"].get("allowed"))


def test_metrics_need_a_token_allowed_to_get_them(
    kube: Kube,
    accounts: tuple[str, str],
    start_operator: Callable[..., OperatorProcess],
    tmp_path: Path,
) -> None:
    reader, stranger = accounts
    # The operator's certificate from a directory (as the chart mounts one), so the client
    # can check it; with none, the operator makes a self-signed one (test_endpoints.py).
    certificate = webhooks.generate(["127.0.0.1"], dt.datetime.now(dt.UTC))
    webhooks.write_files(tmp_path / "metrics-certs", certificate)
    (tmp_path / "ca.crt").write_bytes(certificate.ca)
    operator = start_operator(
        SKYHOOK_METRICS_SECURE="true", SKYHOOK_METRICS_CERT_DIR=str(tmp_path / "metrics-certs")
    )
    assert operator.metrics_url.startswith("https://127.0.0.1:")
    https = urllib3.PoolManager(
        retries=False,
        timeout=urllib3.Timeout(connect=2.0, read=15.0),
        cert_reqs="CERT_REQUIRED",
        ca_certs=str(tmp_path / "ca.crt"),
    )

    def scrape(bearer: str | None) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {bearer}"} if bearer is not None else {}
        answer = https.request("GET", operator.metrics_url, headers=headers)
        return answer.status, answer.data.decode()

    wait_until(lambda: may_read_metrics(kube, reader), 30, f"RBAC to let {reader} get /metrics")
    assert not may_read_metrics(kube, stranger)

    assert scrape(None) == (401, "Unauthorized")
    assert scrape("not-a-token") == (401, "Unauthorized")
    status, text = scrape(token(kube, stranger))
    assert (status, text) == (
        403,
        f"Authorization denied for user system:serviceaccount:{NAMESPACE}:{stranger}",
    )
    reader_token = token(kube, reader)
    status, text = scrape(reader_token)
    assert status == 200, text
    assert "# TYPE skyhook_operator_api_requests_total counter" in text
    # Every review so far went to the apiserver: three tokens, two of them users to ask about.
    assert reviews_made(text) == {"tokenreviews": 3, "subjectaccessreviews": 2}

    # Scrapes within the cache's lifetime ask nothing more, refused ones included.
    for _ in range(3):
        status, text = scrape(reader_token)
        assert status == 200
        assert scrape(None)[0] == 401
    assert reviews_made(text) == {"tokenreviews": 3, "subjectaccessreviews": 2}

    # HTTPS only: a plain HTTP request is not answered with metrics.
    plain = urllib3.PoolManager(retries=False, timeout=urllib3.Timeout(connect=2.0, read=5.0))
    try:
        refused = plain.request("GET", operator.metrics_url.replace("https:", "http:"))
    except urllib3.exceptions.HTTPError:
        pass
    else:
        assert refused.status == 400


def test_metrics_served_with_the_webhook_certificate_verify_against_the_serving_ca(
    kube: Kube, start_operator: Callable[..., OperatorProcess], tmp_path: Path
) -> None:
    # As the chart runs it for a ServiceMonitor that checks the certificate: /metrics from the
    # webhook's certificate directory, which the operator fills from its Secret at start.
    certs = tmp_path / "serving-certs"
    operator = start_operator(
        SKYHOOK_METRICS_SECURE="true",
        SKYHOOK_WEBHOOK_CERT_DIR=str(certs),
        SKYHOOK_METRICS_CERT_DIR=str(certs),
    )
    secret = kube.request("GET", kube.namespaced_path("secrets", NAMESPACE, "webhook-cert"))
    (tmp_path / "serving-ca.crt").write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
    https = urllib3.PoolManager(
        retries=False,
        timeout=urllib3.Timeout(connect=2.0, read=15.0),
        cert_reqs="CERT_REQUIRED",
        ca_certs=str(tmp_path / "serving-ca.crt"),
    )
    answer = https.request("GET", operator.metrics_url)  # verified, or this raises
    assert (answer.status, answer.data.decode()) == (401, "Unauthorized")
