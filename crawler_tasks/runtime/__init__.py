"""What runs inside the crawl's processes under the stages: the crawl's state and counters
(``control``), node claims (``nodes``), the maintenance tick (``maintenance``), process
tuning (``malloc``) and the fetch latency writer (``latency``). The operator's tools are
in ``ops/``, above the stages."""
