from __future__ import annotations

import pytest

from crawler_tasks.exceptions import ConfigError
from crawler_tasks.parse import budget
from crawler_tasks.robots import product_token
from crawler_tasks.settings import Settings


def test_defaults_validate():
    s = Settings()
    s.validate()
    assert product_token(s.USER_AGENT) == "simbot"   # the robots.txt name workers use by default
    assert s.uses_default_contact
    # the parse room's own defaults (used by callers without settings) are the settings' defaults
    assert (s.MAX_TEXT_CHARS, s.PARSE_MAX_ELEMENTS, s.PARSE_MAX_DEPTH, s.PARSE_MAX_ATTRS) == (
        budget.MAX_TEXT_CHARS, budget.MAX_ELEMENTS, budget.MAX_DEPTH, budget.MAX_ATTRS)


def test_env_overrides_and_types():
    env = {"CRAWLER_SHARDS": "4", "CRAWLER_MIN_DELAY_S": "0.5", "CRAWLER_ALLOW_PRIVATE": "yes",
           "CRAWLER_ALLOWED_DOMAINS": "a.com, b.org", "CRAWLER_MAX_PAGES": "1_000"}
    s = Settings.from_env(env)
    assert (s.SHARDS, s.MIN_DELAY_S, s.ALLOW_PRIVATE, s.ALLOWED_DOMAINS, s.MAX_PAGES) == (
        4, 0.5, True, ("a.com", "b.org"), 1000)


def test_flags_override_env():
    s = Settings.from_env({"CRAWLER_SHARDS": "4"}, SHARDS=3, MIN_DELAY_S=None)
    assert s.SHARDS == 3 and s.MIN_DELAY_S == Settings().MIN_DELAY_S


def test_roundtrip_through_env():
    s = Settings.from_env({}, SHARDS=5, RESOLVE=("a=127.0.0.1",), OBEY_ROBOTS=False)
    assert Settings.from_env(s.to_env()) == s


@pytest.mark.parametrize("env, message", [
    ({"CRAWLER_SHARDS": "many"}, "SHARDS"),
    ({"CRAWLER_SHARDS": "0"}, "SHARDS must be >= 1"),
    ({"CRAWLER_ALLOW_PRIVATE": "perhaps"}, "ALLOW_PRIVATE"),
    ({"CRAWLER_BLOOM_ERROR_RATE": "2"}, "BLOOM_ERROR_RATE"),
    ({"CRAWLER_USER_AGENT": "  "}, "USER_AGENT"),
])
def test_bad_values_are_clear_errors(env, message):
    with pytest.raises(ConfigError, match=message):
        Settings.from_env(env)


def test_unknown_override_rejected():
    with pytest.raises(ConfigError, match="unknown setting"):
        Settings.from_env({}, NOPE=1)
