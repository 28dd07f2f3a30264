"""The end of a host turn in the stores: the frontier's finish, the payload's revisit
test and the page budget's count, on one round trip where the shard and the crawl's
counters share a server (the common case), the count first otherwise. Each participant
queues its commands on the shared pipeline and returns the reader of its own replies.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from crawler_tasks.frontier import Completion, Lease
from crawler_tasks.output.warc import warc_date
from crawler_tasks.records import Action
from crawler_tasks.stages.fetch.outcome import Turn, requested
from crawler_tasks.stages.worker import Worker


@dataclass(slots=True)
class End:
    """How a turn ended in the frontier."""

    done: Completion
    parked: str | None = None          # the fetched entry, parked until its page is handed on
    spent: bool = False                # the page budget is spent with this page
    earlier: tuple[str, str] | None = None   # an earlier capture of the same payload (url, date)
    dry: bool = False                  # held on, but the host had no URL left: it waits for parse


def finish_turn(w: Worker, lease: Lease, turn: Turn, hold_until: float, leased: int) -> End:
    """Finish the turn's lease (held on until ``hold_until`` when > 0 and the host has
    URLs left). With a page budget, the turn's page is counted first on the same round
    trip; where the frontier's script keeps the budget (``budget_in_scripts``), the script
    counts it and holds the host only within the budget. Otherwise ``leased`` (hosts
    leased over the crawl as last read) decides: a held host is given back after the round
    trip when the count and they pass the budget (``End.spent``)."""
    s = w.settings
    res = turn.exchange
    date = warc_date(res.started) if res is not None else ""
    capture = bool(s.WARC_DEDUP_REVISITS and res is not None and res.status == 200 and res.body
                   and not res.truncated)
    # counted at once, so that no session holds a host past the budget
    count = bool(s.MAX_PAGES) and turn.page is not None and requested(turn.page)
    # a fetched URL stays parked in the frontier until its page is handed on
    park = turn.action == Action.DONE and turn.page is not None
    fields = turn.state.to_fields() if turn.state is not None else None
    park_until = time.time() + s.LEASE_S if park else 0.0
    pipe = w.control.client.pipeline(transaction=False)
    read_earlier = w.content.queue_capture(pipe, res.url, turn.digest, date) if capture and res is not None else None
    together = w.frontier.same_server(lease.shard, w.control.client)
    # where the script keeps the budget it counts the page too: once, even when redis-py
    # sends the pipeline again after a lost reply
    in_script = count and together and w.frontier.budget_in_scripts
    read_count = w.control.queue_count_page(pipe) if count and not in_script else None
    read_done = None
    if together:
        read_done = w.frontier.queue_finish(pipe, lease, turn.te, turn.action, fields, hold_until, park_until,
                                            count_page=in_script)
    replies = pipe.execute(raise_on_error=False) if len(pipe) else []
    spent = (read_count is not None and not w.frontier.budget_in_scripts
             and read_count(replies) + leased > s.MAX_PAGES)
    earlier = read_earlier(replies) if read_earlier is not None else None
    if read_done is not None:
        done = read_done(replies)
    else:
        hold_until = 0.0 if spent else hold_until
        done = w.frontier.finish(lease, turn.te, turn.action, fields, hold_until, park_until)
    spent = spent or done.spent
    return End(done, lease.raw if park and done.ok else None, spent, earlier,
               dry=bool(hold_until) and done.ok and done.held is None and not spent)


def archive_turn(w: Worker, turn: Turn, end: End) -> str | None:
    """The turn's exchange (and the DOM its page rendered to) in WARC, once the turn is
    finished; the response's record id."""
    res = turn.exchange
    if res is None:
        return None
    record_id = w.warc.write_exchange(res, end.earlier, turn.digest)
    if turn.conversion is not None:
        w.warc.write_conversion(res.url, record_id, *turn.conversion)
    return record_id
