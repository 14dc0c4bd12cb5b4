"""``wrp upgrade``: rewrite a capture of an older Warp for the installed one."""

from __future__ import annotations

import click

from ..formats.wrp1_layout import LAYOUTS
from .options import UserPath, refuse_signing_in_place, resign, trust_options
from .output import dump_json, size


@click.command()
@click.argument("src", type=UserPath(dir_okay=False))
@click.argument("dst", type=UserPath(dir_okay=False))
@click.option("--collision", type=click.Choice(["producer", "intent"]), default="producer", show_default=True,
              help="Formats 3/10 kernel-key collisions: replay what the producing Warp ran (producer) or each "
                   "launch's own module's kernel (intent).")
@click.option("--kernels", "kernels", multiple=True, type=UserPath(dir_okay=False),
              help="Format 3 only: a .py module defining the kernels, compiled by the installed Warp. Repeatable.")
@click.option("--no-fsync", "no_fsync", is_flag=True,
              help="Do not fsync the output (still validated and published atomically, but a power loss may "
                   "lose it, as with cp). For batches that run `sync` once at the end.")
@click.option("--copy-current", is_flag=True,
              help="When SRC is already of the current format, copy it to DST (as `wrp convert` does) instead of "
                   "writing nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print the upgrade report as JSON.")
@click.option("-q", "--quiet", is_flag=True, help="No report.")
@trust_options
@click.option("--key", "key", type=UserPath(dir_okay=False), metavar="PRIVATE.pem",
              help="Sign DST with this EC private key (as `wrp sign DST --key` does).")
def upgrade(src, dst, collision, kernels, no_fsync, copy_current, as_json, quiet, trust, key):
    """Rewrite SRC (written by Warp 1.13 to 1.18) as DST for the installed Warp.

    \b
    Formats 10-16 (Warp 1.14-1.18) keep their kernel objects; format 3
    (Warp 1.13) objects cannot be called by current Warp, so its kernels are
    rebuilt from --kernels.  DST ending in .wrpk writes a bundle; otherwise a
    .wrp with <stem>_modules/ beside it.  The output is validated before it
    is published, written atomically and durably (fsynced; --no-fsync
    leaves the sync to you), and records a digest of every module file.
    A SRC that is already current is no error: exit 0, "already format 18",
    and DST is written only with --copy-current (so batches run through).
    Exit codes: 0 upgraded (or already current); 2 bad option or path;
    3 SRC invalid (or, with --trusted-key, unsigned or untrusted); 1 DST
    cannot be written.  DST is a new file, unsigned unless --key signs it.

    \b
    Examples:
      wrp upgrade old.wrp new.wrp
      wrp upgrade old.wrp new.wrpk --collision intent
      wrp upgrade old_113.wrp new.wrp --kernels my_kernels.py
      for f in archive/*.wrp; do wrp upgrade -q --no-fsync --copy-current "$f" new/"$(basename "$f")"; done; sync
    """
    from ..run.load.upgrade import upgrade as do_upgrade  # noqa: PLC0415

    refuse_signing_in_place(dst, key)
    res = do_upgrade(src, dst, collision=collision, kernels=list(kernels), durable=not no_fsync,
                     copy_current=copy_current, trust=trust)
    rep = res.report
    wrote_dst = not res.already_current or res.bytes_written > 0
    signed = resign(src, res.dst, res.form, key, quiet or as_json) if wrote_dst else None
    if res.already_current:
        from ..formats.wrp1_layout import CURRENT_FORMAT  # noqa: PLC0415

        wrote = res.bytes_written > 0
        if as_json:
            dump_json({"source": str(res.src), "destination": str(res.dst) if wrote else None, "form": res.form,
                       "already_current": True, "format_version": CURRENT_FORMAT,
                       "module_files": res.module_files, "bytes_written": res.bytes_written,
                       "capture_bytes": res.capture_bytes, "signature": signed})
        elif not quiet:
            click.echo(f"{res.src} is already format {CURRENT_FORMAT}: nothing to upgrade; "
                       + (f"copied to {res.dst} ({size(res.capture_bytes)})" if wrote
                          else f"{res.dst} not written (--copy-current copies it)"))
        return
    if as_json:
        dump_json({
            "source": str(res.src), "destination": str(res.dst), "form": res.form,
            "source_format": rep.source_format, "format_version": rep.target_format,
            "producer_version": rep.producer_version, "collision": rep.collision,
            "kernels": [{"kernel_key": k.kernel_key, "module_hash": k.module_hash,
                         "binary_filename": k.binary_filename, "route": k.route, "detail": k.detail}
                        for k in rep.kernels],
            "notes": rep.notes, "module_files": res.module_files, "bytes_written": res.bytes_written,
            "capture_bytes": res.capture_bytes, "already_current": False, "signature": signed})
        return
    if quiet:
        return
    # Plain lines, echoed as they are: rich (about 0.1 s to import) is left to
    # the commands that draw tables.
    modules = res.bytes_written - res.capture_bytes
    in_bundle = res.form == "wrpk"
    click.echo(f"wrote {res.dst} ({res.form}, format {rep.target_format} for Warp {rep.producer_version}, "
               f"{size(res.capture_bytes)}" + ("" if in_bundle or not res.module_files else
                                              f"; {len(res.module_files)} module file(s), {size(modules)}")
               + f") from {rep.source}")
    # Only formats 3 and 10 key kernels by key alone, where a collision can happen at all.
    if LAYOUTS[rep.source_format].kernels_by_key:
        click.echo(f"collision policy: {rep.collision}")
    for k in rep.kernels:
        click.echo(f"  {k.kernel_key:<20} {k.route:<28} {k.binary_filename}")
        if k.detail:
            click.echo(f"  {'':<20} {k.detail}")
    for n in rep.notes:
        click.echo(f"note: {n}")
