"""``wrp export-runtime``: a folder that replays captures on a machine without Python."""

from __future__ import annotations

import click

from .options import UserPath

from .output import console, dump_json, size


@click.command("export-runtime")
@click.argument("directory", type=UserPath(file_okay=False))
@click.option("--overwrite", is_flag=True, help="Replace the files of an existing, non-empty folder.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
def export_runtime(directory, overwrite, as_json):
    """Write DIRECTORY with wrp-replay, Warp's warp.so and warp-clang.so, and a README.

    \b
    The folder runs as it is wherever it is copied (same OS and CPU
    architecture), with no Python on the machine: wrp-replay finds Warp's
    libraries beside itself.  Captures must come from the same Warp version
    as the libraries (the installed warp-lang's).

    \b
    Examples:
      wrp export-runtime dist/replayer
      scp -r dist/replayer host: && ssh host replayer/wrp-replay sim.wrpk --json
    """
    from ..run.replay.export import export_runtime as do_export  # noqa: PLC0415
    from ..run.replay.engines import native_paths  # noqa: PLC0415

    res = do_export(directory, native_paths().require_replayer(), overwrite=overwrite)
    if as_json:
        dump_json({"directory": str(res.directory), "files": res.files, "warp_version": res.warp_version,
                   "bytes_written": res.bytes_written})
    else:
        console().print(f"wrote {res.directory}/ ({len(res.files)} files, {size(res.bytes_written)}, "
                        f"Warp {res.warp_version}): {', '.join(res.files)}", markup=False)
        console().print(f"run it with: {res.directory}/wrp-replay FILE.wrp --help", markup=False)
