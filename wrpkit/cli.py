"""The ``wrp`` command line: thin click commands over the wrpkit library.

The library never prints; this module formats its results with rich, or as
JSON with ``--json``.  Every :class:`~wrpkit.errors.WrpError` becomes one
``error:`` line (plus a ``hint:`` line) on stderr and the error's exit code;
nothing a user feeds in produces a Python traceback.  Set ``WRP_DEBUG=1`` to
see tracebacks of internal errors.

Exit codes: 0 success; 1 a check or replay failed (e.g. ``--check``
mismatch, runtime error); 2 usage error (bad option, unknown binding,
wrong input size); 3 the file is invalid, corrupted, unsafe or incomplete;
70 internal error; 124 ``wrp replay --timeout`` ran out.
"""

from __future__ import annotations

import json
import os
import sys

import click

from . import __version__
from .errors import WrpError

EXIT_INTERNAL = 70


def _stderr_console():
    from rich.console import Console  # noqa: PLC0415

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _console():
    from rich.console import Console  # noqa: PLC0415

    return Console(highlight=False)


def report_error(err: WrpError) -> None:
    """Print a WrpError as ``error:`` and ``hint:`` lines on stderr."""
    con = _stderr_console()
    con.print(f"[bold red]error:[/] {err.message}", markup=True, highlight=False)
    for p in getattr(err, "problems", [])[1:21]:
        con.print(f"       {p}", markup=False)
    if err.hint:
        con.print(f"[yellow]hint:[/] {err.hint}", markup=True, highlight=False)


class WrpGroup(click.Group):
    """A click group that turns wrpkit errors into clean messages and exit codes.

    Commands whose modules import Warp or numpy are registered by name in
    ``lazy`` and imported only when used, so that ``wrp inspect`` stays light.
    """

    lazy = {"replay": "wrpkit.replaycli:replay"}

    def list_commands(self, ctx):
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx, name):
        cmd = super().get_command(ctx, name)
        if cmd is None and name in self.lazy:
            import importlib  # noqa: PLC0415

            mod, attr = self.lazy[name].split(":")
            cmd = getattr(importlib.import_module(mod), attr)
        return cmd

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except WrpError as e:
            report_error(e)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            _stderr_console().print("interrupted")
            ctx.exit(130)
        except Exception as e:  # noqa: BLE001  (last line of defence: no tracebacks for users)
            if os.environ.get("WRP_DEBUG"):
                raise
            _stderr_console().print(f"error: internal error: {type(e).__name__}: {e}", markup=False)
            _stderr_console().print("hint: rerun with WRP_DEBUG=1 for a traceback and report it", markup=False)
            ctx.exit(EXIT_INTERNAL)


@click.group(cls=WrpGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="wrp")
def main():
    """Inspect, validate, convert and replay NVIDIA Warp captured graphs (.wrp, .wrpk).

    \b
    Examples:
      wrp inspect graph.wrp             summary tables
      wrp inspect graph.wrp --ops       every op, nested bodies indented
      wrp validate graph.wrp            exit 0 when valid, else list problems
      wrp convert graph.wrp graph.wrpk  one self-contained, checksummed file
      wrp replay graph.wrp --inputs in.npz --output out.npz
    """


def _dump_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


