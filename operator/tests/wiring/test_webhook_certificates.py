"""The webhooks' serving certificate: what the operator issues, when it renews, and a TLS
handshake a client trusting only the CA bundle completes."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import ssl
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cryptography import x509

from skyhook_operator.kube.webhooks import (
    RENEW_BEFORE,
    ServingCertificate,
    generate,
    served_names,
    write_files,
)

NOW = dt.datetime(2026, 11, 24, 12, 0, tzinfo=dt.UTC)


def test_in_cluster_names_are_the_services() -> None:
    assert served_names("hooks", "skyhook", "") == [
        "hooks.skyhook.svc",
        "hooks.skyhook.svc.cluster.local",
    ]
    assert served_names("hooks", "skyhook", "https://127.0.0.1:9443") == ["127.0.0.1"]


def test_renewal_is_due_a_week_before_expiry_or_when_the_names_change() -> None:
    certificate = generate(["hooks.skyhook.svc"], NOW)
    expiry = certificate.not_after
    assert not certificate.due(["hooks.skyhook.svc"], expiry - RENEW_BEFORE - dt.timedelta(1))
    assert certificate.due(["hooks.skyhook.svc"], expiry - RENEW_BEFORE)
    assert certificate.due(["other.skyhook.svc"], NOW)


def test_a_renewed_bundle_still_trusts_the_previous_ca() -> None:
    first = generate(["127.0.0.1"], NOW)
    second = generate(["127.0.0.1"], NOW, previous_ca=first.ca)
    bundle = x509.load_pem_x509_certificates(second.ca)
    assert len(bundle) == 2 and bundle[1] == x509.load_pem_x509_certificates(first.ca)[0]
    # Only one previous CA is carried: a third renewal drops the first.
    third = generate(["127.0.0.1"], NOW, previous_ca=second.ca)
    assert first.ca not in third.ca and len(x509.load_pem_x509_certificates(third.ca)) == 2


def test_a_client_trusting_the_bundle_completes_a_handshake(tmp_path: Path) -> None:
    certificate = generate(["127.0.0.1"], dt.datetime.now(dt.UTC))
    write_files(tmp_path, certificate)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        connection, _ = listener.accept()
        with server_context.wrap_socket(connection, server_side=True) as tls:
            tls.sendall(b"ok")

    thread = threading.Thread(target=serve)
    thread.start()
    client_context = ssl.create_default_context(cadata=certificate.ca.decode())
    # As strict as Python 3.13's default context and RFC 5280 (key identifiers required).
    client_context.verify_flags |= ssl.VERIFY_X509_STRICT
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        client_context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.recv(2) == b"ok"
    thread.join(5)
    listener.close()


def test_files_are_private_and_rewritten_only_on_change(tmp_path: Path) -> None:
    certificate = generate(["127.0.0.1"], NOW)
    directory = tmp_path / "certs"
    assert write_files(directory, certificate)
    assert stat.S_IMODE((directory / "tls.key").stat().st_mode) == 0o600
    assert not write_files(directory, certificate)
    assert write_files(directory, generate(["127.0.0.1"], NOW))


def test_the_key_is_never_readable_by_others_even_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "certs"
    directory.mkdir(mode=0o755)
    # A process stopped right after the key's bytes are written: no later step (a chmod, the
    # key's rename) comes.
    monkeypatch.setattr(os, "chmod", _stopped)
    renamed = Path.replace
    monkeypatch.setattr(
        Path,
        "replace",
        lambda path, target: _stopped() if path.name == ".tls.key.new" else renamed(path, target),
    )
    umask = os.umask(0o022)
    try:
        with contextlib.suppress(_Stopped):
            write_files(directory, generate(["127.0.0.1"], NOW))
    finally:
        os.umask(umask)
    written = {f.name: stat.S_IMODE(f.stat().st_mode) for f in directory.iterdir()}
    assert written == {"tls.crt": 0o600, ".tls.key.new": 0o600}


class _Stopped(Exception):
    pass


def _stopped(*args: object) -> None:
    raise _Stopped


def test_a_secret_round_trips() -> None:
    certificate = generate(["127.0.0.1"], NOW)
    assert ServingCertificate.from_secret({"data": certificate.secret_data()}) == certificate
    assert ServingCertificate.from_secret({"data": {"tls.crt": "x"}}) is None


def test_a_certificate_that_is_not_one_is_due_for_replacement() -> None:
    """A Secret whose tls.crt was overwritten by hand is renewed, not a round failing forever."""
    assert ServingCertificate(b"", b"not a certificate", b"").due(["127.0.0.1"], NOW)


# The operator's own process makes and reads certificates, and `cryptography` is never loaded
# in it: the child process does the X.509 work.
_MAKES_AND_READS = """
import datetime as dt, sys
import skyhook_operator.cli, skyhook_operator.runtime
from skyhook_operator.kube import webhooks
made = webhooks.generate(["127.0.0.1"], dt.datetime.now(dt.UTC))
webhooks._KNOWN_FACTS.clear()
assert not made.due(["127.0.0.1"], dt.datetime.now(dt.UTC))
assert made.due(["other.example"], dt.datetime.now(dt.UTC))
print(sorted({m.split(".")[0] for m in sys.modules} & {"cryptography", "_cffi_backend"}))
"""


def test_the_operator_process_never_loads_the_x509_library() -> None:
    """About 14 MiB stay out of the operator's resident memory."""
    done = subprocess.run(
        [sys.executable, "-c", _MAKES_AND_READS], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
