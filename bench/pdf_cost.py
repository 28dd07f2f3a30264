#!/usr/bin/env python3
"""What a PDF costs the parse stage, and which library reads it best.

Libraries: each real PDF (``tests/realpages.py``'s ``pdf_documents()``: two vendored, the
rest from installed packages; more with ``--pdf FILE``) read whole by pypdfium2 (the
crawler's), pdfminer.six and pypdf (each when installed: they are not requirements): ms a
page (best of ``--repeat``) and characters. Quality: ``--pair PDF HTMLDIR`` compares each
library's words with those of the same document's HTML version (Debian's manuals ship
both), as precision and recall of the word bags; "glued" is the share of words over 20
letters (words run together).

The crawler's own path: ``parse.page.analyse`` of each real PDF as the stage calls it (the
reader capped by PDF_MAX_PAGES and MAX_TEXT_CHARS, then the XHTML analysis): ms, pages
read, words, language.

Bombs (``tests/pdfs.py``, each within the 1 MiB body cap): parsed in a real parse sandbox
with the default deadline and memory cap, as the stage calls it: the outcome (what the
record gets), wall ms and the child's peak memory (VmHWM, sampled every 20 ms; "at rest":
the child after a one-line PDF, pages shared with the worker included).

``--smoke``: the vendored PDFs and small bombs, a 2 s deadline (seconds).

    python bench/pdf_cost.py [--repeat 3] [--pdf FILE ...] [--pair PDF HTMLDIR ...] [--smoke]
"""
from __future__ import annotations

import argparse
import collections
import io
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from crawler_tasks.parse.page import analyse  # noqa: E402
from crawler_tasks.parse.sandbox import ParseFailed, ParseSandbox  # noqa: E402
from crawler_tasks.parse.text import extract_text  # noqa: E402
from crawler_tasks.settings import Settings  # noqa: E402
from crawler_tasks.stages.parse import _sandboxed  # noqa: E402
from tests import pdfs, realpages  # noqa: E402

WORD = re.compile(r"[^\W\d_]{2,}")
Reader = Callable[[bytes], tuple[str, int]]   # text, pages


def _pypdfium2(data: bytes) -> tuple[str, int]:
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(data)
    out = []
    for i in range(len(doc)):
        page = doc[i]
        textpage = page.get_textpage()
        out.append(textpage.get_text_range())
        textpage.close()
        page.close()
    n = len(doc)
    doc.close()
    return "\n".join(out), n


def _pdfminer(data: bytes) -> tuple[str, int]:
    from pdfminer.high_level import extract_text as pdfminer_text
    from pdfminer.pdfpage import PDFPage

    text = pdfminer_text(io.BytesIO(data))
    return text, sum(1 for _ in PDFPage.get_pages(io.BytesIO(data)))


def _pypdf(data: bytes) -> tuple[str, int]:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    return "\n".join(page.extract_text() for page in reader.pages), len(reader.pages)


LIBRARIES: dict[str, tuple[str, Reader]] = {"pypdfium2": ("pypdfium2", _pypdfium2),
                                            "pdfminer.six": ("pdfminer", _pdfminer), "pypdf": ("pypdf", _pypdf)}


def installed() -> dict[str, Reader]:
    found = {}
    for name, (module, reader) in LIBRARIES.items():
        try:
            __import__(module)
        except ImportError:
            print(f"{name}: not installed (pip install {name}): left out")
            continue
        found[name] = reader
    return found


def words(text: str) -> collections.Counter[str]:
    return collections.Counter(w.lower() for w in WORD.findall(text))


def html_words(folder: Path) -> collections.Counter[str]:
    bag: collections.Counter[str] = collections.Counter()
    for path in sorted(folder.glob("*.html")):
        page = extract_text(path.read_bytes(), path.as_uri(), main_content=False, full_text=True, max_chars=10**8)
        bag.update(words(page.full_text or page.text))
    return bag


def libraries(docs: list[tuple[str, bytes, Path | None]], readers: dict[str, Reader], repeat: int) -> None:
    print(f"\n{'document':34} {'library':13} {'pages':>5} {'ms/page':>8} {'chars':>9} {'prec':>6} {'rec':>6} {'glued':>6}")
    per_lib: dict[str, list[float]] = collections.defaultdict(list)
    for name, data, html_dir in docs:
        reference = html_words(html_dir) if html_dir else None
        for lib, read in readers.items():
            best = float("inf")
            try:
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    text, pages = read(data)
                    best = min(best, time.perf_counter() - t0)
            except Exception as exc:
                print(f"{name[:34]:34} {lib:13} error {type(exc).__name__}: {exc}"[:160])
                continue
            got = words(text)
            total = sum(got.values())
            glued = sum(n for w, n in got.items() if len(w) > 20) / max(1, total)
            prec = rec = "-"
            if reference:
                common = sum((got & reference).values())
                prec, rec = f"{common / max(1, total):.3f}", f"{common / max(1, sum(reference.values())):.3f}"
            ms = best * 1000 / max(1, pages)
            per_lib[lib].append(ms)
            print(f"{name[:34]:34} {lib:13} {pages:5} {ms:8.2f} {len(text):9,} {prec:>6} {rec:>6} {glued:6.4f}")
    for lib, values in per_lib.items():
        print(f"{lib:13} median {sorted(values)[len(values) // 2]:.2f} ms/page over {len(values)} PDFs")


