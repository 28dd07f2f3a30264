"""MinHash sketches, LSH clustering and the ``manage.py dupes`` report."""
from __future__ import annotations

import gzip
import itertools
import os
import random
import subprocess
import sys
import time
import zlib

from crawler_tasks.dedup.minhash import (
    NUM_PERM,
    candidate_pairs,
    clusters,
    jaccard,
    jaccard_estimate,
    lsh_params,
    shingles,
    sketch,
    sketch_shingles,
)
from crawler_tasks.fetch.http import FetchResult
from crawler_tasks.ops import dupes
from crawler_tasks.output.jsonl import append_jsonl
from crawler_tasks.output.warc import WarcStore

_SYLLABLES = ["ka", "to", "ri", "men", "sa", "lo", "ver", "ing", "pa", "de", "un", "tion",
              "al", "er", "qu", "es", "mor", "bi", "ne", "st", "th", "ou", "ly", "ch"]


def _vocabulary(size: int = 20_000) -> list[str]:
    rng = random.Random(0)
    words: list[str] = ["the", "of", "and", "to", "a", "in", "is", "it"]
    seen = set(words)
    while len(words) < size:
        w = "".join(rng.choices(_SYLLABLES, k=rng.randint(1, 4)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


VOCAB = _vocabulary()
CUM = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(VOCAB))))


def words(rng: random.Random, n: int) -> list[str]:
    return rng.choices(VOCAB, cum_weights=CUM, k=n)


def edit(rng: random.Random, w: list[str], n: int) -> list[str]:
    out = list(w)
    for _ in range(n):
        out[rng.randrange(len(out))] = rng.choice(VOCAB)
    return out


# ------------------------------------------------------------------------- shingles
def test_shingles():
    assert shingles("") == set()
    assert len(shingles("a b c")) == 1                       # shorter than k: one shingle
    assert len(shingles("a b c d e f")) == 3
    assert shingles("A b  C d") == shingles("a b c d")        # case and spacing do not count
    assert shingles("born 1999 in x") == shingles("born 2024 in x")  # nor digits
    assert len(shingles("a b c d a b c d")) == 4                # 5 windows, one repeated


def test_sketch_shape_and_determinism():
    rng = random.Random(1)
    text = " ".join(words(rng, 3000))
    sk = sketch(text)
    assert len(sk) == NUM_PERM
    assert sk == sketch(text) == sketch_shingles(shingles(text))
    assert sketch("") == [] and jaccard_estimate([], sk) == 0.0
    assert len(sketch("tiny text")) == NUM_PERM              # densified: every bin filled
    assert jaccard_estimate(sk, sk) == 1.0


def test_sketch_is_the_same_in_another_process():
    """Tuple hashes of ints are not randomized: sketches agree between processes."""
    code = ("from crawler_tasks.dedup.minhash import sketch; "
            "print(sum(sketch(' '.join(str(i % 97) + 'w' + str(i % 13) for i in range(2000)))))")
    env = dict(os.environ, PYTHONHASHSEED="12345")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                           cwd=os.path.dirname(os.path.dirname(__file__)), check=True).stdout
    here = sum(sketch(" ".join(str(i % 97) + "w" + str(i % 13) for i in range(2000))))
    assert int(other) == here


