"""The shell tool's sandbox: what bubblewrap adds to starting a command."""

from __future__ import annotations

import tempfile

from benchlib.procs import PythonPass, clean_environ, installed_environ, median_ms, wall
from benchlib.registry import Metric, Options, Result, benchmark

SANDBOX = Metric(
    "shell_sandbox_start", "ms", "<", 100,
    about="`bash -c true` through the shell tool's argv in the workspace-write sandbox "
          "(bwrap --unshare-net --unshare-pid ...); the same command unsandboxed is a "
          "detail.",
    changes="bubblewrap's namespace set-up (network and pid namespaces cost most), the "
            "kernel, the bind mounts the policy asks for; load. Target 100 ms.")


@benchmark("shell_sandbox_start", SANDBOX)
def shell_sandbox_start(opts: Options) -> Result:
    """``true`` through the shell tool's argv, in the workspace-write sandbox and plain."""
    from dsh.runtime.tools.sandbox import Policy, probe
    from dsh.runtime.tools.shell import command_argv

    sandbox = {"mode": "workspace-write", "network": False, "required": False}
    found = probe(Policy.from_config(sandbox))
    if not found.usable:
        return SANDBOX.skip(f"the sandbox is not usable here: {found.reason}")
    runs = opts.reps(41, 9)
    environ = clean_environ()
    with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
        baseline = PythonPass(installed_environ(tmp), tmp)
        argvs = {mode: command_argv({"shell": "", "sandbox": {**sandbox, "mode": mode}},
                                    "true", tmp, home=tmp, env=environ)
                 for mode in ("off", "workspace-write")}
        times: dict[str, list[float]] = {mode: [] for mode in argvs}
        for run in range(runs + 1):
            if run:
                baseline.sample()
            for mode, argv in argvs.items():
                times[mode].append(wall(argv, environ, tmp))
    plain, boxed = (median_ms(times[m][1:]) for m in ("off", "workspace-write"))
    return SANDBOX.measure(boxed, runs=runs, python_pass_ms=baseline.median_ms,
                           unsandboxed_ms=plain, overhead_ms=round(boxed - plain, 2),
                           ratio=round(boxed / plain, 2))
