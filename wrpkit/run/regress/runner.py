"""``wrpkit.regress``: replay a folder of captures against their goldens, as CI does.

A suite is a folder.  Each case is a capture ``NAME.wrp`` (with
``NAME_modules/``) or ``NAME.wrpk``, with optional inputs
``NAME_inputs.npz`` and a golden ``NAME_expected.npz`` (the files the
samples write).  Cases nest in subfolders; a case's name is its path below
the suite, without the extension (``cloth/step``).  An optional
``wrp-suite.toml`` at the suite's root sets tolerances, devices, timeouts,
skips and expected failures (:func:`~wrpkit.run.regress.suite.read_suite_config`).

Each case is validated (:func:`wrpkit.run.load.prepare.prepare` on its bytes),
then replayed contained, in a child process (the ``ReplayWorker`` of
``load(isolate=True)``; one warm child per worker, which loads each case in
turn, so Warp is imported once per worker, not once per case; or
``wrp-replay`` for ``engine="native"``), and compared with its golden
(:func:`wrpkit.checks.compare.compare_arrays`: values, shapes and dtypes,
NaN-aware).  Verdicts:

* ``pass``: every binding of the golden matches;
* ``fail``: it replays, but differs;
* ``error``: it cannot be used (invalid, another Warp version, no golden, a
  golden lacking an output binding, a crash, a timeout, a worker that died);
* ``skip``: it needs a device this machine lacks (or the suite says so);
* ``xfail`` / ``xpass``: a case the suite expects to fail did / did not.

Locally, the whole case (reading, validating, replaying, comparing) runs in
the replay child, and every child is forked from one warm process the run
starts first (:mod:`wrpkit.run.contain.zygote`): ``jobs`` workers cost one ``import
warp``.

Fan-out: serially (this process and one replay child), on ``jobs`` local
replay processes (each driven by a thread of this process), on a Dask distributed scheduler
(``dask="tcp://host:port"``) or a Ray cluster (``ray="auto"`` or an
address).  Remote workers get every case's files as bytes.  Results come
back in case order and equal a serial run's.

The suite and its settings are :mod:`wrpkit.run.regress.suite`; one case in
a worker, :mod:`wrpkit.run.regress.case`; the fan-out,
:mod:`wrpkit.run.regress.fanout`; JUnit and HTML, :mod:`wrpkit.run.regress.report`.
"""

from __future__ import annotations

import io
import os
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from ...records import record
from ...checks.json_values import json_safe
from ...errors import EXIT_FAILED, EXIT_OK, WrpError
from .case import VERDICTS, CaseResult, case_job, read_npz
from .fanout import run_dask, run_local, run_ray, run_serial
from .suite import SUITE_FILE, discover, usage_error


def _finish(job: dict, res: CaseResult) -> CaseResult:
    """Verdicts the suite decides: expected failures."""
    s = job["settings"]
    if s.get("expect") == "fail":
        if res.verdict in ("fail", "error"):
            res.message = f"expected to fail{': ' + s['reason'] if s.get('reason') else ''} ({res.verdict}: " \
                          f"{res.message})"
            res.verdict = "xfail"
        elif res.verdict == "pass":
            res.verdict, res.exit_code = "xpass", EXIT_FAILED
            res.message = "expected to fail" + (f" ({s['reason']})" if s.get("reason") else "") + \
                ", but passed: remove expect from its entry in " + SUITE_FILE
    return res


def _skipped(job: dict) -> CaseResult:
    return CaseResult(job["name"], "skip", message=f"skipped by {SUITE_FILE}: {job['settings']['skip']}",
                      engine=job["engine"], device=job["settings"].get("device"), file=job["capture"])



def _untrusted(job: dict, trust) -> Optional[CaseResult]:
    """The error result of a case whose capture ``trust`` refuses, or None when it is signed and unchanged."""
    from ...formats.signature import verify_path  # noqa: PLC0415
    from .case import _unreadable  # noqa: PLC0415

    try:
        verify_path(trust, job["capture"], job.get("modules_dir"))
    except WrpError as e:
        return _unreadable(job, e)
    return None


