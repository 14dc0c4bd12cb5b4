"""Shared output helpers of the ``wrp`` commands: consoles, error lines, JSON, sizes, tables.

The library never prints; these are the only places the command line writes
from, so every command formats errors, JSON and sizes the same way.
"""

from __future__ import annotations

import json

import click

from ..errors import WrpError


def stderr_console():
    from rich.console import Console  # noqa: PLC0415

    return Console(stderr=True, highlight=False, soft_wrap=True)


def console():
    from rich.console import Console  # noqa: PLC0415

    return Console(highlight=False)


def report_error(err: WrpError) -> None:
    """Print a WrpError as ``error:`` and ``hint:`` lines on stderr."""
    con = stderr_console()
    con.print(f"[bold red]error:[/] {err.message}", markup=True, highlight=False)
    for p in getattr(err, "problems", [])[1:21]:
        con.print(f"       {p}", markup=False)
    if err.hint:
        con.print(f"[yellow]hint:[/] {err.hint}", markup=True, highlight=False)


def dump_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


def size(n) -> str:
    """A byte count as people read it: ``512 B``, ``1.5 KiB``, ``256.0 MiB``."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def table(title, columns):
    from rich.table import Table  # noqa: PLC0415

    t = Table(title=title, title_justify="left", title_style="bold", show_edge=False, pad_edge=False)
    for c in columns:
        justify = "right" if c in ("size", "offset", "count", "launches", "region", "points", "tris") else "left"
        t.add_column(c, justify=justify)
    return t
