"""The headless runner (``dsh --profile headless``): one task from argv, run to completion.

The plugin lives in :mod:`dsh.runtime.headless.runner`; its command line in
:mod:`dsh.runtime.headless.options`; the stderr progress lines in
:mod:`dsh.runtime.headless.progress`.
"""
