"""Main text and metadata extraction (crawler_tasks.parse.text) on real and odd pages."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from crawler_tasks.dedup.fingerprint import (
    OTHER_WHITESPACE,
    collapse_words,
    collapse_words_utf8,
    content_fingerprint,
    fingerprint_collapsed,
    lower_utf8,
)
from crawler_tasks.dedup.simhash import page_simhash
from crawler_tasks.exceptions import ConfigError
from crawler_tasks.parse.boilerplate import COMMENTS_MARK, trim_boilerplate
from crawler_tasks.parse.html import prepare_document
from crawler_tasks.parse.page import analyse
from crawler_tasks.parse.text import MAX_INPUT_BYTES, PageText, extract_text
from crawler_tasks.settings import Settings

DATA = Path(__file__).parent / "data" / "text"


def page(name: str, **kw: object) -> PageText:
    return extract_text((DATA / name).read_bytes(), "https://docs.test/" + name, **kw)  # type: ignore[arg-type]


def test_handbook_page_main_text_drops_navigation() -> None:
    p = page("handbook-en-syslog.html", full_text=True)
    assert p.error is None
    assert p.title == "9.5. syslog System Events"
    assert "The rsyslogd daemon is responsible for collecting service messages" in p.text
    assert p.full_text is not None and "Download the ebook" in p.full_text
    assert "Download the ebook" not in p.text
    assert "\n\n" in p.text  # paragraph breaks kept
    assert "9.5.1. Principle and Mechanism" in p.headings
    assert p.lang == "en" and p.lang_confidence > 0.5
    assert p.lang_declared is None  # the page declares nothing
    assert p.word_count == len(p.text.split()) > 300


def test_sphinx_sidebar_and_its_headings_are_boilerplate() -> None:
    p = page("python-atexit.html")
    assert "atexit — Exit handlers" in p.headings
    assert "register()" in p.text
    assert "Previous topic" not in p.text and "Previous topic" not in p.headings
    assert "Report a Bug" not in p.text
    assert p.lang_declared == "en"
    whole = page("python-atexit.html", main_content=False)
    assert "Previous topic" in whole.text and whole.full_text is None


def test_language_detected_from_text_not_declaration() -> None:
    p = page("handbook-de-syslog.html")
    assert p.lang == "de" and p.lang_confidence > 0.5
    html = (
        b'<html lang="fr"><body><p>This page says that it is French, but every sentence on it is written in '
        b"plain English, which the detector should notice from the words and letters it reads, whatever "
        b"the markup claims about the language of the document.</p>"
    )
    q = extract_text(html, "https://x.test/")
    assert (q.lang, q.lang_declared) == ("en", "fr")
    assert extract_text(b"<p>ok</p>", "u", headers={"Content-Language": "pt-BR, en"}).lang_declared == "pt-br"
    assert extract_text(b"<p>Hi</p>", "u").lang is None  # too short to guess


def test_link_dense_lists_go_prose_lists_stay() -> None:
    menu = "".join(f'<li><a href="/p{i}">Section number {i}</a></li>' for i in range(12))
    prose = "".join(
        f"<li>Step {i}: run the command and read the <a href='/m{i}'>manual</a> before going on.</li>"
        for i in range(5)
    )
    html = (
        f"<html><body><div class='x'><ul>{menu}</ul></div><div><h1>Guide</h1>"
        f"<p>{'A long paragraph of real content about configuring the service. ' * 8}</p>"
        f"<ol>{prose}</ol></div></body></html>"
    )
    p = extract_text(html, "https://x.test/")
    assert "Section number 3" not in p.text
    assert "Step 2: run the command" in p.text
    assert p.headings == ["Guide"]


META = """<html><head><title> A  title </title>
<meta name="description" content="  Short   summary. ">
<meta property="article:published_time" content="2024-03-01T10:00:00+02:00">
<script type="application/ld+json">{not json</script>
<script type="application/ld+json">{"@graph": [{"@type": "WebPage"},
  {"@type": "Article", "datePublished": "1999-01-01", "dateModified": "2024-03-05T08:00:00Z"}]}</script>
</head><body><p>Body text.</p></body></html>"""


def test_metadata_dates_and_description() -> None:
    p = extract_text(META, "https://x.test/")
    assert p.title == "A title"
    assert p.description == "Short summary."
    assert p.published == "2024-03-01T08:00:00Z"  # meta wins over JSON-LD, offset made UTC
    assert p.modified == "2024-03-05T08:00:00Z"  # from the JSON-LD @graph
    micro = '<article><time itemprop="datePublished" datetime="2023-12-24">Dec 24</time>' \
            '<meta itemprop="dateModified" content="Tue, 02 Jan 2024 10:00:00 GMT"><p>x</p></article>'
    q = extract_text(micro, "u")
    assert (q.published, q.modified) == ("2023-12-24T00:00:00", "2024-01-02T10:00:00Z")
    assert extract_text('<meta property="og:description" content="OG">', "u").description == "OG"
    bad = extract_text('<meta property="article:published_time" content="last tuesday">', "u")
    assert bad.published is None and bad.error is None


def test_jsonld_is_bounded() -> None:
    deep = "[" * 100_000 + "]" * 100_000  # json.loads recursion limit
    wide = '{"a": [' + ",".join('{"b": 1}' for _ in range(15_000)) + '], "datePublished": "2020-01-01"}'
    huge = '{"a": "' + "x" * 300_000 + '", "datePublished": "2020-01-01"}'  # past the per-block cap
    found = {}
    for name, blob in (("deep", deep), ("wide", wide), ("huge", huge)):
        p = extract_text(f'<script type="application/ld+json">{blob}</script><p>x</p>', "u")
        assert p.error is None
        found[name] = p.published
    assert found == {"deep": None, "wide": "2020-01-01T00:00:00", "huge": None}


@pytest.mark.parametrize(
    "bad",
    [b"", b"\x00\xff\xfe" * 1000, "<div>" * 200_000, "<" * 10_000, b"<html><body>\xe9\xe8</body>", "\ud800 lone surrogate"],
)
def test_bad_input_never_raises(bad: bytes | str) -> None:
    p = extract_text(bad, "https://x.test/")
    assert isinstance(p, PageText)


def test_wrong_type_is_an_error_not_an_exception() -> None:
    p = extract_text(12345, "u")  # type: ignore[arg-type]
    assert p.error is not None and "TypeError" in p.error and p.text == ""


@hsettings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000) | st.text(max_size=3000))
def test_arbitrary_input_gives_a_page(data: bytes | str) -> None:
    p = extract_text(data, "https://x.test/")
    assert p.word_count == len(p.text.split())
    assert 0.0 <= p.lang_confidence <= 1.0


def test_caps_on_input_and_output() -> None:
    big = b"<p>" + b"word " * (MAX_INPUT_BYTES // 5 + 1000) + b"</p>"
    p = extract_text(big, "u", max_chars=1000)
    assert p.truncated and len(p.text) <= 1000
    assert extract_text(b"<p>" + b"word " * 500 + b"</p>", "u", max_chars=50, full_text=True).full_text is not None


def test_fingerprints_hash_the_collapsed_text() -> None:
    body = (DATA / "handbook-en-syslog.html").read_bytes()
    result = analyse(body, "http://h.test/syslog.html", {}, "main", 100_000, 12_000)
    flat = " ".join(result.text.text.split())
    assert "\n" in result.text.text and result.text.word_count == len(flat.split())
    assert result.fingerprint == content_fingerprint(result.text.text) == fingerprint_collapsed(flat)
    assert (result.simhash, result.simhash_words) == page_simhash(
        flat, [link.text for link in result.parsed.links], result.text.title or result.parsed.title, 12_000)
    assert analyse(body, "http://h.test/syslog.html", {}, "main", 100_000).simhash_words == 0


def test_other_whitespace_is_every_separator_of_str_split_but_space_and_newline() -> None:
    separators = {chr(c) for c in range(0x110000) if len(f"a{chr(c)}b".split()) == 2}
    assert set(OTHER_WHITESPACE) == separators - {" ", "\n"}


_SPACES = st.sampled_from([" ", "\n", "\n\n", "  ", "\t", "\r\n", "\xa0", "\u3000", "\x1f", "\u2028"])


@given(st.lists(st.one_of(st.text(alphabet=st.characters(blacklist_categories=("Zs", "Zl", "Zp", "Cc"))),
                          _SPACES), max_size=40).map("".join))
def test_collapse_words_is_split_and_join(text: str) -> None:
    words = text.split()
    assert collapse_words(text) == (" ".join(words), len(words))
    flat, data, _ = collapse_words_utf8(text)
    assert data == flat.encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("text", ["", " ", "\n", "a", "a b\nc\n\nd", "\na", "a\n", "a\n\n\nb", "a  b",
                                  "a\tb", "a\xa0b", "a\u3000b", "a\x85b", "\u2003"])
def test_collapse_words_edges(text: str) -> None:
    assert collapse_words(text) == (" ".join(text.split()), len(text.split()))
    assert collapse_words_utf8(text)[1] == " ".join(text.split()).encode("utf-8", "surrogatepass")


@given(st.lists(st.one_of(st.text(), st.sampled_from(["Σ", "ΑΣ ", "İ", "é", "É", "ß", "ǅ", "\ud800", "ﬃ", "Ω"])),
                max_size=20).map("".join))
def test_lower_utf8_is_lower_then_encode(text: str) -> None:
    assert lower_utf8(text) == text.lower().encode("utf-8", "surrogatepass")
    assert lower_utf8(text, text.encode("utf-8", "surrogatepass")) == text.lower().encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("text", ["", "plain ascii TEXT", "déjà vu", "DÉJÀ", "ΟΔΟΣ end", "aΣ", "İstanbul", "x\ud800y"])
def test_lower_utf8_edges(text: str) -> None:
    assert lower_utf8(text) == text.lower().encode("utf-8", "surrogatepass")


def test_text_mode_setting() -> None:
    assert Settings().TEXT_MODE == "main"
    assert Settings.from_env({"CRAWLER_TEXT_MODE": "full"}).TEXT_MODE == "full"
    with pytest.raises(ConfigError):
        Settings.from_env({"CRAWLER_TEXT_MODE": "everything"})


def test_stray_byte_in_utf8_document_is_one_replacement_not_mojibake() -> None:
    doc = prepare_document(b"<html><head><meta charset=utf-8></head><body><p>Caf\xc3\xa9 cr\xc3\xa8me \xff here.</p></body></html>")
    assert isinstance(doc.data, bytes)
    p = extract_text(doc, "u")
    assert p.text == "Café crème \ufffd here."
    assert extract_text("\ud800<p>Text after a lone surrogate.</p>", "u").text == "Text after a lone surrogate."


def test_nested_menus_go_with_their_outer_menu() -> None:
    sub = "".join(f'<li><a href="/s{i}">Subsection {i}</a></li>' for i in range(3))
    toc = "".join(f'<li><a href="/p{i}">Chapter {i}</a><ul>{sub}</ul></li>' for i in range(1000))
    html = (f"<html><body><ul>{toc}</ul><h2>Intro</h2>"
            f"<p>{'Words of the real content that a reader came for. ' * 6}</p>"
            f"<table><tr><td>{'A prose cell with one ' * 9}<a href='/x'>link</a></td></tr></table></body></html>")
    p = extract_text(html, "u", full_text=True)
    assert "Chapter" not in p.text and "Subsection" not in p.text
    assert "Words of the real content" in p.text and "A prose cell" in p.text
    assert p.full_text is not None and "Chapter 999" in p.full_text  # the whole text was taken before the drop


def test_long_prose_list_with_many_links_stays() -> None:
    items = "".join(f"<li>Item {i} explains one option of the tool in a sentence, see <a href='/o{i}'>o{i}</a>.</li>"
                    for i in range(600))  # more links than one block's sample
    p = extract_text(f"<html><body><h1>Options</h1><ol>{items}</ol></body></html>", "u")
    assert "Item 599 explains one option" in p.text


def test_hidden_elements_leave_headings_and_text_nested_ones_too() -> None:
    html = ("<html><body><h2>Setup<script>var hidden = 1;</script><svg><svg><text>icon</text></svg>"
            "<math><mi>x</mi></math></svg></h2><p>Run the installer, then restart the service once.</p></body></html>")
    p = extract_text(html, "u", full_text=True)
    assert p.headings == ["Setup"] and p.title == "Setup"
    assert p.full_text is not None and "icon" not in p.full_text and "hidden" not in p.full_text


_PROSE = ("The council voted on Tuesday to keep the library open for another year, and the mayor said that "
          "the decision was the right one for the families who use it every week. ")


def test_article_keeps_headline_and_byline_and_loses_teasers_and_comments() -> None:
    teasers = "".join(f"<div><a href='/t{i}'>Teaser headline number {i}</a><p>Summary of another story that "
                      f"is {i} words long.</p></div>" for i in range(6))
    html = ("<html><body>"
            f"<article><h1>Library stays open</h1><p>By A. Writer, 12 January</p><p>{_PROSE * 2}</p>"
            f"<p>{_PROSE}</p></article><div><b>Comments are now closed for this story</b><br>Frank<br>"
            f"{'I could not agree more with the people who wrote before me about this library. ' * 3}</div>"
            f"<div>{teasers}</div></body></html>")
    p = extract_text(html, "u")
    assert p.text.startswith("Library stays open\n\nBy A. Writer")
    assert p.text.count("The council voted") == 3
    assert "Teaser" not in p.text and "Summary of another" not in p.text
    assert "Comments are now closed" not in p.text and "could not agree" not in p.text


def test_trim_keeps_lists_listings_and_other_languages() -> None:
    prose = _PROSE.strip()
    # nothing reads as prose: left as it is
    names = "\n".join(f"Name {i}" for i in range(20))
    assert trim_boilerplate(names, set()) == names
    # a heading repeated on each item of a listing is not the article's end
    listing = "\n\n".join(f"Post {i}\n{prose}\n{i + 2} comments" for i in range(3))
    assert trim_boilerplate(listing, set()).count("The council voted") == 3
    # once after the article it is
    assert trim_boilerplate(f"{prose}\n{prose}\n12 Responses to “Library”\n{prose}", set()).count("The council") == 2
    # text without English function words is judged on length and links only
    german = "Der Rat hat am Dienstag beschlossen, die Bibliothek ein weiteres Jahr offen zu halten, sagte er heute."
    text = f"Startseite\n{german * 2}\n{german * 2}\nImpressum"
    assert trim_boilerplate(text, {"Startseite", "Impressum"}) == f"{german * 2}\n{german * 2}"
    # a run of comment signatures starts the comments
    comments = "".join(f"Reader {i} says:\n{prose}\n" for i in range(3))
    assert trim_boilerplate(f"{prose}\n{prose}\n{comments}", set()) == f"{prose}\n{prose}"
    assert trim_boilerplate(f"{prose}\n{prose}\nThe mayor says:\n{prose}", set()).count("The council") == 3
    # a closing code sample or table stays; the page's furniture after it (a link) goes
    code = "import os\nprint(os.getcwd(), 'a fairly long line of code that has no English in it', 42, 43, 44)"
    assert trim_boilerplate(f"{prose}\n{prose}\n{code}\nNext page", {"Next page"}) == f"{prose}\n{prose}\n{code}"
    # a block led by a link is link text; one with a link inside a sentence is not
    assert trim_boilerplate(f"Read more about it\n{prose}\n{prose}\nRead more about it", {"Read more about it"}) \
        == f"{prose}\n{prose}"


def test_article_in_a_container_named_like_furniture_is_kept() -> None:
    # resiliparse's class rules drop a <div class="sidebar"> whole; when that leaves
    # (almost) nothing, the main text is the page's text, trimmed
    html = (f"<html><body><div class='sidebar'><h1>Library stays open</h1><p>{_PROSE * 3}</p><p>{_PROSE}</p>"
            "</div><div><a href='/about'>About us</a></div></body></html>")
    p = extract_text(html, "u")
    assert p.text.startswith("Library stays open") and p.text.count("The council voted") == 4
    assert "About us" not in p.text


@hsettings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["the", "Of", "AND", "x_y", "a1", "don’t", "İn", "ΣΑΣ", "naïve", "—", ", ", ".", " ",
                                 "\n", "\t", "\u00a0", "über", "It's", "9", "_"]), max_size=80),
       st.integers(0, 400))
def test_stop_word_share_byte_path_matches_the_word_regex(parts: list[str], cut: int) -> None:
    """The byte-table path (the whole text at once, its non-ASCII lines again by the
    regex) counts exactly the words and stop words that \\w+ over the lower-cased
    text counts, line by line and for the language sample."""
    import re

    from crawler_tasks.parse import boilerplate

    def regex_counts(text: str) -> tuple[int, int]:
        words = [w for line in text.split("\n") for w in re.findall(r"\w+", line.lower())]
        return sum(w in boilerplate._STOP_WORDS for w in words), len(words)

    text = "".join(parts)
    for sample in (text, text.encode("ascii", "ignore").decode()):
        assert boilerplate._stop_counts(sample) == regex_counts(sample)
        assert boilerplate._stop_counts(sample[:cut]) == regex_counts(sample[:cut])
        for line in sample.split("\n"):
            assert boilerplate._stop_counts(line) == regex_counts(line)
            assert not boilerplate._collapsed(line) or " ".join(line.split()) == line


def test_comment_marker_prefilter_misses_no_match() -> None:
    """Every line the comment-marker regex matches passes the cheap test in front of it:
    the letters of its literals match no other character under re.I than their cases."""
    import re
    import sys

    from crawler_tasks.parse import boilerplate

    letters = re.compile("[comentprl]", re.I)
    assert all(chr(c).lower() in "comentprl" for c in range(sys.maxunicode + 1) if letters.fullmatch(chr(c)))
    for line in ("12 Comments", "(3 RESPONSES", "4 replies to “x”", "Comments are now closed.", "Leave a Reply",
                 "POST YOUR COMMENT", "3 reſponses"):
        assert boilerplate._END_MARKER_RE.fullmatch(line) and boilerplate._may_end_article(line)


_STORY = ("The harbour board agreed on Monday to rebuild the old pier, and the engineers said that the work "
          "would take two summers because the tides leave only a few hours a day for it. ")


def _furnished(furniture: str, article: str = f"<p>{_STORY * 2}</p><p>{_STORY * 2}</p>") -> str:
    return (f"<html><body><div id='page'><h1>Pier to be rebuilt</h1>{article}{furniture}</div>"
            "<div><a href='/a'>Home</a> <a href='/b'>News</a></div></body></html>")


@pytest.mark.parametrize("furniture", [
    "<div class='share-box'><p>Share this story with your friends and family on every network that you use.</p></div>",
    "<div id='newsletter-signup'><p>Get the best of our reporting in your inbox: sign up for the newsletter, which is "
    "sent every Friday morning to all of our readers.</p></div>",
    "<div class='post-related'><p>The council will vote on the new ferry timetable before the summer, and the "
    "harbour master has said that he is in favour of it.</p></div>",
    "<div class='promo'><p>Subscribe now and read every one of our stories for a whole year at half of the price.</p>"
    "</div>",
    "<div class='entry-footer'><p>This story was first published in the morning edition and was updated at noon "
    "with the vote of the board.</p></div>",
    "<div class='article-tools'><p>Follow us on every one of the networks where we post the news of the day.</p></div>",
    "<div class='story-foot'><p>This page is best viewed in an up-to-date web browser with style sheets enabled, which "
    "all of the browsers of today are.</p></div>",
    "<div class='right-rail'><p>Most read: the harbour master says that the ferry timetable will change in the "
    "summer, when the work begins.</p></div>",
    "<div class='modal-dialog'><p>We use cookies to improve your experience of the site and to show you the "
    "stories that you will like.</p></div>",
])
def test_furniture_named_by_class_or_id_goes(furniture: str) -> None:
    """Prose-like blocks that neither resiliparse's class rules nor the link-density
    test remove, but whose class or id names them as furniture."""
    words = furniture.split("<p>")[1][:30]
    assert words in extract_text(_furnished(furniture), "u", main_content=False).text
    text = extract_text(_furnished(furniture), "u").text
    assert text.count("The harbour board agreed") == 4
    assert words not in text


@pytest.mark.parametrize("look_alike", [
    "<div class='commentary'><p>{}</p></div>",                              # an opinion column
    "<div class='shared-content'><p>{}</p></div>",                          # "shared" is no share box
    "<div class='post category-social tag-newsletter'><p>{}</p></div>",     # taxonomy names: the post's topics
    "<section id='social-security'><span id='x'></span><h2>4.2. Social security</h2><p>{}</p></section>",  # doc section
    "<section id='sharing-with-a-remote-team'><p>{}</p></section>",        # a heading's slug
    "<div class='football'><p>{}</p></div>",                                # "foot" is a word of its own
    "<div class='trail-guide'><p>{}</p></div>",                             # "rail" too
    "<div class='modality'><p>{}</p></div>",
    "<div class='share'><p>{}</p><p>{}</p><p>{}</p><p>{}</p></div>",        # the article itself, badly named
])
def test_furniture_look_alikes_stay(look_alike: str) -> None:
    block = look_alike.format(*[_STORY] * look_alike.count("{}"))
    text = extract_text(_furnished(block, f"<p>{_STORY}</p>"), "u").text
    assert text.count("The harbour board agreed") == 1 + look_alike.count("{}")


@pytest.mark.parametrize("tag", ["div", "aside", "ol"])
def test_comment_section_by_class_ends_the_article(tag: str) -> None:
    """A comment section named by its class or id goes, and the article ends where it
    was (resiliparse drops an aside, and an item of a list, by its tag alone: the mark
    is a paragraph of its own): an "About this blog" box after it goes too, though it
    reads as prose; a short "comments" link near the headline does not end the article."""
    comments = "".join(f"<li class='comment'><p>Reader {i}: I could not agree more with what the board decided, "
                       f"it is about time that someone did something about that pier, which is older than "
                       f"all of us.</p></li>" for i in range(4))
    about = ("<div class='about'><h3>About this blog</h3><p>This blog is written by the harbour reporters of the "
             "paper, who have covered the port and the people who work in it for more than twenty years.</p></div>")
    article = (f"<div class='comments-link'><a href='#c'>4 comments</a></div><p>{_STORY * 2}</p>"
               f"<div class='comments-count'>Four readers have commented on this story so far today.</div>"
               f"<p>{_STORY * 2}</p>")
    section = (f"<ol class='commentlist'>{comments}</ol>" if tag == "ol" else
               f"<{tag} id='comments'><h3>4 responses to “Pier to be rebuilt”</h3><ol>{comments}</ol></{tag}>")
    p = extract_text(_furnished(section + about, article), "u")
    assert p.text.count("The harbour board agreed") == 4
    assert "could not agree" not in p.text and "twenty years" not in p.text
    assert COMMENTS_MARK not in p.text and "\u2063" not in p.text


def test_stamped_signatures_of_several_names_start_the_comments() -> None:
    story = _STORY.strip()
    signed = "".join(f"Posted by {name} on May {i + 2}, 2008 11:{10 + i} AM\n{story}\n"
                     for i, name in enumerate(["Ann", "Bob", "Cy"]))
    assert trim_boilerplate(f"{story}\n{story}\n{signed}", set()) == f"{story}\n{story}"
    # a blog's front page: each post signed so by its one author, nothing is cut
    front = "".join(f"{story}\n# posted by Dana @ 9:{10 + i} PM\n" for i in range(3))
    assert trim_boilerplate(f"{story}\n{front}{story}", set()).count("The harbour board") == 5
    # the mark that parse.text leaves for a comment section ends the article and is never output
    assert trim_boilerplate(f"{story}\n{story}\n{COMMENTS_MARK}\n{story}", set()) == f"{story}\n{story}"
    assert trim_boilerplate(f"{COMMENTS_MARK}\nName\nName", set()) == "Name\nName"


def _deep(html: str) -> str:
    """The page's content four blocks below the body: past resiliparse's rules for the
    page's top levels, so that its rules for lists and class names are the ones at work."""
    return f"<html><body><div><div><div><div class='main'>{html}</div></div></div></div></body></html>"


@pytest.mark.parametrize("wrap", [_deep, lambda html: f"<html><body>{html}</body></html>"])
def test_prose_lists_with_links_stay_teaser_lists_go(wrap: Callable[[str], str]) -> None:
    """A list whose items are sentences with links in them stays, nested deep or near
    the top of the body (resiliparse drops every list with a fifth of link text, and
    every list near the top); a list whose items begin with their headline links (a
    teaser or "related" list) still goes, as do menus, one nested in a layout table
    (that the link-density pass, which measures outermost blocks, did not see), and a
    <ul> that only indents a column of links."""
    prose = "".join(f"<li>{who} <a href='/b{i}'>rebuilt the landing stage</a> of the north pier in {year}</li>"
                    for i, (who, year) in enumerate([("Ann", 1990), ("Bob", 2001), ("Cy", 2012)]))
    teasers = "".join(f"<li><a href='/t{i}'>Ferry timetable number {i}</a> A short summary of the story.</li>"
                      for i in range(4))
    menu = "".join(f"<li><a href='/m{i}'>Section {i}</a></li>" for i in range(6))
    nav = ("<ul><li><a href='/s'>Scoreboard</a></li><li>Schedules: <a href='/a'>North</a> | <a href='/b'>South</a>"
           "</li><li>Standings: <a href='/c'>North</a> | <a href='/d'>South</a></li><li><a href='/e'>Teams</a> | "
           "<a href='/f'>Statistics</a></li></ul>")
    indent = "<ul><b>Archives</b><br><a href='/y'>Yesterday's issue</a><br><a href='/d'>By date</a></ul>"
    html = wrap(f"<h1>Pier to be rebuilt</h1><p>{_STORY * 2}</p><ul>{prose}</ul>"
                f"<table><tr><td><p>{_STORY}</p>{nav}{indent}</td></tr></table><p>{_STORY * 2}</p>"
                f"<ul>{teasers}</ul><ul>{menu}</ul>")
    text = extract_text(html, "u").text
    assert "Bob rebuilt the landing stage of the north pier in 2001" in text
    assert text.count("The harbour board agreed") == 5
    assert "Ferry timetable" not in text and "short summary" not in text and "Section 3" not in text
    assert "Standings" not in text and "Statistics" not in text and "Yesterday" not in text


def test_embedded_quotation_stays_whatever_its_class_a_hidden_one_does_not() -> None:
    """An embedded post is quoted content (resiliparse drops it for its class:
    "twitter-tweet" reads as a social box); a quotation that its class hides stays hidden."""
    tweet = ("<blockquote class='twitter-tweet'><p>The old pier closes for two summers from Monday, "
             "the board says.</p>— Harbour Board (@harbourboard) May 2, 2024</blockquote>")
    hidden = "<blockquote class='visually-hidden'><p>Screen readers get a summary of the vote here.</p></blockquote>"
    text = extract_text(_deep(f"<h1>Pier</h1><p>{_STORY * 2}</p>{tweet}{hidden}<p>{_STORY * 2}</p>"), "u").text
    assert "The old pier closes for two summers from Monday" in text
    assert "Screen readers" not in text


def test_title_in_the_body_is_metadata() -> None:
    """A <title> printed in the body is no text of the page; the head's is its title."""
    html = ("<html><head><title>Pier to be rebuilt</title></head><body><title>Pier to be rebuilt - Harbour News"
            f"</title><h1>Pier to be rebuilt</h1><p>{_STORY * 3}</p></body></html>")
    p = extract_text(html, "u")
    assert p.title == "Pier to be rebuilt"
    assert "Harbour News" not in p.text and p.text.startswith("Pier to be rebuilt\n")


_BYLINE = "Filed by the harbour desk under Piers, Ferries and Tides"


@pytest.mark.parametrize(("block", "stays"), [
    (f"<div class='entry-meta'><span>{_BYLINE}</span></div>", False),
    (f"<div class='metadata'><span>{_BYLINE}</span></div>", False),
    (f"<p class='post-tags'>{_BYLINE}</p>", False),
    # a theme that names the article's wrapper so: more text than a byline or a list of tags
    (f"<div class='post-meta'><p>{_STORY}</p><p>{_BYLINE}</p><p>{_STORY}</p></div>", True),
    (f"<div class='information'><span>{_BYLINE}</span></div>", True),  # "info" only after post, entry...
    (f"<div class='metadatabase'><span>{_BYLINE}</span></div>", True),
])
def test_small_post_metadata_goes(block: str, stays: bool) -> None:
    """Bylines, categories and tags in blocks their class names as the post's metadata go."""
    text = extract_text(_furnished("", f"<p>{_STORY * 2}</p>{block}<p>{_STORY * 2}</p>"), "u").text
    assert (_BYLINE in text) is stays
    assert text.count("The harbour board agreed") == 4 + block.count(_STORY)


@pytest.mark.parametrize("name", ["comments", "footer"])
def test_big_block_named_like_furniture_survives_resiliparse_unless_it_is_comments_or_footer(name: str) -> None:
    """A block the class rules keep because it holds the page's text loses the name that
    resiliparse's own class rules (which weigh no text) would drop it by; a long comment
    section or footer is no article, and still goes."""
    wrapped = _deep(f"<h1>Pier</h1><div class='share_wrapper'><p>{_STORY * 2}</p><p>{_STORY * 2}</p></div>"
                    f"<div class='more'><p>{_STORY}</p></div>")
    assert extract_text(wrapped, "u").text.count("The harbour board agreed") == 5
    block = (f"<div class='{name}'>" + "".join(
        f"<p>Reader {i}: I could not agree more with what the board decided, it is about time that someone "
        f"did something about that pier, which is older than all of us and falls apart.</p>" for i in range(5))
        + "</div>")
    text = extract_text(_deep(f"<h1>Pier</h1><p>{_STORY * 2}</p><p>{_STORY * 2}</p>{block}"), "u").text
    assert text.count("The harbour board agreed") == 4 and "could not agree" not in text


@pytest.mark.parametrize("wrap", [_deep, lambda html: f"<html><body>{html}</body></html>"])
def test_figure_captions_and_object_fallbacks_stay_alt_texts_and_player_notices_do_not(
        wrap: Callable[[str], str]) -> None:
    """resiliparse's switch for alt texts also skips figures and objects whole: a caption,
    or the text that a page gives in place of a plugin's content, went with the image."""
    figure = ("<figure><img src='/p.jpg' alt='Photo of a grey stone pier at low tide'><figcaption>The old pier "
              "at low tide, photographed by the harbour board in March.</figcaption></figure>")
    movie = ("<object type='application/x-shockwave-flash' data='/v.swf'><p>The engineers explain how the "
             "tides limit the work on the pier.</p></object>")
    player = "<video src='/v.mp4'>Your browser does not support the video element.</video>"
    text = extract_text(wrap(f"<h1>Pier</h1><p>{_STORY * 2}</p>{figure}{movie}{player}<p>{_STORY * 2}</p>"),
                        "u").text
    assert "The old pier at low tide, photographed by the harbour board in March." in text
    assert "The engineers explain how the tides limit the work" in text
    assert "grey stone" not in text and "does not support" not in text
    assert text.count("The harbour board agreed") == 4


@pytest.mark.parametrize("wrap", [_deep, lambda html: f"<html><body>{html}</body></html>"])
def test_list_of_sentences_about_links_stays_however_much_link_text(wrap: Callable[[str], str]) -> None:
    """A changelog's items say who did what, and the what is a link: more link text than
    _PROSE_LIST_LINK_MAX, but words of their own in most items; a navigation list with
    one label per item ("Schedules: North | South") still goes."""
    done = "".join(f"<li>&#127775; {who} <a href='/b{i}'>fixed the crash of the timetable printer</a> in the "
                   f"ferry office</li>" for i, who in enumerate(["Ann", "Bob", "Cy"]))  # 0.63 of link text
    nav = "".join(f"<li>{label}: <a href='/{label}n'>North side</a> | <a href='/{label}s'>South side</a></li>"
                  for label in ("Schedules", "Standings", "Results"))
    text = extract_text(wrap(f"<h1>Pier news</h1><p>{_STORY * 2}</p><ul>{done}</ul><p>{_STORY * 2}</p>"
                             f"<ul>{nav}</ul>"), "u").text
    assert "Bob fixed the crash of the timetable printer in the ferry office" in text
    assert "Standings" not in text and "North side" not in text
    assert text.count("The harbour board agreed") == 4


def test_ul_that_indents_a_quotation_stays_one_that_indents_links_goes() -> None:
    """Old pages indent a quotation with a <ul> that has no items; resiliparse drops
    every <ul> near the top of the body.  An indent around a column of links still goes."""
    quote = ("<ul><i>Whenever a programmer adds skins to a media player, the speakers of his computer "
             "should play a loud and unpleasant noise.</i></ul>")
    links = ("<ul><b>Archives of the daily</b><br><a href='/y'>Yesterday's issue</a><br><a href='/d'>By date</a>"
             "</ul>")  # 0.55 of link text: not a block that _drop_link_dense removes
    text = extract_text(f"<html><body><h1>Players</h1><p>{_STORY * 2}</p><p><b>Makali wrote:</b></p>{quote}"
                        f"<p>{_STORY * 2}</p>{links}<p>{_STORY * 2}</p></body></html>", "u").text
    assert "Whenever a programmer adds skins to a media player" in text
    assert "Yesterday" not in text and "Archives" not in text
