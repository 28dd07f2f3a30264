"""Is this page an app shell whose text and links appear only after its scripts run?

Pure and cheap (no browser): a page without any ``<script`` is never flagged (running
nothing changes nothing); otherwise the HTML is parsed once with selectolax and four
signals are tried, the first that holds is the reason:

- ``empty-mount``: an empty framework mount point (``#root``, ``#app``, ``#__next``,
  ``#__nuxt``, ...) on a page with little text;
- ``noscript``: a ``<noscript>`` saying JavaScript is required, little text, few links;
- ``thin``: almost no text and hardly a link, but scripts to run;
- ``script-heavy``: inline script code (an inlined bundle, 16 kB or more) dwarfs the
  visible text, and few links.

The thresholds lean towards "no": a render costs a browser and, per subresource, a
host delay, while a static page with a bit of script is the common case.

A search page whose script runs the search (Sphinx's ``search.html``: "Please activate
JavaScript to enable the search functionality") is taken as it is, on purpose: its own
content is there, and what its script adds are results for a query the crawler does not
have, so a render finds nothing more to crawl. It is known by a JavaScript notice that
names search; an empty framework mount is still flagged first (an app with a search box).
"""
from __future__ import annotations

import re

from selectolax.lexbor import LexborHTMLParser, LexborNode

# ids and tags where single-page-app frameworks mount their tree
MOUNT_IDS = frozenset({"root", "app", "__next", "__nuxt", "___gatsby", "svelte", "q-app", "react-root",
                       "app-root", "main-app"})
MOUNT_TAGS = frozenset({"app-root"})  # Angular's default component element
# below this many visible characters a page is "little text"
LITTLE_TEXT_CHARS = 1000
THIN_TEXT_CHARS = 200
FEW_LINKS = 5
SCRIPT_HEAVY_LINKS = 10
SCRIPT_HEAVY_TEXT_CHARS = 1500
SCRIPT_TO_TEXT_RATIO = 20
# an inlined bundle, not a page's helper: AsciiDoc's table-of-contents script (5.9 kB)
# sits on short static pages of real text (git's manual pages)
SCRIPT_HEAVY_MIN_CHARS = 16_384
# only the head of a huge page is looked at (the shell signals sit near the top)
MAX_SCAN_BYTES = 512 * 1024

_NOT_CONTENT = frozenset({"_comment", "-comment", "script", "noscript", "style", "template"})
_SCRIPT = re.compile(rb"<script", re.I)
_JS_REQUIRED = re.compile(
    r"(enable|activate|turn on|allow)\s+(your\s+)?javascript|javascript\s+(is\s+)?(required|disabled|must be enabled"
    r"|needs to be enabled|is needed)|requires?\s+javascript|need\s+(to\s+)?(have\s+)?javascript|"
    r"javascript\s+to\s+(run|use|view)|without\s+javascript", re.I)
_SEARCH = re.compile(r"\bsearch", re.I)


def needs_render(html: bytes | str, parsed_text_chars: int | None = None, n_links: int | None = None) -> str | None:
    """The reason this page looks like an app shell, or None (a page to take as it is).

    ``parsed_text_chars`` and ``n_links`` are what the caller's parser found (visible
    text length, outlinks); None: counted here from the same parse."""
    raw = html.encode("utf-8", "replace") if isinstance(html, str) else html
    raw = raw[:MAX_SCAN_BYTES]
    if not _SCRIPT.search(raw):
        return None
    tree = LexborHTMLParser(raw)
    scripts = tree.css("script")
    inline_chars = 0
    external = 0
    for script in scripts:
        kind = (script.attributes.get("type") or "").strip().lower()
        if kind and kind not in ("module", "text/javascript", "application/javascript"):
            continue  # JSON data blocks, templates: not code that runs
        if script.attributes.get("src"):
            external += 1
        else:
            inline_chars += len(script.text(deep=True))
    if not external and not inline_chars:
        return None
    notices = [text for text in (node.text(deep=True) for node in tree.css("noscript")) if _JS_REQUIRED.search(text)]
    if parsed_text_chars is None:
        parsed_text_chars = _visible_chars(tree)
    if n_links is None:
        n_links = len(tree.css("a[href]"))

    if parsed_text_chars < LITTLE_TEXT_CHARS:
        mount = _empty_mount(tree)
        if mount:
            return f"empty-mount:{mount}"
    if any(_SEARCH.search(text) for text in notices):
        return None  # a search page: its script needs a query to add anything
    if parsed_text_chars < LITTLE_TEXT_CHARS and n_links < SCRIPT_HEAVY_LINKS and notices:
        return "noscript"
    if parsed_text_chars < THIN_TEXT_CHARS and n_links < FEW_LINKS:
        return "thin"
    if (parsed_text_chars < SCRIPT_HEAVY_TEXT_CHARS and n_links < SCRIPT_HEAVY_LINKS
            and inline_chars >= SCRIPT_HEAVY_MIN_CHARS
            and inline_chars > SCRIPT_TO_TEXT_RATIO * max(parsed_text_chars, 1)):
        return "script-heavy"
    return None


def _empty_mount(tree: LexborHTMLParser) -> str | None:
    """``#id`` or tag name of an empty mount element (no element child, no text)."""
    body = tree.body
    if body is None:
        return None
    for node in body.traverse(include_text=False):
        ident = (node.attributes.get("id") or "").strip()
        if ident in MOUNT_IDS or node.tag in MOUNT_TAGS:
            if _is_empty(node):
                return f"#{ident}" if ident in MOUNT_IDS else node.tag
    return None


def _is_empty(node: LexborNode) -> bool:
    """Nothing but whitespace, comments and script-like children."""
    child = node.child
    while child is not None:
        if child.tag == "-text":
            if (child.text_content or "").strip():
                return False
        elif child.tag not in _NOT_CONTENT:
            return False
        child = child.next
    return True


def _visible_chars(tree: LexborHTMLParser) -> int:
    """Visible text length of the body: scripts, styles and noscript left out."""
    body = tree.body
    if body is None:
        return 0
    for node in body.css("script, style, noscript, template"):
        node.decompose()
    return len(" ".join(body.text(deep=True, separator=" ").split()))
