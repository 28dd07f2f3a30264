"""TLS for the fetcher: whom it trusts, and a failed handshake told as a reason.

Trust: certifi's bundle (Mozilla's roots, the same on every machine, so a crawl's
verdicts do not depend on the OS it runs on), plus what the operator names: CA_BUNDLE
(``--ca-bundle``) and, as Python and OpenSSL users expect, the SSL_CERT_FILE and
SSL_CERT_DIR variables when set. All of them in addition to certifi, never instead: a
private CA must not cost the public web. Settings validation refuses a location that
gives no certificate, so nothing is skipped silently. A CA named may be an intermediate
(VERIFY_X509_PARTIAL_CHAIN, Python 3.13's default): an operator can trust a proxy's
issuing CA without its root. The store is built once per Fetcher (one SSLContext: ~20 ms
for certifi's roots, as much again for a system bundle); a connection pays nothing.
Verification is never turned off and there is no switch for it: a site whose certificate
fails is a recorded error. Revocation is not checked (no CRL, no OCSP), as in most
clients outside browsers.

Reasons: a certificate that fails is the site's doing and does not pass with a retry, so
``ErrorKind.TLS`` is not in ``records.RETRYABLE_ERRORS``; the record says why in words
(expired, another name, unknown authority...). OpenSSL's verify codes below are the ones
that mean the same in OpenSSL 1.1.1 and 3.x; any other keeps OpenSSL's own message in
parentheses. Other handshake failures (an alert, no version or cipher in common, a port
that does not speak TLS) get a short reason the same way.
"""
from __future__ import annotations

import os
import re
import ssl

import certifi

from crawler_tasks.exceptions import ConfigError
from crawler_tasks.settings import Settings

_UNKNOWN_CA = "unknown certificate authority"
_OTHER_NAME = "certificate for another name (wrong host name)"
_BAD_SIGNATURE = "bad certificate signature"
_BAD_DATES = "certificate with unreadable validity dates"
_WEAK = "weak key or signature in the certificate chain"
_REJECTED = "certificate rejected by the trust store"
_UNTRUSTED = f"{_UNKNOWN_CA} (untrusted CA or missing intermediate)"

# X509_V_ERR_* -> reason
_VERIFY_REASONS: dict[int, str] = {
    2: _UNTRUSTED,                                       # UNABLE_TO_GET_ISSUER_CERT
    4: _BAD_SIGNATURE,                                   # UNABLE_TO_DECRYPT_CERT_SIGNATURE
    6: _BAD_SIGNATURE,                                   # UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY
    7: _BAD_SIGNATURE,                                   # CERT_SIGNATURE_FAILURE
    9: "certificate not yet valid",                      # CERT_NOT_YET_VALID
    10: "certificate expired",                           # CERT_HAS_EXPIRED
    13: _BAD_DATES,                                      # ERROR_IN_CERT_NOT_BEFORE_FIELD
    14: _BAD_DATES,                                      # ERROR_IN_CERT_NOT_AFTER_FIELD
    18: f"{_UNKNOWN_CA} (self-signed certificate)",      # DEPTH_ZERO_SELF_SIGNED_CERT
    19: f"{_UNKNOWN_CA} (self-signed root not trusted)",  # SELF_SIGNED_CERT_IN_CHAIN
    20: _UNTRUSTED,                                      # UNABLE_TO_GET_ISSUER_CERT_LOCALLY
    21: _UNTRUSTED,                                      # UNABLE_TO_VERIFY_LEAF_SIGNATURE
    22: "certificate chain too long",                    # CERT_CHAIN_TOO_LONG
    23: "certificate revoked",                           # CERT_REVOKED
    25: "certificate chain too long for its CA",         # PATH_LENGTH_EXCEEDED
    26: "certificate not for a server (wrong purpose)",  # INVALID_PURPOSE
    27: _REJECTED,                                       # CERT_UNTRUSTED
    28: _REJECTED,                                       # CERT_REJECTED
    62: _OTHER_NAME,                                     # HOSTNAME_MISMATCH
    64: _OTHER_NAME,                                     # IP_ADDRESS_MISMATCH
    66: _WEAK,                                           # EE_KEY_TOO_SMALL
    67: _WEAK,                                           # CA_KEY_TOO_SMALL
    68: _WEAK,                                           # CA_MD_TOO_WEAK
}

_NO_VERSION = "no TLS version in common (protocol version)"
_NO_CIPHER = "handshake refused (no cipher or version in common)"
# SSLError.reason of a handshake that failed otherwise -> reason
_SSL_REASONS: dict[str, str] = {
    "WRONG_VERSION_NUMBER": "the port does not speak TLS (wrong version number)",
    "UNSUPPORTED_PROTOCOL": _NO_VERSION,
    "TLSV1_ALERT_PROTOCOL_VERSION": _NO_VERSION,
    "NO_PROTOCOLS_AVAILABLE": _NO_VERSION,
    "SSLV3_ALERT_HANDSHAKE_FAILURE": _NO_CIPHER,
    "NO_SHARED_CIPHER": _NO_CIPHER,
    "NO_CIPHERS_AVAILABLE": _NO_CIPHER,
    "TLSV1_UNRECOGNIZED_NAME": "the server does not serve this host name (SNI)",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": "the server requires a client certificate",
    "UNSAFE_LEGACY_RENEGOTIATION_DISABLED": "the server needs unsafe legacy renegotiation",
    "DH_KEY_TOO_SMALL": "weak server key (small DH group)",
    "EE_KEY_TOO_SMALL": _WEAK,
    "CA_KEY_TOO_SMALL": _WEAK,
    "CA_MD_TOO_WEAK": _WEAK,
    "UNEXPECTED_EOF_WHILE_READING": "the server hung up inside TLS (unexpected EOF)",
}
_SOURCE = re.compile(r"\s*\(_ssl\.c:\d+\)$")


def client_context(settings: Settings) -> ssl.SSLContext:
    """The verifying client context: certifi's roots plus every location ``settings``
    names (``Settings.ca_paths``); a location that cannot be loaded is a ConfigError."""
    context = ssl.create_default_context(cafile=certifi.where())
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    for name, path in settings.ca_paths():
        try:
            if os.path.isdir(path):
                context.load_verify_locations(capath=path)
            else:
                context.load_verify_locations(cafile=path)
        except OSError as exc:   # it changed since validation (ssl.SSLError is an OSError)
            raise ConfigError(f"{name}: cannot load {path}: {exc}") from None
    return context


def tls_reason(exc: ssl.SSLError) -> str:
    """A failed handshake or TLS read as a short reason, OpenSSL's text in parentheses
    when the failure is not one of the known ones."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        reason = _VERIFY_REASONS.get(exc.verify_code)
        return reason or f"certificate not accepted ({exc.verify_message})"
    if isinstance(exc, ssl.SSLEOFError):
        return _SSL_REASONS["UNEXPECTED_EOF_WHILE_READING"]
    code = exc.reason or ""
    if code in _SSL_REASONS:
        return _SSL_REASONS[code]
    raw = _SOURCE.sub("", str(exc))
    if "ALERT" in code:
        return f"the server sent a TLS alert ({raw})"
    return f"TLS failure ({raw})"
