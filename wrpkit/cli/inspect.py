"""``wrp inspect``: summary tables, every op, or JSON with stable keys."""

from __future__ import annotations

import click

from .inspect_run import run
from .options import UserPath, kernels_option


@click.command()
@click.argument("file", type=UserPath(exists=True, dir_okay=True, allow_dash=False))
@click.option("--ops", "with_ops", is_flag=True,
              help="List every op with its key fields (and the binding each launch argument points to), "
                   "nested bodies indented, and where the program issued it (captures made with wrpkit.capture).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (stable keys) instead of tables.")
@click.option("--verify", is_flag=True,
              help="For .wrpk: also hash every blob (region data, modules) against its SHA-256, as wrp validate "
                   "does; by default inspect reads the records only.")
@click.option("--no-verify", is_flag=True, hidden=True, help="Kept for old scripts: blobs are not hashed anyway.")
@kernels_option
def inspect(file, with_ops, as_json, verify, no_verify, kernels):
    """Summarize a capture: versions, device, sections, ops, kernels, bindings, regions, modules.

    Reads only the file's records (region and module contents are not read,
    and a .wrpk's blobs are not hashed: `wrp validate` or --verify does that)
    and never imports Warp, so it is fast on large files.

    \b
    Bindings have one row each, with their roles: a binding given to
    capture_save as input and as output (an in-place array) is one row
    with both.  In --json: "input" and "output" are true, false, or null
    where a stock file does not record it.  A capture made with
    wrpkit.capture says where each op was issued ("source" per op in --json,
    "at sim.py:42 in step()" with --ops) and where each kernel is defined.

    \b
    Examples:
      wrp inspect graph.wrp
      wrp inspect graph.wrp --ops
      wrp inspect graph.wrp --json | jq .bindings
    """
    run(file, with_ops=with_ops, as_json=as_json, verify=verify, no_verify=no_verify, kernels=kernels)
