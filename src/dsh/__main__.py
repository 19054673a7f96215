"""``python -m dsh``: the python carrier, running exactly the ``dsh`` console script."""

from dsh.cli.main import main

if __name__ == "__main__":
    main()
