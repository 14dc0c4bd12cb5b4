"""``wrp slice``: cut top-level ops A:B out of a capture into a capture of their own."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import click

from .options import (UserPath, gather_inputs, input_options, kernels_option, quiet_warp, refuse_signing_in_place,
                      resign, trust_options)
from .output import console, dump_json, escape, size


@click.command("slice")
@click.argument("file", type=UserPath(dir_okay=True, path_type=Path))
@click.option("--ops", "ops", metavar="A:B",
              help="Top-level ops A to B-1 (as `wrp inspect --ops` numbers them; negative counts from the end); "
                   "an IF or WHILE is kept whole.")
@click.option("--steps", "steps", metavar="A:B",
              help="The ops that ran at steps A to B-1, as `wrp trace` numbers them (its # column), inside IF "
                   "and WHILE bodies at their iteration: a flat program. --steps K:K+1 is one launch alone.")
@click.option("-o", "--output", "out", required=True, type=UserPath(dir_okay=False, path_type=Path),
              metavar="OUT", help="The slice: OUT.wrp (with OUT_modules/) or OUT.wrpk (one file).")
@input_options
@click.option("--device", default=None, help="Device that replays ops before A (default: the capture's family).")
@kernels_option
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@trust_options
@click.option("--key", "key", type=UserPath(dir_okay=False), metavar="PRIVATE.pem",
              help="Sign the output with this EC private key (as `wrp sign OUT --key` does).")
def slice(file, ops, steps, out, inputs_npz, input_items, device, kernels, as_json, trust, key):  # noqa: A001
    """Write a capture holding only top-level ops A to B-1 of FILE (--ops), or steps A to B-1 (--steps).

    \b
    Its initial memory is the state just before op (step) A, given the
    inputs (or FILE's own initial data): what runs before A is replayed once
    to get it. With --steps, the leaf ops that ran at those steps (numbered
    as `wrp trace` numbers them, inside WHILE and IF bodies at their
    iteration) form a flat program: `--steps 190:191` is the launch trace
    numbered 190 alone, and replaying it writes what it wrote then.
    Bindings keep their names. Stock Warp's capture_load(OUT) plus one
    capture_launch reproduces, bit for bit, the state after op B-1 of the
    original run. Use it to cut a failing piece out of a long capture.
    Exit codes: 0 written; 1 replay failed; 2 bad input, or a range outside
    the program (--steps: outside the steps it runs); 3 invalid file.

    \b
    Examples:
      wrp slice sim.wrp --ops 5000:5010 -o piece.wrpk
      wrp slice sim.wrp --ops 120:121 --inputs in.npz -o op120.wrp
      wrp slice sim.wrp --ops -1: -o last.wrp && wrp validate last.wrp
      wrp slice chain.wrp --steps 26:27 -o bad_launch.wrpk
      wrp slice stock.wrp --steps 26:27 --kernels chain.py -o bad_launch.wrp
    """
    from ..debug.slice import slice as run_slice  # noqa: PLC0415

    from ..errors import WrpUsageError  # noqa: PLC0415

    if (ops is None) == (steps is None):
        raise WrpUsageError("give one of --ops A:B and --steps A:B",
                            hint="--ops: top-level ops (wrp inspect --ops); --steps: the # column of wrp trace.")
    refuse_signing_in_place(out, key)
    from ..formats.signature import verify_path  # noqa: PLC0415

    verify_path(trust, file)
    quiet_warp(device)
    inputs = gather_inputs(inputs_npz, input_items)
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        res = run_slice(file, out, ops=ops, steps=steps, inputs=inputs, device=device, kernels=kernels)
    signed = resign(file, res.path, "wrpk" if Path(res.path).suffix.lower() == ".wrpk" else "wrp", key, as_json)
    if as_json:
        dump_json(dict(res.to_json(), signature=signed))
        return
    if res.unit == "steps":
        console().print(f"[green]wrote[/] {escape(str(res.path))}: steps {res.start}:{res.stop} ({res.ops} op(s), flat), "
                        f"{res.regions_with_data} region(s) with initial data, {size(res.bytes_written)}",
                        highlight=False)
        return
    console().print(f"[green]wrote[/] {escape(str(res.path))}: ops {res.start}:{res.stop} ({res.ops} top-level), "
                    f"{res.regions_with_data} region(s) with initial data, {size(res.bytes_written)}",
                    highlight=False)
