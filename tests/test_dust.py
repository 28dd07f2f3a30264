"""Learned URL equivalence rules (dedup.dust, pure) and their per-host store
(dedup.rules, real Redis): evidence, counter-examples, trap shapes."""
from __future__ import annotations

import dataclasses
import random
from hashlib import blake2b

from crawler_tasks.dedup.dust import (
    applicable,
    apply_rules,
    candidate_rules,
    checks_prior,
    facet_shape,
    is_walk_step,
    known_prior,
    same_content,
    shape,
    walks,
)
from crawler_tasks.dedup.evidence import TextSketch
from crawler_tasks.dedup.rules import RuleDrop, UrlRules, _shapes_of, _walks
from crawler_tasks.frontier import Discovered, Frontier
from crawler_tasks.records import FetchedPage, Found, PageRecord, Parsed

H = "http://h.test"
TEMPLATE = "Home About Contact Calendar of the society: all our events, meetings and talks, by month and year."
WORDS = [a + b + c for a in "bcdfg" for b in "aeiou" for c in "klmnprst"]   # no digits: they fold


def text(seed: int | str, n: int) -> str:
    return " ".join(random.Random(str(seed)).sample(WORDS, n))


def test_candidate_rules_of_the_family():
    assert candidate_rules(f"{H}/a.html?ref=nav", f"{H}/a.html") == {"q:ref"}
    assert candidate_rules(f"{H}/a.html?ref=sidebar&ref=nav", f"{H}/a.html") == {"q:ref"}
    assert candidate_rules(f"{H}/a.html?ref=nav", f"{H}/a.html?ref=side") == {"q:ref"}
    assert candidate_rules(f"{H}/print/d/a.html", f"{H}/d/a.html") == {"p:print"}
    assert candidate_rules(f"{H}/d/", f"{H}/d/index.html") == {"i:index.html"}
    assert candidate_rules(f"{H}/default.aspx", f"{H}/") == {"i:default.aspx"}
    assert candidate_rules(f"{H}/a;cid=7/b", f"{H}/a/b") == {"m:cid"}
    assert candidate_rules(f"{H}/a.html", f"{H}/b.html") == set()
    assert candidate_rules(f"{H}/a?x=1&y=2", f"{H}/a") == set()      # two parameters: no one rule
    assert candidate_rules(f"{H}/print/", f"{H}/") == set()          # a prefix needs a rest


def test_apply_rules_removes_and_ends():
    rules = frozenset({"q:ref", "p:print", "p:amp", "i:index.html", "m:cid"})
    assert apply_rules(f"{H}/amp/print/d/index.html?ref=x&page=2", rules) == f"{H}/d/?page=2"
    assert apply_rules(f"{H}/a;cid=9?ref=1", rules) == f"{H}/a"
    assert apply_rules(f"{H}/a?page=2", rules) == f"{H}/a?page=2"
    assert apply_rules(f"{H}/index.html.bak", rules) == f"{H}/index.html.bak"
    assert {r for r, _ in applicable(f"{H}/x/index.php?a=1")} == {"q:a", "i:index.php", "p:x"}


def test_shapes_and_walks():
    assert shape(f"{H}/cal/2024/05?view=m&a=1") == "/cal/#/#?a&view"
    assert facet_shape(f"{H}/shop?color=red&size=m") == facet_shape(f"{H}/shop?size=s&sort=asc") == "/shop?&"
    assert facet_shape(f"{H}/shop?color=red") is None
    assert is_walk_step(f"{H}/cal/2024/5", f"{H}/cal/2024/6")
    assert is_walk_step(f"{H}/cal/2024/12", f"{H}/cal/2025/1")
    assert is_walk_step(f"{H}/list?page=3", f"{H}/list?page=2")
    assert not is_walk_step(f"{H}/article/100", f"{H}/article/107")
    assert not is_walk_step(f"{H}/cal/2024/5", f"{H}/other/2024/6")
    assert not is_walk_step(f"{H}/cal/2024/5", f"{H}/cal/2024/5")
    others = [f"{H}/cal/2024/5", f"{H}/other/2024/6", f"{H}/cal/2024/9", f"{H}/cal/x/6", f"{H}/about"]
    assert not walks(f"{H}/cal/2024/5", others)
    assert walks(f"{H}/cal/2024/5", [*others, f"{H}/cal/2024/4"])
    assert not walks(f"{H}/about", [f"{H}/about", f"{H}/team"])


