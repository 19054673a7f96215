"""PyInstaller's entry script: the frozen runtime is exactly the ``dsh`` command line.

It calls the same :func:`dsh.cli.main.main` as the ``dsh`` console script and ``python -m
dsh``, so the exe carrier and the python carrier cannot accept different arguments. The
one exception is the sandbox's allow-list relay (:mod:`dsh.core.netrelay`), which the
python carrier runs as ``python -I -S -c`` and the frozen runtime, having no ``-c``,
runs through :data:`~dsh.core.netrelay.FROZEN_FLAG` inside a bubblewrap sandbox.
"""

import sys

if sys.argv[1:2] == ["--dsh-netrelay"]:
    from dsh.core.netrelay import run_frozen

    run_frozen()
else:
    from dsh.cli.main import main

    main()
