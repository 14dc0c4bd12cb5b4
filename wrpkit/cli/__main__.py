"""``python -m wrpkit.cli``: the ``wrp`` command line."""

from . import main

main()
