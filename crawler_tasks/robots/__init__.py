"""robots.txt: the RFC 9309 rules (``rules``) and the crawl's shared cache and policy (``cache``).

``parse_robots(text).is_allowed(url, agent)`` is the public matcher.
"""
from crawler_tasks.robots.rules import MAX_ROBOTS_BYTES, RobotsRules, Rule, Verdict, parse_robots, product_token

__all__ = ["MAX_ROBOTS_BYTES", "RobotsRules", "Rule", "Verdict", "parse_robots", "product_token"]
