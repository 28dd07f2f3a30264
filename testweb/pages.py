"""Page generation: a seeded corpus, the link graph, and page bodies of exact size.

Everything follows from the seed, so a test can predict the web it talks to.
Bodies are cut from one pre-built paragraph stream per seed: padding a 60 KB
page costs a few C-level slices instead of hundreds of Python steps, while two
pages still share little text.

Host ``h`` has nodes ``0..pages[h]``: node 0 is the home page ``/``, node
``k >= 1`` is ``/p/<k-1>.html``.  Hosts ``len(pages)`` and up are dead (names
that never serve): cross-host links may point at them, and they have no nodes.
"""

from __future__ import annotations

import html
import math
import random
import re
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

_SYLLABLES = (
    "ka", "lo", "mi", "ra", "to", "ne", "su", "vi", "an", "el", "or", "is", "ul", "en", "ta",
    "po", "de", "ri", "ba", "mo", "ce", "fu", "gi", "ho", "ja", "ki", "lu", "ma", "no", "pe",
    "qua", "sa", "ti", "va", "we", "xe", "yo", "zu", "ar", "on", "in", "et", "um", "ex", "al",
    "bro", "cla", "dri", "fen", "gor", "hal", "ist", "jun", "kel", "lim", "mar", "nor", "pla",
    "ros", "sen", "tur", "ven", "wil",
)
_COMMON = ("the", "of", "and", "a", "to", "in", "is", "it", "that", "for", "on", "with", "as",
           "was", "by", "at", "from", "this", "be", "or")
_ACCENTED = ("café", "naïve", "Zürich", "façade", "jalapeño", "smörgåsbord", "über", "crème")
_STREAM_SENTENCES = 16_000  # about 1 MB of padding text per seed
_MIN_SLICE, _MAX_SLICE = 2048, 12_288  # bytes copied from the stream per slice

# How a link is spelled in the HTML (targets on other hosts are always absolute).
_ABS, _ROOT, _REL, _DOTREL, _FRAG = range(5)
# 20 slots: 25% absolute, 30% root-relative, 25% relative, 10% ./ or ../, 10% with #fragment
_STYLES = (_ABS,) * 5 + (_ROOT,) * 6 + (_REL,) * 5 + (_DOTREL,) * 2 + (_FRAG,) * 2

PRIVATE_PATH = "/private/x.html"  # linked from some pages, forbidden by the default robots.txt
PRIVATE_BODY = (
    b'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Private</title></head>'
    b'<body><h1>Private area</h1><p>Robots were asked not to come here.</p>'
    b'<p><a href="/">home</a></p></body></html>\n'
)
HREF_RE = re.compile(rb"""href\s*=\s*["']([^"']*)["']""", re.IGNORECASE)

Link = tuple[int, int, int]  # (target host, target node, spelling style); a dead target has no such node


def node_path(k: int) -> str:
    """Node 0 is the home page; node k >= 1 is /p/<k-1>.html."""
    return "/" if k == 0 else f"/p/{k - 1}.html"


def path_node(path: str, n_pages: int) -> int | None:
    """Inverse of node_path; only the canonical spelling maps to a page."""
    if path == "/":
        return 0
    if path.startswith("/p/") and path.endswith(".html"):
        num = path[3:-5]
        if num.isdigit() and num.isascii() and (num == "0" or num[0] != "0"):
            n = int(num)
            if n < n_pages:
                return n + 1
    return None


def links_private(k: int) -> bool:
    """Homes and pages 4, 14, 24, ... link PRIVATE_PATH, so robots obedience shows in the log."""
    return k == 0 or k % 10 == 5


@dataclass(frozen=True, slots=True)
class _Corpus:
    """Words and a long paragraph stream shared by all pages of one seed."""

    bag: tuple[str, ...]  # words repeated roughly by Zipf frequency
    phrases: tuple[str, ...]  # short anchor texts
    text: bytes  # ASCII b"<p>...</p>\n" paragraphs back to back
    offs: tuple[int, ...]  # start offset of each paragraph, then len(text)
    n_start: int  # slices start before this paragraph so they never run off the end


