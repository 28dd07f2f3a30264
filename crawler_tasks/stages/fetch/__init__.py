"""Fetch stage, as components: the session (``session.py``: its loop, the heap of held
hosts, page groups, back-pressure, lease renewal), a host turn (``turn.py``: refuse,
learned rules, robots.txt, request, render, each a step), and its outcome
(``outcome.py``: the turn's record and the one failure and retry rule), finished in the
stores on one round trip (``finish.py``). Turns run on the process's exchange pool
(``fetch/pool.py``)."""
from crawler_tasks.stages.fetch.robots_step import first_contact
from crawler_tasks.stages.fetch.session import FetchSession, fetch_stage

__all__ = ["FetchSession", "fetch_stage", "first_contact"]
