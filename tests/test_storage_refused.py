"""A storage that refuses writes (disk full, Redis refusing) never tears an output file
nor makes a stage task fail (issue 24): an append is all or nothing, a WARC file keeps
only whole records, and the writes are made again in place until the storage takes them.

The disk is made to refuse with RLIMIT_FSIZE (a write past the limit writes what fits,
then fails), so no mount or root is needed; Redis refusals are real replies of a real
redis-server."""
from __future__ import annotations

import gzip
import os
import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
import redis

from crawler_tasks.output.jsonl import WorkerStopping, append_jsonl, once_written, storage_refused
from crawler_tasks.output.warc import WarcStore


@contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Writes of this process past ``limit`` bytes of a file fail (EFBIG), the first one
    after writing what fits."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


def test_an_append_that_fails_midway_is_cut_back_to_where_it_began(tmp_path: Path) -> None:
    path = tmp_path / "pages.jsonl"
    append_jsonl(path, [{"url": "http://a.test/0"}])
    before = path.read_bytes()
    batch = [{"url": f"http://a.test/{i}", "pad": "x" * 3000} for i in range(1, 20)]
    with file_size_limit(len(before) + 10_000), pytest.raises(OSError):
        append_jsonl(path, batch)   # about 3 of 19 lines would fit
    assert path.read_bytes() == before
    append_jsonl(path, batch)       # made again once the disk takes it: each line once
    urls = [orjson.loads(line)["url"] for line in path.read_bytes().splitlines()]
    assert urls == [f"http://a.test/{i}" for i in range(20)]


def test_a_warc_write_that_fails_keeps_whole_records_and_writes_each_once_later(tmp_path: Path) -> None:
    store = WarcStore(tmp_path, max_bytes=10**9, gzip_level=0)
    store.write_metadata("http://a.test/0", None, ["http://a.test/1"], "2026-12-03T10:00:00Z")
    store.flush()
    assert store.path is not None
    whole = store.path.stat().st_size
    for i in range(1, 6):
        # random links: the records keep most of their size on disk
        store.write_metadata(f"http://a.test/{i}", None, [f"http://a.test/{i}/{os.urandom(8).hex()}" for _ in range(300)],
                             "2026-12-03T10:00:00Z")
    with file_size_limit(whole + 20_000), pytest.raises(OSError):
        store.flush()
    assert store.path.stat().st_size == whole   # no torn record for a resume to cut (with all after it)
    store.flush()
    store.close()
    data = gzip.decompress(store.path.read_bytes())
    targets = [line.split(b": ", 1)[1] for line in data.split(b"\r\n") if line.startswith(b"WARC-Target-URI")]
    assert targets == [f"http://a.test/{i}".encode() for i in range(6)]


def test_storage_refusals_are_told_from_errors(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    with pytest.raises(redis.ResponseError) as wrong_type:
        client.set("k", "v")
        client.lpush("k", "x")
    assert not storage_refused(wrong_type.value)   # a bug: raised at once, never waited on
    assert storage_refused(OSError(28, "No space left on device"))
    assert not storage_refused(OSError(2, "No such file or directory"))
    assert storage_refused(redis.ResponseError("MISCONF Errors writing to the AOF file: No space left on device"))
    assert storage_refused(redis.ResponseError("Error running script (call to f_1): @user_script:3: MISCONF ..."))
    assert storage_refused(redis.ConnectionError("Connection refused"))
    try:   # Celery wraps a broker's errors: the cause decides
        try:
            raise redis.ResponseError("READONLY You can't write against a read only replica.")
        except redis.ResponseError as exc:
            raise RuntimeError("publish failed") from exc
    except RuntimeError as wrapped:
        assert storage_refused(wrapped)


def test_a_refused_write_is_made_again_until_taken_and_a_stopping_worker_leaves_it(monkeypatch) -> None:
    from celery.worker import state

    tries: list[int] = []

    def full_twice() -> int:
        tries.append(1)
        if len(tries) <= 2:
            raise OSError(28, "No space left on device")
        return 7

    assert once_written(full_twice) == 7 and len(tries) == 3
    with pytest.raises(ValueError):   # not a refusal: at once
        once_written(lambda: int("x"))
    monkeypatch.setattr(state, "should_stop", 0)   # a warm shutdown while the disk is full
    with pytest.raises(WorkerStopping):
        once_written(lambda: (_ for _ in ()).throw(OSError(28, "No space left on device")))


def test_a_batch_run_again_appends_its_lines_once(settings, tmp_path: Path) -> None:
    """A stage message delivered again (a Redis restart that forgot its acknowledgement,
    a copy requeued while its first run went on) finds its batch's marker."""
    from crawler_tasks.output.spool import new_batch_id, prune_markers, written_marker

    path = tmp_path / "pages.jsonl"
    batch = new_batch_id()
    marker = written_marker(settings, batch, "pages")
    assert append_jsonl(path, [{"url": "http://a.test/1"}], marker) > 0
    assert append_jsonl(path, [{"url": "http://a.test/1"}], marker) == 0
    assert path.read_bytes().count(b"a.test/1") == 1
    assert prune_markers(settings) == 0   # a fresh batch's marker stays
    assert prune_markers(settings, older_than_s=-60) == 1


def test_a_forced_seed_of_a_queued_url_leaves_it_where_it_waits(settings) -> None:
    """`manage.py seed` forces a URL seen before (the operator asked for it); one that is
    still queued would be queued, and fetched, a second time: it is skipped, named."""
    from crawler_tasks.frontier import Discovered, Frontier
    from crawler_tasks.ops.seeds import seed_urls

    frontier = Frontier(settings)
    frontier.put_discovered([Discovered(url="http://a.test/queued", host="a.test")])
    assert seed_urls(settings, ["http://a.test/queued", "http://a.test/new"], frontier) == (
        1, [], ["http://a.test/queued"])
    shard = frontier.shard_of("a.test")
    queued = [frontier.client(shard).lrange(key, 0, -1) for key in frontier.keys(shard).fronts(frontier.levels)]
    assert sum(raw.endswith("http://a.test/queued") for level in queued for raw in level) == 1