def test_walks_of_a_page_given_only_its_own_shapes_links_is_walks():
    """The parse stage hands ``dust.walks`` only the links of the page's own shape (their
    shapes are cached per URL): the same answer on every page and link spelling."""
    rnd = random.Random(3)
    spell = [lambda: f"/cal/{rnd.randint(2023, 2025)}/{rnd.randint(1, 12)}", lambda: f"/list?page={rnd.randint(1, 5)}",
             lambda: f"/list?page={rnd.randint(1, 5)}&sort=asc", lambda: f"/a{rnd.randint(0, 3)}",
             lambda: "/about", lambda: f"/about?x={rnd.choice('ab')}", lambda: f"/p/{rnd.randint(1, 3)}.html"]
    urls = [H + rnd.choice(spell)() for _ in range(300)]
    for page in urls[:100]:
        links = rnd.sample(urls, 12)
        assert _walks(page, _shapes_of(page), links) == walks(page, links), (page, links)


def test_same_content_units():
    assert same_content("aa", None, "aa", None) == 2
    assert same_content("aa", "00000000000000ff", "bb", "00000000000000f0") == 0
    assert same_content("aa", "00000000000000ff", "bb", "00000000000000fe") == 1
    assert same_content("aa", None, "bb", "00") == 0


def page(url: str, fp: str, links: list[str] | None = None, **kw) -> PageRecord:
    """A fetched page whose text is long enough for a simhash (one per text, unless given)."""
    kw.setdefault("simhash", blake2b(fp.encode(), digest_size=8).hexdigest())
    return PageRecord(FetchedPage(url=url, status=200), Parsed(fingerprint=fp, **kw), Found(links=links or []))


def test_rule_learned_after_k_pairs_then_applied(settings):
    s = dataclasses.replace(settings, DUST_PRIORS=False, DUST_CONFIRMATIONS=3)
    rules, counters = UrlRules(s), {}
    for i in range(2):
        rules.observe([page(f"{H}/{i}.html", f"f{i}"), page(f"{H}/{i}.html?ref=nav", f"f{i}")], counters)
    assert rules.judge(f"{H}/9.html?ref=nav", "h.test", counters) == f"{H}/9.html?ref=nav"
    rules.observe([page(f"{H}/2.html?ref=nav", "f2")], counters)    # the variant first this time
    rules.observe([page(f"{H}/2.html", "f2")], counters)
    assert counters["dust/rules_learned"] == 1
    drops: list[RuleDrop] = []
    assert rules.judge(f"{H}/9.html?ref=nav&x=1", "h.test", counters, 2, drops) == f"{H}/9.html?x=1"
    assert [(d.url, d.rule, d.reason) for d in drops] == [(
        f"{H}/9.html?ref=nav&x=1", "URL rule q:ref",
        f"not fetched by the learned rule 'URL rule q:ref' of this host: the same page as {H}/9.html?x=1 "
        "(6 evidence units from 3 pairs of same-content pages of this host, no counter-example)")]
    assert rules.judge(f"{H}/9.html?ref=nav", "other.test", counters) == f"{H}/9.html?ref=nav"  # per host
    infos, _ = rules.host_rules("h.test")
    assert [(i.rule, i.pairs, i.active) for i in infos if i.rule == "q:ref"] == [("q:ref", 3, True)]


def test_counter_example_withdraws_and_blocks(settings):
    s = dataclasses.replace(settings, DUST_PRIORS=False, DUST_CONFIRMATIONS=2)
    rules, counters = UrlRules(s), {}
    for i in range(2):
        rules.observe([page(f"{H}/{i}", f"f{i}"), page(f"{H}/{i}?view=1", f"f{i}")], counters)
    assert rules.judge(f"{H}/5?view=1", "h.test", counters) == f"{H}/5"
    rules.observe([page(f"{H}/list", "l1"), page(f"{H}/list?view=1", "l2")], counters)
    assert counters["dust/counter_examples"] == 1
    for i in range(10, 15):   # more agreeing pairs never bring it back
        rules.observe([page(f"{H}/{i}", f"f{i}"), page(f"{H}/{i}?view=1", f"f{i}")], counters)
    assert rules.judge(f"{H}/5?view=1", "h.test", counters) == f"{H}/5?view=1"
    infos, _ = rules.host_rules("h.test")
    assert [(i.counter_examples, i.active) for i in infos if i.rule == "q:view"] == [(1, False)]


