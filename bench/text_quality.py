#!/usr/bin/env python3
"""Main-text quality and cost of crawler_tasks.parse.text, in two modes.

Labelled mode (``--data DIR``): human-labelled pages, ours against trafilatura and
stock resiliparse in one run.  The data are public collections mirrored, unchanged, in
one git repository: github.com/j-szulc/html-cleaning-dataset-merged, commit
46e01a04b47051838a228bf23631430b2c9de375 (``input/`` the pages, ``GoldStandard/`` the
labels; licences: see each original source).  Not committed here (size, licences).
Unpack once:

    git clone https://github.com/j-szulc/html-cleaning-dataset-merged /tmp/hcd
    git -C /tmp/hcd archive 46e01a04b47051838a228bf23631430b2c9de375 cleaneval-dev \\
        cleaneval-final CleanPortalEval-master dragnet_data page-signal-master readability \\
        | tar -x -C DIR

The datasets (folder: origin, how its gold text is read):

- cleaneval-dev, cleaneval-final: CleanEval 2007 (Baroni et al.), URL line and the
  <p>/<h>/<l> marks dropped;
- CleanPortalEval-master: CleanPortalEval (Endrédy & Novák 2013), same format;
- dragnet_data: Dragnet (Peters & Lecocq 2013), corrected text up to its
  "!@#$%^&*() COMMENTS" mark, typos included (the main text leaves user comments out);
- page-signal-master: L3S-GN1 Google News (Kohlschütter et al. 2010), the text of the
  headline, full-text and supplemental labels (x-nc-sel1..3), as Bevendorff et al. (2023)
  read it;
- readability: Mozilla Readability's test pages, the text of expected.html (the output of
  Readability itself, not of a human annotator).

Zyte's (ScrapingHub's) article-extraction-benchmark is deliberately not used: it is kept
as an independent check.  Bevendorff et al.'s two other article sets, CETD and
Google-Trends-2017, are not in that repository (their own, chatnoir-eu/web-content-
extraction-benchmark, holds them as Git LFS objects) and are not scored here.  Every page is decoded once (parse.encoding.decode_html) and
each extractor gets that string; ours is given it as a ``Document``, which bypasses the
parse-budget pre-pass (``parse/budget.py``) so that the scores are the extractor's own.
Pages are split by a CRC-32 of their dataset and file name: even = "tune" (used to
choose the rules in parse/text.py), odd = "test" (held out).  Scores: bags of
lower-cased words (\\w+); precision, recall and F1 pooled over the pages, and the mean
per-page F1; median ms/page of each extractor.  ``--before REV`` adds our extractor as
it was at a git revision.  trafilatura is a bench-only dependency:

    .venv/bin/pip install trafilatura==2.3.1
    python bench/text_quality.py --data DIR [--split test|tune|all] [--before 5363c1c]

Documentation mode (no ``--data``): Debian documentation pages nobody here wrote,
against trafilatura's text (no human labels; a regression check on real docs):

    apt-get install -y debian-handbook python3-doc debian-reference-en \\
        debian-reference-de debian-reference-fr
    python bench/text_quality.py [--pages 150] [--lang-pages 12]

It prints the same scores, the whole body text's, and language detection accuracy on
translated pages.  Samples are fixed (seeded), so runs compare.

``--smoke`` (seconds) runs documentation mode on the vendored pages of tests/data (in the
repository: four English pages, one German), against trafilatura
where it is installed and stock resiliparse otherwise (it says which).
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from resiliparse.extract.html2text import extract_plain_text  # noqa: E402
from resiliparse.parse.html import HTMLTree  # noqa: E402

from crawler_tasks.parse.encoding import decode_html  # noqa: E402
from crawler_tasks.parse.html import Document  # noqa: E402
from crawler_tasks.parse.text import extract_text  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
SMOKE_ENGLISH = [str(DATA / name) for name in ("text/handbook-en-syslog.html", "text/python-atexit.html",
                                              "realpages/libxslt-python.html", "realpages/nodejs-string_decoder.html")]
# German throughout (tests/test_text.py): its twin's words would call it mixed (log lines, file names)
SMOKE_TRANSLATED: list[tuple[str, str, str | None]] = [(str(DATA / "text/handbook-de-syslog.html"), "de", None)]
HANDBOOK = "/usr/share/doc/debian-handbook/html"
PYDOC = "/usr/share/doc/python3-doc/html"
DEBREF = "/usr/share/debian-reference"
WORD_RE = re.compile(r"\w+")
DATASETS = ("cleaneval-dev", "cleaneval-final", "CleanPortalEval-master", "dragnet_data", "page-signal-master",
            "readability")
_CLEANEVAL_MARK_RE = re.compile(r"<[phl]>|^\s*URL:[^\n]*", re.I | re.M)
_DRAGNET_COMMENTS_RE = re.compile(r"^[!@#$%^&*() ]{5,}\s*COMMENTS", re.M)  # "!@#$%^&*()  COMMENTS", with typos

Extractor = Callable[[str], str]


def words(text: str) -> Counter[str]:
    return Counter(w.lower() for w in WORD_RE.findall(text))


@dataclass
class Score:
    """Pooled and per-page word overlap, and the time of each page."""

    hit: int = 0
    got: int = 0
    gold: int = 0
    page_f1: list[float] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)

    def add(self, got: Counter[str], gold: Counter[str], ms: float) -> float:
        common = sum((got & gold).values())
        n_got, n_gold = sum(got.values()), sum(gold.values())
        self.hit, self.got, self.gold = self.hit + common, self.got + n_got, self.gold + n_gold
        p = common / n_got if n_got else 0.0
        r = common / n_gold if n_gold else 0.0
        f1 = 2 * p * r / (p + r) if p + r else float(not n_got and not n_gold)
        self.page_f1.append(f1)
        self.ms.append(ms)
        return f1

    def line(self, label: str) -> str:
        p = self.hit / self.got if self.got else 0.0
        r = self.hit / self.gold if self.gold else 0.0
        f1 = 2 * p * r / (p + r) if p + r else 0.0
        return (f"  {label:14s} P {p:.3f}  R {r:.3f}  F1 {f1:.3f}  mean page F1 "
                f"{statistics.mean(self.page_f1):.3f}  median {statistics.median(self.ms):6.2f} ms/page")


# ---------------------------------------------------------------------------
# Labelled mode
# ---------------------------------------------------------------------------


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return raw.decode("utf-16", "replace")  # some Dragnet labels
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw.decode("cp1252", "replace")


def _html_text(html: str) -> str:
    return extract_plain_text(HTMLTree.parse(html), main_content=False, preserve_formatting=True)


def _l3s_gold(html: str) -> str:
    """Text of the outermost elements labelled headline, full text or supplemental."""
    tree = HTMLTree.parse(html)
    if tree.body is None:
        return ""
    parts: list[str] = []
    outer = None
    for node in tree.body.query_selector_all(".x-nc-sel1, .x-nc-sel2, .x-nc-sel3").values():
        if outer is not None and outer.contains(node):
            continue
        outer = node
        parts.append(node.text or "")
    return "\n".join(parts)


def gold_text(dataset: str, path: Path) -> str:
    text = _read_text(path)
    if dataset.startswith(("cleaneval", "CleanPortalEval")):
        return _CLEANEVAL_MARK_RE.sub(" ", text)
    if dataset == "dragnet_data":
        return _DRAGNET_COMMENTS_RE.split(text, 1)[0]
    if dataset == "page-signal-master":
        return _l3s_gold(text)
    if dataset == "readability":
        return _html_text(text)
    raise ValueError(dataset)


def split_of(dataset: str, name: str) -> str:
    return "tune" if zlib.crc32(f"{dataset}/{name}".encode()) % 2 == 0 else "test"


def load_pages(data: Path, dataset: str, split: str, limit: int) -> list[tuple[str, str, Counter[str]]]:
    """(name, decoded HTML, gold words) of the pages of one dataset in the split."""
    pages = []
    for gold_path in sorted((data / dataset / "GoldStandard").glob("*.txt")):
        name = gold_path.stem
        html_path = data / dataset / "input" / f"{name}.html"
        if not html_path.exists() or (split != "all" and split_of(dataset, name) != split):
            continue
        gold = words(gold_text(dataset, gold_path))
        if not gold:
            continue  # a few CleanEval pages are labelled empty
        pages.append((name, decode_html(html_path.read_bytes(), None)[0], gold))
    if limit and len(pages) > limit:
        pages = random.Random(7).sample(pages, limit)
    return pages


def ours_at(rev: str) -> Extractor:
    """Our extract_text as it was at a git revision (text.py and the boilerplate.py it
    imports; the rest is today's)."""
    trim = _module_at(rev, "boilerplate", {})
    text = _module_at(rev, "text", {"crawler_tasks.parse.boilerplate": trim})
    old = sys.modules[text].extract_text
    return lambda html: old(Document(html, "utf-8", None), "http://bench.test/").text


def _module_at(rev: str, name: str, imports: dict[str, str]) -> str:
    """Loads crawler_tasks/parse/NAME.py at REV as a module of its own, its imports of
    the modules named in ``imports`` pointed at the given module names; returns its name."""
    source = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:crawler_tasks/parse/{name}.py"],
                            check=True, capture_output=True, text=True).stdout
    for imported, loaded in imports.items():
        source = source.replace(f"from {imported} import", f"from {loaded} import")
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(f"{name}_at_{rev}", f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses (and the imports above) look their module up there
    spec.loader.exec_module(module)
    os.unlink(f.name)
    return spec.name


def extractors(names: list[str], before: str | None) -> dict[str, Extractor]:
    table: dict[str, Extractor] = {}
    if before:
        table[f"ours@{before}"] = ours_at(before)
    for name in names:
        if name == "ours":
            table["ours"] = lambda html: extract_text(Document(html, "utf-8", None), "http://bench.test/").text
        elif name == "trafilatura":
            import trafilatura

            table["trafilatura"] = lambda html: trafilatura.extract(html, include_comments=False) or ""
        elif name == "resiliparse":
            table["resiliparse"] = lambda html: extract_plain_text(html, main_content=True)
        else:
            sys.exit(f"unknown extractor {name!r}")
    return table


def labelled(data: Path, split: str, limit: int, names: list[str], before: str | None, worst: int) -> None:
    table = extractors(names, before)
    total = {label: Score() for label in table}
    for dataset in DATASETS:
        if not (data / dataset).is_dir():
            print(f"{dataset}: not in {data}, skipped")
            continue
        pages = load_pages(data, dataset, split, limit)
        print(f"{dataset}: {len(pages)} pages ({split})")
        scores = {label: Score() for label in table}
        ours: list[tuple[float, str]] = []
        for name, html, gold in pages:  # page by page, so that a change in the machine's load hits all alike
            for label, extract in table.items():
                t0 = time.perf_counter()
                text = extract(html)
                ms = 1000 * (time.perf_counter() - t0)
                f1 = scores[label].add(words(text), gold, ms)
                total[label].add(words(text), gold, ms)
                if label == "ours":
                    ours.append((f1, name))
        for label, score in scores.items():
            print(score.line(label))
        if worst and ours:
            print("  ours' worst pages: " + ", ".join(f"{n} {f:.2f}" for f, n in sorted(ours)[:worst]))
    print(f"all datasets ({split}):")
    for label, score in total.items():
        if score.ms:
            print(score.line(label))


# ---------------------------------------------------------------------------
# Documentation mode
# ---------------------------------------------------------------------------


def english_sample(n: int, rng: random.Random) -> list[str]:
    handbook = sorted(glob.glob(f"{HANDBOOK}/en-US/*.html"))
    pydoc = sorted(glob.glob(f"{PYDOC}/**/*.html", recursive=True))
    debref = sorted(glob.glob(f"{DEBREF}/*.en.html"))
    if not (handbook and pydoc):
        sys.exit("install debian-handbook and python3-doc first (see the docstring)")
    n_ref = min(len(debref), n // 10)
    n_hb = min(len(handbook), (n - n_ref) * 2 // 5)
    return rng.sample(handbook, n_hb) + rng.sample(pydoc, n - n_ref - n_hb) + debref[:n_ref]


def quality(paths: list[str], reference: str) -> None:
    extract_ref = extractors([reference], None)[reference]
    refs = []
    for path in paths:
        body = Path(path).read_bytes()
        refs.append((body, words(extract_ref(body.decode("utf-8", "replace")))))
    for label, main in (("main text", True), ("whole text", False)):
        score = Score()
        for body, ref in refs:
            t0 = time.perf_counter()
            page = extract_text(body, "http://docs.test/", main_content=main)
            score.add(words(page.text), ref, 1000 * (time.perf_counter() - t0))
        print(score.line(label))


def translated(per_lang: int, rng: random.Random) -> list[tuple[str, str, str | None]]:
    """(page, its folder's language, its English original if there is one) of the
    installed handbook and reference translations."""
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
    return [(path, lang, _english_twin(path)) for path, lang in cases]


def languages(cases: list[tuple[str, str, str | None]]) -> None:
    """Language detection on translated pages.  Translations are partial: a page whose
    words match its English original (> 90 %) counts as English, one that shares less
    than 30 % with it as its folder's language, and pages in between (mixed) are left out."""
    if not cases:
        print("no translated pages installed")
        return
    right = total = 0
    confident_right = confident = mixed = 0
    per: dict[str, list[int]] = {}
    for path, lang, twin in cases:
        page = extract_text(Path(path).read_bytes(), "http://docs.test/")
        if not page.word_count:
            continue
        expected = lang
        english = extract_text(Path(twin).read_bytes(), "http://docs.test/").text if twin else None
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
    return twin if os.path.exists(twin) else None


def _overlap(a: str, b: str) -> float:
    wa, wb = words(a), words(b)
    return sum((wa & wb).values()) / max(1, sum(wa.values()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, help="labelled mode: the unpacked datasets (see above)")
    ap.add_argument("--split", choices=("test", "tune", "all"), default="test", help="labelled pages to score")
    ap.add_argument("--limit", type=int, default=0, help="at most this many pages per dataset (0: all)")
    ap.add_argument("--extractors", default="ours,trafilatura,resiliparse", help="comma-separated")
    ap.add_argument("--before", help="also score ours as it was at this git revision")
    ap.add_argument("--worst", type=int, default=0, help="list ours' N worst pages of each dataset")
    ap.add_argument("--pages", type=int, default=150, help="documentation mode: English pages")
    ap.add_argument("--lang-pages", type=int, default=12, help="documentation mode: pages per translated language")
    ap.add_argument("--smoke", action="store_true", help="documentation mode on the vendored pages: seconds")
    args = ap.parse_args()
    if args.smoke:
        reference = "trafilatura" if importlib.util.find_spec("trafilatura") else "resiliparse"
        print(f"{len(SMOKE_ENGLISH)} vendored pages (reference: {reference}"
              f"{'' if reference == 'trafilatura' else '; trafilatura is not installed'})")
        quality(SMOKE_ENGLISH, reference)
        languages(SMOKE_TRANSLATED)
        return
    if args.data:
        labelled(args.data, args.split, args.limit, [n for n in args.extractors.split(",") if n], args.before,
                 args.worst)
        return
    rng = random.Random(7)
    paths = english_sample(args.pages, rng)
    print(f"{len(paths)} pages: Debian handbook, Python docs, Debian reference (reference: trafilatura)")
    quality(paths, "trafilatura")
    languages(translated(args.lang_pages, rng))


if __name__ == "__main__":
    main()
