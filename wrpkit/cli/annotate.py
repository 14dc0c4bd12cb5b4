"""``wrp annotate``: write a copy of a stock capture typed from the user's kernel source."""

from __future__ import annotations

from pathlib import Path

import click

from .options import UserPath, kernel_match_lines, quiet_warp, refuse_signing_in_place, resign, trust_options
from .output import console, dump_json, escape, size


@click.command("annotate")
@click.argument("file", type=UserPath(dir_okay=False, path_type=Path))
@click.option("--kernels", "kernels", multiple=True, required=True, metavar="FILE.py",
              type=UserPath(dir_okay=False, path_type=Path),
              help="The .py file that defines the capture's kernels (repeatable).")
@click.option("-o", "--output", "out", required=True, type=UserPath(dir_okay=False, path_type=Path),
              metavar="OUT", help="OUT.wrp (with OUT_modules/) or OUT.wrpk (one file).")
@click.option("--json", "as_json", is_flag=True, help="Print the result (kernels matched, reasons) as JSON.")
@trust_options
@click.option("--key", "key", type=UserPath(dir_okay=False), metavar="PRIVATE.pem",
              help="Sign the output with this EC private key (as `wrp sign OUT --key` does).")
def annotate(file, kernels, out, as_json, trust, key):
    """Write OUT: FILE with its kernels and bindings typed from --kernels.

    \b
    A stock wp.capture_save file records no types. Each --kernels file is
    imported as Python runs a script (its folder on the import path, its
    `if __name__ == "__main__":` block not run); every recorded kernel that
    matches one of its kernels by name, module (__main__ matches the
    script) and argument layout gets its argument types and access, and
    bindings that such an argument covers get a dtype. Kernels that do not
    match are named with the reason. The types go into wrpkit's extra
    section, which stock wp.capture_load skips: OUT loads and replays as
    FILE does. OUT is validated, then written atomically.
    Exit codes: 0 written; 2 bad input (a --kernels file that fails to
    import, no kernel matches, FILE already typed); 3 invalid file.

    \b
    Examples:
      wrp annotate chain.wrp --kernels chain.py -o chain_typed.wrp
      wrp annotate sim.wrp --kernels sim.py --kernels helpers.py -o sim.wrpk
      wrp trace chain_typed.wrp --stop-at-nonfinite
    """
    from ..run.capture.source_types import annotate as run_annotate  # noqa: PLC0415

    from ..formats.signature import verify_path  # noqa: PLC0415

    refuse_signing_in_place(out, key)
    verify_path(trust, file)
    quiet_warp(None)
    res = run_annotate(file, out, list(kernels))
    signed = resign(file, res.dst, "wrpk" if Path(res.dst).suffix.lower() == ".wrpk" else "wrp", key, as_json)
    if as_json:
        dump_json(dict(res.to_json(), signature=signed))
        return
    con = console()
    t = res.typing
    con.print(f"[green]wrote[/] {escape(str(res.dst))}: {len(t.matched)} of {len(t.matches)} kernel(s) typed, "
              f"{len(t.bindings_typed)} binding(s) typed, {size(res.bytes_written)}", highlight=False)
    for line in kernel_match_lines(t.to_json())[1:]:  # the count is in the line above
        con.print(line, highlight=False)
