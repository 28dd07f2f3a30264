"""MinHash sketches of 4-word shingles and LSH clustering (pure), for the offline
near-duplicate report (``manage.py dupes``).

Why these choices:

- **Shingles**: every run of k=4 consecutive words of the lower-cased text, digits
  folded to 0 (as in :mod:`.simhash`: dates and counters do not make pages
  different). Word order matters here, unlike the per-page simhash.
- **Hashes**: a word is its CRC-32; a shingle is Python's ``hash()`` of the tuple of
  its k word CRCs. Tuples of ints hash deterministically (only str/bytes hashing is
  randomized per process), and the whole step runs in C (``map``/``zip``), which is
  what makes 9,000-shingle pages cheap. The tuple hash is a CPython detail that
  may change between Python versions: compare sketches made by one interpreter,
  do not store them across upgrades.
- **One-permutation hashing** (Li, Owen, Zhang 2012) with optimal densification
  (Shrivastava 2017) instead of 200 hash functions: a shingle hash ``x`` falls into
  bin ``x % 200`` and each bin keeps its smallest hash; empty bins borrow the value
  of a non-empty bin picked by a fixed hash sequence, the same for every document.
  One pass instead of 200, and the fraction of equal bins still estimates the
  Jaccard similarity of the shingle sets (standard error ~ sqrt(J(1-J)/200)).
- **LSH banding**: bands of ``rows`` values; pages sharing one whole band become
  candidates, and only candidates get their estimate compared to the threshold.
  The default banding is the one with the most rows (fewest false candidates)
  that still makes a pair at the threshold a candidate with probability >= 99.5 %.
"""
from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import combinations
from operator import eq

NUM_PERM = 200
K = 4
_FOLD = bytes.maketrans(b"123456789", b"000000000")
_MIN_RECALL = 0.995


def _words(text: str) -> list[int]:
    words = text.lower().encode("utf-8", "surrogatepass").translate(_FOLD).split()
    return list(map(zlib.crc32, words))


def _shingle_hashes(ids: list[int], k: int) -> Iterator[int]:
    """Hash of every k-word window (repeats included); one shingle for short texts."""
    if len(ids) <= k:
        return iter((hash(tuple(ids)),))
    return map(hash, zip(*(ids[i:] for i in range(k)), strict=False))


def shingles(text: str, k: int = K) -> set[int]:
    """Hashed k-word shingles of a text (a text of at most k words is one shingle)."""
    ids = _words(text)
    return set(_shingle_hashes(ids, k)) if ids else set()


def _fill_empty(bins: list[int | None], num_perm: int) -> list[int]:
    """Optimal densification: empty bin i takes the value of the first non-empty bin
    in its own fixed pseudo-random probe sequence (the same for every document)."""
    out = list(bins)
    for i, v in enumerate(bins):
        if v is None:
            attempt = 1
            while True:
                j = hash((i, attempt, 0x5EED)) % num_perm
                if bins[j] is not None:
                    out[i] = bins[j]
                    break
                attempt += 1
    return out  # type: ignore[return-value]


def _bin_minima(values: Iterable[int], num_perm: int) -> list[int | None]:
    """Smallest value of each bin ``x % num_perm`` (a plain loop measured faster than
    sort-based C-level variants at these sizes)."""
    bins: list[int | None] = [None] * num_perm
    for x in values:
        b = x % num_perm
        v = bins[b]
        if v is None or x < v:
            bins[b] = x
    return bins


def _sketch(make: Callable[[], Iterable[int]], n: int, num_perm: int) -> list[int]:
    """OPH sketch of the values ``make()`` yields (about n of them, repeats allowed)."""
    if n <= 0:
        return []
    if n > 12 * num_perm:
        # bin minima are almost surely among the smallest values: keep those first
        # (P(some bin loses its minimum) ~ num_perm * e^-12), else look at everything
        cut = -(1 << 63) + (1 << 64) * 12 * num_perm // n
        bins = _bin_minima(filter(cut.__gt__, make()), num_perm)
        if None in bins:
            bins = _bin_minima(make(), num_perm)
    else:
        bins = _bin_minima(make(), num_perm)
    if None in bins:
        return _fill_empty(bins, num_perm)
    return bins  # type: ignore[return-value]


