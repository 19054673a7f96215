"""PyInstaller's entry script: the frozen runtime is exactly the ``dsh`` command line.

It calls the same :func:`dsh.cli.main.main` as the ``dsh`` console script and ``python -m
dsh``, so the exe carrier and the python carrier cannot accept different arguments.
"""

from dsh.cli.main import main

main()
