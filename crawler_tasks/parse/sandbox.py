"""A hard budget per page: HTML is parsed in a child process with a deadline and a memory cap.

The parse budget (``parse.budget``) keeps the known HTML bombs linear, but a parser is C
code that no signal can interrupt, and a page may find a slow path nobody has measured
yet. So the parse worker hands each document to a long-lived child process and waits at
most ``PARSE_TIMEOUT_S``: a child that is late is killed and replaced, a child that runs
out of its address space (``PARSE_MEMORY_MB``) dies; either way only that page gets an
error record and the worker goes on.

The body and the answer (the page's text: tens of kB) pass through a mapping shared with
the child; the socket between them carries a few bytes each way. Through the socket
they cost the worker 0.26 ms of CPU a page (kernel copies, buffers), about a quarter of
all its own work on a page; what does not fit the mapping still goes through it.
"""
from __future__ import annotations

import logging
import mmap
import multiprocessing
import os
import pickle
import resource
import select
import signal
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from crawler_tasks.parse.page import Analysis, analyse

log = logging.getLogger(__name__)

REGION_BYTES = 16 << 20   # the shared mapping (pages are touched only as used)
_IN_REGION = b"R"         # answer tags: in the region (then its length), or inline
_INLINE = b"P"


class ParseFailed(Exception):
    """The page's parse was stopped: over its deadline, or the child died (memory)."""


class ParseSandbox:
    def __init__(self, timeout_s: float, memory_mb: int) -> None:
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self._proc: BaseProcess | None = None
        self._conn: Connection | None = None
        self._poller: select.poll | None = None
        self._region = mmap.mmap(-1, REGION_BYTES)   # shared with every child forked from here

    def analyse(self, body: bytes, url: str, *args: Any, timeout_s: float | None = None, **kwargs: Any) -> Analysis:
        """``parse.page.analyse(body, url, *args, **kwargs)`` in the child; ParseFailed if it
        had to be stopped. ``timeout_s`` is a shorter deadline for this page."""
        conn = self._connection()
        assert self._poller is not None
        deadline = self.timeout_s if timeout_s is None else min(timeout_s, self.timeout_s)
        shared = len(body) <= REGION_BYTES
        if shared:
            self._region[:len(body)] = body
        try:
            conn.send_bytes(pickle.dumps((len(body) if shared else body, url, args, kwargs),
                                         protocol=pickle.HIGHEST_PROTOCOL))
            if not self._poller.poll(deadline * 1000):
                self._kill()
                raise ParseFailed(f"parse stopped after its {deadline:g} s deadline")
            answer = conn.recv_bytes()
            page = pickle.loads(self._answer(answer))
        except (EOFError, OSError, pickle.UnpicklingError) as exc:
            self._kill()
            raise ParseFailed(f"parse process died ({type(exc).__name__}; memory cap {self.memory_mb} MB)") from None
        if not isinstance(page, Analysis):
            raise ParseFailed("parse process answered nonsense")
        return page

    def _answer(self, answer: bytes) -> bytes:
        if answer[:1] == _INLINE:
            return answer[1:]
        n = int.from_bytes(answer[1:], "little")
        if answer[:1] != _IN_REGION or not 0 < n <= REGION_BYTES:
            raise pickle.UnpicklingError("not an answer")
        return self._region[:n]

    def close(self) -> None:
        self._kill()

    def _connection(self) -> Connection:
        if self._proc is None or not self._proc.is_alive() or self._conn is None:
            self._kill()
            parent, child = multiprocessing.get_context("fork").Pipe()
            proc = multiprocessing.get_context("fork").Process(
                target=_serve, args=(child, self.memory_mb, self._region), name="parse-sandbox", daemon=True)
            proc.start()
            child.close()
            self._proc, self._conn = proc, parent
            self._poller = select.poll()
            self._poller.register(parent.fileno(), select.POLLIN)
        return self._conn

    def _kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = self._poller = None


def _serve(conn: Connection, memory_mb: int, region: mmap.mmap) -> None:
    """The child: parse documents until the pipe closes; never outlives the worker."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:  # SIGKILL when the worker dies (Linux PR_SET_PDEATHSIG)
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:  # pragma: no cover - not Linux
        pass
    if memory_mb > 0:
        limit = memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    while True:
        try:
            body, url, args, kwargs = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            os._exit(0)
        if isinstance(body, int):
            body = region[:body]
        try:
            page = analyse(body, url, *args, **kwargs)
        except MemoryError:
            os._exit(3)
        answer = pickle.dumps(page, protocol=pickle.HIGHEST_PROTOCOL)
        if len(answer) <= REGION_BYTES:
            region[:len(answer)] = answer
            conn.send_bytes(_IN_REGION + len(answer).to_bytes(8, "little"))
        else:
            conn.send_bytes(_INLINE + answer)
