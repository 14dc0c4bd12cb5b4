"""Measure wrpkit as an installed copy runs: with its bytecode cached.

``pip install .`` compiles every module to bytecode; an editable install
writes it on first import.  An environment that sets
``PYTHONDONTWRITEBYTECODE`` (some sandboxes and CI images do) makes every
``wrp`` process of an editable install compile each wrpkit module it imports
from source instead (at 256 MiB, ``wrp replay`` took 0.02 s longer on the
native engine and 0.04 s on the python engine), which inflated the ``wrp``
rows of ``bench_scale.py`` against ``wrp-replay``.  Each bench
calls :func:`cache_bytecode` first, so that it and the processes it starts
read cached bytecode as a user's install does (bytecode of wrpkit's source
tree goes to its ``__pycache__`` folders, which git ignores).
"""

from __future__ import annotations

import compileall
import os
import sys
from pathlib import Path


def cache_bytecode() -> None:
    """Compile the imported wrpkit's modules to bytecode (a no-op where it is cached) and let this
    process and the ones it starts use it."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False
    import wrpkit  # noqa: PLC0415

    compileall.compile_dir(str(Path(wrpkit.__file__).parent), quiet=1)
