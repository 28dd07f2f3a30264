"""docker/: the compose files agree with the README's production section and the queue
names of crawler_tasks/queues.py (parsed only: there is no container engine here)."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from crawler_tasks.queues import CONTROL_QUEUE, ENQUEUE_QUEUES, fetch_queue, parse_queue

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILES = ["docker-compose.yml", "docker-compose.cluster.yml"]


def compose(name: str) -> dict:
    return yaml.safe_load((ROOT / "docker" / name).read_text())


def readme_production() -> str:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Production", 1)[1]
    return section.split("\n## ", 1)[0]


def readme_commands() -> list[list[str]]:
    block = re.search(r"```sh\n(.*?)```", readme_production(), re.S)
    assert block, "the production section has a shell block"
    return [shlex.split(line.split("#", 1)[0]) for line in block.group(1).splitlines() if line.strip()]


def readme_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for words in readme_commands():
        if words and words[0] == "export":
            env.update(w.split("=", 1) for w in words[1:])
    return env


def celery_role(command: list[str]) -> tuple[str, set[str]]:
    """('worker'|'beat'|'flower', queues) of a celery command line."""
    assert command[:3] == ["celery", "-A", "crawler_tasks"], command
    queues: set[str] = set()
    if "-Q" in command:
        queues = set(command[command.index("-Q") + 1].split(","))
    return command[3], queues


def services(doc: dict) -> dict[str, dict]:
    return doc["services"]


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_workers_consume_every_queue_of_the_crawl(name):
    doc = services(compose(name))
    env = doc["fetch"]["environment"]
    shards = int(env["CRAWLER_SHARDS"])
    queues: set[str] = set()
    roles: set[str] = set()
    for service in doc.values():
        command = service.get("command")
        if isinstance(command, list) and command[:1] == ["celery"]:
            role, qs = celery_role(command)
            roles.add(role)
            queues |= qs
            assert service["environment"] == env, "every crawler process sees the same settings"
        elif isinstance(command, list) and command[:2] == ["sh", "-c"] and "celery -A crawler_tasks flower" in command[2]:
            roles.add("flower")   # started by a guard that insists on FLOWER_BASIC_AUTH
    expected = {fetch_queue(s) for s in range(shards)} | {parse_queue(env["CRAWLER_NODE_NAME"]),
                                                          *ENQUEUE_QUEUES, CONTROL_QUEUE}
    assert queues == expected
    assert {"worker", "beat", "flower"} <= roles
    control = [s for s in doc.values() if s.get("command", [""])[0] == "celery"
               and CONTROL_QUEUE in celery_role(s["command"])[1]]
    assert len(control) == 1 and "solo" in control[0]["command"], "one solo control worker per crawl"


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_environment_matches_the_readme(name):
    env = services(compose(name))["fetch"]["environment"]
    wanted = readme_env()
    assert set(wanted) <= set(env), f"README exports {sorted(set(wanted) - set(env))} that compose does not set"
    assert env["CRAWLER_USER_AGENT"].startswith(("simbot/", "mybot/")) and "+http" in env["CRAWLER_USER_AGENT"]
    assert env["CRAWLER_BROKER_URL"].startswith("redis://broker:")


@pytest.mark.parametrize("name", COMPOSE_FILES)
def test_redis_servers_never_evict(name):
    doc = services(compose(name))
    redis_services = [s for s in doc.values() if s.get("image", "").startswith("redis")
                      and "redis-server" in s.get("command", [])]
    assert len(redis_services) >= 2
    for service in redis_services:
        command = service["command"]
        assert command[command.index("--maxmemory-policy") + 1] == "noeviction"


def test_readme_workers_are_in_compose():
    doc = services(compose("docker-compose.yml"))
    compose_queues = {frozenset(celery_role(s["command"])[1]) for s in doc.values()
                      if s.get("command", [""])[0] == "celery"}
    compose_roles = {celery_role(s["command"])[0] for s in doc.values() if s.get("command", [""])[0] == "celery"}
    for words in readme_commands():
        if words[:1] == ["celery"]:
            role, queues = celery_role(words)
            assert role in compose_roles
            if queues:
                assert frozenset(queues) in compose_queues, f"README worker for {sorted(queues)} not in compose"


def test_cluster_variant_points_the_frontier_at_the_cluster():
    doc = services(compose("docker-compose.cluster.yml"))
    env = doc["fetch"]["environment"]
    assert env["CRAWLER_REDIS_URL"].startswith("redis+cluster://frontier1:")
    nodes = [n for n, s in doc.items() if "--cluster-enabled" in s.get("command", [])]
    assert len(nodes) == 3
    assert all("cluster-init" in doc[n]["depends_on"] for n in ("fetch", "process", "control", "beat"))
    init = " ".join(doc["cluster-init"]["command"])
    assert all(f"{n}:6379" in init for n in nodes)
