"""The pinned corpus of real pages that no defence (parse budget, encoding sniffing, render
detection, ...) may drop, cut or slow: named Debian documentation packages, which ``.ci/run``
installs, and a few vendored pages whose sources and licences are in their folders' READMEs.

A test takes one package's pages with ``package_pages(name)`` (parametrize over
``PACKAGES``): a package that is not installed is skipped, with its name and the command
that installs it; one that is installed but shows fewer pages than pinned fails, since the
corpus would have shrunk unseen. Nothing else under /usr/share/doc is read, so a machine
with more documentation installed runs the same tests.

Real PDFs (``pdf_documents()``): two vendored beside the pages, and the manuals that
Debian packages of this machine's image hold (``PDF_FILES``; a missing one is left out,
and the vendored two always count).
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Package:
    name: str        # the Debian package
    root: str        # its HTML folder
    pattern: str     # the pages, a glob under root
    min_pages: int   # as many as Debian 12's package holds, rounded down


PACKAGES = (
    Package("python-django-doc", "/usr/share/doc/python-django-doc/html", "**/*.html", 650),  # 692
    Package("git-doc", "/usr/share/doc/git-doc", "**/*.html", 230),                          # 242
    Package("postgresql-doc-15", "/usr/share/doc/postgresql-doc-15/html", "*.html", 1100),   # 1169
    Package("python3-doc", "/usr/share/doc/python3-doc/html", "**/*.html", 500),              # 530
    Package("sphinx-doc", "/usr/share/doc/sphinx-doc/html", "**/*.html", 130),                # 137
)
PACKAGE_NAMES = [p.name for p in PACKAGES]
VENDORED_DIRS = (REPO / "tests/data/realpages", REPO / "tests/data/text")


def package_pages(name: str) -> list[Path]:
    """The package's pages, sorted; skips the calling test when it is not installed."""
    package = next(p for p in PACKAGES if p.name == name)
    root = Path(package.root)
    if not root.is_dir():
        pytest.skip(f"real-page corpus: {name} is not installed (apt-get install {name}, as .ci/run does)")
    pages = sorted(path for path in root.glob(package.pattern) if path.is_file())
    assert len(pages) >= package.min_pages, f"{name}: {len(pages)} pages under {root}, {package.min_pages} pinned"
    return pages


def vendored_pages() -> list[Path]:
    pages = sorted(path for folder in VENDORED_DIRS for path in folder.glob("*.html"))
    assert len(pages) >= 4
    return pages


def corpus(name: str) -> list[Path]:
    """One part of the corpus by name: a package, or "vendored"."""
    return vendored_pages() if name == "vendored" else package_pages(name)


PARTS = [*PACKAGE_NAMES, "vendored"]

# Installed PDFs: (the Debian package, its file; .gz ones are read decompressed). All are
# in the python machine image's packages; each is 15-400 pages of English documentation.
PDF_FILES = (
    ("bzip2-doc", "/usr/share/doc/bzip2/manual.pdf.gz"),
    ("libtasn1-doc", "/usr/share/doc/libtasn1-doc/libtasn1.pdf"),
    ("nettle-dev", "/usr/share/doc/nettle-dev/nettle.pdf.gz"),
    ("zlib1g-dev", "/usr/share/doc/zlib1g-dev/crc-doc.1.0.pdf.gz"),
    ("valgrind", "/usr/share/doc/valgrind/valgrind_manual.pdf.gz"),   # 1.4 MB: over the 1 MiB body cap
)
VENDORED_PDFS = ("shared-mime-info-spec.pdf", "fontconfig-user.pdf")


def pdf_documents() -> list[tuple[str, bytes]]:
    """(name, bytes) of every real PDF on this machine: the vendored ones first."""
    docs = [(name, (REPO / "tests/data/realpages" / name).read_bytes()) for name in VENDORED_PDFS]
    for package, path in PDF_FILES:
        file = Path(path)
        if file.is_file():
            data = file.read_bytes()
            docs.append((f"{package}:{file.name.removesuffix('.gz')}", gzip.decompress(data) if path.endswith(".gz") else data))
    return docs
