"""The page analysis made cheaper gives the same answer: ``parse.page.analyse`` (links,
main text, metadata, language, fingerprint, simhash) and ``trim_boilerplate`` are run by
this tree and by the code of ``REFERENCE`` (the last commit before the speed-up, read
with ``git archive`` and run in a child process) on the real-page corpus
(tests/realpages.py: Debian documentation, about 80 pages a package), on pages of the
bench's synthetic web (testweb, 60 kB each) and on generated texts whose lines sit at
every threshold of the boilerplate rules. Every field must be equal.

A change that means to alter the output moves ``REFERENCE`` to the commit that makes it.
"""
from __future__ import annotations

import dataclasses
import io
import pickle
import random
import subprocess
import sys
import tarfile
from collections.abc import Callable
from typing import Any

import pytest

from crawler_tasks.parse.boilerplate import trim_boilerplate
from crawler_tasks.parse.page import analyse
from crawler_tasks.settings import Settings
from tests.realpages import PARTS, REPO, corpus
from testweb.pages import Pages

REFERENCE = "b7882b8"
PAGES_PER_PART = 80

_CHILD = """
import dataclasses, pickle, sys
from crawler_tasks.parse.boilerplate import trim_boilerplate
from crawler_tasks.parse.page import analyse
out = []
for kind, args in pickle.load(sys.stdin.buffer):
    out.append(dataclasses.asdict(analyse(*args)) if kind == "analyse" else trim_boilerplate(*args))
pickle.dump(out, sys.stdout.buffer)
"""

Job = tuple[str, tuple[Any, ...]]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Callable[[list[Job]], list[Any]]:
    """Runs jobs with the reference commit's code, in a child process."""
    root = tmp_path_factory.mktemp("reference")
    try:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", REFERENCE, "crawler_tasks"],
                                 capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"the reference commit {REFERENCE} cannot be read from git here: {exc}")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(root, filter="data")

    def run(jobs: list[Job]) -> list[Any]:
        done = subprocess.run([sys.executable, "-c", _CHILD], input=pickle.dumps(jobs), capture_output=True,
                              cwd=root, env={"PYTHONPATH": str(root)}, check=False, timeout=600)
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
        result: list[Any] = pickle.loads(done.stdout)
        return result

    return run


def _args(mode: str) -> tuple[Any, ...]:
    s = Settings()
    options = {"content_type": "text/html", "headers": {"content-type": "text/html"}, "agent": "bench",
               "max_text_chars": s.MAX_TEXT_CHARS, "drop_params": None, "max_elements": s.PARSE_MAX_ELEMENTS,
               "max_depth": s.PARSE_MAX_DEPTH, "max_attrs": s.PARSE_MAX_ATTRS}
    return options, mode, s.MAX_TEXT_CHARS, s.SIMHASH_MAX_CHARS


def _assert_same(reference: Callable[[list[Job]], list[Any]], pages: list[tuple[str, bytes]],
                 modes: tuple[str, ...]) -> None:
    jobs: list[Job] = [("analyse", (body, url, *_args(mode))) for url, body in pages for mode in modes]
    expected = reference(jobs)
    assert len(expected) == len(jobs)
    for (_, args), want in zip(jobs, expected, strict=True):
        got = dataclasses.asdict(analyse(*args))
        differing = [key for key in want if got.get(key) != want[key]]
        assert not differing, f"{args[1]} ({args[3]}): {differing} differ from {REFERENCE}"


@pytest.mark.parametrize("part", PARTS)
def test_real_pages_analyse_as_before(part: str, reference: Callable[[list[Job]], list[Any]]) -> None:
    paths = corpus(part)
    step = max(1, len(paths) // PAGES_PER_PART)
    pages = [(f"https://docs.example.org/{path.name}", path.read_bytes()) for path in paths[::step]]
    _assert_same(reference, pages, ("main",))
    _assert_same(reference, pages[::8], ("full", "body"))


def test_bench_pages_analyse_as_before(reference: Callable[[list[Job]], list[Any]]) -> None:
    # the web of bench/vs_scrapy.py's loopback run: testweb pages of 60 kB on average
    web = Pages(0, [50] * 4, mean_bytes=60_000, sigma=0.6, max_bytes=400_000, links_per_page=8,
                cross_host_ratio=0.2)
    hosts = [f"127.0.0.{2 + h}:8000" for h in range(4)]
    pages = [(f"http://{hosts[h]}/p/{k}", web.render(h, k, hosts, [])) for h in range(4) for k in range(0, 50, 5)]
    _assert_same(reference, pages, ("main", "full"))


_PROSE = ("The council voted on the plan for the new library and it will open in the spring, "
          "which is what many of the people who live there had asked for over the years.")
_LIST = "Alpha Beta Gamma Delta Epsilon Zeta Eta Theta Iota Kappa Lambda Omicron Sigma Tau Upsilon Omega"
_LINKS = ["Home", "About us", "Read more", "Next page", "Contact the editors", "Older posts"]


def _line(rng: random.Random) -> str:
    """A line near some threshold of the rules: length 70 / 150, stop-word share 0.12 / 0.20,
    link share 0.4, comment markers and signatures, odd whitespace, non-ASCII letters."""
    pick = rng.random()
    if pick < 0.12:
        return ""
    if pick < 0.22:
        return rng.choice(_LINKS) + rng.choice(["", " now", " - news and more from the town", " »"])
    if pick < 0.27:
        return rng.choice(["12 Comments", "Leave a reply", "Comments are closed.", "Posted by: Ann",
                           "Bob says:", "3 responses to “Plans”", "Add a comment"])
    words = (_PROSE if rng.random() < 0.6 else _LIST).split()
    n = rng.choice([3, 8, 11, 12, 13, 18, 25, 26, 27, 30, 40])
    start = rng.randrange(len(words))
    line = " ".join((words * 8)[start: start + n])
    if rng.random() < 0.1:
        line = line.replace(" ", rng.choice(["  ", "\t", "\xa0", " \u2003"]), 1)
    if rng.random() < 0.1:
        line = rng.choice([" ", "Zürich ", "ΣΑΣ "]) + line + rng.choice(["", " ", " naïve"])
    return line


def test_generated_texts_trim_as_before(reference: Callable[[list[Job]], list[Any]]) -> None:
    rng = random.Random(25)
    jobs: list[Job] = []
    for _ in range(3000):
        text = "\n".join(_line(rng) for _ in range(rng.randint(0, 40)))
        links = frozenset(rng.sample(_LINKS, rng.randint(0, len(_LINKS))))
        jobs.append(("trim", (text, links)))
    expected = reference(jobs)
    cut = sum(want != args[0] for (_, args), want in zip(jobs, expected, strict=True))
    assert cut > 1000  # the texts exercise the rules: most are cut somewhere
    for (_, args), want in zip(jobs, expected, strict=True):
        assert trim_boilerplate(*args) == want, args
