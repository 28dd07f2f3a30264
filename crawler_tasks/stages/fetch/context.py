"""What a host turn and its steps (``turn.py``, ``robots_step.py``, ``render_step.py``)
need of their session; in a module of its own, so the steps need not import the turn."""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from crawler_tasks.fetch.http import Cancel
from crawler_tasks.stages.worker import Worker


@dataclass(slots=True)
class TurnContext:
    """What a turn needs of its session."""

    w: Worker
    halt: Cancel                        # the crawl stops: exchanges in flight end now
    stop: threading.Event               # the session stops: no more waiting
    bump: Callable[[str, int], None]    # a session counter
    renew: Callable[[str], None]        # extend one held host's lease (a long turn)