def _write_golden(case_res: CaseResult, golden: Path, settings: dict) -> str:
    """Write a case's replayed bindings as its golden if they differ from it; say what changed."""
    from ...checks.compare import compare_arrays  # noqa: PLC0415
    from ...atomic_writes import atomic_write  # noqa: PLC0415
    from ...io_errors import io_error  # noqa: PLC0415

    new = case_res.replayed or {}
    old = {}
    if golden.is_file():
        try:
            old = read_npz(golden.read_bytes(), golden.name)
        except OSError as e:
            raise io_error(e, golden, "read") from None
        except WrpError:
            old = {}
    changes = []
    for name, arr in new.items():
        if name not in old:
            changes.append(f"{name} added")
            continue
        # A NaN where the golden has one is no change to the golden, whatever the comparison's setting
        # (with equal_nan off, every --update would otherwise rewrite it and call it changed).
        c = compare_arrays(arr, old[name], settings["rtol"], settings["atol"], equal_nan=True, strict_dtype=True)
        if not c.ok:
            what = f"max abs {c.max_abs:.3g}" if c.max_abs else c.reason or "changed"
            changes.append(f"{name} changed ({c.mismatches} element{'s' if c.mismatches != 1 else ''}, {what})"
                           if c.mismatches else f"{name} changed ({c.reason})")
    for name in old:
        if name not in new:
            changes.append(f"{name} removed")
    if not changes and golden.is_file():
        return "unchanged"
    buf = io.BytesIO()
    np.savez(buf, **new)
    atomic_write(golden, [buf.getvalue()])
    raw = [n for n in case_res.raw_bytes if n in new]
    note = f" ({', '.join(raw)} as raw bytes: the capture records no dtype)" if raw else ""
    with_nan = [] if settings["equal_nan"] else [
        n for n, a in new.items() if n not in raw and a.dtype.kind in "fc" and bool(np.isnan(a).any())]
    if with_nan:
        note += (f" ({', '.join(with_nan)} {'holds' if len(with_nan) == 1 else 'hold'} NaN, which equals nothing: "
                 f"the case fails without --equal-nan or equal_nan = true in {SUITE_FILE})")
    if not new:
        note = " (empty: the capture names no output, so the case will compare nothing)"
    return f"wrote {golden.name}: " + (", ".join(changes) if old else "new golden") + note


@record
class RegressReport:
    """The verdicts of a suite, in case order.

    Attributes:
        suite: The suite folder.
        cases: One :class:`~wrpkit.run.regress.case.CaseResult` per case, in case order.
        engine: The engine that replayed the cases (``python`` or ``native``).
        device: The ``--device`` given (None: each case's own).
        warp_version: The Warp that replayed (the installed one).
        ran_on: ``serial``, ``2 local workers``, ``dask tcp://... (2 workers)``, ``ray ...``.
        seconds: Wall time of the whole run.
        started: When it started (ISO 8601, UTC).
    """

    suite: str
    cases: list
    engine: str = "python"
    device: Optional[str] = None
    warp_version: Optional[str] = None
    ran_on: str = "serial"
    seconds: float = 0.0
    started: str = ""
    update: bool = False
    engine_reason: str = ""

    def _with(self, *verdicts) -> list:
        return [c for c in self.cases if c.verdict in verdicts]

    @property
    def passed(self) -> list:
        """Cases that passed (expected failures that failed included)."""
        return self._with("pass", "xfail")

    @property
    def failed(self) -> list:
        """Cases that replayed and differ (and expected failures that passed)."""
        return self._with("fail", "xpass")

    @property
    def errors(self) -> list:
        """Cases that could not be used."""
        return self._with("error")

    @property
    def skipped(self) -> list:
        return self._with("skip")

    @property
    def ok(self) -> bool:
        """No case failed or errored."""
        return not self.failed and not self.errors

    @property
    def exit_code(self) -> int:
        """0 when every case passed (or was skipped), 1 when any failed or errored."""
        return EXIT_OK if self.ok else EXIT_FAILED

    def counts(self) -> dict:
        return {v: sum(1 for c in self.cases if c.verdict == v) for v in VERDICTS}

    def to_json(self) -> dict:
        """The report as JSON-able data: run fields, counts, and one record per case."""
        return json_safe({"suite": self.suite, "engine": self.engine, "engine_reason": self.engine_reason,
                          "device": self.device,
                           "warp_version": self.warp_version, "ran_on": self.ran_on, "started": self.started,
                           "seconds": self.seconds, "update": self.update, "ok": self.ok,
                           "exit_code": self.exit_code, "counts": self.counts(),
                           "cases": [c.to_json() for c in self.cases]})

    def to_junit(self) -> str:
        """JUnit XML as CI systems read it (one ``testcase`` per case)."""
        from .report import junit_xml  # noqa: PLC0415

        return junit_xml(self)

    def to_html(self) -> str:
        """A self-contained page (no script, no fetch: a Content-Security-Policy forbids both)."""
        from .report import html_page  # noqa: PLC0415

        return html_page(self)


