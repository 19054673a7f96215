"""dsh's benchmarks (``scripts/bench.py``), one module per family, and the machinery around
them.

Families, in report order (:data:`benchlib.registry.FAMILIES`): ``compose``, ``sdk``,
``runtime``, ``wheel``, ``throughput``, ``providers``, ``agent``, ``sessions``, ``trust``,
``web``, ``plugins``, ``shell``, ``mcp``, ``telemetry``, ``chat``. Machinery:
:mod:`.registry` (rows, registration, verdict), :mod:`.cli` (the runner), :mod:`.report`
and :mod:`.plots` (``docs/benchmarks.md``), :mod:`.procs` (environments, process timing, the
``python -c pass`` yardstick, interleaving), :mod:`.rpc` (a bare JSON-RPC peer),
:mod:`.carrier` (the runtime wheel and the exe carrier), :mod:`.anchors` (the anchor
SDKs, in a venv of their own).

Rules for every row (a new family or row follows them; the runner enforces what it can)
-----------------------------------------------------------------------------------------

1. **Declare, then measure.** A row is a :class:`~benchlib.registry.Metric` declared at
   module level: name, unit, ``op`` and a fixed ``target``, ``about`` (what is measured)
   and ``changes`` (what would change the number: code, machine, load, configuration).
   Register the function with ``@benchmark("key", METRIC, ...)``; it returns exactly the
   declared rows, in order (else every row becomes an error). Put the row in the family
   whose code it measures; a new family is a new module added to ``FAMILIES``.
2. **A row that did not measure says so.** Return ``METRIC.skip("why")``: ``ok`` is
   ``None``, the reason is printed, and the run's verdict becomes ``incomplete``. Never
   return a zero, a placeholder or a figure of something else (a missing wheel, tool,
   server, key or anchor is a skip). A raised exception becomes an error row, also not a
   pass.
3. **Targets are fixed numbers or ratios taken in the same run** (``sdk_start_to_ready``:
   DshClient over the DeepSeek Harness client, interleaved). Never rescale a target by
   figures from another machine or another run. Say where a target comes from (an issue,
   a contract, a reason) in ``changes``; a target beyond the contract is ``stretch=True``
   and counts like any other.
4. **Every time is reported beside ``python -c pass``.** Build a
   :class:`~benchlib.procs.PythonPass` and call ``sample()`` once per repetition of the
   row's own loop, then ``METRIC.measure(value, python_pass_ms=baseline.median_ms)``; the
   row gets ``python_pass_ms`` and ``vs_python_pass`` (:func:`~benchlib.registry.
   with_python_pass`). A timed row that does not is given the samples the runner takes
   just before and after the benchmark (``python_pass_source: bracketing``).
5. **Medians of interleaved repetitions.** Run the sides compared (dsh and an anchor, two
   carriers) within one loop, in :func:`~benchlib.procs.balanced` order (each runs after
   each other equally often), so a load spike or what one side leaves behind slows each
   alike; leave the first round out when it seeds caches or writes bytecode. Honour
   ``opts.reps(full, quick)``; a run of several minutes registers with
   ``full_only=True``. A benchmark that measures the anchor SDKs registers with
   ``anchors=True`` and reads ``opts.anchors`` (their venv, a large download, is only
   made when a selected benchmark says so).
6. **Measure what a user gets.** Spawn processes in :func:`~benchlib.procs.
   installed_environ` (own home, no ``DSH_*`` of the caller's, bytecode kept as an
   installed wheel keeps it); time the steps a user's program runs, the imports it needs
   included where they are part of the row (say so in ``about``). Compare like with like:
   the same steps, the same runtime, on both sides.
7. **No machine paths.** Name things by what they are ("exe carrier (dsh-runtime-bin,
   installed)", a wheel's file name), never by where they sit; the runner scrubs paths
   from the document anyway (:func:`~benchlib.report.scrub`), but a row whose meaning
   depends on a path is wrong.
8. **Never judge in a test.** Benchmarks run by hand; the test suite runs the machinery
   on tiny rows, with no wall-clock assertion.

Rows other issues add follow the same rules. Examples already fitted: ``providers`` (what
a route adds per streamed chunk, on each wire format, over httpx reading the same body
from a local stand-in,
``python -c pass`` sampled between repetitions), ``session_lease_acquire`` in
``sessions``, ``safe_open``/``safe_open_walk`` in ``trust`` (the race-free open beside a
plain ``os.open`` in the same loop), and the PostgreSQL session store in ``sessions``
(append, resume and lease beside SQLite's in the same loop, on a throwaway cluster it
starts; skipped with the reason without PostgreSQL's binaries or psycopg, never measured
against SQLite in its place).
"""
