"""``python -m differank ARGS``: the ``differank`` command (differank.cli)."""

from differank.cli import main

if __name__ == "__main__":
    main()