def regress(suite, *, jobs: int = 1, device: Optional[str] = None, engine: str = "python",
            timeout: Optional[float] = None, update: bool = False, keyword: Optional[str] = None,
            dask: Optional[str] = None, ray: Optional[str] = None, rtol: Optional[float] = None,
            atol: Optional[float] = None, equal_nan: Optional[bool] = None,
            progress: Optional[Callable] = None, connect_timeout: float = 10.0, trust=None) -> RegressReport:
    """Replay every case of a suite against its golden and return the verdicts.

    Args:
        suite: The suite folder (see the module's documentation).
        jobs: Local worker processes (1: serially, in this process and one replay child).
        device: The device for cases that name none (default: the capture's
            own family, ``cpu`` or ``cuda:0``).
        engine: ``"python"`` (Warp's Python API in a contained child), ``"native"`` (``wrp-replay``)
            or ``"auto"``: the faster for this run (:func:`choose_regress_engine`); the report's
            ``engine`` and ``engine_reason`` say which replayed and why.
        timeout: Seconds per case for loading and replaying, where the suite
            sets none (default :data:`~wrpkit.run.regress.suite.DEFAULT_TIMEOUT`).
        update: Write missing or changed goldens (atomically) from the
            replays; each case's ``updated`` says what changed.
        keyword: Run only the cases whose name contains it (or matches it as a glob).
        dask: A Dask scheduler address (``tcp://HOST:PORT``) to run the cases on.
        ray: A Ray cluster address (``auto``, ``HOST:PORT``) to run the cases on.
        rtol, atol, equal_nan: Tolerances where the suite sets none.
        progress: Called as ``progress(done, total, result)`` after each case (in completion order).
        connect_timeout: Seconds to wait for the Dask scheduler or the Ray cluster's address to answer.
        trust: A :class:`~wrpkit.formats.signature.Trust` every case's capture must be signed by
            (its ``STEM.sig``): a case that is not is an error, refused here before any worker reads it.

    Returns:
        A :class:`RegressReport`.

    Raises:
        WrpNotFoundError: The suite does not exist (exit 2).
        WrpSchedulerError: The scheduler or cluster cannot be reached (exit 2).
        WrpError: (exit 2) Bad options, an empty suite, a bad ``wrp-suite.toml``.
    """
    if dask and ray:
        raise usage_error(WrpError("give --dask or --ray, not both"))
    if engine not in ("auto", "python", "native"):
        raise usage_error(WrpError(f"engine must be auto, python or native, not {engine!r}"))
    if int(jobs) < 1:
        raise usage_error(WrpError(f"-j must be at least 1, not {jobs}"))
    if device is not None:
        from ...environment import parse_device  # noqa: PLC0415

        try:
            parse_device(device)
        except WrpError as e:
            raise usage_error(e) from None
    from ..replay.engines import EngineChoice  # noqa: PLC0415

    cases = None
    if engine == "auto":
        if not (dask or ray):
            # the number of cases decides (a warm replay child per worker against a wrp-replay per case)
            cases = discover(suite, keyword=keyword, overrides={"device": device, "timeout": timeout, "rtol": rtol,
                                                                "atol": atol, "equal_nan": equal_nan})
        where = "--dask" if dask else "--ray" if ray else None
        choice = choose_regress_engine(cases, jobs=int(jobs), distributed=where)
    else:
        choice = EngineChoice(engine, f"--engine {engine}")
    engine = choice.name
    if engine == "native":
        from ..replay.engines import native_paths  # noqa: PLC0415
        from ..contain.spawn import discard_prestarted  # noqa: PLC0415
        from ..contain.zygote import PRESTART_KEY  # noqa: PLC0415

        native_paths().require_replayer()  # refuse now, not once per case
        discard_prestarted(PRESTART_KEY)  # one `wrp regress` started ahead in case the python engine replayed
    zygote = None
    if engine == "python" and not (dask or ray) and os.path.isdir(suite):
        from ..contain.spawn import take_prestarted  # noqa: PLC0415
        from ..contain.zygote import PRESTART_KEY, Zygote  # noqa: PLC0415

        # `wrp regress` started one before its imports (zygote.prestart); else it starts now, so
        # that its `import warp` overlaps the scan of the suite below.
        zygote = take_prestarted(PRESTART_KEY)
        if zygote is None and Zygote.supported():
            zygote = Zygote()
    try:
        report = _regress(suite, jobs, device, engine, update, keyword, dask, ray, progress, connect_timeout,
                          {"device": device, "timeout": timeout, "rtol": rtol, "atol": atol, "equal_nan": equal_nan},
                          zygote, trust, cases)
        report.engine_reason = choice.reason
        return report
    finally:
        if zygote is not None:
            zygote.close()


