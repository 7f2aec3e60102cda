"""``python -m grid``: the same entry point as the ``grid`` command."""

from grid.cli import main

main()
