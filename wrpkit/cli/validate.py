"""``wrp validate``: every structural rule, exit 0 when valid and 3 with every problem listed."""

from __future__ import annotations

import sys

import click

from ..errors import EXIT_INVALID, WrpError
from .options import UserPath, trust_options
from .output import console, dump_json, escape, report_error, stderr_console


@click.command()
@click.argument("file", type=UserPath(exists=True, dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--no-verify", is_flag=True, help="For .wrpk: skip blob checksum verification.")
@click.option("--modules-dir", type=UserPath(file_okay=False), metavar="DIR",
              help="Folder of the .wrp's module files (default: <stem>_modules/ beside it).")
@trust_options
def validate(file, as_json, no_verify, modules_dir, trust):
    """Check a capture's structure: every rule Warp's loader applies, plus wrpkit's.

    \b
    Checks the byte layout, that every region referenced by an op, relocation,
    binding, mesh or pointer location exists and every byte range fits inside
    its region, that binding names are unique, that nested bodies are well
    formed, and that every module file is present and non-empty.
    Exit 0 when valid; 3 with every problem listed otherwise.  With
    --trusted-key (or WRPKIT_TRUSTED_KEYS), the signature is checked first:
    exit 3 when unsigned, signed by no trusted key, or changed since.

    \b
    Examples:
      wrp validate step.wrp
      wrp validate step.wrp --trusted-key pub.pem
      wrp validate step.wrpk --json
    """
    from ..formats.container import open_capture  # noqa: PLC0415
    from ..checks.validate import validate_capture  # noqa: PLC0415

    try:
        with open_capture(file, verify_checksums=not no_verify, modules_dir=modules_dir, thorough=True,
                          trust=trust) as cap:
            problems = validate_capture(cap)
    except WrpError as e:
        if not as_json:
            raise
        report_error(e)
        dump_json({"file": str(file), "valid": False, "error": e.message, "exit_code": e.exit_code, "hint": e.hint,
                   "problems": [{"where": "file", "message": str(e)}]})
        sys.exit(e.exit_code)
    errors = [p for p in problems if p.severity == "error"]
    if as_json:
        dump_json({"file": str(file), "valid": not errors,
                   **({"error": f"invalid: {errors[0]}" + (f" (and {len(errors) - 1} more problems)"
                                                            if len(errors) > 1 else ""),
                       "exit_code": EXIT_INVALID, "hint": None} if errors else {}),
                    "problems": [{"where": p.where, "message": p.message, "offset": p.offset,
                                  "severity": p.severity} for p in problems]})
    else:
        con = console()
        for p in problems:
            tag = "[red]error[/]" if p.severity == "error" else "[yellow]warning[/]"
            con.print(f"{tag} {escape(p)}", highlight=False)
        if errors:
            stderr_console().print(f"[bold red]invalid:[/] {escape(file)}: {len(errors)} problem(s)")
        else:
            con.print(f"[green]valid:[/] {escape(file)}")
    if errors:
        sys.exit(EXIT_INVALID)