def crawler_path(docs: list[tuple[str, bytes, Path | None]], settings: Settings) -> None:
    print(f"\nparse.page.analyse as the stage calls it (PDF_MAX_PAGES {settings.PDF_MAX_PAGES}, "
          f"MAX_TEXT_CHARS {settings.MAX_TEXT_CHARS:,}, body cap {settings.MAX_BODY_BYTES:,} B)")
    print(f"{'document':34} {'bytes':>9} {'ms':>7} {'words':>7} {'lang':>5}  title / error")
    total_ms = 0.0
    for name, data, _ in docs:
        body = data[:settings.MAX_BODY_BYTES]
        t0 = time.perf_counter()
        result = analyse(body, "http://docs.test/doc.pdf", {"content_type": "application/pdf"}, settings.TEXT_MODE,
                         settings.MAX_TEXT_CHARS, settings.SIMHASH_MAX_CHARS, True, pdf_max_pages=settings.PDF_MAX_PAGES)
        ms = (time.perf_counter() - t0) * 1000
        total_ms += ms
        said = result.text.error or result.parsed.title
        print(f"{name[:34]:34} {len(data):9,} {ms:7.1f} {result.text.word_count:7,} {result.text.lang or '-':>5}  "
              f"{said[:70]}")
    print(f"analyse: {total_ms / max(1, len(docs)):.1f} ms/PDF")


def _peak_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def bombs(makers: dict[str, Callable[[], bytes]], settings: Settings, timeout_s: float) -> None:
    print(f"\nbombs in the parse sandbox (deadline {timeout_s:g} s, memory cap {settings.PARSE_MEMORY_MB} MB)")
    print(f"{'bomb':16} {'bytes':>9} {'wall ms':>8} {'peak MB':>8} {'at rest':>8}  outcome (the page's record)")
    args = ({"content_type": "application/pdf"}, settings.TEXT_MODE, settings.MAX_TEXT_CHARS,
            settings.SIMHASH_MAX_CHARS, True)
    for name, make in makers.items():
        body = make()
        box = ParseSandbox(timeout_s, settings.PARSE_MEMORY_MB)
        try:
            box.analyse(pdfs.make_pdf([["warm-up"]]), "http://docs.test/w.pdf", *args)   # PDFium loaded
            proc = box._proc
            assert proc is not None and proc.pid is not None
            pid, done = proc.pid, threading.Event()
            rest = _peak_kb(pid)   # the child after a small PDF: the floor of every peak
            peak = [rest]

            def watch(pid: int = pid, peak: list[int] = peak, done: threading.Event = done) -> None:
                while not done.wait(0.02):
                    peak[0] = max(peak[0], _peak_kb(pid))

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            t0 = time.perf_counter()
            try:
                result = _sandboxed(box, body, "http://docs.test/bomb.pdf", args, lambda c: None, pdf=True,
                                    pdf_max_pages=settings.PDF_MAX_PAGES)
                outcome = (f"parsed: {result.text.word_count:,} words"
                           + (f", limited {result.parsed.limited}" if result.parsed.limited else "")
                           + (f", error {result.text.error[:60]}" if result.text.error else ""))
            except ParseFailed as exc:
                outcome = f"parse_limit: {exc}"
            wall = (time.perf_counter() - t0) * 1000
            done.set()
            watcher.join()
        finally:
            box.close()
        print(f"{name:16} {len(body):9,} {wall:8.0f} {peak[0] / 1024:8.0f} {rest / 1024:8.0f}  {outcome}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pdf", action="append", default=[], type=Path, help="another PDF to read")
    ap.add_argument("--pair", nargs=2, action="append", default=[], metavar=("PDF", "HTMLDIR"),
                    help="a PDF and the folder of its HTML version (quality)")
    ap.add_argument("--smoke", action="store_true")
    opts = ap.parse_args()
    settings = Settings()
    real = realpages.pdf_documents()
    if opts.smoke:
        real = real[:2]
    docs: list[tuple[str, bytes, Path | None]] = [(name, data, None) for name, data in real]
    docs += [(path.name, path.read_bytes(), None) for path in opts.pdf]
    docs += [(Path(pdf).name, Path(pdf).read_bytes(), Path(html)) for pdf, html in opts.pair]
    print(f"real PDFs: {len(docs)}")
    libraries(docs, installed(), 1 if opts.smoke else opts.repeat)
    crawler_path(docs, settings)
    if opts.smoke:
        makers = {"many-pages": lambda: pdfs.many_pages(800), "flate-text": lambda: pdfs.flate_bomb(20)}
        bombs(makers, settings, 2.0)
    else:
        bombs(pdfs.BOMBS, settings, settings.PARSE_TIMEOUT_S)


if __name__ == "__main__":
    main()
