"""Every crawler setting, its default and its meaning, in one place.

Precedence (lowest first): the defaults below, ``CRAWLER_<NAME>`` environment
variables, CLI flags of ``manage.py`` (which it hands to the worker and beat
processes it starts as ``CRAWLER_*`` variables, so every process of one crawl
sees the same settings).

Lists are written in the environment as comma-separated values; booleans as
``1/0``, ``true/false``, ``yes/no``, ``on/off``.
"""
from __future__ import annotations

import dataclasses
import functools
import ipaddress
import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import urlsplit

from crawler_tasks.exceptions import ConfigError

ENV_PREFIX = "CRAWLER_"

DEFAULT_USER_AGENT = "simbot/1.0 (+https://example.invalid/simbot; crawler contact)"


@dataclass(frozen=True, slots=True)
class Settings:
    # --- Redis -------------------------------------------------------------------------
    # Frontier/state Redis. Empty: ``manage.py crawl`` starts an embedded redis-server.
    REDIS_URL: str = ""
    # Frontier shards may live on several Redis servers (shard -> server by stable hash).
    # Empty: all shards on REDIS_URL.
    REDIS_SHARD_URLS: tuple[str, ...] = ()
    # Celery broker. Empty: the frontier Redis, database 1 (frontier state stays in db 0).
    BROKER_URL: str = ""
    # The embedded redis-server keeps an append-only file (fsync every second): a killed
    # redis-server loses nothing it acknowledged (its writes are in the OS's cache), a
    # machine crash about a second, instead of everything since the last RDB save or
    # checkpoint. Off (0) only for throwaway crawls (its cost: README, "Durability").
    EMBEDDED_REDIS_AOF: bool = True
    # Prefix of every Redis key the crawler owns (two crawls can share one Redis).
    KEY_PREFIX: str = "crawl"
    # Socket timeout for Redis commands, seconds.
    REDIS_TIMEOUT_S: float = 10.0

    # --- Frontier (Mercator) -------------------------------------------------------------
    # Number of frontier shards (hosts are assigned by crc32(host) % SHARDS).
    SHARDS: int = 2
    # Number of front-queue priority levels (0 = highest).
    PRIORITY_LEVELS: int = 3
    # Most hosts holding an active back queue per shard (Mercator's B): at least the hosts the
    # fetch workers may hold (FETCH_MAX_HOSTS each), or hosts in flight stop there.
    MAX_ACTIVE_HOSTS: int = 16_384
    # A leased host not returned by then is put back by maintenance, seconds (sooner when
    # the fetch process that held it is known dead: PROCESS_TTL_S).
    LEASE_S: float = 120.0
    # Bounded memory, Mercator's disk-backed front queues: a front queue longer than this
    # spills its tail to OUT/spill in gzip chunks (0 = never), read back once it is shorter
    # than FRONT_REFILL_AT. An entry costs ~78 bytes in Redis and ~15 on disk; at these
    # bounds Redis holds at most ~1.2 M front entries (SHARDS x PRIORITY_LEVELS x 200 k),
    # whatever the frontier's size. The refill bound outlasts minutes of leasing.
    FRONT_SPILL_AT: int = 200_000
    FRONT_REFILL_AT: int = 50_000
    # A host's back queue holds at most this many URLs (0 = no cap); more go to per-host
    # spill files and come back as the host's queue drains below half of it.
    HOST_QUEUE_CAP: int = 100_000
    # Most hosts one wake task leases per shard.
    WAKE_MAX_HOSTS: int = 256
    # Hosts wake gives a new fetch session (a session then leases more itself, up to
    # max(FETCH_BATCH, WAKE_MAX_HOSTS) a control tick, within FETCH_MAX_HOSTS).
    FETCH_BATCH: int = 32
    # Caps of one fetch worker process, shared by its sessions. A held host waiting out
    # its delay is a heap entry; it takes a thread and a socket only for its turn, so
    # exchanges in flight follow demand (turns due a second x time a turn) up to these.
    # Most hosts held at once (leased, waiting for their next turn or in one).
    FETCH_MAX_HOSTS: int = 10_000
    # Most turns (exchanges) in flight at once: threads and sockets in use.
    FETCH_MAX_EXCHANGES: int = 512
    # Most MiB of page bodies held: fetched and not yet spooled, plus the turns in
    # flight at the mean body size; no new turn starts above it.
    FETCH_MEMORY_MB: int = 256
    # Fetch sessions one fetch worker process runs at once (its Celery threads pool).
    FETCH_CONCURRENCY: int = 4
    # Fetch sessions running or queued over the whole crawl (manage.py crawl sets it to
    # fetch workers x FETCH_CONCURRENCY); each shard gets its share.
    MAX_FETCH_SESSIONS: int = 8
    # A session gives its hosts back and ends after this long (the broker rotates work),
    # times 0.75-1.25 drawn per session: sessions started together do not end together.
    SESSION_MAX_S: float = 60.0
    # A host whose next contact is at most this far away stays with its session, which
    # fetches it again the moment its delay has passed; farther ones go back to the heap.
    HOLD_HORIZON_S: float = 10.0
    # Fetched pages go to parse in groups of at most this many, or this old. Each group
    # costs two Celery tasks and a dozen round trips: 32 instead of 16 took 4 % off the
    # crawl's CPU a page on the 100-host bench (+30 MiB peak RSS; 64 was no better).
    PARSE_GROUP_PAGES: int = 32
    PARSE_GROUP_S: float = 0.5
    # Most page groups between fetch and enqueue (back-pressure: sessions give hosts back).
    MAX_INFLIGHT_BATCHES: int = 16
    # A session or page group not finished by then is forgotten (its worker died; its
    # hosts come back when their leases expire; a group's pages are fetched again), but a
    # group whose parse or enqueue message a worker took and never acknowledged has the
    # message delivered again (twice at most). 0 = 2 x LEASE_S.
    BATCH_TIMEOUT_S: float = 0.0
    # Maximum link depth from a seed (0 = seeds only, -1 = unlimited).
    MAX_DEPTH: int = -1

    # --- Scope and URL filters (each drop is counted as filter/<rule>) ---------------------
    # Only these hosts and their subdomains (empty = any host).
    ALLOWED_DOMAINS: tuple[str, ...] = ()
    # Never these hosts and their subdomains.
    BLOCKED_DOMAINS: tuple[str, ...] = ()
    # A URL must match one of these regexes (empty = all) and none of the exclude ones.
    INCLUDE_PATTERNS: tuple[str, ...] = ()
    EXCLUDE_PATTERNS: tuple[str, ...] = ()
    # Per-site rules (urls/sites.py, which checks them: manage.py at the start), a JSON
    # list; a job file's [[sites]] sets it: each matches a domain (and subdomains) or a URL
    # prefix, and sets in_scope, include, exclude, max_depth (its URLs), min_delay and
    # headers (its host).
    SITES: str = ""
    # Most non-empty path segments in a URL.
    MAX_PATH_SEGMENTS: int = 16
    # A path segment repeated this many times marks a trap (/a/b/a/b/a/b).
    MAX_REPEATED_SEGMENTS: int = 3
    # Extensions of what the crawler cannot read: skipped before fetching. PDFs are read
    # (parse/pdf.py); office formats are not (no reader).
    SKIP_EXTENSIONS: tuple[str, ...] = (
        "jpg", "jpeg", "png", "gif", "webp", "bmp", "ico", "svg", "tif", "tiff", "mp3", "mp4", "m4a",
        "ogg", "wav", "avi", "mov", "mkv", "webm", "flv", "wmv", "zip", "gz", "tgz", "bz2", "xz", "7z",
        "rar", "tar", "iso", "dmg", "exe", "msi", "bin", "apk", "deb", "rpm", "woff", "woff2", "ttf",
        "otf", "eot", "css", "js", "doc", "docx", "xls", "xlsx", "ppt", "pptx",
    )
    # Per-host page budget for one crawl (0 = none); hosts of seed URLs get the larger
    # one (0 = 10 x MAX_PAGES_PER_HOST).
    MAX_PAGES_PER_HOST: int = 10_000
    MAX_PAGES_PER_SEED_HOST: int = 0
    # Distinct query strings enqueued for one path before the rest count as a facet trap: a
    # bound on the queue, not a trap rule (those act on content evidence, dedup/evidence.py).
    # 100 cut real pagers and ``item?id=N`` paths of a few hundred pages.
    MAX_QUERY_VARIANTS: int = 1000
    # Read Sitemap: lines of robots.txt; guess /sitemap.xml of a host whose robots.txt
    # names none once it has SITEMAP_GUESS_MIN_URLS URLs queued when robots.txt is read.
    USE_SITEMAPS: bool = True
    PROBE_SITEMAP_XML: bool = True
    SITEMAP_GUESS_MIN_URLS: int = 50
    # Recognise soft 404s (200 for any path): a host whose pages show the sign (two of
    # its URLs with the very same content) gets one probe, a random path.
    SOFT404_PROBE: bool = True
    # Follow links marked rel=nofollow/ugc/sponsored (off: they are not taken).
    FOLLOW_NOFOLLOW: bool = False
    # Query parameters dropped by normalization (empty = the built-in tracking and
    # session-id lists of urls.py).
    DROP_PARAMS: tuple[str, ...] = ()

    # --- Politeness ----------------------------------------------------------------------
    # Identify ourselves: the robots.txt product token is derived from it.
    USER_AGENT: str = DEFAULT_USER_AGENT
    # robots.txt product token; empty = derived from USER_AGENT.
    ROBOTS_AGENT: str = ""
    # Minimum gap between two requests to one host, seconds.
    MIN_DELAY_S: float = 1.0
    # Gap is at least this times the last fetch duration (Mercator's rule, opt-in: 0 = off).
    # Off by default: on the web an answer's time is mostly distance and the server's work
    # for every client, not load we add (one connection at a time bounds that); Mercator's 10
    # rested a host asked for 2 s 4-6 s at 400 ms answers (39 % of the web's politeness bound).
    # Overload still slows us: errors back off, 429/503 honour Retry-After. Heritrix uses 5.
    DELAY_FACTOR: float = 0.0
    # Cap of the factor term, seconds (Heritrix: 30).
    MAX_FACTOR_DELAY_S: float = 30.0
    # Obey Crawl-delay from robots.txt, up to MAX_CRAWL_DELAY_S.
    HONOUR_CRAWL_DELAY: bool = True
    MAX_CRAWL_DELAY_S: float = 60.0
    # Hosts asking for a Crawl-delay over the cap: skip them (True) or crawl at the cap.
    SKIP_HOST_OVER_MAX_CRAWL_DELAY: bool = False
    # Cap for Retry-After on 429/503, seconds.
    MAX_RETRY_AFTER_S: float = 3600.0
    # Exponential backoff on consecutive failures: base x 2^(n-1), capped, +-25 % jitter.
    BACKOFF_BASE_S: float = 5.0
    BACKOFF_MAX_S: float = 600.0
    # After this many consecutive failures a host is parked for PARK_S (its URLs stay).
    PARK_AFTER_FAILURES: int = 8
    PARK_S: float = 6 * 3600.0
    # A URL whose fetch failed (network error, 5xx, 429) is retried this many times.
    MAX_RETRIES: int = 2
    # robots.txt: cached this long (RFC 9309: at most 24 h), seconds.
    ROBOTS_TTL_S: float = 24 * 3600.0
    # robots.txt unreachable (5xx/network): disallow all and ask again after this, seconds.
    ROBOTS_ERROR_TTL_S: float = 600.0
    # Obey robots.txt at all (turn off only for sites you own).
    OBEY_ROBOTS: bool = True
    # Per-address politeness: host names on one address (shared hosting) share one gap and
    # one connection at a time (off: per host name only; hosts written as IP literals are
    # their own). A CDN's address fronts thousands of unrelated sites: turn it off for a
    # broad crawl where most hosts sit behind a few CDNs.
    PER_IP_POLITENESS: bool = True
    # Permit private/loopback/link-local targets (tests and local webs need it).
    ALLOW_PRIVATE: bool = False
    # Cloud metadata and platform endpoints (169.254.169.254, 168.63.129.16, ... see
    # fetch/netsafety.py) are refused even with ALLOW_PRIVATE, except the IP addresses
    # listed here (an operator who crawls a metadata service on purpose).
    ALLOW_METADATA_ADDRESSES: tuple[str, ...] = ()
    # Static DNS answers, curl style: "host=addr" items.
    RESOLVE: tuple[str, ...] = ()
    # DNS servers the crawler's own resolver asks, "ip" or "ip:port" items (an operator's
    # caching resolver; a test server); empty = the nameservers of /etc/resolv.conf.
    DNS_SERVERS: tuple[str, ...] = ()
    # One lookup: the first query waits this long, each later one twice as long, seconds;
    # DNS_TRIES queries at most (a name no server answers costs 1 + 2 = 3 s, and no thread;
    # glibc's defaults cost 2 x 5 s and a thread).
    DNS_TIMEOUT_S: float = 1.0
    DNS_TRIES: int = 2
    # An address is kept for its record's TTL within these bounds, seconds.
    DNS_MIN_TTL_S: float = 300.0
    DNS_MAX_TTL_S: float = 6 * 3600.0
    # A name no server answers for (timeouts, SERVFAIL) is looked up again this many
    # times, DNS_RETRY_BASE_S x 2^n later; then its URLs are recorded as DNS errors and
    # the name rests DNS_DEAD_S (a name that never answers: records 8 s after its first
    # lookup, so that it does not hold a crawl's end). NXDOMAIN (confirmed) is recorded at
    # once, kept for the answer's negative TTL (RFC 2308).
    DNS_RETRIES: int = 1
    DNS_RETRY_BASE_S: float = 2.0
    DNS_DEAD_S: float = 600.0

    # --- Fetching ------------------------------------------------------------------------
    # Most silence allowed while connecting / between two reads, seconds.
    CONNECT_TIMEOUT_S: float = 5.0
    READ_TIMEOUT_S: float = 15.0
    # The one deadline of an exchange, DNS to last body byte (trickling peers), seconds.
    TOTAL_TIMEOUT_S: float = 30.0
    # Body cap in bytes; longer bodies are cut and flagged truncated.
    MAX_BODY_BYTES: int = 1024 * 1024
    # Cap on the decoded size of a compressed body (gzip bombs), bytes.
    MAX_DECODED_BYTES: int = 8 * 1024 * 1024
    # Cap on the response header block, bytes, and on its number of header lines.
    MAX_HEADER_BYTES: int = 64 * 1024
    MAX_HEADERS: int = 100
    # Longest URL we fetch or enqueue, characters.
    MAX_URL_LENGTH: int = 2048
    # Redirect hops followed for one URL (each hop is enqueued as its own URL).
    MAX_REDIRECTS: int = 5
    # CA certificates trusted besides certifi's bundle (an intranet's CA, a TLS-inspecting
    # proxy's, a test web's): PEM files and folders of hashed certificates (`openssl
    # rehash`), separated by os.pathsep (':'). SSL_CERT_FILE and SSL_CERT_DIR, when set in
    # the environment, are trusted as well, also besides certifi. A path that gives no
    # certificate stops the start (never skipped). Verification is never turned off.
    CA_BUNDLE: str = ""
    # An HTTP proxy for every http:// and https:// URL (CONNECT for https://), written
    # http://[user:pass@]host:port (the credentials go as Proxy-Authorization: Basic and
    # never into logs, records or the settings hash). Empty: the environment's, if any.
    PROXY_URL: str = field(default="", repr=False)
    # Honour http_proxy, https_proxy, all_proxy and no_proxy (either case) of the
    # environment, as curl and requests do (read once when a fetch process starts).
    PROXY_FROM_ENV: bool = True
    # Hosts fetched without the proxy, curl's NO_PROXY rules (fetch/proxy.py): "*", names
    # (their subdomains too), IP addresses or CIDR blocks, each with an optional :port.
    NO_PROXY: tuple[str, ...] = ()

    # --- Rendering (headless Chromium, crawler_tasks/render) ------------------------------
    # "auto": render pages that look like app shells (render/detect.py) and RENDER_HOSTS;
    # "always": every HTML page; "never": off. Off (one log line) without a Chromium.
    RENDER: str = "auto"
    # Hosts whose HTML pages are always rendered (and their subdomains).
    RENDER_HOSTS: tuple[str, ...] = ()
    # Deadline of one render, load to settled DOM, seconds (subresource fetches included).
    RENDER_TIMEOUT_S: float = 15.0
    # Most pages rendered per host by one worker process (0 = no cap).
    RENDER_MAX_PER_HOST: int = 100
    # Most subresource requests one render may fetch (the rest are aborted).
    RENDER_MAX_REQUESTS: int = 50
    # Resource types never fetched for a render (they change no text or link).
    RENDER_BLOCK_TYPES: tuple[str, ...] = ("image", "media", "font", "stylesheet", "texttrack", "eventsource",
                                           "websocket", "manifest", "other")
    # Browsers per fetch worker process (each ~150 MB; renders queue for them).
    RENDER_BROWSERS: int = 1
    # A browser context (cookies, storage) serves one host for at most this many pages;
    # the browser is relaunched after RENDER_PAGES_PER_BROWSER renders.
    RENDER_PAGES_PER_CONTEXT: int = 20
    RENDER_PAGES_PER_BROWSER: int = 200
    # A browser with no render for this long is closed (with its driver: ~0.5 GB of RSS
    # that a crawl with one app shell among thousands of pages kept to its end) and
    # launched again (~1 s) for the next render.
    RENDER_IDLE_S: float = 60.0
    # Chromium binary; empty = "chromium" on PATH, else /usr/bin/chromium.
    CHROMIUM_PATH: str = ""

    # --- Dedup ---------------------------------------------------------------------------
    # Near-duplicate detection: 64-bit simhash (word pairs, dedup/simhash.py).
    NEAR_DUPLICATES: bool = True
    # Pages within this many bits are near-duplicates (0..6). The index (four 16-bit
    # blocks) finds every pair within 3 bits, and a pair 4-6 bits apart when it agrees on
    # one block (91 % at 4 bits, 77 % at 5), or on one with a fragile bit flipped. Unrelated
    # pages sit ~31 bits apart (none closer than 15 among 10^5 pages); copies of real
    # pages: 0.91 found at 3, 0.97 at 5. Pages up to 8 bits apart are near-duplicates too
    # when their checks agree (dedup/nearindex.py: WIDE_DISTANCE, CHECK_BITS).
    NEAR_DUP_BITS: int = 5
    # simhash reads at most this many characters of a page's text (it costs about as
    # much as parsing per character; the head of a page decides similarity well).
    SIMHASH_MAX_CHARS: int = 12_000
    # Pages with fewer distinct words get no simhash (short pages collide too easily).
    SIMHASH_MIN_WORDS: int = 50
    # Trap signal: a host whose pages keep duplicating pages we have (this share of at
    # least DUP_TRAP_MIN_PAGES pages) gets its new URLs at the lowest priority.
    DUP_TRAP_RATIO: float = 0.5
    DUP_TRAP_MIN_PAGES: int = 20
    # Learned URL equivalence (dedup/rules.py): a rule (drop a parameter, strip a path
    # prefix, an index file, a path parameter) is applied to a host's new URLs after this
    # many same-content pairs without a counter-example (near-duplicate pairs count half;
    # 0 = off).
    DUST_CONFIRMATIONS: int = 3
    # Priors (dedup/dust.py): a rule the web is known to use (tracker parameters, print
    # and AMP prefixes, index files), or one in force on DUST_PRIOR_HOSTS hosts, applies
    # to every host from its first link, except on one host in DUST_PRIOR_CHECK_EVERY
    # (a stable draw), which checks it with its own pairs (one pair confirms it there; a
    # counter-example withdraws it on that host). A prior refuted on 2 hosts and on a
    # quarter of those it came in force on is no longer one.
    DUST_PRIORS: bool = True
    DUST_PRIOR_HOSTS: int = 3
    DUST_PRIOR_CHECK_EVERY: int = 32
    # Fetched URLs per host remembered for finding pairs (bounds that host's Redis hash).
    DUST_MAX_URLS_PER_HOST: int = 20_000
    # How long a worker reuses a host's rules and trap shapes before reading them again, s.
    DUST_CACHE_S: float = 5.0
    # Trap shapes (URL path with digits masked + parameter names; dedup/evidence.py): a
    # shape becomes a trap on content evidence only, once this many of its pages were
    # fetched and TRAP_SHAPE_DUP_RATIO of them added nothing new (duplicates, near-
    # duplicates, soft 404s, empty pages, the template text of its recent pages); new URLs
    # of the shape are then dropped as filter/trap_shape, each with a record (0 = off).
    TRAP_SHAPE_MIN_PAGES: int = 10
    TRAP_SHAPE_DUP_RATIO: float = 0.7
    # Pages before a shape whose pages link a number step (month 5 -> 6: calendars,
    # pagers, numbered series) is judged: its evidence is weighed early (0 = as any shape).
    TRAP_WALK_PAGES: int = 6
    # Pages before a path's combinations of two or more query parameters (facets) are
    # judged (0 = as any shape).
    TRAP_FACET_PAGES: int = 30
    # Shapes per host whose counts are kept (bounds that host's Redis hash).
    TRAP_MAX_SHAPES_PER_HOST: int = 5_000
    # URL-seen Bloom filter sized for this many URLs at this false-positive rate: the
    # chance, once that many are in, that a new URL is taken for seen and dropped
    # without a record (seeds are decided exactly). 1.2 bytes a URL at 0.01, 1.8 at
    # 0.001; the crawl's summary, `stats` and /metrics estimate the URLs lost so far.
    BLOOM_EXPECTED_URLS: int = 10_000_000
    BLOOM_ERROR_RATE: float = 0.01
    # The URL-seen test: "bloom" (the filter above decides) or "exact" (Mercator's: a
    # fingerprint of every URL in Redis intsets decides, ~4.3 bytes a URL besides the
    # filter; a loss needs two URLs to agree on 47+ bits: ~0.2 URLs at 10^7 a shard).
    URL_SEEN: str = "bloom"

    # --- Storage -------------------------------------------------------------------------
    # This machine's name in queue names (crawl.parse.<node>); empty = the host name.
    # Workers claim it in Redis for the machine (OUT_DIR/node-id) at start and renew the
    # claim every third of NODE_TTL_S: a second machine with the same name is refused
    # until the first one's claim has lapsed (its workers gone that long); then
    # maintenance queues again the pages its parse workers never had (their bodies were
    # in its spool folder), to be fetched by the other nodes.
    NODE_NAME: str = ""
    NODE_TTL_S: float = 10.0
    # Each fetch worker process renews a heartbeat every quarter of this; once it has
    # lapsed (the process died) and stayed lapsed for half of it more (a Redis outage
    # lapses every heartbeat at once), maintenance hands its leased hosts over (after one
    # request gap) and queues again the pages it fetched but never handed to parse.
    # Shorter: a dead process costs less; too short: a process stalled that long is
    # taken for dead, and its pages in flight are fetched twice.
    PROCESS_TTL_S: float = 3.0
    # Output folder: pages.jsonl, warc/, redis/ (embedded), snapshots.
    OUT_DIR: str = "crawl-out"
    # Rotate WARC files past this size, bytes.
    WARC_MAX_BYTES: int = 256 * 1024 * 1024
    # gzip level of WARC records: 1 costs ~1/4 of the CPU of 6 for ~15 % larger files
    # (measured on 60 KB pages), and CPU is what bounds a crawler.
    WARC_GZIP_LEVEL: int = 1
    # Byte-identical payloads after the first are stored as revisit records (no body).
    WARC_DEDUP_REVISITS: bool = True
    # Parse workers write a metadata record with each page's outlinks.
    WARC_METADATA: bool = True
    # Indexer feed: OUT/feed.jsonl (complete), and a Redis Stream capped near this many
    # entries (0 = no stream): a live tail for indexers that keep up; entries carry the
    # page text, so 1,000 of them is ~60 MB of Redis memory on 60 KB pages. `manage.py
    # crawl` with its embedded Redis makes no stream unless CRAWLER_FEED_STREAM_MAXLEN is set.
    FEED_JSONL: bool = True
    FEED_STREAM_MAXLEN: int = 1_000
    # Keep at most this many characters of page text in records (the longest of 2,775 real
    # documentation pages has 285k; 11 have over 100k, which a 100k cap cut short).
    MAX_TEXT_CHARS: int = 500_000
    # Parse budget, applied before the HTML tree builder (0 = that cap off): elements
    # (re-created formatting ones included; the page is cut there), nesting depth
    # (deeper start tags dropped) and attributes per element (the rest dropped).
    PARSE_MAX_ELEMENTS: int = 100_000
    PARSE_MAX_DEPTH: int = 512
    PARSE_MAX_ATTRS: int = 64
    # Links of one page that are followed (the rest counted as parse/outlinks_dropped; the
    # feed still lists them); keeps one page's discoveries a bounded message.
    MAX_OUTLINKS_PER_PAGE: int = 10_000
    # A hard budget per page: HTML is parsed in a child process stopped after this long
    # (0 = parse in the worker itself, no deadline), with this address-space cap.
    PARSE_TIMEOUT_S: float = 5.0
    PARSE_MEMORY_MB: int = 2048
    # Pages read from one PDF (its text also stops at MAX_TEXT_CHARS); a PDF is fetched
    # within MAX_BODY_BYTES like any page, and parsed in the same child and deadline.
    PDF_MAX_PAGES: int = 500
    # Feed text: "main" = main content only (boilerplate removed, language detected,
    # metadata; parse/text.py, ~4 ms a page); "full" = main content in `text` plus the
    # whole visible text in `full_text` (~2 ms more); "body" = the whole <body> text
    # without extraction (cheapest; no detected language or metadata).
    TEXT_MODE: str = "main"

    # --- Crawl control -------------------------------------------------------------------
    # Stop after this many fetched pages (0 = no limit). Exact on one Redis: the frontier's
    # scripts lease a host, or hold it for another page, only within what is left of it.
    MAX_PAGES: int = 0
    # Stop after this many seconds (0 = no limit; enforced by manage.py crawl).
    MAX_SECONDS: float = 0.0
    # Checkpoint the frontier to OUT/snapshots every this many seconds (0 = off); keep
    # this many files. Taken by the maintenance task, which pauses wakes meanwhile.
    SNAPSHOT_INTERVAL_S: float = 300.0
    SNAPSHOT_KEEP: int = 3
    # manage.py crawl stops cleanly (state saved, --resume works) when the output folder's
    # filesystem has less free space than this: room for the exchanges in flight, the
    # final Redis save and a checkpoint (0 = never).
    DISK_MIN_FREE_BYTES: int = 256 * 2**20
    # Prometheus endpoint of manage.py crawl: -1 = off, 0 = a free port.
    METRICS_PORT: int = 0
    METRICS_ADDR: str = "127.0.0.1"
    # Continuous crawl: every fetched URL is revisited; the crawl runs until a limit or a
    # signal stops it (frontier/recrawl.py; the rules are in crawler_tasks/freshness/).
    CONTINUOUS: bool = False
    # Revisit rule: adaptive (estimated change rates, the budget spread to keep copies
    # fresh), multiplicative (2x sooner after a change, 1.5x later if not), nutch (Nutch's
    # AdaptiveFetchSchedule defaults) or uniform (the budget spread evenly).
    RECRAWL_POLICY: str = "adaptive"
    # What adaptive maximizes: freshness (share of copies equal to the live page; pages
    # that change too fast to keep fresh are given up on) or age (how long copies are
    # out of date; every page is revisited, faster ones more often).
    RECRAWL_OBJECTIVE: str = "freshness"
    # Revisits per second per shard; 0 = RECRAWL_HOST_SHARE of the politeness capacity of
    # the shard's known hosts (one request per MIN_DELAY_S each). Discovery has the rest.
    RECRAWL_BUDGET_PER_S: float = 0.0
    RECRAWL_HOST_SHARE: float = 0.5
    # The first visit's interval for the non-adaptive rules (adaptive starts from the
    # host's pooled change rate, or 1 / this), and the bounds of every interval, seconds.
    RECRAWL_INITIAL_S: float = 86_400.0
    RECRAWL_MIN_S: float = 3_600.0
    RECRAWL_MAX_S: float = 30 * 86_400.0
    # Adaptive: a revisit is put off until the page has at least this chance of having
    # changed (at most RECRAWL_MAX_S): with a plentiful budget the optimum still spends it
    # on pages that most likely never change, each visit almost surely a 304 (0: off).
    RECRAWL_MIN_CHANGE_CHANCE: float = 0.02
    # Beat: how often due URLs are moved back into the front queues, seconds (those due within
    # half of it are moved at once: a revisit is as often early as late, never a whole tick late).
    RECRAWL_CHECK_S: float = 5.0
    # Workers started by manage.py crawl send task events (Flower needs them).
    TASK_EVENTS: bool = True
    # Beat: how often the wake task runs, seconds.
    WAKE_INTERVAL_S: float = 0.25
    # Beat: how often maintenance logs stats, expires leases and decides stop, seconds.
    MAINTENANCE_INTERVAL_S: float = 1.0
    # Each maintenance run appends a progress sample (pages, queued, hosts, errors) to a
    # capped Redis list read by ``manage.py report``; 0 = off. 20,000 samples are 11 h at
    # 2 s and ~2 MB of Redis.
    TIMESERIES_MAX_SAMPLES: int = 20_000

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "Settings":
        """Defaults, then ``CRAWLER_*`` variables, then keyword overrides (CLI flags)."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name)
            if raw is not None:
                values[f.name] = _coerce(f.name, f.type, raw)
        for name, value in overrides.items():
            if value is None:
                continue
            if name not in _FIELD_TYPES:
                raise ConfigError(f"unknown setting {name!r}")
            values[name] = _coerce(name, _FIELD_TYPES[name], value) if isinstance(value, str) else value
        settings = dataclasses.replace(cls(), **values)
        settings.validate()
        return settings

    def to_env(self) -> dict[str, str]:
        """The settings as ``CRAWLER_*`` variables, for child processes."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = ",".join(value)
            elif isinstance(value, bool):
                value = "1" if value else "0"
            out[ENV_PREFIX + f.name] = str(value)
        return out

    def validate(self) -> None:
        """Refuse settings that would make the crawl misbehave, with a clear message."""
        checks = [
            (self.SHARDS >= 1, "SHARDS must be >= 1"),
            (self.PRIORITY_LEVELS >= 1, "PRIORITY_LEVELS must be >= 1"),
            (self.MAX_ACTIVE_HOSTS >= 1, "MAX_ACTIVE_HOSTS must be >= 1"),
            (self.FETCH_BATCH >= 1, "FETCH_BATCH must be >= 1"),
            (self.SITEMAP_GUESS_MIN_URLS >= 0, "SITEMAP_GUESS_MIN_URLS must be >= 0"),
            (self.FETCH_MAX_HOSTS >= 1, "FETCH_MAX_HOSTS must be >= 1"),
            (self.FETCH_MAX_EXCHANGES >= 1, "FETCH_MAX_EXCHANGES must be >= 1"),
            (self.FETCH_MEMORY_MB >= 1, "FETCH_MEMORY_MB must be >= 1"),
            (self.FETCH_CONCURRENCY >= 1, "FETCH_CONCURRENCY must be >= 1"),
            (self.MAX_FETCH_SESSIONS >= 1, "MAX_FETCH_SESSIONS must be >= 1"),
            (self.SESSION_MAX_S > 0, "SESSION_MAX_S must be > 0"),
            (self.NODE_TTL_S >= 3, "NODE_TTL_S must be >= 3"),
            (self.PROCESS_TTL_S >= 1, "PROCESS_TTL_S must be >= 1"),
            (self.HOLD_HORIZON_S >= 0, "HOLD_HORIZON_S must be >= 0"),
            (self.PARSE_GROUP_PAGES >= 1, "PARSE_GROUP_PAGES must be >= 1"),
            (self.PARSE_GROUP_S > 0, "PARSE_GROUP_S must be > 0"),
            (self.MAX_OUTLINKS_PER_PAGE >= 0, "MAX_OUTLINKS_PER_PAGE must be >= 0"),
            (self.MIN_DELAY_S >= 0, "MIN_DELAY_S must be >= 0"),
            (0 <= self.NEAR_DUP_BITS <= 6, "NEAR_DUP_BITS must be 0..6"),
            (self.DUST_PRIOR_HOSTS >= 1 and self.DUST_PRIOR_CHECK_EVERY >= 1,
             "DUST_PRIOR_HOSTS and DUST_PRIOR_CHECK_EVERY must be >= 1"),
            (self.RECRAWL_POLICY in ("adaptive", "multiplicative", "nutch", "uniform"),
             "RECRAWL_POLICY must be adaptive, multiplicative, nutch or uniform"),
            (self.RECRAWL_OBJECTIVE in ("freshness", "age"), "RECRAWL_OBJECTIVE must be freshness or age"),
            (self.RECRAWL_BUDGET_PER_S >= 0 and 0 < self.RECRAWL_HOST_SHARE <= 1,
             "RECRAWL_BUDGET_PER_S must be >= 0 and RECRAWL_HOST_SHARE in (0, 1]"),
            (0 <= self.RECRAWL_MIN_CHANGE_CHANCE < 1, "RECRAWL_MIN_CHANGE_CHANCE must be in [0, 1)"),
            (0 < self.RECRAWL_MIN_S <= self.RECRAWL_INITIAL_S <= self.RECRAWL_MAX_S,
             "RECRAWL_MIN_S <= RECRAWL_INITIAL_S <= RECRAWL_MAX_S must hold, all > 0"),
            (self.DELAY_FACTOR >= 0, "DELAY_FACTOR must be >= 0"),
            (self.DNS_TIMEOUT_S > 0 and self.DNS_TRIES >= 1, "DNS_TIMEOUT_S must be > 0 and DNS_TRIES >= 1"),
            (0 <= self.DNS_MIN_TTL_S <= self.DNS_MAX_TTL_S, "0 <= DNS_MIN_TTL_S <= DNS_MAX_TTL_S must hold"),
            (self.DNS_RETRIES >= 0 and self.DNS_RETRY_BASE_S >= 0 and self.DNS_DEAD_S >= 0,
             "DNS_RETRIES, DNS_RETRY_BASE_S and DNS_DEAD_S must be >= 0"),
            (self.LEASE_S > self.TOTAL_TIMEOUT_S, "LEASE_S must exceed TOTAL_TIMEOUT_S"),
            (min(self.TOTAL_TIMEOUT_S, self.CONNECT_TIMEOUT_S, self.READ_TIMEOUT_S) > 0,
             "TOTAL_TIMEOUT_S, CONNECT_TIMEOUT_S and READ_TIMEOUT_S must be > 0"),
            (self.MAX_HEADERS >= 1 and self.MAX_HEADER_BYTES >= 1024,
             "MAX_HEADERS must be >= 1 and MAX_HEADER_BYTES >= 1024"),
            (self.FRONT_SPILL_AT == 0 or 0 <= self.FRONT_REFILL_AT < self.FRONT_SPILL_AT,
             "FRONT_REFILL_AT must be below FRONT_SPILL_AT (else a file spilled is read straight back)"),
            (0 < self.BLOOM_ERROR_RATE < 1, "BLOOM_ERROR_RATE must be in (0, 1)"),
            (self.URL_SEEN in ("bloom", "exact"), f"URL_SEEN must be 'bloom' or 'exact', got {self.URL_SEEN!r}"),
            (self.BLOOM_EXPECTED_URLS >= 1, "BLOOM_EXPECTED_URLS must be >= 1"),
            (self.MAX_BODY_BYTES >= 1024, "MAX_BODY_BYTES must be >= 1024"),
            (self.WAKE_INTERVAL_S > 0, "WAKE_INTERVAL_S must be > 0"),
            (self.MAINTENANCE_INTERVAL_S > 0, "MAINTENANCE_INTERVAL_S must be > 0"),
            (bool(self.USER_AGENT.strip()), "USER_AGENT must not be empty"),
            (all(_is_ip(a) for a in self.ALLOW_METADATA_ADDRESSES),
             f"ALLOW_METADATA_ADDRESSES must list IP addresses, got {self.ALLOW_METADATA_ADDRESSES!r}"),
            (self.TEXT_MODE in ("main", "full", "body"), "TEXT_MODE must be main, full or body"),
            (self.PDF_MAX_PAGES >= 1, "PDF_MAX_PAGES must be >= 1"),
            (self.RENDER in ("auto", "always", "never"), "RENDER must be auto, always or never"),
            (self.RENDER_TIMEOUT_S > 0, "RENDER_TIMEOUT_S must be > 0"),
            (self.RENDER_IDLE_S > 0, "RENDER_IDLE_S must be > 0"),
            (min(self.RENDER_MAX_PER_HOST, self.RENDER_MAX_REQUESTS) >= 0,
             "RENDER_MAX_PER_HOST and RENDER_MAX_REQUESTS must be >= 0"),
            (min(self.RENDER_BROWSERS, self.RENDER_PAGES_PER_CONTEXT, self.RENDER_PAGES_PER_BROWSER) >= 1,
             "RENDER_BROWSERS, RENDER_PAGES_PER_CONTEXT and RENDER_PAGES_PER_BROWSER must be >= 1"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(message)
        try:
            self.dns_servers()
        except ValueError as exc:
            raise ConfigError(f"DNS_SERVERS: {exc}") from None
        for name, patterns in (("INCLUDE_PATTERNS", self.INCLUDE_PATTERNS), ("EXCLUDE_PATTERNS", self.EXCLUDE_PATTERNS)):
            for pattern in patterns:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ConfigError(f"{name}: {pattern[:200]!r} is not a regular expression: {exc}") from None
        if self.PROXY_URL:
            problem = _proxy_problem(self.PROXY_URL)
            if problem:
                shown = self.PROXY_URL.strip()
                if "@" in shown:   # never the credentials
                    scheme = shown.partition("://")[0] + "://" if "://" in shown else ""
                    shown = f"{scheme}***@{shown.rpartition('@')[2]}"
                raise ConfigError(f"PROXY_URL: {shown!r} {problem}")
        for name, path in self.ca_paths():
            problem = _ca_problem(path)
            if problem:
                raise ConfigError(f"{name}: {path} {problem}")

    def ca_paths(self) -> list[tuple[str, str]]:
        """(where it was named, path) of each CA location trusted besides certifi's bundle:
        CA_BUNDLE's, then the process environment's SSL_CERT_FILE (one file, as OpenSSL
        reads it) and SSL_CERT_DIR's folders, which Python and OpenSSL users expect obeyed."""
        named = [("CA_BUNDLE", p) for p in self.CA_BUNDLE.split(os.pathsep)]
        named.append(("SSL_CERT_FILE", os.environ.get("SSL_CERT_FILE", "")))
        named += [("SSL_CERT_DIR", p) for p in os.environ.get("SSL_CERT_DIR", "").split(os.pathsep)]
        return [(name, path) for name, path in named if path]

    def dns_servers(self) -> list[tuple[str, int]] | None:
        """DNS_SERVERS as (address, port) pairs, None when empty (resolv.conf's); ValueError
        names an item that is not an IP address with an optional port."""
        if not self.DNS_SERVERS:
            return None
        out = []
        for item in self.DNS_SERVERS:
            text = item.strip()
            host, port = text, "53"
            if text.startswith("["):   # [v6]:port
                host, _, rest = text[1:].partition("]")
                port = rest[1:] if rest.startswith(":") else "53"
            elif text.count(":") == 1:
                host, port = text.split(":")
            if not (_is_ip(host) and port.isascii() and port.isdigit() and 0 < int(port) < 65536):
                raise ValueError(f"{item!r} is not an IP address with an optional :port")
            out.append((host, int(port)))
        return out

    @property
    def batch_timeout_s(self) -> float:
        return self.BATCH_TIMEOUT_S or 2 * self.LEASE_S

    @property
    def seed_host_budget(self) -> int:
        return self.MAX_PAGES_PER_SEED_HOST or 10 * self.MAX_PAGES_PER_HOST

    @property
    def node_name(self) -> str:
        return self.NODE_NAME or _short_hostname()

    @property
    def uses_default_contact(self) -> bool:
        return self.USER_AGENT == DEFAULT_USER_AGENT


@functools.cache
def _short_hostname() -> str:
    """The machine's name, asked once (every fetched page names its node)."""
    import socket

    return socket.gethostname().split(".")[0]


_HASHED_NAME = re.compile(r"[0-9a-f]{8}\.[0-9]+")   # what OpenSSL looks up in a folder


def _ca_problem(path: str) -> str | None:
    """Why ``path`` gives no CA certificate to trust; None when it gives one. A file is
    loaded as the fetcher will load it (a garbled one fails here, not in a worker)."""
    if os.path.isdir(path):
        try:
            names = os.listdir(path)
        except OSError as exc:
            return f"cannot be read ({exc.strerror})"
        if not any(_HASHED_NAME.fullmatch(name) for name in names):
            return "holds no hashed certificate names (run `openssl rehash` on it)"
        return None
    if not os.path.exists(path):
        return "does not exist"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=path)
    except ssl.SSLError:
        return "holds no PEM certificate"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not context.cert_store_stats()["x509"]:
        return "holds no certificate (only CRLs)"
    return None


def _proxy_problem(url: str) -> str | None:
    """Why PROXY_URL is not ``http://[user:pass@]host:port``; None when it is. The scheme
    is required here (unlike in the environment's variables), so that the settings hash
    can tell its credentials and leave them out. fetch/proxy.py reads the URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return "is not a URL with a numeric port (a password with '/', '?' or '#' must be %-encoded)"
    if parts.scheme.lower() != "http":
        return "must start with http:// (only HTTP proxies are supported; https:// URLs use CONNECT)"
    if not parts.hostname or port is None:
        return "needs a host and a port"
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        return "must have no path (a password with '/', '?' or '#' must be %-encoded)"
    return None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return False
    return True


_FIELD_TYPES: dict[str, str] = {f.name: str(f.type) for f in fields(Settings)}

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def _coerce(name: str, type_name: Any, raw: str) -> Any:
    type_name = str(type_name)
    try:
        if type_name == "bool":
            low = raw.strip().lower()
            if low in _TRUE:
                return True
            if low in _FALSE:
                return False
            raise ValueError(raw)
        if type_name == "int":
            return int(raw.strip().replace("_", ""))
        if type_name == "float":
            return float(raw.strip())
        if type_name.startswith("tuple"):
            return tuple(item.strip() for item in raw.split(",") if item.strip())
        return raw
    except ValueError:
        raise ConfigError(f"setting {name}: cannot read {raw!r} as {type_name}") from None


_cached: Settings | None = None


def get_settings() -> Settings:
    """The process-wide settings, read from the environment once."""
    global _cached
    if _cached is None:
        _cached = Settings.from_env()
    return _cached


def reset_settings(settings: Settings | None = None) -> None:
    """Replace the process-wide settings (tests, manage.py)."""
    global _cached
    _cached = settings


__all__ = ["Settings", "get_settings", "reset_settings", "ENV_PREFIX", "DEFAULT_USER_AGENT"]
