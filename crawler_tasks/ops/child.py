"""The Celery processes of ``manage.py crawl``: ``python -m crawler_tasks.ops.child worker|beat ...``
(the crawl's control worker runs Beat in a thread: ``worker -B SCHEDULE``).

The same worker and beat as ``celery -A crawler_tasks worker|beat`` with the options
the runner uses, started through Celery's API instead of its command line, which
imports every subcommand and plugin it knows of (flower, the amqp shell with its
prompt toolkit) before it looks at its arguments.

``... child serve`` is a fork server: it imports the stages and Celery's worker once
(started first thing, while the runner prepares the crawl), then takes the crawl's
environment and its log file (one JSON line on stdin), makes the app, and forks each
process the runner asks for (one JSON line: argv and log file; it answers ``spawned
PID`` and later ``exited PID CODE`` on stdout). A crawl boots six processes at once, often on two cores, and each spent
~0.4 s of CPU importing the same modules; a fork costs a few milliseconds. Every
forked process is its own session (the runner signals its group), gets SIGTERM when
the server dies, and the server gets SIGTERM when the runner dies, so none outlives
the runner by more than ``ORPHAN_GRACE_S`` (``_end_with_server``). Nothing opens a
connection or starts a thread before the fork: the app's broker pool and the stages'
clients are made on first use.
"""
from __future__ import annotations

import argparse
import atexit
import gc
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import setproctitle

# glibc's malloc arenas for the server and all it forks (read once, at its start; the
# operator's own setting wins): by default a process gets up to 8 per core, and the fetch
# worker's hundred threads spread its buffers over them, ~18 MiB of its ~120 MiB RSS on the
# 100-host bench, for no CPU measured.
MALLOC_ENV = {"MALLOC_ARENA_MAX": "2"}

# A forked process still running this long after its fork server died is killed with
# its process group: a warm shutdown with the crawl's Redis gone may take far longer.
ORPHAN_GRACE_S = 3.0


