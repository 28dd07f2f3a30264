from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler_tasks.fetch.politeness import (
    REASONS,
    FetchOutcome,
    HostState,
    PolitenessPolicy,
    crawl_delay_verdict,
    next_contact,
    parse_retry_after,
)

END = 1_700_000_000.0  # 2023-11-14T22:13:20Z
# Mercator's factor rule (10 x the last fetch time), opt-in since the crawl's default is 0
NO_JITTER = PolitenessPolicy(backoff_jitter=0.0, delay_factor=10.0)


def ok(duration: float = 0.05, status: int | None = 200, retry_after: str | None = None) -> FetchOutcome:
    return FetchOutcome(end=END, duration_s=duration, status=status, retry_after=retry_after, failed=False)


def fail(duration: float = 0.05, status: int | None = 503, retry_after: str | None = None) -> FetchOutcome:
    return FetchOutcome(end=END, duration_s=duration, status=status, retry_after=retry_after, failed=True)


def http_date(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")


# --- which term wins ------------------------------------------------------------

@pytest.mark.parametrize(
    "policy, state, outcome, wait, reason",
    [
        # fast fetch: the floor wins
        (NO_JITTER, HostState(), ok(0.05), 1.0, "min_delay"),
        # 10 x 0.5 s = 5 s beats the 1 s floor
        (NO_JITTER, HostState(), ok(0.5), 5.0, "factor"),
        # a timeout of 100 s is capped at 30 s, not parked for 1000 s
        (NO_JITTER, HostState(), ok(100.0), 30.0, "factor"),
        # Crawl-delay beats the factor
        (NO_JITTER, HostState(crawl_delay_s=12.0), ok(0.5), 12.0, "crawl_delay"),
        # Crawl-delay above the cap is applied at the cap
        (NO_JITTER, HostState(crawl_delay_s=500.0), ok(0.5), 60.0, "crawl_delay"),
        (NO_JITTER, HostState(crawl_delay_s=math.inf), ok(0.5), 60.0, "crawl_delay"),
        # ... and ignored when not honoured, or when nonsense
        (PolitenessPolicy(honour_crawl_delay=False, delay_factor=10.0), HostState(crawl_delay_s=12.0), ok(0.5), 5.0,
         "factor"),
        (NO_JITTER, HostState(crawl_delay_s=-3.0), ok(0.05), 1.0, "min_delay"),
        (NO_JITTER, HostState(crawl_delay_s=math.nan), ok(0.05), 1.0, "min_delay"),
        # 429 with Retry-After beats a 5 s backoff
        (NO_JITTER, HostState(), fail(status=429, retry_after="120"), 120.0, "retry_after"),
        # Retry-After is capped
        (NO_JITTER, HostState(), fail(status=503, retry_after="86400"), 3600.0, "retry_after"),
        # Retry-After on a 200 is not a politeness signal
        (NO_JITTER, HostState(), ok(status=200, retry_after="120"), 1.0, "min_delay"),
        # Retry-After on 429 even when the caller did not mark it failed
        (NO_JITTER, HostState(), ok(status=429, retry_after="30"), 30.0, "retry_after"),
        # garbage Retry-After falls back to the backoff
        (NO_JITTER, HostState(), fail(status=503, retry_after="soon"), 5.0, "backoff"),
        # first failure: base; third: base * 4
        (NO_JITTER, HostState(), fail(status=None), 5.0, "backoff"),
        (NO_JITTER, HostState(consecutive_failures=2), fail(status=500), 20.0, "backoff"),
        # backoff capped
        (NO_JITTER, HostState(consecutive_failures=5), fail(status=500), 160.0, "backoff"),
        (NO_JITTER, HostState(consecutive_failures=6), fail(status=500), 320.0, "backoff"),
        (PolitenessPolicy(backoff_jitter=0.0, park_after_failures=0), HostState(consecutive_failures=400),
         fail(status=500), 600.0, "backoff"),
        # small Retry-After loses to a larger backoff
        (NO_JITTER, HostState(consecutive_failures=3), fail(status=503, retry_after="2"), 40.0, "backoff"),
        # ties go to the earlier reason: factor 10 x 0.1 == min_delay 1.0
        (NO_JITTER, HostState(), ok(0.1), 1.0, "min_delay"),
        (NO_JITTER, HostState(crawl_delay_s=5.0), ok(0.5), 5.0, "factor"),
        # a negative or NaN duration (clock skew) counts as zero
        (NO_JITTER, HostState(), ok(-4.0), 1.0, "min_delay"),
        (NO_JITTER, HostState(), ok(math.nan), 1.0, "min_delay"),
        # min_delay above the factor cap still wins
        (PolitenessPolicy(min_delay_s=45.0), HostState(), ok(1000.0), 45.0, "min_delay"),
        # zero-delay policy
        (PolitenessPolicy(min_delay_s=0.0, delay_factor=0.0), HostState(), ok(3.0), 0.0, "min_delay"),
    ],
)
def test_winning_term(policy: PolitenessPolicy, state: HostState, outcome: FetchOutcome,
                      wait: float, reason: str) -> None:
    te, new_state, why = next_contact(policy, state, outcome, random.Random(1))
    assert why == reason
    assert te == pytest.approx(END + wait)
    assert new_state.parked_until == 0.0


def test_success_resets_failures_and_keeps_crawl_delay() -> None:
    state = HostState(consecutive_failures=5, crawl_delay_s=2.5, last_fetch_s=9.0)
    te, new_state, _ = next_contact(NO_JITTER, state, ok(0.3))
    assert new_state == HostState(consecutive_failures=0, crawl_delay_s=2.5, last_fetch_s=0.3)
    assert te == pytest.approx(END + 3.0)


def test_input_state_is_not_mutated() -> None:
    state = HostState(consecutive_failures=2)
    next_contact(NO_JITTER, state, fail())
    assert state == HostState(consecutive_failures=2)


def test_failures_count_up() -> None:
    state = HostState()
    for expected in range(1, 5):
        _, state, _ = next_contact(NO_JITTER, state, fail())
        assert state.consecutive_failures == expected


def test_non_finite_end_is_rejected() -> None:
    with pytest.raises(ValueError):
        next_contact(NO_JITTER, HostState(), FetchOutcome(math.nan, 0.1, 200, None, False))


# --- jitter ---------------------------------------------------------------------

@pytest.mark.parametrize("failures_before", [0, 1, 2, 4])
def test_jitter_stays_within_bounds(failures_before: int) -> None:
    policy = PolitenessPolicy()
    rng = random.Random(1234)
    nominal = 5.0 * 2**failures_before
    seen = set()
    for _ in range(300):
        te, _, reason = next_contact(policy, HostState(consecutive_failures=failures_before), fail(), rng)
        wait = te - END
        assert reason == "backoff"
        assert nominal * 0.75 - 1e-9 <= wait <= nominal * 1.25 + 1e-9
        seen.add(round(wait, 6))
    assert len(seen) > 100  # it actually varies
    assert min(seen) < nominal * 0.8 and max(seen) > nominal * 1.2  # and spans the band


def test_jitter_is_reproducible_with_a_seed() -> None:
    a = [next_contact(PolitenessPolicy(), HostState(), fail(), random.Random(7))[0] for _ in range(3)]
    b = [next_contact(PolitenessPolicy(), HostState(), fail(), random.Random(7))[0] for _ in range(3)]
    assert a == b


def test_jitter_never_exceeds_backoff_max() -> None:
    policy = PolitenessPolicy(park_after_failures=0)
    rng = random.Random(99)
    waits = [next_contact(policy, HostState(consecutive_failures=20), fail(), rng)[0] - END for _ in range(300)]
    assert max(waits) <= 600.0
    assert min(waits) >= 600.0 * 0.75 - 1e-9


def test_jitter_without_rng_uses_module_random() -> None:
    te, _, reason = next_contact(PolitenessPolicy(), HostState(), fail())
    assert reason == "backoff"
    assert END + 3.75 <= te <= END + 6.25


# --- parking ----------------------------------------------------------------------

def test_park_transition_and_reset() -> None:
    policy = PolitenessPolicy(backoff_jitter=0.0, park_after_failures=3, park_s=7200.0)
    state = HostState(crawl_delay_s=2.0)
    reasons = []
    for _ in range(3):
        te, state, reason = next_contact(policy, state, fail(status=None))
        reasons.append(reason)
    assert reasons == ["backoff", "backoff", "parked"]
    assert te == END + 7200.0
    assert state.parked_until == END + 7200.0
    assert state.consecutive_failures == 3

    # another failure after the park: parked again straight away
    te, state, reason = next_contact(policy, state, fail(status=None))
    assert (reason, te, state.consecutive_failures) == ("parked", END + 7200.0, 4)

    # one success unparks and resets
    te, state, reason = next_contact(policy, state, ok())
    assert reason == "crawl_delay"
    assert te == END + 2.0
    assert state.consecutive_failures == 0
    assert state.parked_until == 0.0


def test_default_policy_parks_on_eighth_failure() -> None:
    state = HostState()
    for n in range(1, 9):
        te, state, reason = next_contact(PolitenessPolicy(), state, fail(), random.Random(n))
        assert (reason == "parked") == (n == 8)
    assert te == END + 6 * 3600.0


def test_park_never_shortens_a_longer_retry_after() -> None:
    policy = PolitenessPolicy(park_after_failures=1, park_s=60.0, backoff_jitter=0.0)
    te, state, reason = next_contact(policy, HostState(), fail(status=503, retry_after="900"))
    assert reason == "parked"
    assert te == END + 900.0 == state.parked_until


def test_park_disabled_with_zero() -> None:
    policy = PolitenessPolicy(park_after_failures=0, backoff_jitter=0.0)
    _, state, reason = next_contact(policy, HostState(consecutive_failures=1000), fail())
    assert reason == "backoff" and state.parked_until == 0.0


# --- Retry-After ------------------------------------------------------------------

NOW = 784111777.0  # Sun, 06 Nov 1994 08:49:37 GMT, the RFC's example date


@pytest.mark.parametrize(
    "value, expected",
    [
        ("120", 120.0),
        ("0", 0.0),
        ("  42 ", 42.0),
        ("007", 7.0),
        ("99999999999999999999999", float(2**31)),
        ("9" * 5000, float(2**31)),  # longer than int() accepts
        ("2147483649", float(2**31)),
        # the three HTTP-date forms, 60 s after NOW
        ("Sun, 06 Nov 1994 08:50:37 GMT", 60.0),
        ("Sunday, 06-Nov-94 08:50:37 GMT", 60.0),
        ("Sun Nov  6 08:50:37 1994", 60.0),
        ("sun, 06 nov 1994 08:50:37 gmt", 60.0),
        ("Sun, 6 Nov 1994 08:50:37 GMT", 60.0),
        ("Sunday, 06-Nov-1994 08:50:37 GMT", 60.0),
        ("Sun, 06 Nov 1994 08:49:60 GMT", 22.0),  # leap second read as :59
        # dates in the past mean "now"
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("Sunday, 06-Nov-94 07:00:00 GMT", 0.0),
        # far future dates are returned as-is (the policy caps them)
        ("Fri, 31 Dec 9999 23:59:59 GMT", 253402300799.0 - NOW),
    ],
)
def test_parse_retry_after_valid(value: str, expected: float) -> None:
    assert parse_retry_after(value, NOW) == pytest.approx(expected)


@pytest.mark.parametrize(
    "value",
    [
        None, "", "   ", "-5", "+5", "1.5", "1e3", "soon", "0x10", "１２",  # full-width digits
        "120, 120", "NaN", "inf",
        "Sun, 06 Nov 1994 08:49:37",        # no GMT
        "Sun, 06 Nov 1994 08:49:37 PST",
        "Sun, 31 Feb 1994 08:49:37 GMT",    # no such day
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Xyz, 06 Nov 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 25:49:37 GMT",
        "Sun, 06 Nov 1994 08:61:37 GMT",
        "Sun, 06-Nov-94 08:49:37 GMT",      # rfc850 needs the long day name
        "Sunday, 06 Nov 1994 08:49:37 GMT",  # IMF needs the short one
        "Sun Nov  6 08:49:37 1994 GMT",
        "Sun, 06 Nov 0000 08:49:37 GMT",
    ],
)
def test_parse_retry_after_invalid(value: str | None) -> None:
    assert parse_retry_after(value, NOW) is None


def test_rfc850_two_digit_year_window() -> None:
    now_2030 = datetime(2030, 6, 1, tzinfo=UTC).timestamp()
    # "85" would be 2085, more than 50 years ahead of 2030: it is 1985, the past
    assert parse_retry_after("Tuesday, 01-Jan-85 00:00:00 GMT", now_2030) == 0.0
    # "31" is 2031, next year
    ahead = parse_retry_after("Wednesday, 01-Jan-31 00:00:00 GMT", now_2030)
    expected = datetime(2031, 1, 1, tzinfo=UTC).timestamp() - now_2030
    assert ahead == pytest.approx(expected)


def test_retry_after_date_through_next_contact() -> None:
    outcome = FetchOutcome(end=END, duration_s=0.1, status=503, retry_after=http_date(END + 300), failed=True)
    te, _, reason = next_contact(NO_JITTER, HostState(), outcome)
    assert (te, reason) == (END + 300.0, "retry_after")


# --- Crawl-delay verdict ------------------------------------------------------------

SKIP = PolitenessPolicy(skip_host_over_max_crawl_delay=True)


@pytest.mark.parametrize(
    "policy, crawl_delay, expected",
    [
        (PolitenessPolicy(), None, (None, False)),
        (PolitenessPolicy(), 0.0, (0.0, False)),
        (PolitenessPolicy(), 5.0, (5.0, False)),
        (PolitenessPolicy(), 60.0, (60.0, False)),
        (PolitenessPolicy(), 61.0, (60.0, False)),
        (PolitenessPolicy(), math.inf, (60.0, False)),
        (PolitenessPolicy(), -1.0, (None, False)),
        (PolitenessPolicy(), math.nan, (None, False)),
        (SKIP, 60.0, (60.0, False)),
        (SKIP, 61.0, (None, True)),
        (SKIP, math.inf, (None, True)),
        (SKIP, 3.0, (3.0, False)),
        (PolitenessPolicy(honour_crawl_delay=False), 500.0, (None, False)),
    ],
)
def test_crawl_delay_verdict(policy: PolitenessPolicy, crawl_delay: float | None,
                             expected: tuple[float | None, bool]) -> None:
    assert crawl_delay_verdict(policy, crawl_delay) == expected


# --- policy validation and HostState round trip ------------------------------------

@pytest.mark.parametrize(
    "kwargs",
    [
        {"min_delay_s": -1.0}, {"delay_factor": math.nan}, {"max_factor_delay_s": math.inf},
        {"backoff_jitter": 1.0}, {"backoff_jitter": -0.1}, {"park_after_failures": -1},
        {"park_s": -5.0},
    ],
)
def test_policy_rejects_bad_values(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        PolitenessPolicy(**kwargs)  # type: ignore[arg-type]


def test_policy_rejects_wrong_types() -> None:
    with pytest.raises(TypeError):
        PolitenessPolicy(min_delay_s="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        PolitenessPolicy(park_after_failures=2.5)  # type: ignore[arg-type]


def test_host_state_fields_shape() -> None:
    fields = HostState(consecutive_failures=3, crawl_delay_s=None, last_fetch_s=0.1, parked_until=5.0).to_fields()
    assert fields == {"consecutive_failures": "3", "crawl_delay_s": "", "last_fetch_s": "0.1", "parked_until": "5.0",
                      "address": "", "address_until": "0.0", "dns_error": "", "dns_failures": "0"}
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())


def test_host_state_crawl_delay_field_tolerates_inf_and_nan() -> None:
    assert HostState.from_fields(HostState(crawl_delay_s=math.inf).to_fields()).crawl_delay_s == math.inf
    assert HostState.from_fields({"crawl_delay_s": "nan"}).crawl_delay_s is None


def test_host_state_from_fields_defaults_bytes_and_unknown_keys() -> None:
    assert HostState.from_fields({}) == HostState()
    raw = {b"consecutive_failures": b"2", b"crawl_delay_s": b"1.5", b"te": b"123", b"queue": b"7"}
    assert HostState.from_fields(raw) == HostState(consecutive_failures=2, crawl_delay_s=1.5)


def test_host_state_keeps_its_address_through_a_fetch() -> None:
    """The DNS fields ride along: a fetch's new state keeps the host's address."""
    state = HostState(address="192.0.2.7", address_until=END + 300, dns_failures=0)
    assert HostState.from_fields(state.to_fields()) == state
    _, after, _ = next_contact(NO_JITTER, state, ok(0.05))
    assert (after.address, after.address_until) == ("192.0.2.7", END + 300)


@pytest.mark.parametrize(
    "fields",
    [
        {"consecutive_failures": "-1"}, {"consecutive_failures": "1.0"}, {"consecutive_failures": "x"},
        {"crawl_delay_s": "abc"}, {"last_fetch_s": "nan"}, {"parked_until": "inf"},
        {"dns_failures": "-2"}, {"address_until": "soon"},
    ],
)
def test_host_state_from_fields_rejects_corruption(fields: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        HostState.from_fields(fields)


finite = st.floats(min_value=0.0, max_value=1e12, allow_nan=False, allow_infinity=False)


@settings(max_examples=100, deadline=None, database=None)
@given(
    failures=st.integers(min_value=0, max_value=10**6),
    crawl_delay=st.none() | finite | st.just(math.inf),
    last=finite,
    parked=finite,
)
def test_host_state_round_trip(failures: int, crawl_delay: float | None, last: float, parked: float) -> None:
    state = HostState(failures, crawl_delay, last, parked)
    assert HostState.from_fields(state.to_fields()) == state


# --- properties -----------------------------------------------------------------------

small = st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False)

policies = st.builds(
    PolitenessPolicy,
    min_delay_s=small,
    delay_factor=st.floats(min_value=0.0, max_value=100.0),
    max_factor_delay_s=small,
    honour_crawl_delay=st.booleans(),
    max_crawl_delay_s=small,
    skip_host_over_max_crawl_delay=st.booleans(),
    max_retry_after_s=small,
    backoff_base_s=small,
    backoff_max_s=small,
    backoff_jitter=st.floats(min_value=0.0, max_value=0.99),
    park_after_failures=st.integers(min_value=0, max_value=20),
    park_s=st.floats(min_value=0.0, max_value=1e5),
)
states = st.builds(
    HostState,
    consecutive_failures=st.integers(min_value=0, max_value=10_000),
    crawl_delay_s=st.none() | st.floats(allow_nan=True, allow_infinity=True),
    last_fetch_s=small,
    parked_until=st.floats(min_value=0.0, max_value=2e9),
)
retry_after_values = st.none() | st.text(max_size=40) | st.integers(-10, 10**12).map(str) | st.builds(
    http_date, st.floats(min_value=0.0, max_value=4e9)
)
outcomes = st.builds(
    FetchOutcome,
    end=st.floats(min_value=0.0, max_value=4e9),
    duration_s=st.floats(allow_nan=True, allow_infinity=True),
    status=st.none() | st.sampled_from([200, 301, 404, 429, 500, 503]),
    retry_after=retry_after_values,
    failed=st.booleans(),
)


@settings(max_examples=150, deadline=None, database=None)
@given(policy=policies, state=states, outcome=outcomes, seed=st.integers(0, 2**32))
def test_te_is_bounded(policy: PolitenessPolicy, state: HostState, outcome: FetchOutcome, seed: int) -> None:
    te, new_state, reason = next_contact(policy, state, outcome, random.Random(seed))
    assert te >= outcome.end + policy.min_delay_s
    assert te <= outcome.end + policy.max_wait_s
    caps = max(policy.min_delay_s, policy.max_factor_delay_s, policy.max_crawl_delay_s,
               policy.max_retry_after_s, policy.backoff_max_s, policy.park_s)
    assert te <= outcome.end + caps
    assert reason in REASONS
    assert new_state.consecutive_failures == (state.consecutive_failures + 1 if outcome.failed else 0)
    if reason == "parked":
        assert outcome.failed
        assert new_state.parked_until == te
    else:
        assert new_state.parked_until == 0.0


@settings(max_examples=100, deadline=None, database=None)
@given(value=st.text(max_size=60), now=st.floats(min_value=0.0, max_value=4e9))
def test_parse_retry_after_never_raises_and_is_non_negative(value: str, now: float) -> None:
    result = parse_retry_after(value, now)
    assert result is None or (result >= 0.0 and math.isfinite(result))


def test_policy_defaults_are_the_settings_defaults():
    """The policy is built from the settings of the same names; their defaults agree, so
    a default changed in one place only is caught here."""
    import dataclasses

    from crawler_tasks.settings import Settings
    from crawler_tasks.stages.worker import politeness_policy

    policy, settings = PolitenessPolicy(), Settings()
    named = [f.name for f in dataclasses.fields(PolitenessPolicy) if hasattr(settings, f.name.upper())]
    assert len(named) >= 11
    assert politeness_policy(settings) == policy
    assert all(getattr(policy, name) == getattr(settings, name.upper()) for name in named)
