"""The pure rooms (URL normalization, robots matching, parsing, fingerprints, simhash,
delay rules) import neither Redis nor Celery: they are unit-tested and reused alone."""
from __future__ import annotations

import subprocess
import sys

import pytest

PURE = ["crawler_tasks.urls", "crawler_tasks.robots", "crawler_tasks.parse.page", "crawler_tasks.parse.sandbox",
        "crawler_tasks.parse.sitemaps", "crawler_tasks.dedup.fingerprint", "crawler_tasks.dedup.simhash",
        "crawler_tasks.dedup.dust", "crawler_tasks.dedup.evidence", "crawler_tasks.dedup.minhash",
        "crawler_tasks.fetch.politeness", "crawler_tasks.freshness.rate", "crawler_tasks.freshness.allocate",
        "crawler_tasks.freshness.policy", "crawler_tasks.ops.messages"]


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_redis_or_celery(module: str) -> None:
    code = f"import sys, {module}; print(sorted(m for m in ('redis', 'celery', 'kombu') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