def die_with_parent() -> None:
    """preexec_fn: the child gets SIGTERM when the process that started it dies. Here,
    among the stdlib imports only, so the fork server starts before the runner imports
    redis-py (0.13 s it was waiting for)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:  # pragma: no cover - not Linux
        pass


def exit_now(code: int) -> None:
    """Exit without the interpreter's teardown of every module a crawl imported (~0.1 s
    that an operator, a script or the runner waits for): the exit handlers run and
    output is flushed; nothing else is left to clean up."""
    try:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):   # a reader gone, a stream closed
                pass
    finally:
        os._exit(code)


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
    worker.add_argument("-B", "--beat", metavar="SCHEDULE",
                        help="also run Beat, in a thread of this worker, with this state file")
    beat = sub.add_parser("beat")
    beat.add_argument("-s", "--schedule", required=True, help="Beat's state file")
    sub.add_parser("serve")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "serve":
        return serve()
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
    stop_beat = _beat_thread(app, args.beat) if args.beat else None
    worker.start()
    if stop_beat is not None:
        stop_beat()
    return int(worker.exitcode or 0)


def _beat_thread(app: Any, schedule: str) -> Callable[[], None]:
    """Beat in a thread of this worker: Celery's own ``-B`` forks a process for it, which
    cost the crawl 46 MiB of RSS and ~0.1 ms of CPU a page. A Beat that dies takes its
    worker with it (SIGTERM), so the runner restarts both, as it would a Beat process."""
    from celery.beat import Service
    from celery.signals import worker_ready

    service = Service(app, schedule_filename=schedule, max_interval=1)
    ready = threading.Event()   # a worker that is still starting may not heed SIGTERM
    worker_ready.connect(lambda **_: ready.set(), weak=False)

    def run() -> None:
        try:
            service.start()
        finally:
            if not service._is_shutdown.is_set():
                print("beat stopped: its worker stops too", file=sys.stderr, flush=True)
                ready.wait(60)
                os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=run, name="beat", daemon=True)
    thread.start()

    def stop() -> None:
        service.stop()
        thread.join(5)   # its last sync; one that failed never says it stopped

    return stop


# -- fork server ---------------------------------------------------------------

def serve() -> int:
    """Import once, then fork on request until stdin closes (the runner is gone)."""
    # setproctitle takes over the memory of argv and environ on its first call: before
    # the environment is replaced (configure), or the forked processes cannot be named
    setproctitle.setproctitle(" ".join([sys.executable, "-m", "crawler_tasks.ops.child", "serve"]))
    _write_bytecode()
    # what every forked process would import: the worker and beat, and what a worker
    # imports as it is built (~25 ms of CPU in each of six processes that start
    # together on two cores)
    import celery.app.amqp  # noqa: F401
    import celery.app.control  # noqa: F401
    import celery.app.events  # noqa: F401
    import celery.app.log  # noqa: F401
    import celery.app.routes  # noqa: F401
    import celery.apps.beat  # noqa: F401
    import celery.apps.worker  # noqa: F401
    import celery.backends.base  # noqa: F401
    import celery.concurrency.solo  # noqa: F401
    import celery.concurrency.thread  # noqa: F401
    import celery.events.dispatcher  # noqa: F401
    import celery.events.receiver  # noqa: F401
    import celery.worker.autoscale  # noqa: F401
    import celery.worker.components  # noqa: F401
    import celery.worker.consumer.consumer  # noqa: F401
    import celery.worker.consumer.delayed_delivery  # noqa: F401
    import kombu.mixins  # noqa: F401
    import kombu.transport.redis  # noqa: F401

    # what crawler_tasks.tasks imports, not the module itself: its state (a CPU clock
    # reading, the stage state) must be made in each process, so each imports it anew;
    # nor the app, made from the settings in the environment that comes next
    import crawler_tasks.ops.snapshot  # noqa: F401
    import crawler_tasks.output.spool  # noqa: F401
    import crawler_tasks.records  # noqa: F401
    import crawler_tasks.runtime.maintenance  # noqa: F401
    import crawler_tasks.stages.enqueue  # noqa: F401
    import crawler_tasks.stages.fetch  # noqa: F401
    import crawler_tasks.stages.parse  # noqa: F401
    import crawler_tasks.stages.wake  # noqa: F401
    import crawler_tasks.stages.worker  # noqa: F401

    me = os.getpid()
    out = sys.stdout
    children: set[int] = set()
    buf = b""
    # its write end stays open here only: a child reads EOF from it once the server is gone
    alive_r, alive_w = os.pipe()
    while True:
        ready, _, _ = select.select([0], [], [], 0.05)
        for pid, code in _reap(children):
            _say(out, f"exited {pid} {code}")
        if not ready:
            continue
        chunk = os.read(0, 65536)
        if not chunk:
            return 0
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            request = json.loads(line)
            if "env" in request:
                _configure(request["env"], request["log"])
                continue
            # what was imported stays out of every collection in the children: their
            # collector never walks (nor copies, by touching) the shared pages
            gc.freeze()
            # "spawned" is said once the child is its own session: the runner may signal
            # its group at once (a Ctrl-C during start-up), and a group not yet made is
            # no group (ESRCH), so that signal would be lost
            settled, told = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(settled)
                os.close(alive_w)
                _run_forked(me, request["args"], request["log"], told, alive_r)
            os.close(told)
            os.read(settled, 1)  # EOF: the child closed its end after setsid (or died)
            os.close(settled)
            children.add(pid)
            _say(out, f"spawned {pid}")


def _write_bytecode() -> None:
    """The package's bytecode, written where it is missing or stale, even under
    PYTHONDONTWRITEBYTECODE (containers often set it): the package runs from its source
    folder, so without it every crawl compiled its modules again, 0.2 s of the fork
    server's imports (0.67 -> 0.44 s), which every process of the crawl waits for. A
    folder that cannot be written is left as it is."""
    import compileall

    try:
        compileall.compile_dir(str(Path(__file__).resolve().parents[1]), quiet=2)
    except OSError:
        pass


def _configure(env: dict[str, str], log: str) -> None:
    """The crawl's environment (its settings) for the app and every process forked later."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(env)
    import crawler_tasks.celery  # noqa: F401


def _reap(children: set[int]) -> list[tuple[int, int]]:
    done = []
    for pid in list(children):
        got, status = os.waitpid(pid, os.WNOHANG)
        if got:
            children.discard(pid)
            done.append((pid, os.waitstatus_to_exitcode(status)))
    return done


def _say(out: IO[str], line: str) -> None:
    out.write(line + "\n")
    out.flush()


