"""``wrp regress``: replay a folder of captures against their goldens (see :mod:`wrpkit.run.regress.runner`)."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import click

from .options import Seconds, UserPath, trust_options

_WIDTH = 80


def _prepare_output(path: Path | None) -> Path | None:
    """Create a missing parent folder of an output and check it is writable, before any case runs (a folder
    made here is removed again if the run fails; a device, a FIFO or /dev/stdout is written in place)."""
    if path is None:
        return None
    from ..errors import WrpIOError  # noqa: PLC0415
    from ..output_paths import check_output_path  # noqa: PLC0415

    try:
        if path.is_dir():
            raise WrpIOError(f"cannot write {path}: it is a folder", hint="Give a file name, e.g. results.xml.")
    except OSError as e:
        raise WrpIOError(f"cannot write {path}: {e.strerror or e}", hint="Choose a folder you may write.") from None
    return check_output_path(path)


class _Progress:
    """The live line on stderr: ``[12/50] 2 failed 1 error  cloth/step`` (only on a terminal)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bad = {"fail": 0, "error": 0, "xpass": 0}

    def __call__(self, done, total, res):
        if res.verdict in self.bad:
            self.bad[res.verdict] += 1
        if not self.enabled:
            return
        tally = " ".join(f"{n} {v}" for v, n in self.bad.items() if n)
        line = f"[{done}/{total}] {tally + '  ' if tally else ''}{res.verdict:5} {res.name}"
        if len(line) > _WIDTH - 1:
            line = line[: _WIDTH - 4] + "..."
        sys.stderr.write("\r\033[K" + line)
        sys.stderr.flush()

    def clear(self):
        if self.enabled:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()


def _many_cases(suite: Path, jobs: int) -> bool:
    """Whether ``--engine auto`` will likely pick the python engine (more captures below ``suite`` than the
    native engine takes a worker), counted without reading them: its replay child then starts ahead."""
    from ..run.replay.engines import NATIVE_MAX_CASES_PER_WORKER  # noqa: PLC0415

    limit = NATIVE_MAX_CASES_PER_WORKER * max(1, int(jobs))
    n = 0
    for _root, _dirs, files in os.walk(suite):
        n += sum(1 for f in files if f.lower().endswith((".wrp", ".wrpk")))
        if n > limit:
            return True
    return False


def _print_summary(report) -> None:
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    from .output import console  # noqa: PLC0415

    con = console(soft_wrap=False)  # its closed pipe is exit 141, quietly, like every command's
    style = {"pass": "green", "xfail": "green", "fail": "bold red", "xpass": "bold red", "error": "bold yellow",
             "skip": "dim"}
    con.print(Text(f"{report.suite}: {len(report.cases)} case{'s' if len(report.cases) != 1 else ''} "
                   f"({report.engine} engine, {report.ran_on}, Warp {report.warp_version})", style="bold"))
    if report.engine_reason:
        con.print(Text(f"engine: {report.engine} ({report.engine_reason})", style="dim"))
    t = Table(show_edge=False, pad_edge=False)
    t.add_column("case", overflow="fold", ratio=2)
    t.add_column("verdict", no_wrap=True)
    t.add_column("s", justify="right", no_wrap=True)
    t.add_column("why", overflow="fold", ratio=5)
    for c in report.cases:
        why = c.message
        if c.updated:
            why = (why + "; " if why else "") + c.updated
        t.add_row(c.name, Text(c.verdict, style=style.get(c.verdict, "")), f"{c.seconds:.2f}", why)
    con.print(t)
    counts = report.counts()
    # pytest's words: "2 passed, 1 failed, 1 error, 3 errors, 1 skipped".
    past = {"pass": "passed", "fail": "failed", "skip": "skipped", "xfail": "xfailed", "xpass": "xpassed"}
    words = ", ".join(f"{n} {('error' if n == 1 else 'errors') if v == 'error' else past.get(v, v)}"
                      for v, n in counts.items() if n)
    empty = sum(1 for c in report.cases if c.compared_nothing)
    if empty:  # passes that checked nothing: said beside the count, not hidden in it
        words += f" ({empty} compared nothing)"
    con.print(Text(f"{words} in {report.seconds:.1f} s", style="green" if report.ok else "bold red"))


@click.command("regress")
@click.argument("suite", type=UserPath(path_type=Path))
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True,
              help="Replay worker processes side by side (each a warm contained child that loads case after "
                   "case).")
@click.option("--junit", "junit", type=UserPath(path_type=Path), metavar="OUT.xml",
              help="Write JUnit XML (one testcase per case) for CI.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with one record per case.")
@click.option("--html", "html_out", type=UserPath(path_type=Path), metavar="OUT.html",
              help="Write a self-contained page (opens offline; no script, no fetch).")
@click.option("--device", default=None, metavar="D",
              help="Device for cases that name none in wrp-suite.toml (default: each capture's own: cpu or cuda:0).")
