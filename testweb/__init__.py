"""A generated multi-host web served on loopback, for crawler tests and benchmarks.

Why this exists: crawler tests need a web whose shape is known in advance
(pages, links, robots rules, odd responses) so results can be checked exactly,
and politeness can only be judged from the server side (what was asked, when,
on which TCP connection).  The benchmark also runs the crawler on the same
small machine, so serving must be cheap.

Host ``i`` listens on ``127.0.0.(first_ip + i)`` at a port chosen by the OS, or
is the name ``h<i>.<suffix>`` (``names=``; several names may share an address,
and a share of the hosts may serve HTTPS from the web's own CA).
Its pages are ``/`` and ``/p/<n>.html``; ``/robots.txt`` follows its
:class:`HostSpec`; anything under ``/private/`` is served (200) even though the
default robots.txt forbids it, so a crawler that ignores robots shows up in the
request log.  Unknown paths get a small 404 page.

Rooms: ``web`` (TestWeb, HostSpec, routing), ``pages`` (corpus, link graph,
bodies), ``responses`` (pre-rendered responses, the request record),
``server`` (HTTP/1.1 selector loop, request and connection logs), ``robots``
(robots.txt and its fetch policy), ``reach`` (what a polite crawler can reach),
``shape`` (the real web's answer times and per-host Crawl-delays), ``evidence``
(politeness checks and in-flight counts from the logs), ``dns`` (an authoritative
DNS server for the web's names, dead names among them), ``tls`` (the web's CA and
certificates, bad ones on request), ``cli`` (``python -m testweb --hosts N --pages P``).
"""

from testweb.cli import main
from testweb.responses import RequestRecord
from testweb.web import HostSpec, TestWeb

__all__ = ["HostSpec", "RequestRecord", "TestWeb", "main"]
