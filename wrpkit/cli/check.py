"""``wrp check``: preflight, will a capture load and replay on this machine."""

from __future__ import annotations

import sys

import click

from ..errors import WrpError
from .options import UserPath, trust_options
from .output import console, dump_json, escape, report_error, stderr_console


@click.command()
@click.argument("file", type=UserPath(exists=True, dir_okay=True))
@click.option("--device", default="cpu", show_default=True, help="Where it should run: cpu or cuda:N.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.option("--modules-dir", type=UserPath(file_okay=False), metavar="DIR",
              help="Folder of the .wrp's module files (default: <stem>_modules/ beside it).")
@trust_options
def check(file, device, as_json, modules_dir, trust):
    """Preflight: will FILE load and replay on DEVICE here, and if not, why?

    \b
    Checks the format and Warp version against the installed Warp (Warp only
    loads captures from its own version), the device family, the CUDA arch
    against the device (CUBIN, PTX or source fallback), the CPU objects'
    target against this host, that every module file is present, matches its
    recorded hash and defines the kernels the graph names, the file's
    structure, and lints captures that save but cannot replay elsewhere
    (e.g. a HashGrid id passed as uint64).
    Exit 0 when loadable (warnings allowed); otherwise the code replay would
    exit with for the same failure: 3 for the file's own problems and a Warp
    version mismatch, 2 for the wrong device, 1 for anything else.
    """
    from ..checks.check import FAIL, WARN, exit_code, preflight  # noqa: PLC0415
    from ..formats.container import open_capture  # noqa: PLC0415
    from ..environment import parse_device  # noqa: PLC0415
    from ..run.warp_bridge.start import cuda_device_arch, host_cpu_tags  # noqa: PLC0415

    try:
        parse_device(device)
    except WrpError as e:
        raise click.BadParameter(e.message, param_hint="--device") from None
    try:
        with open_capture(file, modules_dir=modules_dir, trust=trust) as cap:
            findings = preflight(cap, device, cpu_tags=host_cpu_tags, cuda_arch=cuda_device_arch)
    except WrpError as e:
        if not as_json:
            raise
        report_error(e)
        dump_json({"file": str(file), "device": device, "loadable": False, "error": e.message,
                   "exit_code": e.exit_code, "hint": e.hint,
                   "findings": [{"check": "file", "status": FAIL, "message": str(e), "fix": e.hint or ""}]})
        sys.exit(e.exit_code)
    code = exit_code(findings)
    loadable = code == 0
    if as_json:
        first = next((f for f in findings if f.status == FAIL), None)
        dump_json({"file": str(file), "device": device, "loadable": loadable,
                   **({"error": f"not loadable: {first.message}", "exit_code": code, "hint": first.fix or None}
                      if first else {}),
                   "findings": [{"check": f.check, "status": f.status, "message": f.message, "fix": f.fix}
                                for f in findings]})
    else:
        con = console()
        style = {"ok": "[green]ok[/]  ", FAIL: "[red]FAIL[/]", WARN: "[yellow]warn[/]"}
        for f in findings:
            con.print(f"{style[f.status]} {f.check:<15} {escape(f.message)}", highlight=False)
            if f.fix and f.status != "ok":
                con.print(f"     {'':<15} [dim]fix:[/] {escape(f.fix)}", highlight=False)
        if loadable:
            con.print(f"[green]loadable:[/] {escape(str(file))} on {escape(str(device))}")
        else:
            stderr_console().print(f"[bold red]not loadable:[/] {escape(str(file))} on {escape(str(device))}")
    if not loadable:
        sys.exit(code)
