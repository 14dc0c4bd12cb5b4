"""``wrp slice``: cut top-level ops A:B out of a capture into a capture of their own."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from .debugopts import gather_inputs, input_options, quiet_warp
from .output import console, dump_json, size


@click.command("slice")
@click.argument("file", type=click.Path(dir_okay=True, path_type=Path))
@click.option("--ops", "ops", required=True, metavar="A:B",
              help="Top-level ops A to B-1 (as `wrp inspect --ops` numbers them; negative counts from the end).")
@click.option("-o", "--output", "out", required=True, type=click.Path(dir_okay=False, path_type=Path),
              metavar="OUT", help="The slice: OUT.wrp (with OUT_modules/) or OUT.wrpk (one file).")
@input_options
@click.option("--device", default=None, help="Device that replays ops before A (default: the capture's family).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def slice(file, ops, out, inputs_npz, input_items, device, as_json):  # noqa: A001
    """Write a capture holding only top-level ops A to B-1 of FILE.

    \b
    Its initial memory is the state just before op A, given the inputs (or
    FILE's own initial data): ops before A are replayed once to get it.
    Bindings keep their names. Stock Warp's capture_load(OUT) plus one
    capture_launch reproduces, bit for bit, the state after op B-1 of the
    original run. Use it to cut a failing piece out of a long capture.
    Exit codes: 0 written; 1 replay failed; 2 bad input or range; 3 invalid file.

    \b
    Examples:
      wrp slice sim.wrp --ops 5000:5010 -o piece.wrpk
      wrp slice sim.wrp --ops 120:121 --inputs in.npz -o op120.wrp
      wrp slice sim.wrp --ops -1: -o last.wrp && wrp validate last.wrp
    """
    from ..debug.slice import slice as run_slice  # noqa: PLC0415

    quiet_warp(device)
    inputs = gather_inputs(inputs_npz, input_items)
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        res = run_slice(file, ops, out, inputs=inputs, device=device)
    if as_json:
        dump_json(res.to_json())
        return
    console().print(f"[green]wrote[/] {res.path}: ops {res.start}:{res.stop} ({res.ops} top-level), "
                    f"{res.regions_with_data} region(s) with initial data, {size(res.bytes_written)}",
                    highlight=False)