def _size(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# ---------------------------------------------------------------------------
# inspect
# ---------------------------------------------------------------------------


@main.command()
@click.argument("file", type=click.Path(dir_okay=True, allow_dash=False))
@click.option("--ops", "with_ops", is_flag=True, help="List every op with its key fields, nested bodies indented.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON (stable keys) instead of tables.")
@click.option("--no-verify", is_flag=True, help="For .wrpk: skip blob checksum verification (trusted files only).")
def inspect(file, with_ops, as_json, no_verify):
    """Summarize a capture: versions, device, sections, ops, kernels, bindings, regions, modules.

    Reads only the file's records (region and module contents are not read)
    and never imports Warp, so it is fast on large files.
    """
    from .container import open_capture  # noqa: PLC0415
    from .summary import binding_signature_rows, iter_op_lines, summarize  # noqa: PLC0415

    with open_capture(file, verify_checksums=not no_verify) as cap:
        info = summarize(cap, with_ops=with_ops and as_json, signature=binding_signature_rows(cap.program))
        if as_json:
            _dump_json(info)
            return
        _print_summary(info)
        if with_ops:
            _print_ops(iter_op_lines(cap.program.ops))


def _table(title, columns):
    from rich.table import Table  # noqa: PLC0415

    t = Table(title=title, title_justify="left", title_style="bold", show_edge=False, pad_edge=False)
    for c in columns:
        justify = "right" if c in ("size", "offset", "count", "launches", "region", "points", "tris") else "left"
        t.add_column(c, justify=justify)
    return t


def _print_summary(info: dict) -> None:
    con = _console()
    con.print(f"[bold]{info['file']}[/]  ({info['container']}, {_size(info['file_size'])})")
    con.print(f"  format {info['format_version']}   Warp {info['warp_version']}   device {info['device']}"
              f"   target arch {info['target_arch']}")
    con.print(f"  {info['op_total']} ops ({info['top_level_ops']} top level, nesting depth {info['max_depth']}), "
              f"{len(info['kernels'])} kernels, {len(info['bindings'])} bindings, {len(info['regions'])} regions, "
              f"{len(info['modules'])} modules")
    con.print()
    t = _table("Sections", ["name", "offset", "size"])
    for s in info["sections"]:
        t.add_row(s["name"], str(s["offset"]), _size(s["size"]))
    con.print(t)
    t = _table("Ops", ["op", "count"])
    for k, v in info["op_counts"].items():
        t.add_row(k, str(v))
    con.print(t)
    t = _table("Kernels", ["kernel", "module", "launches", "backward"])
    for k in info["kernels"]:
        t.add_row(k["kernel_key"], f"{k['module_name']} {k['module_hash'][:8]}", str(k["launches"]),
                  "yes" if k["backward_name"] else "no")
    con.print(t)
    t = _table("Bindings", ["name", "region", "size", "dtype", "shape"])
    for b in info["bindings"]:
        shape = "x".join(str(s) for s in b["shape"]) if b.get("shape") is not None else "-"
        t.add_row(b["name"], str(b["region_id"]), _size(b["size"]), b.get("dtype") or "-", shape)
    con.print(t)
    t = _table("Regions", ["region", "size", "initial data"])
    for r in info["regions"]:
        t.add_row(str(r["region_id"]), _size(r["size"]), "yes" if r["has_initial_data"] else "no")
    con.print(t)
    t = _table("Modules", ["module", "file", "size", "status"])
    for mod in info["modules"]:
        status = "[green]present[/]" if mod["present"] else f"[red]{mod['state']}[/]"
        t.add_row(f"{mod['module_name']} {mod['module_hash'][:8]}", mod["binary_filename"], _size(mod["size"]),
                  status)
    con.print(t)
    if info["meshes"]:
        t = _table("Meshes", ["points", "tris", "points region", "indices region"])
        for me in info["meshes"]:
            t.add_row(str(me["num_points"]), str(me["num_tris"]), str(me["points_region_id"]),
                      str(me["indices_region_id"]))
        con.print(t)


def _print_ops(lines) -> None:
    con = _console()
    con.print("[bold]Ops[/]")
    for depth, index, name, line in lines:
        pad = "  " * depth
        if not line:
            con.print(f"  {pad}[dim]{name}[/]")
        else:
            con.print(f"  {pad}[cyan]{index:>5}[/] [bold]{name}[/] {line}", markup=True, highlight=False)


# ---------------------------------------------------------------------------
# validate
# ---------------------------------------------------------------------------


@main.command()
@click.argument("file", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--no-verify", is_flag=True, help="For .wrpk: skip blob checksum verification.")
def validate(file, as_json, no_verify):
    """Check a capture's structure: every rule Warp's loader applies, plus wrpkit's.

    \b
    Checks the byte layout, that every region referenced by an op, relocation,
    binding, mesh or pointer location exists and every byte range fits inside
    its region, that binding names are unique, that nested bodies are well
    formed, and that every module file is present and non-empty.
    Exit 0 when valid; 3 with every problem listed otherwise.
    """
    from .container import open_capture  # noqa: PLC0415
    from .validate import validate_capture  # noqa: PLC0415

    try:
        with open_capture(file, verify_checksums=not no_verify) as cap:
            problems = validate_capture(cap)
    except WrpError as e:
        if not as_json:
            raise
        _dump_json({"file": str(file), "valid": False, "problems": [{"where": "file", "message": str(e)}]})
        sys.exit(e.exit_code)
    errors = [p for p in problems if p.severity == "error"]
    if as_json:
        _dump_json({"file": str(file), "valid": not errors,
                    "problems": [{"where": p.where, "message": p.message, "offset": p.offset,
                                  "severity": p.severity} for p in problems]})
    else:
        con = _console()
        for p in problems:
            tag = "[red]error[/]" if p.severity == "error" else "[yellow]warning[/]"
            con.print(f"{tag} {p}", highlight=False)
        if errors:
            _stderr_console().print(f"[bold red]invalid:[/] {file}: {len(errors)} problem(s)")
        else:
            con.print(f"[green]valid:[/] {file}")
    if errors:
        sys.exit(3)


# ---------------------------------------------------------------------------
# check
# ---------------------------------------------------------------------------


@main.command()
@click.argument("file", type=click.Path(dir_okay=True))
@click.option("--device", default="cpu", show_default=True, help="Where it should run: cpu or cuda:N.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def check(file, device, as_json):
    """Preflight: will FILE load and replay on DEVICE here, and if not, why?

    \b
    Checks the format and Warp version against the installed Warp (Warp only
    loads captures from its own version), the device family, the CUDA arch
    against the device (CUBIN, PTX or source fallback), the CPU objects'
    target against this host, that every module file is present, matches its
    recorded hash and defines the kernels the graph names, the file's
    structure, and lints captures that save but cannot replay elsewhere
    (e.g. a HashGrid id passed as uint64).
    Exit 0 when loadable (warnings allowed), 1 when not.
    """
    from .check import FAIL, WARN, preflight  # noqa: PLC0415
    from .container import open_capture  # noqa: PLC0415
    from .environment import parse_device  # noqa: PLC0415

    try:
        parse_device(device)
    except WrpError as e:
        raise click.BadParameter(e.message, param_hint="--device") from None
    try:
        with open_capture(file) as cap:
            findings = preflight(cap, device)
    except WrpError as e:
        if not as_json:
            raise
        _dump_json({"file": str(file), "device": device, "loadable": False,
                    "findings": [{"check": "file", "status": FAIL, "message": str(e), "fix": e.hint or ""}]})
        sys.exit(1)
    loadable = not any(f.status == FAIL for f in findings)
    if as_json:
        _dump_json({"file": str(file), "device": device, "loadable": loadable,
                    "findings": [{"check": f.check, "status": f.status, "message": f.message, "fix": f.fix}
                                 for f in findings]})
    else:
        con = _console()
        style = {"ok": "[green]ok[/]  ", FAIL: "[red]FAIL[/]", WARN: "[yellow]warn[/]"}
        for f in findings:
            con.print(f"{style[f.status]} {f.check:<15} {f.message}", highlight=False)
            if f.fix and f.status != "ok":
                con.print(f"     {'':<15} [dim]fix:[/] {f.fix}", highlight=False)
        if loadable:
            con.print(f"[green]loadable:[/] {file} on {device}")
        else:
            _stderr_console().print(f"[bold red]not loadable:[/] {file} on {device}")
    if not loadable:
        sys.exit(1)


# ---------------------------------------------------------------------------
# convert
# ---------------------------------------------------------------------------


@main.command()
@click.argument("src", type=click.Path(dir_okay=True))
@click.argument("dst", type=click.Path(dir_okay=False))
@click.option("--no-verify", is_flag=True, help="For a .wrpk input: skip blob checksums (trusted files only).")
@click.option("--no-modules", is_flag=True, help="For a .json output: leave module binaries out.")
@click.option("--json", "as_json", is_flag=True, help="Print what was written as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bar or summary line.")
def convert(src, dst, no_verify, no_modules, as_json, quiet):
    """Convert SRC to DST; the format is picked from DST's extension.

    \b
      .wrp   Warp's own file; <stem>_modules/ is written beside it
      .wrpk  one self-contained, checksummed, mmap-able bundle
      .json  the whole program as editable JSON (bytes in base64)
    .wrp -> .wrpk/.json -> .wrp restores the file byte-identically and every
    module file identical.  Outputs are written atomically.
    """
    from .convert import convert as do_convert  # noqa: PLC0415
    from .convert import estimate_output_size  # noqa: PLC0415

    show = not (quiet or as_json) and sys.stderr.isatty()
    total = estimate_output_size(src) if show else 0
    if show and total > (32 << 20):
        from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn  # noqa: PLC0415

        with Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                      TransferSpeedColumn(), console=_stderr_console(), transient=True) as bar:
            task = bar.add_task(f"writing {dst}", total=total)
            res = do_convert(src, dst, progress=lambda n: bar.advance(task, n), verify_checksums=not no_verify,
                             include_modules=not no_modules)
    else:
        res = do_convert(src, dst, verify_checksums=not no_verify, include_modules=not no_modules)
    if as_json:
        _dump_json({"source": str(res.source), "destination": str(res.destination), "from": res.source_form,
                    "to": res.destination_form, "bytes_written": res.bytes_written, "modules": res.modules})
    elif not quiet:
        _console().print(f"wrote {res.destination} ({res.destination_form}, {_size(res.bytes_written)}, "
                         f"{res.modules} module files)")


if __name__ == "__main__":
    main()