def test_parameter_that_changes_content_is_never_a_rule(settings):
    rules, counters = UrlRules(settings), {}
    for i in range(20):
        rules.observe([page(f"{H}/list?page={i}", f"p{i}")], counters)
    rules.observe([page(f"{H}/list", "p-first")], counters)
    assert "dust/rules_learned" not in counters
    assert rules.judge(f"{H}/list?page=3", "h.test", counters) == f"{H}/list?page=3"


def test_thin_pages_are_no_evidence(settings):
    """A pager whose items are links: its pages' main text is the same chrome, too short
    for a simhash; that they share it does not make ``?page`` a spelling."""
    s = dataclasses.replace(settings, DUST_PRIORS=False, DUST_CONFIRMATIONS=2)
    rules, counters = UrlRules(s), {}
    for i in range(1, 10):
        rules.observe([page(f"{H}/list?page={i}", "chrome", simhash=None)], counters)
    rules.observe([page(f"{H}/list", "chrome", simhash=None)], counters)
    assert "dust/rules_learned" not in counters
    assert rules.judge(f"{H}/list?page=3", "h.test", counters) == f"{H}/list?page=3"


def test_near_duplicates_need_twice_the_pairs(settings):
    s = dataclasses.replace(settings, DUST_PRIORS=False, DUST_CONFIRMATIONS=2)
    rules, counters = UrlRules(s), {}
    for i in range(4):
        if i == 3:
            assert "dust/rules_learned" not in counters
        rules.observe([page(f"{H}/{i}", f"a{i}", simhash="00000000000000ff"),
                       page(f"{H}/amp/{i}", f"b{i}", simhash="00000000000000fe",
                            near_duplicate_of=f"{H}/{i}")], counters)
    assert counters["dust/rules_learned"] == 1


def test_trap_shapes_need_content_evidence(settings):
    s = dataclasses.replace(settings, TRAP_WALK_PAGES=5, TRAP_FACET_PAGES=4, TRAP_SHAPE_MIN_PAGES=3)
    rules, counters = UrlRules(s), {}
    for m in range(1, 6):   # a calendar: every month the same page with another number
        url = f"{H}/cal/2026/{m}"
        rules.observe([page(url, f"c{m}", links=[f"{H}/cal/2026/{m + 1}"])], counters,
                      {url: TextSketch.of(f"events of month {m} of 2026: none {TEMPLATE}")})
    drops: list[RuleDrop] = []
    assert rules.judge(f"{H}/cal/2030/7", "h.test", counters, 4, drops) is None
    [dropped] = drops
    assert dropped.rule == "trap shape /cal/#/#" and dropped.depth == 4 and dropped.url == f"{H}/cal/2030/7"
    assert dropped.evidence == "4 of the 5 pages of this shape added nothing new: 4 template"
    for c in range(4):      # facets: each combination lists what its siblings list
        url = f"{H}/shop?color={c}&size=1"
        rules.observe([page(url, f"s{c}")], counters, {url: TextSketch.of(f"{TEMPLATE} items {text(c, 4)} {text('shop', 40)}")})
    assert rules.judge(f"{H}/shop?size=9&sort=a", "h.test", counters) is None
    assert rules.judge(f"{H}/shop?color=1", "h.test", counters) == f"{H}/shop?color=1"
    for i in range(3):      # duplicates need no text
        rules.observe([page(f"{H}/tag/{i}", f"t{i}", duplicate_of=f"{H}/x")], counters)
    assert rules.judge(f"{H}/tag/77", "h.test", counters) is None
    assert counters["filter/trap_shape"] == 3 and counters["dust/trap_shapes"] == 4
    traps = rules.host_rules("h.test")[1]
    assert set(traps) == {"/cal/#/#", "/shop?&", "/shop?color&size", "/tag/#"}
    assert traps["/tag/#"] == "3 of the 3 pages of this shape added nothing new: 3 duplicate"
    assert "known text" in traps["/shop?&"]
    assert rules.judge(f"{H}/article/5", "h.test", counters) == f"{H}/article/5"
    assert rules.judge(f"{H}/cal/2030/7", "other.test", counters) == f"{H}/cal/2030/7"   # never spreads


