"""Plugin management: installing a local plugin into a profile's own environment."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from benchlib.procs import FIXTURES, PythonPass, installed_environ, median_ms, wall
from benchlib.registry import Metric, Options, Result, benchmark

ADD_LOCAL = Metric(
    "plugin_add_local", "ms", "<", 10000,
    about="`dsh plugin --profile p add ./hello` (tests/fixtures/dsh-hello-plugin, a local "
          "path, pip into the profile's fresh environment) as a whole process.",
    changes="pip's own speed (resolver, build isolation, its start-up), creating the "
            "profile's venv, disk speed; the network only if a build dependency is "
            "missing from pip's cache. Target 10 s.")


@benchmark("plugin_add_local", ADD_LOCAL)
def plugin_add_local(opts: Options) -> Result:
    """``dsh plugin --profile p add ./dsh-hello-plugin`` (pip, local path, fresh env)."""
    runs = opts.reps(5, 1)
    figures = []
    pass_samples: list[float] = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="dsh-bench-") as tmp:
            environ = installed_environ(tmp)
            baseline = PythonPass(environ, tmp)
            baseline.sample(3)
            shutil.copytree(FIXTURES / "dsh-hello-plugin", Path(tmp) / "hello")
            argv = [sys.executable, "-m", "dsh", "plugin", "--profile", "p", "add", "./hello"]
            figures.append(wall(argv, environ, tmp))
            pass_samples += baseline.samples
    return ADD_LOCAL.measure(median_ms(figures), runs=runs,
                             python_pass_ms=median_ms(pass_samples))
