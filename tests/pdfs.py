"""PDFs written byte by byte for the tests and bench/pdf_cost.py: plain documents (pages of
text lines, a title, a language, URI links) and the bombs a hostile server may send within
the body cap. No PDF library writes them, so none can repair what a bomb gets wrong on
purpose; each carries a correct cross-reference table unless it is meant not to."""
from __future__ import annotations

import zlib
from collections.abc import Sequence

MAX_BODY = 1024 * 1024   # the crawler's default MAX_BODY_BYTES: a bomb must fit in it


def _s(text: str) -> bytes:
    """A PDF literal string (Latin-1 text)."""
    raw = text.encode("latin-1", "replace")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def _assemble(objects: list[bytes], root: int, info: int | None = None) -> bytes:
    """Objects numbered from 1 in order, their xref table and trailer."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R" % (len(objects) + 1, root)
    if info:
        out += b" /Info %d 0 R" % info
    out += b" >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def _stream(data: bytes, flate: bool = False) -> bytes:
    if flate:
        data = zlib.compress(data, 9)
        return b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"
    return b"<< /Length %d >>\nstream\n" % len(data) + data + b"\nendstream"


def _text_content(lines: Sequence[str]) -> bytes:
    ops = [b"BT /F1 11 Tf 72 740 Td 14 TL"]
    ops += [_s(line) + b" '" for line in lines]
    ops.append(b"ET")
    return b"\n".join(ops)


def make_pdf(pages: Sequence[Sequence[str]], title: str | None = None, lang: str | None = None,
             links: Sequence[tuple[int, str, int]] = (), flate: bool = False) -> bytes:
    """A PDF of ``pages`` (each a list of text lines, set from the top in Helvetica 11 pt on
    14 pt lines). ``links`` are (page, URI, line index): a URI link annotation over that line."""
    objects: list[bytes] = [b"", b"", b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for index, lines in enumerate(pages):
        objects.append(_stream(_text_content(lines), flate))
        content = len(objects)
        annots = []
        for page, uri, line in links:
            if page == index:
                base = 740 - 14 * (line + 1)   # the line's baseline (each ' moves down one line first)
                objects.append(b"<< /Type /Annot /Subtype /Link /Rect [70 %d 540 %d] /Border [0 0 0] "
                               b"/A << /S /URI /URI %s >> >>" % (base - 2, base + 9, _s(uri)))
                annots.append(b"%d 0 R" % len(objects))
        extra = b" /Annots [" + b" ".join(annots) + b"]" if annots else b""
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                       b"/Contents %d 0 R%s >>" % (content, extra))
        kids.append(b"%d 0 R" % len(objects))
    objects[0] = b"<< /Type /Catalog /Pages 2 0 R" + (b" /Lang " + _s(lang) if lang else b"") + b" >>"
    objects[1] = b"<< /Type /Pages /Kids [" + b" ".join(kids) + b"] /Count %d >>" % len(kids)
    info = None
    if title is not None:
        objects.append(b"<< /Title " + _s(title) + b" /Producer (tests/pdfs.py) >>")
        info = len(objects)
    return _assemble(objects, 1, info)


# --- bombs: each within MAX_BODY ------------------------------------------------------------

def many_pages(n: int = 6000, lines_a_page: int = 1) -> bytes:
    """Thousands of pages (one content stream shared by all): only the page cap (short
    pages) or the character cap (long ones) stops the reader."""
    lines = [f"Line {i} of a page that every page of this document repeats." for i in range(lines_a_page)]
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b"",
                            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
                            _stream(_text_content(lines))]
    kids = []
    for _ in range(n):
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                       b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>")
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [" + b" ".join(kids) + b"] /Count %d >>" % n
    return _assemble(objects, 1)


def page_tree_dag(fanout: int = 64, depth: int = 6) -> bytes:
    """A page tree whose every level lists the one node below it ``fanout`` times: a few
    hundred bytes that claim fanout**depth pages (64**6 = 6.9e10) to a reader that walks it."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b"",
                            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
                            _stream(_text_content(["A page reached through a page tree of shared nodes."]))]
    objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                   b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>")
    below, count = len(objects), 1
    for level in range(depth):
        count *= fanout
        node = b"<< /Type /Pages /Kids [" + b" ".join([b"%d 0 R" % below] * fanout) + b"] /Count %d >>" % count
        if level == depth - 1:
            objects[1] = node
        else:
            objects.append(node)
            below = len(objects)
    return _assemble(objects, 1)


def nested_objects(depth: int = 200_000) -> bytes:
    """A page whose resources hold arrays nested ``depth`` deep (a recursive parser's stack)."""
    nest = b"[" * depth + b"]" * depth
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /X " + nest
               + b" /Font << /F1 5 0 R >> >> /Contents 4 0 R >>",
               _stream(_text_content(["A page with deeply nested resources."])),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    return _assemble(objects, 1)


def flate_bomb(inflated_mb: int = 300, unit: bytes = b"(aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa) Tj\n") -> bytes:
    """One page whose content stream inflates from under 1 MiB: ``inflated_mb`` MB of
    text-showing operators (~330-fold), or of ``unit`` (spaces: ~1000-fold, deflate's limit)."""
    compressor = zlib.compressobj(9)
    chunk = unit * (2**20 // len(unit))
    parts = [compressor.compress(b"BT /F1 1 Tf 72 740 Td\n")]
    parts += [compressor.compress(chunk) for _ in range(inflated_mb)]
    parts.append(compressor.compress(b"ET\n") + compressor.flush())
    data = b"".join(parts)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >> "
               b"/Contents 4 0 R >>",
               b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream",
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    return _assemble(objects, 1)


def blank_flate_bomb(inflated_mb: int = 1000) -> bytes:
    """A content stream of ``inflated_mb`` MB of spaces (a 1 GB buffer to inflate) around one line."""
    return flate_bomb(inflated_mb, b" " * 64)


BOMBS = {"many-pages": many_pages, "many-long-pages": lambda: many_pages(1500, 40), "page-tree-dag": page_tree_dag,
         "nested-objects": nested_objects, "flate-text": flate_bomb, "flate-blank": blank_flate_bomb}
