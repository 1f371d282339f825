"""``python -m corral.cli``: the same as the ``corral`` command."""

from corral.cli.app import main

main()
