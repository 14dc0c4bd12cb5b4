"""``python -m wrpkit.cli``: the ``wrp`` command line (as ``python -m wrpkit``)."""

import sys

from ..__main__ import main

sys.exit(main())