def _run_forked(server: int, argv: list[str], log: str, settled: int, server_alive: int) -> None:
    """In the forked process: own session (then ``settled`` is closed: the server waits
    for it), dies with the server, output to its log, and a process title that names it
    (not the server's)."""
    code = 1
    try:
        os.setsid()
        os.close(settled)
        die_with_parent()
        if os.getppid() != server:  # the server died before prctl took effect
            os._exit(1)
        _end_with_server(server_alive)
        # what ps shows, and the argv Celery's own process titles are made from
        sys.argv = [sys.argv[0], *argv]
        setproctitle.setproctitle(" ".join([sys.executable, "-m", "crawler_tasks.ops.child", *argv]))
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.close(null)
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - whatever it was goes to its log, then _exit
        traceback.print_exc()
    finally:
        exit_now(code)


def _end_with_server(server_alive: int) -> None:
    """A worker outlives its fork server (and runner) by ``ORPHAN_GRACE_S`` at most. Its
    pdeath SIGTERM starts a warm shutdown, which waits for its tasks; with the crawl's
    Redis gone as well, they retry every call for seconds (a fetch worker lived 36 s),
    while the next crawl on the folder waits for it (``outdir.WORKERS_LOCK``). Its process
    group goes (a parse worker's sandbox too): what it held comes back as after a kill -9.
    ``server_alive``: the read end of a pipe whose writer is the server."""
    from crawler_tasks.ops.outdir import hold_for_worker
    from crawler_tasks.settings import ENV_PREFIX

    out_dir = os.environ.get(ENV_PREFIX + "OUT_DIR")
    if out_dir:
        hold_for_worker(out_dir)

    def watch() -> None:
        while os.read(server_alive, 1):   # EOF: the server is gone
            pass
        time.sleep(ORPHAN_GRACE_S)
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: nobody may be there to reap an orphan)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except OSError:  # pragma: no cover - no /proc
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


class ForkedProc:
    """The part of ``subprocess.Popen`` the runner uses, for a process the server forked."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]) -> None:
        self.server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode


class ForkServer:
    """The runner's end of ``child serve``: start it early, ``configure`` it once, then
    ``spawn``."""

    def __init__(self, cwd: str) -> None:
        # its stderr goes to the crawl's log folder once there is one (configure)
        self.proc = subprocess.Popen([sys.executable, "-m", "crawler_tasks.ops.child", "serve"], cwd=cwd,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True, preexec_fn=die_with_parent,
                                     env={**MALLOC_ENV, **os.environ})
        assert self.proc.stdout is not None
        self._out = self.proc.stdout.fileno()
        os.set_blocking(self._out, False)
        self._buf = b""
        self._spawned: list[int] = []
        self._exited: dict[int, int] = {}
        self._eof = False

    def alive(self) -> bool:
        return not self._eof and self.proc.poll() is None

    def configure(self, env: dict[str, str], log_path: Path) -> None:
        """The environment of every process it forks, and its own log file."""
        self._send({"env": env, "log": str(log_path)})

    def spawn(self, args: list[str], log_path: Path, timeout_s: float = 30.0) -> ForkedProc | None:
        """Fork ``child <args>`` logging to ``log_path``; None if the server is not there."""
        if not self._send({"args": args, "log": str(log_path)}):
            return None
        deadline = time.monotonic() + timeout_s
        while not self._spawned:
            if self._eof or time.monotonic() >= deadline:
                return None
            select.select([self._out], [], [], 0.05)
            self._read()
        return ForkedProc(self, self._spawned.pop(0), args)

    def _send(self, request: dict[str, object]) -> bool:
        if not self.alive():
            return False
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            self._eof = True
            return False
        return True

    def exit_code(self, pid: int) -> int | None:
        self._read()
        if pid in self._exited:
            return self._exited[pid]
        if not self.alive() and not _running(pid):  # orphaned by the server, then gone
            return self._exited.setdefault(pid, -signal.SIGTERM)  # its pdeath signal
        return None

    def _read(self) -> None:
        while not self._eof:
            try:
                chunk = os.read(self._out, 65536)
            except BlockingIOError:
                break
            if not chunk:
                self._eof = True
                break
            self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            word, *rest = line.decode().split()
            if word == "spawned":
                self._spawned.append(int(rest[0]))
            elif word == "exited":
                self._exited[int(rest[0])] = int(rest[1])

    def stop(self) -> None:
        """SIGKILL, once the processes it forked are gone: it holds no state, and a clean
        exit of an interpreter with every module loaded takes a tenth of a second."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._eof = True
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass


if __name__ == "__main__":
    sys.exit(main())
