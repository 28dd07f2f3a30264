"""The per-page hard budget: a real child process, killed past its deadline or its memory cap."""
from __future__ import annotations

import time

import pytest

from crawler_tasks.parse import sandbox as sb
from crawler_tasks.parse.sandbox import ParseFailed, ParseSandbox

PAGE = b"<html><head><title>t</title></head><body><a href='/x'>x</a> hello</body></html>"


def _hostile_parse(body, url, **kwargs):
    if body == b"slow":
        time.sleep(30)
    if body == b"greedy":
        hog = [bytearray(2**20) for _ in range(10_000)]   # 10 GB: over any cap
        return hog
    return sb.parse_html.__wrapped__(body, url, **kwargs)


@pytest.fixture
def sandbox(monkeypatch):
    real = sb.parse_html
    _hostile_parse.__dict__["__wrapped__"] = real
    monkeypatch.setattr(sb, "parse_html", _hostile_parse)   # the forked child inherits it
    box = ParseSandbox(timeout_s=1.0, memory_mb=512)
    yield box
    box.close()


def test_pages_parse_in_the_child(sandbox):
    page = sandbox.parse(PAGE, "http://a.test/", max_text_chars=1000)
    assert page.title == "t" and [link.url for link in page.links] == ["http://a.test/x"]
    child = sandbox._proc
    sandbox.parse(PAGE, "http://a.test/")
    assert sandbox._proc is child   # one long-lived child, not one per page


def test_a_page_past_its_deadline_is_stopped_and_the_next_one_parses(sandbox):
    t0 = time.monotonic()
    with pytest.raises(ParseFailed, match="deadline"):
        sandbox.parse(b"slow", "http://a.test/")
    assert time.monotonic() - t0 < 5
    assert sandbox.parse(PAGE, "http://a.test/").title == "t"


def test_a_page_over_the_memory_cap_kills_only_its_child(sandbox):
    with pytest.raises(ParseFailed, match="died"):
        sandbox.parse(b"greedy", "http://a.test/")
    assert sandbox.parse(PAGE, "http://a.test/").title == "t"
