"""The parse budget: caps applied to the raw document before lexbor builds a tree.

lexbor follows the HTML5 tree-building algorithm, which is quadratic on deeply
nested markup (new elements scan the stack of open elements), on unclosed
formatting elements (every ``</div>`` leaves them to be re-created before the
next text: "reconstruct the active formatting elements") and on one element
with many attributes.  Measured on the reference machine: 512 pending ``<b>``
then 50k paragraphs, 24 s; 40k attributes on one element, 2.4 s.

So one pass of a small tokenizer runs first.  It knows where tags are (the
HTML tokenizer's comments, bogus comments, quoted attribute values, raw-text
and RCDATA elements) and keeps a rough model of the stack of open elements and
of the formatting elements waiting for reconstruction, and enforces:

* ``max_elements``: elements the tree builder would create, reconstructed ones
  included; the document is cut before the first one over the cap;
* ``max_depth``: open elements plus pending formatting elements; start tags
  that would go deeper are dropped (replaced by a space);
* ``max_attrs``: attributes of one element; the rest of that tag is dropped but for
  the first of each name the parser reads (href, rel, title...).

Where the tokenizer cannot know what the tree builder will do (foreign
content, script escapes, CDATA sections) it takes the reading that counts
more, so a contrived page may meet a cap early, but no markup hides from it.
A document within the caps is returned unchanged (no copy).  Pure; never
raises on any str or bytes.

Cost: linear in the document (no pattern here backtracks; every model step is O(1)
but closing a pending formatting element), ~1-3 us a tag in Python: 50-300 ms on real
pages of 0.5-8 MB, more than lexbor's own parse of them. So the parse stage, whose
child process has a hard deadline (``parse.sandbox``), first parses every page as it
is under a short deadline and runs this pass only on a late one (a bomb: lexbor takes
2-3 s on 0.5 MiB of one). A parse without a deadline runs it on the documents that
could hold a bomb of consequence (``needs_budget``: large, tag-dense, or with a giant tag).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

__all__ = ["MAX_ATTRS", "MAX_DEPTH", "MAX_ELEMENTS", "MAX_TEXT_CHARS", "apply_budget", "needs_budget"]

MAX_ELEMENTS = 100_000
MAX_DEPTH = 512  # Blink's tree depth cap
MAX_ATTRS = 64
# A page's text is cut here (settings.MAX_TEXT_CHARS): the longest of 2,775 real documentation
# pages (tests/realpages.py) has 285k characters of main text, and 11 have over 100k.
MAX_TEXT_CHARS = 500_000
# Below these a document skips the tokenizer (the sandbox deadline covers it).
_PLAIN_MAX_CHARS = 512 * 1024
_PLAIN_MAX_TAGS = 8_000
_GIANT_TAG_S = re.compile(r"<[^<>]{8192}")
_GIANT_TAG_B = re.compile(rb"<[^<>]{8192}")

_WS = r"\t\n\f\r "
# One attribute, as the tokenizer reads it: a name (its first character may be
# "="), then maybe "=" and a value; an unterminated quote runs to the end. Every
# quantifier is possessive: there is one reading, so no pattern here backtracks
# (a value that may also be read as names was split into dozens of fake attributes,
# exponentially slowly: 2.3 s for 15 attributes of 3 words, a real SVG path cut mid-quote).
_NAME = rf"[^{_WS}/>][^{_WS}/>=]*+"
_VALUE = rf"[{_WS}]*+=[{_WS}]*+(?:\"[^\"]*+(?:\"|\Z)|'[^']*+(?:'|\Z)|[^{_WS}>]*+)"
_ATTR = rf"{_NAME}(?:{_VALUE})?+"
_TOKEN = (
    r"<(?:"
    r"(!--(?:-?>|.*?(?:--!?>|\Z)))"  # 1: comment ("<!-->" and "<!--->" end at once)
    r"|([!?][^>]*+(?:>|\Z)|/(?![A-Za-z])[^>]*+(?:>|\Z))"  # 2: doctype, bogus comment, CDATA
    rf"|(/?)([A-Za-z][^{_WS}/>]*+)((?:[{_WS}/]++|{_ATTR})*+)(>|\Z)"  # 3-6: tag
    r")"
)
_TOKEN_S = re.compile(_TOKEN, re.S)
_TOKEN_B = re.compile(_TOKEN.encode(), re.S)
_NON_WS_S = re.compile(rf"[^{_WS}]")
_NON_WS_B = re.compile(rf"[^{_WS}]".encode())

# What a tag name means to the model; names not listed are ordinary elements.
_ORDINARY, _IGNORED, _SIBLING, _RAW, _FORMAT, _CELL, _FOREIGN_ROOT, _PLAINTEXT = range(8)
_KIND_NAMES = {
    _IGNORED: "area base basefont bgsound br col embed frame hr image img input keygen link meta param source track wbr",
    # closed by the next one of the same name when it is (nearly) on top
    _SIBLING: "p li dd dt option optgroup rb rt rp rtc tr tbody thead tfoot colgroup a nobr",
    _RAW: "script style xmp iframe noembed noframes noscript textarea title",  # text content (scripting on)
    _FORMAT: "b big code em font i s small strike strong tt u",
    _CELL: "td th caption",
    _FOREIGN_ROOT: "svg math",
    _PLAINTEXT: "plaintext",
}
_KIND: dict[Any, int] = {}
for _kind, _names in _KIND_NAMES.items():
    for _name in _names.split():
        _KIND[_name] = _KIND[_name.encode()] = _kind
# Start tags before which the tree builder does not re-create pending formatting elements.
_NO_RECONSTRUCT_NAMES = (
    "address article aside blockquote center details dialog dir div dl fieldset figcaption figure footer header "
    "hgroup main menu nav ol p search section summary ul h1 h2 h3 h4 h5 h6 pre listing form li dd dt plaintext "
    "table hr base basefont bgsound link meta noframes script style template title html body frameset head "
    "caption col colgroup frame tbody td tfoot th thead tr textarea iframe noembed noscript".split()
)
_NO_RECONSTRUCT: frozenset[Any] = frozenset(_NO_RECONSTRUCT_NAMES) | {n.encode() for n in _NO_RECONSTRUCT_NAMES}
# Closing one of these clears the formatting elements opened inside it.
_MARKER_NAMES = "td th caption table template object applet marquee".split()
_MARKERS: frozenset[Any] = frozenset(_MARKER_NAMES) | {n.encode() for n in _MARKER_NAMES}


@lru_cache(maxsize=64)
def _closer(name: Any, is_bytes: bool) -> re.Pattern[Any]:
    """Finds the end tag that closes a raw-text element."""
    text = name.decode("latin-1") if isinstance(name, bytes) else name
    pattern = rf"</{text}[{_WS}/>]"
    return re.compile(pattern.encode() if is_bytes else pattern, re.I)


@lru_cache(maxsize=16)
def _first_attrs(n: int, is_bytes: bool) -> re.Pattern[Any]:
    """Matches the first n attributes of an attribute section (with separators); each
    one atomic, so a section with fewer fails in one pass."""
    pattern = rf"(?>[{_WS}/]*+{_ATTR}){{{n}}}"
    return re.compile(pattern.encode() if is_bytes else pattern)


# One attribute and the separators before it: name and value as groups 1 and 2.
_ATTR_AT = rf"[{_WS}/]*+({_NAME})((?:{_VALUE})?+)"
_ATTR_AT_S = re.compile(_ATTR_AT)
_ATTR_AT_B = re.compile(_ATTR_AT.encode())
# Attributes the parser reads: kept even past max_attrs (first of each name).
_READ_NAMES = "href rel name content http-equiv charset alt title aria-label lang".split()
_READ: frozenset[Any] = frozenset(_READ_NAMES) | {n.encode() for n in _READ_NAMES}


def _cap_attrs(attrs: Any, max_attrs: int, is_bytes: bool) -> Any:
    """The first max_attrs attributes, then the first later one of each name the parser reads."""
    keep = _first_attrs(max_attrs, is_bytes).match(attrs)
    cut = keep.end() if keep is not None else 0
    at = (_ATTR_AT_B if is_bytes else _ATTR_AT_S).match
    sep: Any = b" " if is_bytes else " "
    extra: dict[Any, Any] = {}
    pos = cut
    while (m := at(attrs, pos)) is not None:
        name = m.group(1).lower()
        if name in _READ and name not in extra:
            extra[name] = sep + m.group(1) + m.group(2)
        pos = m.end()
    return attrs[:cut] + attrs[:0].join(extra.values())


class _Model:
    """Open elements (name, and for formatting ones a key) and pending formatting ones.

    Counts by name and key make each step O(1) but for closing a pending element, which
    costs its distance from the top: a stray end tag of another name must not walk the
    list (1 MiB of ``</b>`` after 505 pending ``<i>`` took 4.6 s)."""

    __slots__ = ("foreign", "open", "pending", "pending_keys", "pending_names", "stack")

    def __init__(self) -> None:
        self.stack: list[tuple[Any, Any]] = []
        self.open: dict[Any, int] = {}
        self.pending: list[tuple[Any, Any]] = []
        self.pending_keys: dict[Any, int] = {}
        self.pending_names: dict[Any, int] = {}
        self.foreign = 0  # open <svg>/<math>: raw-text rules do not apply inside

    def push(self, name: Any, key: Any, kind: int) -> None:
        self.stack.append((name, key))
        self.open[name] = self.open.get(name, 0) + 1
        if kind == _FOREIGN_ROOT:
            self.foreign += 1

    def pop_to(self, names: Any, marker: bool) -> None:
        """Pop up to and including the topmost element named in names (one must be open).

        Formatting elements popped on the way wait for reconstruction, unless a
        marker element (a cell, a table...) is closed: then they are dropped.
        """
        stack, open_, keys = self.stack, self.open, self.pending_keys
        while stack:
            name, key = stack.pop()
            open_[name] -= 1
            if _KIND.get(name) == _FOREIGN_ROOT:
                self.foreign -= 1
            if name in names:
                return
            if key is not None and not marker and keys.get(key, 0) < 3:  # Noah's ark: at most 3 identical ones
                self.pending.append((name, key))
                keys[key] = keys.get(key, 0) + 1
                self.pending_names[name] = self.pending_names.get(name, 0) + 1

    def reconstruct(self) -> int:
        """Put the pending formatting elements back on the stack; returns how many."""
        n = len(self.pending)
        for name, key in self.pending:
            self.push(name, key, _FORMAT)
        self.pending.clear()
        self.pending_keys.clear()
        self.pending_names.clear()
        return n

    def cell_open(self) -> bool:
        get = self.open.get
        return bool(get("td") or get("th") or get("caption") or get(b"td") or get(b"th") or get(b"caption"))

    def end_tag(self, name: Any) -> None:
        """Close the element if open, else forget a pending formatting one."""
        if self.open.get(name):
            self.pop_to((name,), name in _MARKERS)
        elif name in _ROW_NAMES and self.cell_open():
            self.pop_to(_CELL_NAMES, True)
        elif self.pending_names.get(name):
            pending = self.pending
            for i in range(len(pending) - 1, -1, -1):
                if pending[i][0] == name:
                    key = pending.pop(i)[1]
                    self.pending_keys[key] -= 1
                    self.pending_names[name] -= 1
                    break


_CELL_NAMES = frozenset(("td", "th", "caption", b"td", b"th", b"caption"))
_ROW_NAMES = frozenset(("tr", "tbody", "thead", "tfoot", b"tr", b"tbody", b"thead", b"tfoot"))


def _close_sibling(model: _Model, name: Any) -> None:
    """A new <p>, <li>, <tr>... closes an open one of its name found under formatting elements only."""
    if name in _ROW_NAMES and model.cell_open():
        model.pop_to(_CELL_NAMES, True)
    if not model.open.get(name):
        return
    stack = model.stack
    for i in range(len(stack) - 1, max(-1, len(stack) - 9), -1):
        entry_name, key = stack[i]
        if entry_name == name:
            model.pop_to((name,), False)
            return
        if key is None:
            return  # a container in between: the tree builder would not close it either


def needs_budget(data: str | bytes) -> bool:
    """Whether a document is big, tag-dense or has a giant tag (C-speed checks): one
    that could hold a bomb of consequence, for a parse that has no deadline."""
    if len(data) > _PLAIN_MAX_CHARS:
        return True
    if isinstance(data, bytes):
        return data.count(b"<") > _PLAIN_MAX_TAGS or _GIANT_TAG_B.search(data) is not None
    return data.count("<") > _PLAIN_MAX_TAGS or _GIANT_TAG_S.search(data) is not None


def apply_budget(
    data: bytes | str, max_elements: int = MAX_ELEMENTS, max_depth: int = MAX_DEPTH, max_attrs: int = MAX_ATTRS
) -> tuple[bytes | str, str | None]:
    """Return (document within the caps, names of the caps that bit or None).

    The names are "max_elements", "max_depth", "max_attrs", comma-separated in
    the order they first bit.  A cap of 0 or less is off; all three off skips
    the pass.
    """
    if max_elements <= 0 and max_depth <= 0 and max_attrs <= 0:
        return data, None
    max_elements = max_elements if max_elements > 0 else 1 << 62
    max_depth = max_depth if max_depth > 0 else 1 << 62
    max_attrs = max_attrs if max_attrs > 0 else 1 << 30
    is_bytes = isinstance(data, bytes)
    doc: Any = data
    finditer = (_TOKEN_B if is_bytes else _TOKEN_S).finditer
    non_ws = (_NON_WS_B if is_bytes else _NON_WS_S).search
    space: Any = b" " if is_bytes else " "
    model = _Model()
    stack, pending, kinds = model.stack, model.pending, _KIND
    out: list[Any] = []  # rewritten pieces, once a cap bit
    copied = 0  # doc[:copied] is in out
    bit: list[str] = []
    elements = 0
    cut = -1  # where the document is cut, once max_elements bit
    long_attrs = 2 * max_attrs  # fewer characters cannot hold more attributes
    pos = 0
    end = len(doc)
    while 0 <= pos < end:
        resume = -1
        for m in finditer(doc, pos):
            name = m.group(4)
            if name is None:
                continue  # comment, doctype, bogus comment
            start = m.start()
            if pending and non_ws(doc, pos, start) is not None:
                elements += model.reconstruct()  # text re-creates them
                if elements > max_elements:
                    cut = pos
                    break
            pos = m.end()
            name = name.lower()
            if m.group(3):
                model.end_tag(name)
                continue
            elements += 1
            if pending and name not in _NO_RECONSTRUCT:
                elements += model.reconstruct()  # so do most start tags
            if elements > max_elements:
                cut = start
                break
            kind = kinds.get(name, _ORDINARY)
            replacement: Any = None
            attrs = m.group(5)
            if len(attrs) > long_attrs and _first_attrs(max_attrs + 1, is_bytes).match(attrs) is not None:
                replacement = doc[start : m.start(5)] + _cap_attrs(attrs, max_attrs, is_bytes) + m.group(6)
                if "max_attrs" not in bit:
                    bit.append("max_attrs")
            if kind == _IGNORED:
                pass
            elif (kind == _RAW or kind == _PLAINTEXT) and not model.foreign:
                # Skip the text content; a raw-text end tag is then stray, ignored.
                close = _closer(name, is_bytes).search(doc, pos) if kind == _RAW else None
                resume = close.start() if close is not None else end
            elif kind == _FOREIGN_ROOT and not model.foreign and attrs[-1:] in ("/", b"/"):
                pass  # <svg/>: self-closing is honoured for foreign elements
            elif kind == _CELL and not (model.open.get("table") or model.open.get(b"table")):
                pass  # a cell outside a table: the tree builder ignores the tag
            elif kind == _SIBLING and len(stack) + len(pending) >= max_depth:
                pass  # kept (links!) but not counted: they do not nest in themselves
            elif len(stack) + len(pending) >= max_depth:
                replacement = space
                if "max_depth" not in bit:
                    bit.append("max_depth")
            else:
                if kind == _CELL and model.cell_open():
                    model.pop_to(_CELL_NAMES, True)  # a new cell closes the open one
                elif kind == _SIBLING:
                    _close_sibling(model, name)
                model.push(name, m.group(0) if kind == _FORMAT else None, kind)
            if replacement is not None:
                out.append(doc[copied:start])
                out.append(replacement)
                copied = pos
            if resume >= 0:
                pos = resume
                break
        else:
            break  # no more tokens
        if cut >= 0:
            break
    if cut >= 0:
        bit.append("max_elements")
        out.append(doc[copied:cut])
    elif not bit:
        return data, None
    else:
        out.append(doc[copied:])
    joined: Any = (b"" if is_bytes else "").join(out)
    return joined, ",".join(bit)
