"""``wrp convert``: .wrp, .wrpk and .json, chosen by the destination's extension."""

from __future__ import annotations

import sys

import click

from .options import UserPath, refuse_signing_in_place, resign, trust_options
from .output import console, dump_json, plural, size, stderr_console


def _edit_problems(prog, modules) -> list:
    """What `wrp validate` would refuse in a program read from .json (an edit), as texts."""
    from ..checks.module_files import check_module_symbols  # noqa: PLC0415
    from ..checks.validate import validate_program  # noqa: PLC0415

    problems = [p for p in validate_program(prog) if getattr(p, "severity", "error") == "error"]
    if modules:
        problems += check_module_symbols(prog, modules)
    return [str(p) for p in problems]


@click.command()
@click.argument("src", type=UserPath(exists=True, dir_okay=True))
@click.argument("dst", type=UserPath(dir_okay=False))
@click.option("--no-verify", is_flag=True, help="For a .wrpk input: skip blob checksums (trusted files only).")
@click.option("--no-modules", is_flag=True, help="For a .json output: leave module binaries out.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary line.")
@click.option("--modules-dir", type=UserPath(file_okay=False), metavar="DIR",
              help="Folder of the .wrp's module files (default: <stem>_modules/ beside it).")
@click.option("--container-version", type=click.IntRange(1, 2), metavar="N",
              help="For a .wrpk output: 2 (default) lets a replay map large region data from the file; 1 is for "
                   "older wrpkit readers (replays copy that data).")
@trust_options
@click.option("--key", "key", type=UserPath(dir_okay=False), metavar="PRIVATE.pem",
              help="Sign DST with this EC private key (as `wrp sign DST --key` does).")
def convert(src, dst, no_verify, no_modules, as_json, quiet, modules_dir, container_version, trust, key):
    """Convert SRC to DST; the format is picked from DST's extension.

    \b
      .wrp   Warp's own file; <stem>_modules/ is written beside it
      .wrpk  one self-contained, checksummed, mmap-able bundle
      .json  the whole program as editable JSON (bytes in base64)
    .wrp -> .wrpk/.json -> .wrp restores the file byte-identically and every
    module file identical.  Outputs are written atomically.  A .json input
    (an edit) is validated as `wrp validate` would, and refused with every
    problem named (exit 3) before anything is written.
    DST is a new file: a signature of SRC does not carry over (a note says
    so); --key signs DST, and --trusted-key checks SRC's signature first.
    Exit codes: 0 written; 1 DST cannot be written; 2 bad option, path or
    output name; 3 SRC invalid, unsigned or untrusted (with --trusted-key),
    or an edit that makes it invalid.

    \b
    Examples:
      wrp convert step.wrp step.wrpk
      wrp convert step.wrpk step.json --no-modules
      wrp convert step.wrp step.wrpk --trusted-key ci.pub --key release.pem
    """
    from ..formats.convert import convert as do_convert  # noqa: PLC0415
    from ..formats.convert import estimate_output_size  # noqa: PLC0415
    from ..module_dirs import modules_dir_for  # noqa: PLC0415
    from ..special_outputs import output_size  # noqa: PLC0415

    refuse_signing_in_place(dst, key)
    show = not (quiet or as_json) and sys.stderr.isatty()
    total = estimate_output_size(src) if show else 0
    if show and total > (32 << 20):
        from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn  # noqa: PLC0415

        with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                      TransferSpeedColumn(), console=stderr_console(), transient=True) as bar:
            task = bar.add_task(f"writing {dst}", total=total)
            res = do_convert(src, dst, progress=lambda n: bar.advance(task, n), verify_checksums=not no_verify,
                             include_modules=not no_modules, modules_dir=modules_dir, validate=_edit_problems,
                             container_version=container_version, trust=trust)
    else:
        res = do_convert(src, dst, verify_checksums=not no_verify, include_modules=not no_modules,
                         modules_dir=modules_dir, validate=_edit_problems, container_version=container_version,
                         trust=trust)
    signed = resign(src, res.destination, res.destination_form, key, quiet or as_json)
    # The destination's own size is what `wrp inspect` reports for it; module files are counted apart.
    file_size = output_size(res.destination, res.bytes_written)
    if as_json:
        dump_json({"source": str(res.source), "destination": str(res.destination), "from": res.source_form,
                   "to": res.destination_form, "bytes_written": res.bytes_written, "file_size": file_size,
                   "modules": res.modules, "signature": signed})
    elif not quiet:
        beside = ""
        if res.destination_form == "wrp" and res.modules:
            beside = (f"; {plural(res.modules, 'module file')}, {size(res.bytes_written - file_size)}, "
                      f"in {modules_dir_for(res.destination).name}/")
        elif res.modules:
            beside = f"; {plural(res.modules, 'module')} inside"
        console().print(f"wrote {res.destination} ({res.destination_form}, {size(file_size)}{beside})",
                        markup=False, highlight=False)