def test_calendar_linking_new_pages_that_add_nothing_is_cut(settings):
    """Each month links a new "add an event" URL of its own: new links, but to a shape
    whose pages add nothing; the calendar is cut once that shows, not walked for ever."""
    rules, counters, months, adds = UrlRules(settings), {}, 0, 0
    for m in range(1, 200):
        url, add = f"{H}/cal/{2026 + m // 12}/{m % 12 + 1}", f"{H}/event/add?date={m}"
        if rules.judge(url, "h.test", counters) is None:
            break
        nxt = f"{H}/cal/{2026 + (m + 1) // 12}/{(m + 1) % 12 + 1}"
        rules.observe([page(url, f"c{m}", links=[nxt, add, f"{H}/about"])], counters,
                      {url: TextSketch.of(f"{TEMPLATE} month {m}: no events")})
        months += 1
        if rules.judge(add, "h.test", counters) is not None:
            rules.observe([page(add, f"a{m}", links=[f"{H}/about"])], counters,
                          {add: TextSketch.of(f"Add an event: day {m}. {TEMPLATE}")})
            adds += 1
    traps = rules.host_rules("h.test")[1]
    assert months <= 15 and adds <= 12 and set(traps) == {"/cal/#/#", "/event/add?date"}, (months, adds, traps)


def test_numbered_series_of_distinct_pages_is_never_a_trap(settings):
    """Release notes, chapters, posts: pages that walk a number, all distinct (some short),
    stay crawlable however many there are."""
    s = dataclasses.replace(settings, TRAP_WALK_PAGES=5, TRAP_SHAPE_MIN_PAGES=3)
    rules, counters = UrlRules(s), {}
    for k in range(1, 400, 7):
        batch = [page(f"{H}/releases/3.1.{j}.html", f"r{j}", links=[f"{H}/releases/3.1.{j + 1}.html"])
                 for j in range(k, k + 7)]
        rules.observe(batch, counters, {r.page.url: TextSketch.of(f"Django 3.1.{j} release notes. Fixed {text(j, 3 + j % 40)}.")
                                        for j, r in enumerate(batch, k)})
    assert "dust/trap_shapes" not in counters
    assert rules.judge(f"{H}/releases/3.1.400.html", "h.test", counters) == f"{H}/releases/3.1.400.html"


def test_recorded_once_per_url_unless_it_entered_the_frontier(settings):
    rules, frontier = UrlRules(settings), Frontier(settings)
    frontier.put_discovered([Discovered(url=f"{H}/cal/9", host="h.test", depth=1)])   # queued before the rule
    drops = [RuleDrop(f"{H}/cal/{i % 3}", "h.test", 1, "trap shape /cal/#", "e") for i in range(6)]
    drops += [RuleDrop(f"{H}/cal/0", "other.test", 1, "trap shape /cal/#", "e"),
              RuleDrop(f"{H}/cal/9", "h.test", 1, "trap shape /cal/#", "e")]
    assert [(d.url, d.host) for d in rules.first_drops(drops, frontier)] == [
        (f"{H}/cal/0", "h.test"), (f"{H}/cal/1", "h.test"), (f"{H}/cal/2", "h.test"), (f"{H}/cal/0", "other.test")]
    assert rules.first_drops(drops[:2], frontier) == []


def test_manage_hosts_prints_rules(settings, capsys):
    import manage

    rules, counters = UrlRules(settings), {}
    for i in range(3):
        rules.observe([page(f"{H}/{i}", f"f{i}"), page(f"{H}/print/{i}", f"f{i}")], counters)
    rules.observe([page(f"{H}/l", "a"), page(f"{H}/l?page=2", "b")], counters)
    manage._print_url_rules(settings, "h.test")
    out = capsys.readouterr().out
    assert "url rule p:print" in out and "in force  evidence 6 units from 3 pairs" in out
    assert "url rule q:page" in out and "blocked" in out


