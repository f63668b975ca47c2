"""The X.509 work behind the serving certificates (the webhooks', and /metrics' own): make a
CA and a server certificate, and read when a certificate expires and which names it covers.

It runs as a short-lived child process, never imported by the operator:
`python -m skyhook_operator.certificates make|read`, a JSON request on stdin and the answer
on stdout (`kube/webhooks.py` starts it). The `cryptography` package it needs keeps about
14 MiB resident once loaded, in every process that loads it, for work done at start and
about once a year after.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import sys
from collections.abc import Sequence
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LIFETIME = dt.timedelta(days=365)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "skyhook"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def make(names: Sequence[str], now: dt.datetime, previous_ca: bytes = b"") -> dict[str, Any]:
    """A new CA and a server certificate for `names` (DNS names or IP addresses), both valid
    for a year, as PEM texts, with what `read` would say of the server certificate. ECDSA
    P-256: as strong as RSA-3072, and both keys take well under a millisecond. The CA's key is
    not kept: the next renewal makes a new CA. `previous_ca` (the first certificate of it)
    stays in the bundle after the new CA while it is valid."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("skyhook-webhooks-ca"))
        .issuer_name(_name("skyhook-webhooks-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + LIFETIME)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        # Key identifiers: clients that verify strictly (Python 3.13's default context, as
        # RFC 5280 asks) refuse a chain without them.
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + LIFETIME)
        .add_extension(x509.SubjectAlternativeName([_san(n) for n in names]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    bundle = ca_cert.public_bytes(serialization.Encoding.PEM)
    if previous_ca:
        old = x509.load_pem_x509_certificates(previous_ca)[0]
        if old.not_valid_after_utc > now:
            bundle += old.public_bytes(serialization.Encoding.PEM)
    server = cert.public_bytes(serialization.Encoding.PEM)
    return {
        "ca": bundle.decode(),
        "cert": server.decode(),
        "key": key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ).decode(),
        **read(server),
    }


def read(cert: bytes) -> dict[str, Any]:
    """When the (first) certificate in `cert` expires and the names it covers; `error` instead
    when it is not a certificate."""
    try:
        leaf = x509.load_pem_x509_certificate(cert)
    except ValueError as error:
        return {"error": f"not a PEM certificate: {error}"}
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [str(n) for n in sans.get_values_for_type(x509.DNSName)]
        names += [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        names = []
    return {"not_after": leaf.not_valid_after_utc.isoformat(), "names": names}


def main(argv: Sequence[str]) -> int:
    request = json.load(sys.stdin)
    if list(argv) == ["make"]:
        answer = make(
            request["names"],
            dt.datetime.fromisoformat(request["now"]),
            request.get("previous_ca", "").encode(),
        )
    elif list(argv) == ["read"]:
        answer = read(request["cert"].encode())
    else:
        print(
            "usage: python -m skyhook_operator.certificates make|read < request.json",
            file=sys.stderr,
        )
        return 2
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
