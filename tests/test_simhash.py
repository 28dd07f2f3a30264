"""Simhash properties: identical -> equal, small edits -> within 3 bits, unrelated -> far."""
from __future__ import annotations

import itertools
import random
import zlib

import pytest

from crawler_tasks.dedup.simhash import (
    _CHECK_MIX,
    _LINKS_MIX,
    BITS,
    FRAGILE_BITS,
    LANE,
    NearPrint,
    feature_hashes,
    from_hex,
    hamming,
    keys_of,
    link_page_text,
    page_print,
    page_simhash,
    pair_keys,
    simhash64,
    simhash64_of_words,
    simhash64_with_count,
    title_mark,
    title_name,
    to_hex,
    words_of,
)

_SYLLABLES = ["ka", "to", "ri", "men", "sa", "lo", "ver", "ing", "pa", "de", "un", "tion",
              "al", "er", "qu", "es", "mor", "bi", "ne", "st", "th", "ou", "ly", "ch"]
_COMMON = ["the", "of", "and", "to", "a", "in", "is", "it", "for", "on", "with", "as", "was", "at"]


def _vocabulary(seed: int = 0, size: int = 20_000) -> tuple[list[str], list[float]]:
    rng = random.Random(seed)
    words = list(_COMMON)
    seen = set(words)
    while len(words) < size:
        w = "".join(rng.choices(_SYLLABLES, k=rng.randint(1, 4)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words, list(itertools.accumulate(1 / (rank + 1) for rank in range(size)))


VOCAB, CUM = _vocabulary()


def words(rng: random.Random, n: int) -> list[str]:
    """Zipf-distributed words, like natural text."""
    return rng.choices(VOCAB, cum_weights=CUM, k=n)


def test_identical_texts_identical_hash():
    rng = random.Random(1)
    text = " ".join(words(rng, 2000))
    assert simhash64(text) == simhash64(text)
    assert simhash64(text) == simhash64("  " + text.upper().replace(" ", "\n  "))
    assert 0 <= simhash64(text) < 1 << 64


def test_empty_and_tiny_texts():
    assert simhash64("") == 0
    assert simhash64("   \n ") == 0
    assert simhash64("word") != 0 or simhash64("other") != 0
    assert simhash64_with_count("b a b 12 34") == (simhash64("B A b 56 78"), 4)   # pairs: ba ab b0 00
    assert simhash64_with_count("word")[1] == 1
    assert simhash64_with_count("") == (0, 0)


def test_value_is_stable_across_runs():
    """Fingerprints are stored in Redis and compared between processes and machines:
    a change of this value is a format change."""
    assert to_hex(simhash64("The quick brown fox jumps over the lazy dog")) == "36aad6f4e2898440"   # VERSION 2


def test_hex_round_trip_and_hamming():
    rng = random.Random(2)
    for _ in range(100):
        h = rng.getrandbits(64)
        assert len(to_hex(h)) == 16
        assert from_hex(to_hex(h)) == h
    assert to_hex(1) == "0000000000000001"
    assert hamming(0, (1 << 64) - 1) == 64
    assert hamming(0b1011, 0b0001) == 2
    for bad in ("", "0x12", "12345678901234567", "zz", " 1"):
        with pytest.raises(ValueError):
            from_hex(bad)


def test_feature_hash_bits_are_balanced():
    """The 64 bits of a key's hash must each be set for about half of the keys: word
    pairs, and pairs that share their first word (their bits must not follow it); so
    for the hash functions of a NearPrint's check."""
    crcs = [zlib.crc32(w.encode()) for w in VOCAB]
    for mix in (None, _CHECK_MIX, _LINKS_MIX):
        for feats in (list(pair_keys(crcs)), [crcs[0] << 32 | c for c in crcs[1:]]):
            _balanced(feats, mix)


def _balanced(feats: list[int], mix: tuple[int, int] | None) -> None:
    lanes = feature_hashes(feats) if mix is None else feature_hashes(feats, mix)
    hashes = [int.from_bytes(lanes[LANE * i + 2:LANE * i + 10], "little") for i in range(len(feats))]
    for j in range(64):
        share = sum(h >> j & 1 for h in hashes) / len(hashes)
        assert 0.47 < share < 0.53, (j, share)


def _with_counter_line(rng: random.Random, body: list[str]) -> tuple[str, str]:
    pos = rng.randrange(len(body))

    def line() -> list[str]:
        unit = rng.choice(["minutes", "hours", "days"])
        return (f"posted {rng.randint(2, 59)} {unit} ago updated {rng.randint(2000, 2030)}-"
                f"{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:"
                f"{rng.randint(0, 59):02d} {rng.randint(10, 99999)} views").split()

    a = body[:pos] + line() + body[pos:]
    b = body[:pos] + line() + body[pos:]
    return " ".join(a), " ".join(b)


def test_counter_line_change_is_within_3_bits():
    rng = random.Random(3)
    distances = []
    for _ in range(40):
        a, b = _with_counter_line(rng, words(rng, 2000))
        distances.append(hamming(simhash64(a), simhash64(b)))
    assert sum(d <= 3 for d in distances) >= 0.9 * len(distances), distances


def test_few_word_edits_are_within_3_bits():
    """Not only digits: two real words replaced in a 2,000-word page."""
    rng = random.Random(4)
    distances = []
    for _ in range(40):
        a = words(rng, 2000)
        b = list(a)
        for _ in range(2):
            b[rng.randrange(len(b))] = rng.choice(VOCAB[:5000])
        distances.append(hamming(simhash64(" ".join(a)), simhash64(" ".join(b))))
    assert sum(d <= 3 for d in distances) >= 0.9 * len(distances), distances


def test_unrelated_texts_are_more_than_3_bits_apart():
    rng = random.Random(5)
    hashes = [simhash64(" ".join(words(rng, rng.randint(300, 2500)))) for _ in range(200)]
    distances = [hamming(a, b) for a, b in itertools.combinations(hashes, 2)]
    assert sum(d <= 3 for d in distances) < 0.01 * len(distances)
    assert 24 < sum(distances) / len(distances) < 36


def test_unspaced_text_uses_character_trigrams():
    rng = random.Random(6)
    chars = [chr(0x4E00 + i) for i in range(3000)]
    cum = list(itertools.accumulate(1 / (i + 1) for i in range(3000)))
    close = 0
    for _ in range(20):
        text = "".join(rng.choices(chars, cum_weights=cum, k=3000))
        assert keys_of(text) == set(map(zlib.crc32, {text[i:i + 3].encode() for i in range(len(text) - 2)}))
        i = rng.randrange(len(text))
        edited = text[:i] + rng.choice(chars) + text[i + 1:]
        close += hamming(simhash64(text), simhash64(edited)) <= 3
        other = "".join(rng.choices(chars, cum_weights=cum, k=3000))
        assert hamming(simhash64(text), simhash64(other)) > 3
    assert close >= 17


def test_the_simhash_from_the_sketch_words_is_the_texts():
    """The parse sandbox hashes a spaced text's words once for the simhash and the trap
    sketch (``simhash64_of_words``): the same fingerprint as from the text."""
    rng = random.Random(7)
    texts = [" ".join(words(rng, n)) for n in (1, 5, 300, 2000)]
    texts += ["Ünïcode ÉTÉ été 2026-12-07 ΣΟΦΙΑ σοφια", "The quick brown fox jumps over the lazy dog"]
    for text in texts:
        found, spaced = words_of(text)
        assert spaced
        assert simhash64_of_words(list(map(zlib.crc32, found))) == simhash64_with_count(text), text[:40]
    assert simhash64_of_words([]) == (0, 0)
    assert not words_of("".join(chr(0x4E00 + i) for i in range(300)))[1]   # unspaced: trigrams instead


def test_unrelated_texts_of_a_small_vocabulary_are_far_apart():
    """Issue 38: pages of one 4,000-word vocabulary shared most words, and sat ~23 bits
    apart with single words as features; word pairs put them near 32."""
    rng = random.Random(8)
    small = VOCAB[:4000]
    cum = list(itertools.accumulate(1 / (r + 1) for r in range(4000)))
    hashes = [simhash64(" ".join(rng.choices(small, cum_weights=cum, k=rng.randint(80, 400)))) for _ in range(300)]
    distances = [hamming(a, b) for a, b in itertools.combinations(hashes, 2)]
    assert 30 < sum(distances) / len(distances) < 34
    assert min(distances) > 8


def test_a_page_of_links_is_its_links():
    """Two index pages with one template text and other entries (the Python docs'
    genindex-D and genindex-E) are far apart; a mirror of one is not; a page whose text
    outweighs its links (an article with a menu) keeps to its text."""
    rng = random.Random(9)
    template = " ".join(words(rng, 80))
    entries = [[" ".join(words(rng, 3)) for _ in range(200)] for _ in range(2)]
    d, e = (page_simhash(template, links, "Index", 12_000)[0] for links in entries)
    assert hamming(d, e) > 10
    mirror = page_simhash(template, entries[0] + ["one more entry"], "Index", 12_000)[0]
    assert hamming(d, mirror) <= 3
    assert link_page_text(entries[0], len(template), 12_000)
    article = " ".join(words(rng, 2000))
    assert link_page_text(entries[0][:20], len(article), 12_000) == ""
    assert page_simhash(article, entries[0][:20], "", 12_000)[0] == simhash64(article[:12_000])
    assert page_simhash("", entries[0], "", 12_000) == (0, 0)     # no text, no fingerprint


def test_numbers_of_the_title_name_the_page():
    """Django's release notes 1.3.5 and 1.4.3: one text but for the version (digits are
    folded in the text), two pages; pages whose titles share their numbers are unchanged."""
    text = " ".join(words(random.Random(10), 500))
    a = page_simhash(text.replace("VERSION", "1.3.5"), [], "Django 1.3.5 release notes", 12_000)[0]
    b = page_simhash(text.replace("VERSION", "1.4.3"), [], "Django 1.4.3 release notes", 12_000)[0]
    assert hamming(a, b) > 10
    assert title_mark("Release notes") == 0 and title_mark("v1.2") == title_mark("Print: v1.2")
    assert page_simhash(text, [], "Release notes", 12_000)[0] == simhash64(text)
    printed = page_simhash(text + " printed from the site", [], "Django 1.3.5 release notes (print)", 12_000)[0]
    assert hamming(printed, page_simhash(text, [], "Django 1.3.5 release notes", 12_000)[0]) <= 3


def _short_page(rng: random.Random) -> str:
    """A page of the kind whose copies land far: ~100 words of a 4,000-word vocabulary."""
    return " ".join(rng.choices(VOCAB[:4000], cum_weights=CUM[:4000], k=rng.randint(80, 120)))


def test_a_near_print_holds_the_pages_simhash():
    """``page_print`` gives the crawl's fingerprint (``page_simhash``): of text, links and title."""
    rng = random.Random(11)
    text = _short_page(rng)
    links = [" ".join(words(rng, 3)) for _ in range(200)]
    for anchors, title in (([], ""), (links[:5], "Release 1.2 notes"), (links, "Index"), (["a b", "b c"], "T")):
        p = page_print(text, anchors, title, 12_000)
        assert (p.simhash, p.features) == page_simhash(text, anchors, title, 12_000)
        assert p == page_print(text, iter(anchors), title, 12_000, keys_of(text))
        assert bin(p.fragile).count("1") == FRAGILE_BITS and 0 <= p.check < 1 << BITS
    assert page_print("", links, "Index", 12_000) == NearPrint(0, 0)     # no text, no fingerprint


def test_near_print_value_is_stable_across_runs():
    """The check is stored in the index and compared between processes and machines."""
    p = page_print("The quick brown fox jumps over the lazy dog", ["home", "next page"], "Fox", 12_000)
    assert (to_hex(p.simhash), to_hex(p.check), to_hex(p.fragile)) == ("36aad6f4e2898440", "07837eb38132e1cd", "00000000000013ae")


def test_title_name():
    assert title_name("") == title_name("  \n") == 0
    assert title_name("Index —  Python 3.11 docs") == title_name("index — python 3.11 DOCS ")
    assert title_name("Index") != title_name("Index - Mirror")


def test_a_copys_check_agrees_and_a_siblings_does_not():
    """A short page with a line more: the check agrees about as well as the simhash does.
    What the text cannot tell apart, the check does: a page with another title; an index
    page of one template whose entries (its links) are other ones (the Python docs'
    genindex-Y and genindex-Z: one letter of text apart); an unrelated page."""
    rng = random.Random(12)
    copies, siblings = [], []
    for _ in range(40):
        text, title = _short_page(rng), " ".join(words(rng, 4))
        nav = ["home", "about us", "contact"]
        entries = [[" ".join(words(rng, 2)) for _ in range(15)] for _ in range(2)]
        page = page_print(text, nav + entries[0], title, 12_000)
        copy = page_print("reposted by " + " ".join(words(rng, 4)) + " " + text, nav + entries[0], title, 12_000)
        copies.append(hamming(page.check, copy.check) - hamming(page.simhash, copy.simhash))
        for other in (page_print(text, nav + entries[0], title + " (print)", 12_000),
                      page_print(text.replace(" ", " z ", 1), nav + entries[1], title, 12_000),
                      page_print(_short_page(rng), nav + entries[0], title, 12_000)):
            siblings.append(hamming(page.check, other.check))
    assert abs(sum(copies) / len(copies)) < 2, copies
    assert min(siblings) > 12, siblings


def test_fragile_bits_are_the_ones_a_line_more_flips():
    """The bits a 5-word line flips in a short page are mostly among its FRAGILE_BITS
    least confident ones (which the index probes flipped), far more than 8 in 64 by chance."""
    rng = random.Random(13)
    flipped = fragile = 0
    for _ in range(60):
        text = _short_page(rng)
        page = page_print(text, [], "", 12_000)
        copy = page_print(text + " mirrored from " + " ".join(words(rng, 3)), [], "", 12_000)
        diff = page.simhash ^ copy.simhash
        flipped += bin(diff).count("1")
        fragile += bin(diff & copy.fragile).count("1")
    assert flipped > 100 and fragile > 0.4 * flipped, (fragile, flipped)   # 60 %
