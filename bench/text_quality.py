#!/usr/bin/env python3
"""Main-text quality and cost of crawler_tasks.parse.text on real documentation pages.

Pages come from Debian documentation packages (HTML nobody here wrote):

    apt-get update && apt-get install -y debian-handbook python3-doc debian-reference-en \\
        debian-reference-de debian-reference-fr

The reference main text is trafilatura's (too slow for the crawl, ~60-100 ms a page; only
this script needs it):

    .venv/bin/pip install trafilatura

Prints word-level precision, recall and F1 of our main text against the reference (bags of
lower-cased words, pooled over all pages, and the mean of per-page F1), the same for the
whole body text (the feed's text before this module), ms/page of extract_text, and language
detection accuracy on translated pages.  The sample is fixed (seeded), so runs compare.

    python bench/text_quality.py [--pages 150] [--lang-pages 12]
"""
from __future__ import annotations

import argparse
import glob
import os
import random
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from crawler_tasks.parse.text import extract_text  # noqa: E402

HANDBOOK = "/usr/share/doc/debian-handbook/html"
PYDOC = "/usr/share/doc/python3-doc/html"
DEBREF = "/usr/share/debian-reference"
WORD_RE = re.compile(r"\w+")


def words(text: str) -> Counter[str]:
    return Counter(w.lower() for w in WORD_RE.findall(text))


def english_sample(n: int, rng: random.Random) -> list[str]:
    handbook = sorted(glob.glob(f"{HANDBOOK}/en-US/*.html"))
    pydoc = sorted(glob.glob(f"{PYDOC}/**/*.html", recursive=True))
    debref = sorted(glob.glob(f"{DEBREF}/*.en.html"))
    if not (handbook and pydoc):
        sys.exit("install debian-handbook and python3-doc first (see the docstring)")
    n_ref = min(len(debref), n // 10)
    n_hb = min(len(handbook), (n - n_ref) * 2 // 5)
    return rng.sample(handbook, n_hb) + rng.sample(pydoc, n - n_ref - n_hb) + debref[:n_ref]


def quality(paths: list[str]) -> None:
    import trafilatura

    refs = []
    for path in paths:
        body = Path(path).read_bytes()
        refs.append((body, words(trafilatura.extract(body.decode("utf-8", "replace"), include_comments=False) or "")))
    for label, main in (("main text (extract_text)", True), ("whole text", False)):
        hit = ours = theirs = 0
        f1s = []
        elapsed = 0.0
        for body, ref in refs:
            t0 = time.perf_counter()
            page = extract_text(body, "http://docs.test/", main_content=main)
            elapsed += time.perf_counter() - t0
            got = words(page.text)
            common = sum((got & ref).values())
            hit, ours, theirs = hit + common, ours + sum(got.values()), theirs + sum(ref.values())
            p = common / sum(got.values()) if got else 0.0
            r = common / sum(ref.values()) if ref else 0.0
            f1s.append(2 * p * r / (p + r) if p + r else float(not got and not ref))
        p, r = hit / ours, hit / theirs
        print(f"{label:26s} precision {p:.3f}  recall {r:.3f}  F1 {2 * p * r / (p + r):.3f}  "
              f"mean page F1 {statistics.mean(f1s):.3f}  {1000 * elapsed / len(refs):.2f} ms/page")


def languages(per_lang: int, rng: random.Random) -> None:
    """Translated handbook and reference pages.  Translations are partial: a page whose
    words match its English original (> 90 %) counts as English, one that shares less
    than 30 % with it as its folder's language, and pages in between (mixed) are left out."""
    cases: list[tuple[str, str]] = []
    for folder in sorted(glob.glob(f"{HANDBOOK}/*-*")):
        lang = os.path.basename(folder).split("-")[0].lower()
        lang = {"nb": "no"}.get(lang, lang)  # the detector knows Norwegian as one language
        if lang == "en":
            continue
        names = sorted(os.path.basename(p) for p in glob.glob(f"{folder}/*.html"))
        cases += [(f"{folder}/{name}", lang) for name in rng.sample(names, min(per_lang, len(names)))]
    for path in sorted(glob.glob(f"{DEBREF}/*.html")):
        lang = path.rsplit(".", 2)[1].split("-")[0]
        if lang != "en":
            cases.append((path, lang))
    if not cases:
        print("no translated pages installed")
        return
    right = total = 0
    confident_right = confident = mixed = 0
    per: dict[str, list[int]] = {}
    for path, lang in cases:
        page = extract_text(Path(path).read_bytes(), "http://docs.test/")
        if not page.word_count:
            continue
        expected = lang
        english = _english_twin(path)
        shared = _overlap(page.text, english) if english is not None else 0.0
        if shared > 0.9:
            expected = "en"
        elif shared >= 0.3:
            mixed += 1
            continue
        ok = page.lang == expected
        total += 1
        right += ok
        per.setdefault(expected, [0, 0])
        per[expected][0] += ok
        per[expected][1] += 1
        if page.lang_confidence >= 0.5:
            confident += 1
            confident_right += ok
    print(f"language id: {right}/{total} right ({right / total:.3f}) over {len(per)} languages "
          f"({mixed} half-translated pages left out); "
          f"confidence >= 0.5 on {confident} pages, {confident_right / max(confident, 1):.3f} of them right")
    wrong = {lang: f"{ok}/{n}" for lang, (ok, n) in sorted(per.items()) if ok < n}
    print(f"  languages with misses: {wrong or 'none'}")


def _english_twin(path: str) -> str | None:
    if path.startswith(HANDBOOK):
        twin = f"{HANDBOOK}/en-US/{os.path.basename(path)}"
    else:
        twin = re.sub(r"\.[a-zA-Z-]+\.html$", ".en.html", path)
    return extract_text(Path(twin).read_bytes(), "http://docs.test/").text if os.path.exists(twin) else None


def _overlap(a: str, b: str) -> float:
    wa, wb = words(a), words(b)
    return sum((wa & wb).values()) / max(1, sum(wa.values()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=150, help="English pages for precision/recall")
    ap.add_argument("--lang-pages", type=int, default=12, help="pages per translated handbook language")
    args = ap.parse_args()
    rng = random.Random(7)
    paths = english_sample(args.pages, rng)
    print(f"{len(paths)} pages: Debian handbook, Python docs, Debian reference")
    quality(paths)
    languages(args.lang_pages, rng)


if __name__ == "__main__":
    main()
