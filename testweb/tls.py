"""Certificates of the test web's HTTPS hosts: a CA of its own, one leaf for every good host.

Why one leaf: at 5,000 hosts a leaf and a context per name would cost seconds at
start-up; one leaf for ``*.<suffix>`` (without names: one whose IP SANs are the
HTTPS hosts' addresses) costs about a millisecond, and one context serves every
good host, so TLS 1.3 session tickets work the same on all of them.  A wildcard
needs two labels under it (OpenSSL will not match ``*.test``), hence names such as
``web.test``.  trustme is imported only by a web with HTTPS hosts.  Contexts speak TLS 1.2 and 1.3 (tickets on, renegotiation off) and
offer ``http/1.1`` by ALPN.

Bad certificates are for crawler tests and cost a leaf each, only when asked:
``expired`` (the good names, valid until yesterday), ``wrong-name`` (valid, for
``wrong-name.invalid``) and ``unknown-ca`` (the good names, signed by a CA nobody
is told to trust).
"""

from __future__ import annotations

import datetime
import ssl
from collections.abc import Iterable, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import trustme

WRONG_NAME = "wrong-name.invalid"


class BadCert(StrEnum):
    """How a host's certificate fails a verifying client."""

    EXPIRED = "expired"
    WRONG_NAME = "wrong-name"
    UNKNOWN_CA = "unknown-ca"


def _server_context(leaf: trustme.LeafCert) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_RENEGOTIATION  # so a write never waits for a read
    ctx.set_alpn_protocols(["http/1.1"])
    leaf.configure_cert(ctx)
    return ctx


class WebCerts:
    """The web's CA and the server contexts of its HTTPS hosts (good, and each bad kind asked for)."""

    def __init__(self, identities: Sequence[str], bad: Iterable[BadCert] = ()) -> None:
        import trustme  # here: 70 ms of imports a web without HTTPS does not pay

        self._ca = trustme.CA(organization_name="testweb")
        self.good = _server_context(self._ca.issue_cert(*identities))
        self.bad: dict[BadCert, ssl.SSLContext] = {}
        for kind in set(bad):
            if kind is BadCert.EXPIRED:
                now = datetime.datetime.now(datetime.UTC)
                leaf = self._ca.issue_cert(*identities, not_before=now - datetime.timedelta(days=30),
                                           not_after=now - datetime.timedelta(days=1))
            elif kind is BadCert.WRONG_NAME:
                leaf = self._ca.issue_cert(WRONG_NAME)
            else:
                leaf = trustme.CA(organization_name="unknown").issue_cert(*identities)
            self.bad[kind] = _server_context(leaf)

    @property
    def ca_pem(self) -> bytes:
        """The CA certificate a crawler must trust to verify the good hosts."""
        return self._ca.cert_pem.bytes()

    def context(self, bad: BadCert | None) -> ssl.SSLContext:
        """The server context of a host with certificate ``bad`` (None: a good one)."""
        return self.good if bad is None else self.bad[bad]

    def client_context(self) -> ssl.SSLContext:
        """A verifying client context that trusts this web's CA (and nothing else)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._ca.configure_trust(ctx)
        return ctx