@click.option("--engine", type=click.Choice(["auto", "python", "native"]), default="auto", show_default=True,
              help="auto: the native engine (wrp-replay per case) for up to 10 cases a worker, the python engine "
                   "(a warm replay child per worker) above that and on --dask or --ray; the report says which and why.")
@click.option("--timeout", type=Seconds(), default=None, metavar="S",
              help="Seconds per case for loading and replaying where the suite sets none (default 300).")
@click.option("--update", is_flag=True, help="Write missing or changed goldens from the replays (atomically) "
              "and say what changed.")
@click.option("--dask", "dask_address", default=None, metavar="ADDRESS",
              help="Run the cases on a Dask distributed scheduler (tcp://HOST:PORT).")
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="Run the cases on a Ray cluster (auto, HOST:PORT).")
@click.option("-k", "keyword", default=None, metavar="PATTERN",
              help="Only cases whose name contains PATTERN (a glob when it has * ? or [).")
@click.option("--rtol", type=click.FloatRange(min=0), default=None, help="Relative tolerance where the suite sets "
              "none (default 1e-5).")
@click.option("--atol", type=click.FloatRange(min=0), default=None, help="Absolute tolerance where the suite sets "
              "none (default 1e-6).")
@click.option("--equal-nan", is_flag=True, default=None, help="NaN equals NaN where the suite does not say.")
@trust_options
@click.pass_context
def regress(ctx, suite, jobs, junit, as_json, html_out, device, engine, timeout, update, dask_address, ray_address,
            keyword, rtol, atol, equal_nan, trust):
    """Replay every capture of the folder SUITE and compare it with its golden.

    \b
    Cases: NAME.wrp (with NAME_modules/) or NAME.wrpk, anywhere below SUITE,
    with optional NAME_inputs.npz and the golden NAME_expected.npz. A case's
    name is its path below SUITE. SUITE/wrp-suite.toml may set rtol, atol,
    equal_nan, timeout, device, skip and expect = "fail" per case (see
    docs/regress.md). Each case is validated, replayed in a contained child
    and compared: pass, fail (replays but differs), error (invalid, other
    Warp version, crash, timeout, no golden), skip (needs a device this
    machine lacks).
    Exit codes: 0 every case passed (or was skipped); 1 a case failed or
    errored; 2 usage error (no such suite, bad wrp-suite.toml, scheduler
    unreachable).

    \b
    Examples:
      wrp regress corpus/                      serially
      wrp regress corpus/ -j 2 --junit results.xml
      wrp regress corpus/ --dask tcp://10.0.0.5:8786 --json > verdicts.json
      wrp regress corpus/ -k cloth --html report.html
      wrp regress corpus/ --update             write missing or changed goldens
      wrp regress corpus/ --trusted-key ci.pub unsigned or altered cases are errors
    """
    if (engine == "python" or (engine == "auto" and _many_cases(suite, jobs))) and not (dask_address or ray_address) \
            and suite.is_dir():
        from ..run.contain.zygote import prestart  # noqa: PLC0415  (imports next to nothing)

        prestart()  # its `import warp` runs beside the imports below and the scan of the suite
    from ..atomic_writes import atomic_write  # noqa: PLC0415
    from ..io_errors import io_error  # noqa: PLC0415
    from ..run.regress.runner import regress as run_regress  # noqa: PLC0415
    from .output import reported_errors  # noqa: PLC0415

    with reported_errors(ctx, as_json):
        if dask_address and ray_address:
            raise click.UsageError("give --dask or --ray, not both")
        junit = _prepare_output(junit)
        html_out = _prepare_output(html_out)
        progress = _Progress(enabled=sys.stderr.isatty() and not os.environ.get("WRP_NO_PROGRESS"))
        try:
            with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
                report = run_regress(suite, jobs=jobs, device=device, engine=engine, timeout=timeout, update=update,
                                     keyword=keyword, dask=dask_address, ray=ray_address, rtol=rtol, atol=atol,
                                     equal_nan=equal_nan, progress=progress, trust=trust)
        finally:
            progress.clear()
            from ..run.contain.spawn import discard_prestarted  # noqa: PLC0415

            discard_prestarted()  # a run that stopped before it took the zygote
        for path, text in ((junit, report.to_junit), (html_out, report.to_html)):
            if path is None:
                continue
            try:
                atomic_write(path, [text().encode()])
            except BrokenPipeError:
                raise  # /dev/stdout whose reader quit: stop quietly (141), as every output to stdout does
            except OSError as e:
                raise io_error(e, path, "write") from None
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, allow_nan=False))
    else:
        _print_summary(report)
        for path, what in ((junit, "JUnit XML"), (html_out, "HTML")):
            if path is not None:
                click.echo(f"wrote {what} {path}")
    ctx.exit(report.exit_code)