def test_prefetch_reads_a_batch_of_hosts_at_once(settings, monkeypatch):
    """The gate's view of a batch's link hosts is read in one round trip per shard (and
    one for the priors), and judging their links then asks Redis nothing: the same
    answers as host by host."""
    s = dataclasses.replace(settings, DUST_CONFIRMATIONS=1, TRAP_WALK_PAGES=5, TRAP_SHAPE_MIN_PAGES=3)
    learner, counters = UrlRules(s), {}
    learner.observe([page(f"{H}/1.html", "f1"), page(f"{H}/1.html?ref=nav", "f1")], counters)
    for m in range(1, 6):
        url = f"{H}/cal/2026/{m}"
        learner.observe([page(url, f"c{m}", links=[f"{H}/cal/2026/{m + 1}"])], counters,
                        {url: TextSketch.of(f"events of month {m} of 2026: none {TEMPLATE}")})
    hosts = ["h.test", *(f"o{i}.test" for i in range(20))]
    links = [(f"http://{h}/{p}", h) for h in hosts for p in ("9.html?ref=nav", "cal/2030/7", "a/1")]
    one_by_one = [UrlRules(s).judge(url, host, {}) for url, host in links]
    assert one_by_one[:3] == [f"{H}/9.html", None, f"{H}/a/1"]
    rules = UrlRules(s)
    client = rules._pipeline({}, 0)
    client.ping().execute()   # a connection made: its handshake is not counted
    conn_class = client.connection_pool.connection_class
    sent: list[object] = []
    send = conn_class.send_packed_command
    monkeypatch.setattr(conn_class, "send_packed_command", lambda c, cmd, check_health=True: (
        sent.append(cmd), send(c, cmd, check_health))[1])
    rules.prefetch(host for _, host in links)
    assert len(sent) <= s.SHARDS + 1
    sent.clear()
    assert [rules.judge(url, host, {}) for url, host in links] == one_by_one and sent == []


def test_known_priors_are_the_tracker_list_less_what_selects_content():
    assert all(map(known_prior, ("q:ref", "q:utm_campaign", "q:fb_ref", "q:affiliate", "q:session",
                                 "q:pk_campaign", "p:print", "p:amp", "i:index.html", "i:default.aspx")))
    # words of the list inside other words, and the list's names that select content
    assert not any(map(known_prior, ("q:reference", "q:refresh", "q:prefix", "q:cid", "q:id", "q:uid",
                                     "q:source", "q:keyword", "q:page", "q:sort", "p:m", "p:docs", "m:cid",
                                     "i:default.html")))


def test_one_host_in_every_checks_a_prior_the_same_on_every_node():
    hosts = [f"h{i}.test" for i in range(4000)]
    drawn = [h for h in hosts if checks_prior(h, "q:ref", 16)]
    assert 4000 / 16 * 0.8 < len(drawn) < 4000 / 16 * 1.2
    assert drawn == [h for h in hosts if checks_prior(h, "q:ref", 16)]
    assert set(drawn) != {h for h in hosts if checks_prior(h, "p:print", 16)}   # drawn per rule
    assert all(checks_prior(h, "q:ref", 1) for h in hosts[:10])


def _hosts(every: int, checking: bool, n: int = 3) -> list[str]:
    return [h for h in (f"p{i}.test" for i in range(500)) if checks_prior(h, "q:ref", every) == checking][:n]


def test_a_prior_applies_from_a_hosts_first_link_and_its_drop_says_why(settings):
    rules, counters = UrlRules(settings), {}
    host = _hosts(settings.DUST_PRIOR_CHECK_EVERY, checking=False)[0]
    drops: list[RuleDrop] = []
    assert rules.judge(f"http://{host}/a?ref=nav", host, counters, 1, drops) == f"http://{host}/a"
    assert counters["dust/prior_rewritten"] == 1
    assert drops[0].reason == (f"not fetched by the learned rule 'URL rule q:ref' of this host: the same page as "
                               f"http://{host}/a (prior q:ref: a spelling the web is known to use for the same "
                               "page, not refuted on this host)")
    assert rules.judge(f"http://{host}/a?page=2", host, counters) == f"http://{host}/a?page=2"
    off = UrlRules(dataclasses.replace(settings, DUST_PRIORS=False))
    assert off.judge(f"http://{host}/a?ref=nav", host, {}) == f"http://{host}/a?ref=nav"


