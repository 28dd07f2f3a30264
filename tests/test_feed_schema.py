"""Feed records built from real pages follow crawler_tasks/output/feed.schema.json."""
from __future__ import annotations

import copy
import glob
import json
from pathlib import Path

import jsonschema
import pytest

from crawler_tasks.dedup.simhash import to_hex
from crawler_tasks.output.feed import SCHEMA_PATH, SCHEMA_VERSION, feed_record
from crawler_tasks.output.warc import warc_date
from crawler_tasks.parse.page import analyse
from crawler_tasks.parse.text import extract_text

DATA = Path(__file__).parent / "data" / "text"
SCHEMA = json.loads(SCHEMA_PATH.read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA, format_checker=jsonschema.FormatChecker())
# Installed Debian documentation, when present (bench/text_quality.py says how): more real pages.
EXTRA = sorted(glob.glob("/usr/share/doc/debian-handbook/html/*/sect.*.html"))[::40][:20]


def build(body: bytes, url: str, *, full: bool = False) -> dict:
    result = analyse(body, url, {}, "full" if full else "main", 100_000, 12_000)
    parsed, page = result.parsed, result.text
    outlinks = [(link.url, link.text, ["nofollow"] if link.nofollow else []) for link in parsed.links]
    return feed_record(
        page, url=url, fetched_at=warc_date(1_700_000_000.5), fingerprint=result.fingerprint,
        simhash=to_hex(result.simhash) if result.simhash_words >= 50 else None, canonical=parsed.canonical,
        content_type="text/html; charset=utf-8", outlinks=outlinks,
    )


def test_schema_is_a_valid_versioned_2020_12_schema() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["$id"].endswith(f":{SCHEMA_VERSION}") and SCHEMA["version"] == SCHEMA_VERSION


@pytest.mark.parametrize("path", sorted(DATA.glob("*.html")) + [Path(p) for p in EXTRA], ids=lambda p: p.name)
def test_records_from_real_pages_validate(path: Path) -> None:
    record = build(path.read_bytes(), "https://docs.test/" + path.name, full=True)
    VALIDATOR.validate(record)
    assert record["schema_version"] == SCHEMA_VERSION
    assert record["word_count"] > 0 and record["outlinks"]
    assert "full_text" in record
    json.loads(json.dumps(record, ensure_ascii=False))  # what FeedWriter does


def test_record_fields_and_rel_tokens() -> None:
    body = (DATA / "python-atexit.html").read_bytes()
    record = build(body, "https://docs.python.test/atexit.html")
    assert "full_text" not in record
    assert record["lang"] == {"detected": "en", "confidence": record["lang"]["confidence"], "declared": "en"}
    assert record["simhash"] is not None and len(record["fingerprint"]) == 16
    page = extract_text(b"<p>x</p>", "u")
    links = feed_record(page, url="u", fetched_at="2024-01-01T00:00:00Z", fingerprint=None,
                        outlinks=[("https://a.test/", "A"), ("https://b.test/", "B", "Nofollow noopener")])["outlinks"]
    assert links == [{"url": "https://a.test/", "text": "A", "rel": []},
                     {"url": "https://b.test/", "text": "B", "rel": ["nofollow"]}]


@pytest.mark.parametrize(
    "breakage",
    [
        lambda r: r.pop("text"),
        lambda r: r.update(schema_version=2),
        lambda r: r.update(simhash="XYZ"),
        lambda r: r["lang"].update(confidence=1.5),
        lambda r: r.update(outlinks=[["https://a.test/", "old pair form"]]),
        lambda r: r.update(surprise=1),
    ],
)
def test_schema_rejects_broken_records(breakage) -> None:  # type: ignore[no-untyped-def]
    record = copy.deepcopy(build((DATA / "handbook-en-syslog.html").read_bytes(), "https://docs.test/x"))
    breakage(record)
    assert not VALIDATOR.is_valid(record)
