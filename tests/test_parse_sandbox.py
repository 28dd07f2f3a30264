"""The per-page hard budget: a real child process, killed past its deadline or its memory cap."""
from __future__ import annotations

import time

import pytest

from crawler_tasks.parse import sandbox as sb
from crawler_tasks.parse.sandbox import ParseFailed, ParseSandbox

PAGE = b"<html><head><title>t</title></head><body><a href='/x'>x</a> hello</body></html>"


def _hostile_parse(body, url, *args):
    if body == b"slow":
        time.sleep(30)
    if body == b"greedy":
        hog = [bytearray(2**20) for _ in range(10_000)]   # 10 GB: over any cap
        return hog
    return sb.analyse.__wrapped__(body, url, *args)


@pytest.fixture
def sandbox(monkeypatch):
    real = sb.analyse
    _hostile_parse.__dict__["__wrapped__"] = real
    monkeypatch.setattr(sb, "analyse", _hostile_parse)   # the forked child inherits it
    box = ParseSandbox(timeout_s=1.0, memory_mb=512)
    yield box
    box.close()


def test_pages_parse_in_the_child(sandbox):
    result = sandbox.analyse(PAGE, "http://a.test/", {}, "main", 1000)
    assert result.parsed.title == "t" and [link.url for link in result.parsed.links] == ["http://a.test/x"]
    assert result.text is not None and "hello" in result.text.text
    child = sandbox._proc
    sandbox.analyse(PAGE, "http://a.test/", {}, "body", 1000)
    assert sandbox._proc is child   # one long-lived child, not one per page


def test_a_page_past_its_deadline_is_stopped_and_the_next_one_parses(sandbox):
    t0 = time.monotonic()
    with pytest.raises(ParseFailed, match="deadline"):
        sandbox.analyse(b"slow", "http://a.test/", {}, "body", 1000)
    assert time.monotonic() - t0 < 5
    assert sandbox.analyse(PAGE, "http://a.test/", {}, "body", 1000).parsed.title == "t"


def test_a_page_over_the_memory_cap_kills_only_its_child(sandbox):
    with pytest.raises(ParseFailed, match="died"):
        sandbox.analyse(b"greedy", "http://a.test/", {}, "body", 1000)
    assert sandbox.analyse(PAGE, "http://a.test/", {}, "body", 1000).parsed.title == "t"


def test_pages_are_parsed_as_they_are_and_a_bomb_gets_the_budget_after_a_short_deadline(monkeypatch):
    """No page pays the budget's tokenizer up front; a late one is redone within the budget."""
    from crawler_tasks.stages import parse as stage

    box = ParseSandbox(timeout_s=20.0, memory_mb=1024)
    counted: dict[str, int] = {}

    def count(c: dict[str, int]) -> None:
        for k, v in c.items():
            counted[k] = counted.get(k, 0) + v

    try:
        args = ({}, "main", 100_000, 0)
        dense = b"<html><body>" + b"".join(b"<p><a href='/%d'>link %d</a> text</p>" % (i, i)
                                            for i in range(5000)) + b"</body></html>"
        icon = b'<svg viewBox="0 0 24 24"><path d="M0 0' + b" L%d.5 %d" * 2000 % tuple(range(4000)) + b'"/></svg>'
        giant_tag = b"<html><body><p>A page with an icon.</p>" + icon + b"<a href='/next'>next</a></body></html>"
        # over a cap but cheap for lexbor: parsed as it is (the budget would cut its attributes)
        wide = (b"<div " + b" ".join(b"data-k%d=v" % i for i in range(100)) + b"><a href='/w'>w</a></div>"
                + b"<p>a big page with one wide element</p>" * 15_000)
        for page, links in ((dense, 5000), (giant_tag, 1), (wide, 1)):
            result = stage._sandboxed(box, page, "http://a.test/", args, count)
            assert result.parsed.limited is None and len(result.parsed.links) == links and not counted
        bomb = b"<div>" * 60_000 + b'<a href="/end">e</a>'   # 300 kB: lexbor alone takes minutes
        monkeypatch.setattr(stage, "UNBUDGETED_PARSE_S", 0.5)
        t0 = time.monotonic()
        result = stage._sandboxed(box, bomb, "http://a.test/", args, count)
        assert time.monotonic() - t0 < 10
        assert result.parsed.limited == "max_depth" and counted == {"parse/budget_retry": 1}
        assert [link.url for link in result.parsed.links] == ["http://a.test/end"]
    finally:
        box.close()


def test_bodies_and_answers_too_big_for_the_shared_region_go_through_the_socket(monkeypatch):
    monkeypatch.setattr(sb, "REGION_BYTES", 4096)   # the child is forked with it
    box = ParseSandbox(timeout_s=20.0, memory_mb=1024)
    try:
        big = b"<html><head><title>big</title></head><body>" + b"<p>words and more words</p>" * 2000 + b"</body></html>"
        small = box.analyse(PAGE, "http://a.test/", {}, "main", 100_000)   # in the region both ways
        large = box.analyse(big, "http://a.test/big", {}, "main", 100_000)  # 54 kB body, 46 kB of text
        again = box.analyse(PAGE, "http://a.test/", {}, "main", 100_000)
        assert small.parsed.title == again.parsed.title == "t" and "hello" in again.text.text
        assert large.parsed.title == "big" and large.text.text.count("words and more words") == 2000
    finally:
        box.close()
