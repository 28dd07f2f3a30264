"""The Celery processes of ``manage.py crawl``: ``python -m crawler_tasks.ops.child worker|beat ...``.

The same worker and beat as ``celery -A crawler_tasks worker|beat`` with the options
the runner uses, started through Celery's API instead of its command line, which
imports every subcommand and plugin it knows of (flower, the amqp shell with its
prompt toolkit) before it looks at its arguments: about 0.13 s of CPU per process,
and a crawl boots six of them at once on a machine that may have two cores.
"""
from __future__ import annotations

import argparse
import sys


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m crawler_tasks.ops.child", description=__doc__)
    ap.add_argument("-l", "--loglevel", default="INFO")
    sub = ap.add_subparsers(dest="command", required=True)
    worker = sub.add_parser("worker")
    worker.add_argument("-Q", "--queues", required=True, help="comma-separated queue names")
    worker.add_argument("-P", "--pool", default="solo", choices=("solo", "threads"))
    worker.add_argument("-c", "--concurrency", type=int, default=None)
    worker.add_argument("-n", "--hostname", required=True, help="node name; %%h is this host's name")
    worker.add_argument("-E", "--task-events", action="store_true")
    beat = sub.add_parser("beat")
    beat.add_argument("-s", "--schedule", required=True, help="Beat's state file")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from celery.utils.log import mlevel

    from crawler_tasks.celery import app

    level = mlevel(args.loglevel.upper())
    if args.command == "beat":
        app.Beat(schedule=args.schedule, loglevel=level).run()
        return 0
    from celery import concurrency
    from celery.utils.nodenames import default_nodename, host_format

    worker = app.Worker(hostname=host_format(default_nodename(args.hostname)),
                        pool_cls=concurrency.get_implementation(args.pool), loglevel=level,
                        queues=args.queues.split(","), concurrency=args.concurrency,
                        task_events=args.task_events,
                        # no broadcast chatter between workers: the runner owns them all
                        without_gossip=True, without_mingle=True, without_heartbeat=True)
    worker.start()
    return int(worker.exitcode or 0)


if __name__ == "__main__":
    sys.exit(main())
