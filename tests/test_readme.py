"""The README's commands, as a new user types them, from a fresh folder (install and the
test run aside). The public example.org is pointed at a closed loopback port (what a
host that is down looks like, and DNS failures take the same path): the first command
must then explain itself."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    """Shell lines of the ``sh`` blocks of the README's first section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## The two commands", 1)[1].split("\n## ", 1)[0]
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        lines += [line for line in block.splitlines() if line.strip()]
    return [line for line in lines if "pip install" not in line and "pytest" not in line]


def as_run_here(line: str) -> str:
    python = shlex.quote(sys.executable)
    return line.replace(".venv/bin/python manage.py", f"{python} {shlex.quote(str(ROOT / 'manage.py'))}")


def run(line: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", as_run_here(line)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=180)


def test_readme_commands_work_from_a_fresh_folder(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    commands = readme_commands()
    first, testweb, local_crawl, stats, head = commands  # the README's order; update both together

    proc = run(first, tmp_path, {**env, "CRAWLER_RESOLVE": "example.org=127.0.0.9", "CRAWLER_ALLOW_PRIVATE": "1"})
    assert proc.returncode == 1 and "nothing was fetched" in proc.stderr, proc.stderr[-3000:]
    assert "host unreachable: example.org: connection refused; next try in" in proc.stderr, proc.stderr[-3000:]
    assert "hosts unreachable: 1 (example.org: connection refused" in proc.stderr
    assert "not fetched: 1 URL(s) of 1 host(s) waiting for robots.txt" in proc.stderr
    assert (tmp_path / "crawl-out" / "pages.jsonl").exists()

    web = subprocess.Popen(["bash", "-c", "exec " + as_run_here(testweb)], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert web.stdout is not None
        urls = [web.stdout.readline().strip() for _ in range(5)]
        assert all(u.startswith("http://127.0.0.") for u in urls), urls
        port = urls[0].rsplit(":", 1)[1].strip("/")
        assert "127.0.0.2:PORT" in local_crawl and urls[0].startswith("http://127.0.0.2:")
        t0 = time.monotonic()
        proc = run(local_crawl.replace("PORT", port), tmp_path, env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert "crawl finished: frontier exhausted" in proc.stderr, proc.stderr[-3000:]
        assert time.monotonic() - t0 < 150
    finally:
        web.terminate()
        web.wait(10)
    proc = run(stats, tmp_path, env)
    assert proc.returncode == 0 and "state finished frontier exhausted" in proc.stdout, proc.stderr
    proc = run(head, tmp_path, env)
    assert proc.returncode == 0 and proc.stdout.startswith('{"url":"http://127.0.0.')


def test_the_readmes_job_file_is_a_valid_job(tmp_path):
    """The README's job example, written to a file as a reader would, passes `job check`
    and says what it says (its out beside the file, its patterns as written)."""
    import tomllib

    text = (ROOT / "README.md").read_text().split("## The crawl job", 1)[1]
    example = re.search(r"```toml\n(.*?)```", text, re.S)[1]
    (tmp_path / "crawl.toml").write_text(example)
    base = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    proc = subprocess.run([sys.executable, str(ROOT / "manage.py"), "job", "check", "crawl.toml"], cwd=tmp_path,
                          env=base, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    effective = tomllib.loads(proc.stdout)
    assert effective["seeds"] == ["https://docs.python.org/3/"] and effective["out"] == str(tmp_path / "python-docs")
    assert re.search(effective["scope"]["include"][0], "https://docs.python.org/3/library/re.html")
    assert effective["settings"]["DUST_PRIOR_CHECK_EVERY"] == 16