@lru_cache(maxsize=4)
def _corpus(seed: int) -> _Corpus:
    """Build the corpus once per seed (tens of ms), reused by every web with that seed."""
    rng = random.Random(f"testweb-corpus:{seed}")
    words: list[str] = list(_COMMON)
    seen = set(words)
    while len(words) < 3000:
        w = "".join(rng.choices(_SYLLABLES, k=rng.choice((1, 2, 2, 3, 3, 4))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    bag: list[str] = []
    for rank, w in enumerate(words):
        bag.extend([w] * max(1, 300 // (rank + 1)))
    sentences = [
        " ".join(rng.choices(bag, k=rng.randint(5, 16))).capitalize() + "."
        for _ in range(_STREAM_SENTENCES // 3)
    ]
    picks = rng.choices(sentences, k=_STREAM_SENTENCES)
    paras: list[str] = []
    i = 0
    while i < len(picks):
        m = rng.randint(3, 8)
        paras.append("<p>" + " ".join(picks[i : i + m]) + "</p>\n")
        i += m
    offs = [0]
    for para in paras:
        offs.append(offs[-1] + len(para))
    phrases = tuple(" ".join(rng.choices(bag, k=rng.randint(1, 3))) for _ in range(1024))
    room = _MAX_SLICE + 2 * max(len(para) for para in paras)
    return _Corpus(tuple(bag), phrases, "".join(paras).encode("ascii"), tuple(offs),
                   bisect_right(offs, offs[-1] - room) - 1)


class Pages:
    """Sizes, links and bodies of every generated page, fixed at construction by the seed."""

    def __init__(self, seed: int, pages: list[int], *, mean_bytes: int, sigma: float,
                 max_bytes: int, links_per_page: int, cross_host_ratio: float,
                 dead_hosts: int = 0, dead_link_share: float = 0.0) -> None:
        self.seed = seed
        self.pages = pages  # generated pages of each host (its nodes are these plus the home)
        self._corpus = _corpus(seed)
        self.sizes: list[list[int]] = []  # [host][node] -> body bytes
        self.links: list[list[list[Link]]] = []  # [host][node] -> links, in page order
        self._build(mean_bytes, sigma, max_bytes, max(0, links_per_page), cross_host_ratio,
                    dead_hosts, dead_link_share)

    def _build(self, mean: int, sigma: float, cap: int, per_page: int, cross: float,
               n_dead: int, dead_share: float) -> None:
        """A tree (fan-out per_page // 2) makes every page of a host reachable from its home,
        and each home links the next host's home, so all is reachable from host 0's home.
        A share ``dead_share`` of cross-host links goes to the dead hosts (when it is not
        0, every cross-host link of a one-host web does), to a path the linking host would
        have; with no share the graph is the one of a web without dead hosts."""
        n_dead = n_dead if dead_share > 0 else 0
        mu = math.log(max(1, mean)) - sigma * sigma / 2.0  # so E[size] == mean
        fan = max(1, per_page // 2)
        n_hosts = len(self.pages)
        styles = _STYLES
        for h in range(n_hosts):
            rng = random.Random(f"testweb-graph:{self.seed}:{h}")
            rnd = rng.random
            n_nodes = self.pages[h] + 1
            self.sizes.append([min(cap, int(rng.lognormvariate(mu, sigma))) for _ in range(n_nodes)])
            host_links: list[list[Link]] = []
            for k in range(n_nodes):
                lk: list[Link] = [
                    (h, c, styles[int(rnd() * 20)])
                    for c in range(k * fan + 1, min(k * fan + fan, n_nodes - 1) + 1)
                ]
                if k == 0 and h + 1 < n_hosts:
                    lk.append((h + 1, 0, _ABS))
                while len(lk) < per_page:
                    if (n_hosts > 1 or n_dead) and rnd() < cross:
                        if n_dead and (n_hosts == 1 or rnd() < dead_share):
                            lk.append((n_hosts + int(rnd() * n_dead), int(rnd() * n_nodes), _ABS))
                            continue
                        th = int(rnd() * (n_hosts - 1))
                        th += th >= h
                        lk.append((th, int(rnd() * (self.pages[th] + 1)), _ABS))
                    elif n_nodes > 1:
                        tk = int(rnd() * (n_nodes - 1))
                        tk += tk >= k
                        lk.append((h, tk, styles[int(rnd() * 20)]))
                    else:
                        break
                rng.shuffle(lk)
                host_links.append(lk)
            self.links.append(host_links)

    def render(self, h: int, k: int, hosts: Sequence[str], extras: list[str],
               schemes: Sequence[str] | None = None) -> bytes:
        """Body of page (h, k): exact target size, text unique to the page.

        ``hosts`` ("host:port", dead hosts too) and ``schemes`` (None: all http) spell
        absolute links; the home page also links every path in ``extras``.
        """
        c = self._corpus
        rng = random.Random((self.seed * 1_000_003 + h) * 1_000_003 + k)
        rnd = rng.random
        words = " ".join(rng.choices(c.bag, k=rng.randint(3, 6))).title()
        title = f"{words} - {'home' if k == 0 else f'page {k - 1}'} of site {h}"
        accent = _ACCENTED[int(rnd() * len(_ACCENTED))]
        phrases = c.phrases
        n_phrases = len(phrases)
        items = [
            f'<li><a href="{_href(h, k, th, tk, st, hosts, schemes)}">'
            f"{phrases[int(rnd() * n_phrases)]}</a></li>\n"
            for th, tk, st in self.links[h][k]
        ]
        if links_private(k):
            items.append(f'<li><a href="{PRIVATE_PATH}">members only</a></li>\n')
        if k == 0:
            items.extend(
                f'<li><a href="{html.escape(r)}">extra {html.escape(r)}</a></li>\n' for r in extras
            )
        head = (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f"<title>{title}</title>\n</head>\n<body>\n<h1>{title}</h1>\n"
            f"<p>About {words.lower()}, {accent}.</p>\n<ul class=\"links\">\n{''.join(items)}</ul>\n"
        ).encode()
        tail = b"</body>\n</html>\n"
        parts = [head]
        parts.extend(self._padding(rnd, self.sizes[h][k] - len(head) - len(tail)))
        parts.append(tail)
        return b"".join(parts)

    def _padding(self, rnd: Callable[[], float], nbytes: int) -> list[bytes]:
        """Exactly ``nbytes`` of paragraphs: random slices of the corpus stream."""
        c = self._corpus
        text, offs = c.text, c.offs
        n_start = c.n_start
        out: list[bytes] = []
        while nbytes > 0:
            seg = min(nbytes, _MIN_SLICE + int(rnd() * (_MAX_SLICE - _MIN_SLICE)))
            i = int(rnd() * n_start)
            start = offs[i]
            j = bisect_right(offs, start + seg) - 1
            if j > i:
                out.append(text[start : offs[j]])
            if seg == nbytes:  # last slice: cut paragraph j's text to land exactly
                r = start + seg - offs[j]
                if r >= 9:
                    out.append(b"<p>" + text[offs[j] + 3 : offs[j] + r - 5] + b"</p>\n")
                elif r:
                    out.append(b"\n" * r)
                nbytes = 0
            else:
                nbytes -= offs[j] - start
        return out


def _href(h: int, k: int, th: int, tk: int, style: int, hosts: Sequence[str],
          schemes: Sequence[str] | None) -> str:
    """The link from node k of host h to node tk of host th, in the given spelling."""
    path = node_path(tk)
    if th != h or style == _ABS:
        return f"{schemes[th] if schemes else 'http'}://{hosts[th]}{path}"
    if style == _ROOT:
        return path
    if style == _FRAG:
        return f"{path}#s{tk % 7}"
    if style == _REL:
        if k == 0:
            return path[1:] or "./"
        return path[3:] if tk else "../"
    return ("." if k == 0 else "..") + path