def test_estimate_within_0_1_of_exact_jaccard():
    rng = random.Random(2)
    errors = []
    for _ in range(120):
        a = words(rng, rng.randint(50, 3000))
        b = edit(rng, a, rng.randint(0, len(a) // 4))
        if rng.random() < 0.3:
            b = b[rng.randrange(len(b) // 2):]               # containment, not only edits
        sa, sb = shingles(" ".join(a)), shingles(" ".join(b))
        errors.append(jaccard_estimate(sketch_shingles(sa), sketch_shingles(sb)) - jaccard(sa, sb))
    assert max(map(abs, errors)) <= 0.1
    assert abs(sum(errors) / len(errors)) < 0.02             # unbiased


# ------------------------------------------------------------------------------ LSH
def test_lsh_params():
    bands, rows = lsh_params(0.9)
    assert bands * rows <= NUM_PERM
    assert 1 - (1 - 0.9 ** rows) ** bands >= 0.995
    assert 1 - (1 - 0.5 ** rows) ** bands < 0.01              # few false candidates at 0.5


def _corpus(rng: random.Random) -> tuple[dict[str, list[int]], list[set[str]]]:
    sketches: dict[str, list[int]] = {}
    groups = []
    for g in range(12):
        base = words(rng, rng.randint(400, 2000))
        members = {f"g{g}/0"}
        sketches[f"g{g}/0"] = sketch(" ".join(base))
        for m in range(1, rng.randint(2, 5)):
            sketches[f"g{g}/{m}"] = sketch(" ".join(edit(rng, base, 2)))
            members.add(f"g{g}/{m}")
        groups.append(members)
    for u in range(40):
        sketches[f"single/{u}"] = sketch(" ".join(words(rng, rng.randint(100, 2000))))
    sketches["copy/a"] = sketches["copy/b"] = sketch(" ".join(words(rng, 500)))
    groups.append({"copy/a", "copy/b"})
    sketches["empty"] = []
    return sketches, groups


def test_near_duplicates_cluster_and_unrelated_do_not():
    sketches, groups = _corpus(random.Random(3))
    found = clusters(sketches, 0.9)
    assert sorted(map(set, found), key=sorted) == sorted(groups, key=sorted)
    assert [len(c) for c in found] == sorted((len(c) for c in found), reverse=True)
    assert all(c == sorted(c) for c in found)


def test_candidate_pairs_contain_the_near_duplicates():
    sketches, groups = _corpus(random.Random(4))
    pairs = candidate_pairs(sketches, bands=20, rows=10)
    for group in groups:
        for a, b in itertools.combinations(sorted(group), 2):
            assert (a, b) in pairs
    assert len(pairs) < 3 * sum(len(g) * (len(g) - 1) // 2 for g in groups)


def test_lower_threshold_merges_looser_copies():
    rng = random.Random(5)
    base = words(rng, 1000)
    loose = edit(rng, base, 60)                                # ~0.6 Jaccard of 4-shingles
    sk = {"a": sketch(" ".join(base)), "b": sketch(" ".join(loose))}
    assert clusters(sk, 0.9) == []
    assert clusters(sk, 0.5) == [["a", "b"]]


# --------------------------------------------------------------------- dupes report
def _html(title: str, text: str) -> bytes:
    return f"<html><head><title>{title}</title></head><body><p>{text}</p></body></html>".encode()


def test_dupes_report_from_warc(tmp_path, capsys):
    rng = random.Random(6)
    article = words(rng, 1500)
    other = words(rng, 800)
    pages: dict[str, tuple[int, str, bytes, str | None]] = {}
    for i in range(3):   # the same article with a different counter line and one edited word
        text = " ".join(edit(rng, article, 1)) + f" posted {rng.randint(1, 50)} minutes ago"
        pages[f"http://a.test/story?v={i}"] = (200, "text/html; charset=utf-8", _html("s", text), None)
    pages["http://b.test/x"] = (200, "text/html", _html("x", " ".join(other)), None)
    pages["http://c.test/x"] = (200, "text/html", gzip.compress(_html("x", " ".join(other))), "gzip")
    deflated = zlib.compress(_html("y", " ".join(words(rng, 900))))
    pages["http://d.test/"] = (200, "text/html", deflated, "deflate")
    for i in range(2):
        pages[f"http://e.test/{i}"] = (200, "text/html", _html("z", " ".join(words(rng, 700))), None)
    pages["http://f.test/missing"] = (404, "text/html", _html("nf", " ".join(other)), None)
    pages["http://g.test/plain"] = (200, "text/plain", " ".join(other).encode(), None)

    store = WarcStore(tmp_path, max_bytes=10**9)
    records = []
    for url, (status, ctype, body, coding) in pages.items():
        headers = [("Content-Type", ctype)] + ([("Content-Encoding", coding)] if coding else [])
        store.write_exchange(FetchResult(url=url, started=time.time(), ended=time.time(), status=status,
                                         reason="OK", headers=headers, body=body))
        records.append({"url": url, "final_url": url, "status": status, "content_type": ctype})
    records.append({"url": "http://h.test/sitemap.xml", "status": 200, "kind": "sitemap"})
    store.close()
    append_jsonl(tmp_path / "pages.jsonl", records)

    assert dupes.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out == ("http://a.test/story?v=0\nhttp://a.test/story?v=1\nhttp://a.test/story?v=2\n\n"
                   "http://b.test/x\nhttp://c.test/x\n\n"
                   "2 clusters, 5 pages in clusters of 8 pages\n")

    texts = dupes.warc_texts(tmp_path)
    assert set(texts) == set(pages) - {"http://f.test/missing", "http://g.test/plain"}
    assert texts["http://b.test/x"] == texts["http://c.test/x"]   # gzip undone
    assert dupes.report(records, texts, threshold=0.9) == [
        [f"http://a.test/story?v={i}" for i in range(3)], ["http://b.test/x", "http://c.test/x"]]


def test_dupes_report_without_output(tmp_path, capsys):
    assert dupes.main(["--out", str(tmp_path / "nothing")]) == 2
    rec = [{"url": "u1", "status": 200, "text": "one two three four five"},
           {"url": "u2", "status": 200, "text": "one two three four five"},
           {"url": "u3", "status": 500, "text": "one two three four five"}]
    assert dupes.report(rec, None) == [["u1", "u2"]]


def test_dupes_counts_a_byte_identical_page_stored_as_a_revisit(tmp_path, capsys):
    """The second capture of an identical payload is a WARC revisit record with no body:
    `dupes` saw one page where `report` (from duplicate_of) showed a cluster of two."""
    from crawler_tasks.ops.report import summarize

    body = _html("same", " ".join(words(random.Random(8), 600)))
    store = WarcStore(tmp_path, max_bytes=10**9)
    records = []
    for url, earlier in (("http://a.test/1", None), ("http://a.test/2", ("http://a.test/1", "2026-01-01T00:00:00Z"))):
        store.write_exchange(FetchResult(url=url, started=time.time(), ended=time.time(), status=200, reason="OK",
                                         headers=[("Content-Type", "text/html")], body=body), earlier)
        records.append({"url": url, "final_url": url, "status": 200, "content_type": "text/html",
                        **({"duplicate_of": earlier[0]} if earlier else {})})
    store.close()
    append_jsonl(tmp_path / "pages.jsonl", records)
    assert dupes.main(["--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out.endswith("1 clusters, 2 pages in clusters of 2 pages\n")
    assert len(summarize(records).clusters) == 1   # what report shows: they agree