def choose_regress_engine(cases, *, jobs: int = 1, distributed: Optional[str] = None,
                          replayer_found: Optional[bool] = None) -> EngineChoice:
    """``wrp regress --engine auto``'s engine: the native engine for a suite small enough that a
    ``wrp-replay`` per case beats a warm replay child per worker (at most
    :data:`~wrpkit.run.replay.engines.NATIVE_MAX_CASES_PER_WORKER` cases a worker), else the python engine.

    Args:
        cases: The cases that will run (:func:`~wrpkit.run.regress.suite.discover`; skipped ones do not
            count), or None (on a cluster).
        jobs: Local workers.
        distributed: ``--dask`` or ``--ray`` when the cases run on a cluster (the python engine: its
            workers need no wrp-replay), else None.
        replayer_found: Whether wrp-replay is there (None: look now).
    """
    from ..replay.engines import NATIVE_EXE, NATIVE_MAX_CASES_PER_WORKER, EngineChoice, _find_replayer  # noqa: PLC0415

    if distributed:
        return EngineChoice("python", f"--engine auto: {distributed} runs the cases on a cluster's workers, which "
                                      f"replay with the python engine (they need no {NATIVE_EXE})", auto=True)
    if replayer_found is None:
        replayer_found = _find_replayer() is not None
    if not replayer_found:
        return EngineChoice("python", f"--engine auto: {NATIVE_EXE} is not built or installed, so the python "
                                      "engine replayed instead", auto=True)
    n = sum(1 for c in (cases or ()) if not getattr(getattr(c, "settings", None), "skip", None))
    workers = max(1, min(int(jobs), n))
    per_worker = -(-n // workers)
    if per_worker <= NATIVE_MAX_CASES_PER_WORKER:
        return EngineChoice("native", f"--engine auto: {n} case{'s' if n != 1 else ''} to replay"
                                      + (f" on {workers} workers" if workers > 1 else "")
                                      + f": {NATIVE_EXE} per case is faster than a warm python replay child "
                                      f"up to {NATIVE_MAX_CASES_PER_WORKER} cases a worker", auto=True)
    return EngineChoice("python", f"--engine auto: {n} cases to replay" + (f" on {workers} workers" if workers > 1
                                  else "") + ": a warm python replay child per worker is faster than "
                                  f"{NATIVE_EXE} per case above {NATIVE_MAX_CASES_PER_WORKER} cases a worker",
                        auto=True)


def _regress(suite, jobs, device, engine, update, keyword, dask, ray, progress, connect_timeout, overrides,
             zygote, trust=None, cases=None) -> RegressReport:
    """:func:`regress` once its options are checked (and its zygote started); ``cases`` already found, or None."""
    import datetime  # noqa: PLC0415

    if cases is None:
        cases = discover(suite, keyword=keyword, overrides=overrides)
    if update:
        for c in cases:  # the goldens' folders must be writable before any long work
            if not os.access(c.golden.parent, os.W_OK):
                from ...errors import WrpIOError  # noqa: PLC0415

                raise WrpIOError(f"cannot write {c.golden}: its folder is not writable",
                                 hint="Run --update where you may write the suite's files.")
    all_jobs = [case_job(c, engine, update) for c in cases]
    results: list = [None] * len(all_jobs)
    run_jobs, index = [], []
    for i, job in enumerate(all_jobs):
        if job["settings"].get("skip"):
            results[i] = _skipped(job)
        elif trust is not None and (refused := _untrusted(job, trust)) is not None:
            results[i] = _finish(job, refused)
        else:
            run_jobs.append(job)
            index.append(i)
    count = [sum(r is not None for r in results)]

    def done(k, res):
        i = index[k]
        results[i] = _finish(all_jobs[i], res)
        count[0] += 1
        if progress is not None:
            progress(count[0], len(all_jobs), results[i])

    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    if dask:
        ran_on = run_dask(run_jobs, dask, done, connect_timeout)
    elif ray:
        ran_on = run_ray(run_jobs, ray, done, connect_timeout)
    elif int(jobs) > 1 and len(run_jobs) > 1:
        run_local(run_jobs, int(jobs), done, zygote)
        ran_on = f"{int(jobs)} local workers"  # threads, each with its own replay process
    else:
        run_serial(run_jobs, done, zygote)
        ran_on = "serial"
    if update:
        for case, res in zip(cases, results):
            if res.replayed is None or res.expected == "fail":
                if res.expected == "fail" and res.replayed is not None:
                    res.updated = "not written: the case is expected to fail"
                continue
            res.updated = _write_golden(res, case.golden, case.settings.__dict__)
            if res.verdict == "fail":  # the golden now holds what the replay gave
                res.verdict, res.exit_code, res.message = "pass", EXIT_OK, ""
            res.replayed = None
    from ...environment import installed_warp_version  # noqa: PLC0415

    return RegressReport(os.fspath(suite), results, engine, device, installed_warp_version(), ran_on,
                         time.perf_counter() - t0, started, update)


__all__ = ["regress", "RegressReport", "choose_regress_engine"]
