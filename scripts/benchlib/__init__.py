"""The machinery around ``scripts/bench.py``'s benchmarks: the anchor SDKs' environment and
probes (:mod:`.anchors`), the report (:mod:`.report`) and its plots (:mod:`.plots`).

The benchmarks themselves stay in ``bench.py``; these modules only read its result rows, so
each can be tested on a fixed result document without running a benchmark.
"""