def test_a_checking_host_confirms_a_prior_with_one_pair_or_withdraws_it(settings):
    rules, counters = UrlRules(settings), {}
    agrees, refutes = _hosts(settings.DUST_PRIOR_CHECK_EVERY, checking=True, n=2)
    for host in (agrees, refutes):   # the first variant is the sample that checks it: fetched
        assert rules.judge(f"http://{host}/a?ref=nav", host, counters) == f"http://{host}/a?ref=nav"
        assert rules.judge(f"http://{host}/c?ref=nav", host, counters) == f"http://{host}/c"   # the others not
        assert UrlRules(settings).judge(f"http://{host}/a?ref=nav", host, {}) == f"http://{host}/a?ref=nav"
    rules.observe([page(f"http://{agrees}/a", "fa"), page(f"http://{agrees}/a?ref=nav", "fa")], counters)
    assert rules.judge(f"http://{agrees}/b?ref=x", agrees, counters) == f"http://{agrees}/b"
    rules.observe([page(f"http://{refutes}/a", "fa"), page(f"http://{refutes}/a?ref=main", "fb")], counters)
    assert rules.judge(f"http://{refutes}/b?ref=x", refutes, counters) == f"http://{refutes}/b?ref=x"
    info = [i for i in rules.host_rules(refutes)[0] if i.rule == "q:ref"][0]
    assert (info.active, info.counter_examples) == (False, 1)
    assert info.why == f"http://{refutes}/a?ref=main and http://{refutes}/a have other content"
    # the prior still holds on the other hosts: one refutation is no verdict on the web
    other = _hosts(settings.DUST_PRIOR_CHECK_EVERY, checking=False)[0]
    assert rules.judge(f"http://{other}/b?ref=x", other, counters) == f"http://{other}/b"


def test_a_prior_refuted_on_a_quarter_of_its_hosts_is_withdrawn_everywhere(settings):
    rules, counters = UrlRules(settings), {}
    for host in _hosts(settings.DUST_PRIOR_CHECK_EVERY, checking=True, n=2):
        rules.observe([page(f"http://{host}/a", "fa"), page(f"http://{host}/a?ref=main", "fb")], counters)
        rules.observe([page(f"http://{host}/c", "fc"), page(f"http://{host}/c?ref=x", "fd")], counters)
    other = _hosts(settings.DUST_PRIOR_CHECK_EVERY, checking=False)[0]
    assert rules.judge(f"http://{other}/b?ref=x", other, counters) == f"http://{other}/b?ref=x"


def test_a_rule_in_force_on_enough_hosts_becomes_a_prior_of_the_others(settings):
    s = dataclasses.replace(settings, DUST_CONFIRMATIONS=2, DUST_PRIOR_HOSTS=3, DUST_PRIOR_CHECK_EVERY=1000)
    rules, counters = UrlRules(s), {}
    assert not known_prior("p:printer")
    for n in range(3):
        host = f"l{n}.test"
        assert rules.judge(f"http://{host}/printer/a", host, counters) == f"http://{host}/printer/a"
        for i in range(2):
            rules.observe([page(f"http://{host}/{i}", f"f{n}{i}"), page(f"http://{host}/printer/{i}", f"f{n}{i}")],
                          counters)
        if n < 2:
            assert rules.judge("http://new.test/printer/a", "new.test", counters) == "http://new.test/printer/a"
    drops: list[RuleDrop] = []
    assert rules.judge("http://new.test/printer/a", "new.test", counters, 1, drops) == "http://new.test/a"
    assert "prior p:printer: in force on 3 other hosts" in drops[0].reason


def test_an_index_file_is_a_prior_once_its_host_serves_a_directory_and_no_other_file_is(settings):
    s = dataclasses.replace(settings, DUST_CONFIRMATIONS=1, DUST_PRIOR_HOSTS=2, DUST_PRIOR_CHECK_EVERY=1000)
    rules, counters = UrlRules(s), {}
    # index.html: not before the host has served a page at a directory URL (many answer 404 there)
    assert rules.judge("http://s.test/b/index.html", "s.test", counters) == "http://s.test/b/index.html"
    rules.observe([page("http://s.test/a/index.html", "fa"), page("http://s.test/a/b.html", "fb")], counters)
    assert rules.judge("http://s.test/b/index.html", "s.test", counters) == "http://s.test/b/index.html"
    rules.observe([page("http://s.test/", "home")], counters)
    assert rules.judge("http://s.test/b/index.html", "s.test", counters) == "http://s.test/b/"
    # default.html, in force on many hosts, stays each host's own rule (Django's auth/default.html)
    for n in range(3):
        host = f"d{n}.test"
        rules.observe([page(f"http://{host}/a/", f"f{n}"), page(f"http://{host}/a/default.html", f"f{n}")], counters)
        assert rules.judge(f"http://{host}/b/default.html", host, counters) == f"http://{host}/b/"
    rules.observe([page("http://new.test/", "x")], counters)
    assert rules.judge("http://new.test/b/default.html", "new.test", counters) == "http://new.test/b/default.html"