def sketch_shingles(hashes: set[int], num_perm: int = NUM_PERM) -> list[int]:
    """One-permutation MinHash of a set of shingle hashes; [] for an empty set."""
    return _sketch(lambda: hashes, len(hashes), num_perm)


def sketch(text: str, k: int = K, num_perm: int = NUM_PERM) -> list[int]:
    """MinHash sketch (``num_perm`` values) of the text's k-word shingles; [] if no words.
    Equal to ``sketch_shingles(shingles(text, k))``, without building the set."""
    ids = _words(text)
    if not ids:
        return []
    return _sketch(lambda: _shingle_hashes(ids, k), max(1, len(ids) - k + 1), num_perm)


def jaccard(a: set[int], b: set[int]) -> float:
    """Exact Jaccard similarity of two shingle sets (tests, small inputs)."""
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def jaccard_estimate(a: Sequence[int], b: Sequence[int]) -> float:
    """Fraction of equal sketch values; 0.0 if either text had no words."""
    if not a or not b or len(a) != len(b):
        return 0.0
    equal: int = sum(map(eq, a, b))
    return equal / len(a)


def lsh_params(threshold: float, num_perm: int = NUM_PERM) -> tuple[int, int]:
    """(bands, rows) for a threshold: the most rows per band (fewest false candidates)
    such that a pair at the threshold is a candidate with probability >= 99.5 %."""
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if 1 - (1 - threshold ** rows) ** bands >= _MIN_RECALL:
            best = (bands, rows)
    return best


def _buckets(sketches: Mapping[str, Sequence[int]], bands: int, rows: int) -> Iterator[list[str]]:
    """Groups of two or more keys sharing one whole band."""
    for band in range(bands):
        lo, hi = band * rows, (band + 1) * rows
        table: dict[tuple[int, ...], list[str]] = {}
        for key, sk in sketches.items():
            if len(sk) >= hi:
                table.setdefault(tuple(sk[lo:hi]), []).append(key)
        for members in table.values():
            if len(members) > 1:
                yield members


def candidate_pairs(sketches: Mapping[str, Sequence[int]], bands: int = 20,
                    rows: int = 10) -> set[tuple[str, str]]:
    """Pairs (a < b) of keys whose sketches agree on at least one whole band.

    Materializes every pair: for tests and small inputs; :func:`clusters` does the
    same work without building the set."""
    pairs: set[tuple[str, str]] = set()
    for members in _buckets(sketches, bands, rows):
        for a, b in combinations(sorted(members), 2):
            pairs.add((a, b))
    return pairs


def clusters(sketches: Mapping[str, Sequence[int]], threshold: float = 0.9,
             bands: int | None = None, rows: int | None = None) -> list[list[str]]:
    """Groups of near-duplicate keys: connected components of the pairs whose estimated
    Jaccard is >= threshold (only LSH candidates are compared). Keys with an empty
    sketch are ignored; only groups of two or more are returned, largest first, each
    sorted."""
    if bands is None or rows is None:
        bands, rows = lsh_params(threshold, NUM_PERM)
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    # identical sketches join at once; one representative of each goes through LSH
    reps: dict[tuple[int, ...], str] = {}
    for key, sk in sketches.items():
        if not sk:
            continue
        parent[key] = key
        rep = reps.setdefault(tuple(sk), key)
        if rep != key:
            union(rep, key)
    rep_sketches = {key: sk for sk, key in reps.items()}
    for members in _buckets(rep_sketches, bands, rows):
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if find(a) != find(b) and jaccard_estimate(rep_sketches[a], rep_sketches[b]) >= threshold:
                    union(a, b)
    groups: dict[str, list[str]] = {}
    for key in parent:
        groups.setdefault(find(key), []).append(key)
    out = [sorted(g) for g in groups.values() if len(g) > 1]
    out.sort(key=lambda g: (-len(g), g[0]))
    return out
