"""Fan-out for ``wrp regress``: a suite's jobs run serially, on local threads, on Dask or on Ray.

Each runner calls ``done(k, result)`` in this thread as job ``k`` finishes
(in completion order); a worker that dies fails only its case.  Remote
workers get every case's files as bytes (:func:`~wrpkit.run.regress.case.with_payload`).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import warnings
from typing import Callable, Optional

from ...errors import EXIT_FAILED, EXIT_USAGE, WrpError
from .case import CaseResult, close_replay_workers, payload_parts, run_case, run_cases, with_payload
from .suite import usage_error


class WrpSchedulerError(WrpError):
    """The Dask scheduler or Ray cluster named cannot be reached (a usage error: check the address)."""

    exit_code = EXIT_USAGE


def _optional_package(package: str, option: str, extra: str):
    """Import the optional package a fan-out needs, or raise the usage error that says how to install it."""
    import importlib  # noqa: PLC0415

    try:
        return importlib.import_module(package)
    except ImportError:
        raise usage_error(WrpError(f"{option} needs the {package} package, which is not installed",
                                   hint=f"pip install 'wrpkit[{extra}]'")) from None


def _unreadable(job: dict, e: WrpError) -> CaseResult:
    return CaseResult(job["name"], "error", message=e.message, hint=e.hint, error_class=type(e).__name__,
                      exit_code=e.exit_code, engine=job["engine"], device=job["settings"].get("device"),
                      file=job["capture"])


def _died(job: dict, why: str) -> CaseResult:
    return CaseResult(job["name"], "error", message=f"the worker running it died ({why}); the run went on",
                      hint="Rerun the case alone with `wrp replay` to see why.", error_class="WrpWorkerDied",
                      exit_code=EXIT_FAILED, engine=job["engine"], device=job["settings"].get("device"),
                      file=job["capture"])


_remote_zygote_lock = threading.Lock()
_remote_zygote = None


def remote_zygote():
    """This worker process's zygote (a Dask or Ray worker's), started on its first case and kept; or None.

    :func:`run_remote_cases` (what Dask and Ray
    run) forks a remote worker's replay children from it, as a local run's
    are from the run's: a child that a crash, a timeout or a kill ended is
    back in milliseconds rather than a Python start and ``import warp``, and
    a worker with several threads imports Warp once.  It is started from a
    thread that lives as long as this process, so that it dies with the
    process (and its forks with it: ``PR_SET_PDEATHSIG`` follows the thread
    that started a process), not with the Dask thread that ran the first
    case; it is closed when the process exits.  A zygote that died is
    replaced at the next case.  None where zygotes are not supported.
    """
    global _remote_zygote
    from ..contain.zygote import Zygote  # noqa: PLC0415

    with _remote_zygote_lock:
        if _remote_zygote is not None and not _remote_zygote.dead:
            return _remote_zygote
        if not Zygote.supported():
            return None
        box, ready = {}, threading.Event()

        def keep():
            try:
                box["zygote"] = Zygote()
            finally:
                ready.set()
            threading.Event().wait()  # the zygote's parent thread: it ends with the process

        first = _remote_zygote is None
        threading.Thread(target=keep, name="wrp-zygote-keeper", daemon=True).start()
        ready.wait()
        _remote_zygote = box.get("zygote")
        if first:
            import atexit  # noqa: PLC0415

            atexit.register(_close_remote_zygote)
        return _remote_zygote


def _close_remote_zygote() -> None:
    global _remote_zygote
    with _remote_zygote_lock:
        zygote, _remote_zygote = _remote_zygote, None
    if zygote is not None:
        zygote.close()


def run_remote_cases(jobs: list, seconds: Optional[float] = None) -> list:
    """A Dask or Ray task: :func:`~wrpkit.run.regress.case.run_cases`, the children forked from this process's zygote.

    Args:
        jobs: The batch's cases, their files' bytes included.
        seconds: Stop starting cases once this much time has gone (at least
            one always runs): the result is then shorter than ``jobs``, and
            the client sends the rest again (:func:`_run_batched`).  None: all.
    """
    return run_cases(jobs, remote_zygote(), seconds=seconds)


def run_local(jobs: list, n_workers: int, done: Callable, zygote=None) -> None:
    """Run ``jobs`` on ``n_workers`` threads, each driving its own warm replay child process.

    The replays (loading and running the capture) happen in the children, in
    parallel; a thread only validates, sends the bindings and compares.  A
    child that dies fails only its case; the thread starts a new one for the next.
    With ``zygote`` (:class:`~wrpkit.run.contain.zygote.Zygote`), the children are forked from it.
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed  # noqa: PLC0415

    pool = ThreadPoolExecutor(max_workers=n_workers, thread_name_prefix="wrp-regress")
    try:
        futures = {pool.submit(run_case, job, zygote): i for i, job in enumerate(jobs)}
        for fut in as_completed(futures):
            done(futures[fut], fut.result())  # here, in this thread: one at a time
    finally:
        # On Ctrl-C, end the replay children first, so that no thread waits for a case to finish.
        pool.shutdown(wait=False, cancel_futures=True)
        close_replay_workers()
        pool.shutdown(wait=True)
        close_replay_workers()  # any a thread started while the first round closed


def run_serial(jobs: list, done: Callable, zygote=None) -> None:
    """Run ``jobs`` one after another in this thread (and its one warm replay child, forked from ``zygote``)."""
    try:
        for i, job in enumerate(jobs):
            done(i, run_case(job, zygote))
    finally:
        close_replay_workers()


#: Seconds of cases a remote task aims to hold, once a case's time is known (:class:`RemoteBatches`): a task
#: costs its scheduler, worker and client a few milliseconds between them (about 6 ms of the 2-core
#: machine's time for an empty Dask task), so small cases go many to a task; a bound keeps the progress
#: line moving and the last tasks short, so that no worker idles long while another finishes.
TASK_SECONDS = 0.5
#: Cases in a remote task before any case's time is known.
FIRST_BATCH = 32
#: The most cases one remote task runs.
REMOTE_BATCH = 256
#: Bytes of case files one remote task carries at most (a case larger than this goes alone).
TASK_BYTES = 256 << 20


class RemoteBatches:
    """The remote routes' cases in batches, each sized when it is sent.

    A batch is an even share of the cases not yet sent: among the slots
    that have no task yet, else among the second tasks a slot the window
    has room for (:func:`_run_batched`), so that every slot starts at once
    with as much as the others.  It holds at most :data:`FIRST_BATCH` cases
    until a case's time is known, then about :data:`TASK_SECONDS` of cases
    (from the mean time of those that ended), and never more than
    :data:`REMOTE_BATCH` cases or :data:`TASK_BYTES` of files.
    Measured on the 2-core machine, 50 cases of 5 ms on a two-worker Dask
    cluster (12 interleaved rounds): batches of 7, 13 and 25 cases gave
    1.36x, 1.71x and 1.89x the cases per second of ``-j 1``, the larger
    batch ahead in every round but one (docs/regress.md, "Cost").

    Cases sent back (:meth:`put_back`: a task that ran out of its time, or
    one whose worker died) go first; those that must go alone go one a batch.
    """

    def __init__(self, n_jobs: int, slots: int):
        self.slots = max(1, slots)
        self.unsent = list(range(n_jobs))
        self.alone: list = []
        self.ended, self.seconds = 0, 0.0

    def __bool__(self) -> bool:
        return bool(self.unsent or self.alone)

    def case_seconds(self) -> Optional[float]:
        """The mean time of the cases that ended so far, or None before one has."""
        return self.seconds / self.ended if self.ended else None

    def size(self, busy: int) -> int:
        """How many cases the next batch takes (before its bytes are counted), ``busy`` tasks in flight."""
        known = self.case_seconds()
        cap = FIRST_BATCH if known is None else round(TASK_SECONDS / max(known, 1e-4))
        # Shared among the slots with no task yet, else among the window's second tasks a slot.
        share = self.slots - busy if busy < self.slots else 2 * self.slots - busy
        even = -(-len(self.unsent) // max(1, share))
        return max(1, min(even, cap, REMOTE_BATCH))

    def take(self, busy: int) -> list:
        """The next batch's job indices (in case order), ``busy`` tasks in flight: a case to go alone, else
        :meth:`size` unsent ones."""
        if self.alone:
            return [self.alone.pop(0)]
        n = self.size(busy)
        batch, self.unsent = self.unsent[:n], self.unsent[n:]
        return batch

    def put_back(self, indices: list, alone: bool = False) -> None:
        """Send ``indices`` again before the rest: in later batches, or one a batch with ``alone``."""
        if alone:
            self.alone[:0] = indices
        else:
            self.unsent[:0] = indices

    def ended_cases(self, results: list) -> None:
        """Count the times of cases that ended (their ``seconds``) towards :meth:`case_seconds`."""
        for r in results:
            self.ended += 1
            self.seconds += max(0.0, float(r.seconds or 0.0))


def _run_batched(jobs: list, n_slots: int, done: Callable, submit: Callable, next_finished: Callable) -> None:
    """The remote routes' loop: ``jobs`` in batches (:class:`RemoteBatches`), a window of two a slot in flight.

    ``n_slots`` is how many tasks the cluster runs at once (a Dask worker
    thread, a Ray CPU each): with two a slot sent, each has its next task
    waiting when one ends, rather than waiting for a round trip through the client.

    ``submit(batch_jobs, seconds)`` sends one task (:func:`run_remote_cases`
    of the jobs, their files' bytes included, stopping after ``seconds``)
    and returns its handle; ``next_finished()`` waits for one sent task to
    end and returns ``(handle, results, None)``, or ``(handle, None, why)``
    where the task raised (``why``: the exception, in a line).  A task
    stops starting cases after twice :data:`TASK_SECONDS` (a batch sized
    before any case's time was known may hold slow ones); the cases it did
    not reach are sent again.  A batch whose task raised (its worker process
    died, a lost connection) is sent again one case a task, so that only the
    case that kills its worker fails (:func:`_died`); a single case whose
    task raised fails with the reason.
    """
    in_flight = {}  # handle -> job indices
    slots = max(1, n_slots)
    window = 2 * slots
    batches = RemoteBatches(len(jobs), slots)
    loaded = {}  # job index -> the job with its files' bytes, read but not yet sent (TASK_BYTES)

    def submit_next():
        while batches:
            sent, size, later = [], 0, []
            for i in batches.take(len(in_flight)):
                if later:  # the batch is full of bytes: the rest go in the next one
                    later.append(i)
                    continue
                try:
                    job = loaded.pop(i, None) or with_payload(jobs[i])
                except WrpError as e:  # a file that cannot be read here: that case only
                    done(i, _unreadable(jobs[i], e))
                    continue
                n = sum(len(v) for v in payload_parts(job["payload"]).values())
                if sent and size + n > TASK_BYTES:
                    loaded[i] = job
                    later.append(i)
                    continue
                sent.append((i, job))
                size += n
            batches.put_back(later)
            if sent:
                in_flight[submit([job for _, job in sent], 2 * TASK_SECONDS)] = [i for i, _ in sent]
                return

    while True:
        while batches and len(in_flight) < window:
            submit_next()
        if not in_flight:
            return
        handle, results, error = next_finished()
        batch = in_flight.pop(handle)
        if error is None:
            batches.ended_cases(results)
            for i, res in zip(batch, results):
                done(i, res)
            batches.put_back(batch[len(results):])  # the task ran out of time before these
        elif len(batch) > 1:
            batches.put_back(batch, alone=True)
        else:
            done(batch[0], _died(jobs[batch[0]], error))


def run_dask(jobs: list, address: str, done: Callable, connect_timeout: float) -> str:
    """Run ``jobs`` on the Dask scheduler at ``address`` in batches, a window of two a worker thread; say where.

    A batch whose worker process died is sent again one case a task, so
    that only the case that kills its worker fails (:func:`_run_batched`).

    Raises:
        WrpSchedulerError: The scheduler cannot be reached (exit 2).
        WrpError: (exit 2) ``distributed`` is not installed.
    """
    distributed = _optional_package("distributed", "--dask", "dask")
    Client, as_completed = distributed.Client, distributed.as_completed
    try:
        client = Client(address, timeout=f"{connect_timeout}s", set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise WrpSchedulerError(f"cannot reach the Dask scheduler at {address}: {e}",
                                hint="Start one (`dask scheduler` and `dask worker ADDRESS`) or check the "
                                     "address (tcp://HOST:PORT).") from None
    except ValueError as e:
        raise WrpSchedulerError(f"not a Dask scheduler address: {address!r} ({e})",
                                hint="Give it as tcp://HOST:PORT.") from None
    try:
        workers = client.scheduler_info().get("workers", {})
        n = len(workers)
        threads = sum(int(w.get("nthreads") or 1) for w in workers.values())
        ac = as_completed(loop=client.loop)
        tasks = itertools.count()

        def submit(batch, seconds):
            with warnings.catch_warnings():
                # Dask warns of a task over 10 MB and advises loading data once and sharing it: a
                # case's bytes are sent once, to the one task that replays them, so the advice does
                # not apply, and the warning would land in the user's output.  (Called from this thread only.)
                warnings.filterwarnings("ignore", message="Sending large graph", category=UserWarning)
                fut = client.submit(run_remote_cases, batch, seconds, pure=False,
                                    key=f"wrp-regress-{os.getpid()}-{time.time_ns()}-{next(tasks)}")
            ac.add(fut)
            return fut

        def next_finished():
            fut = next(ac)
            try:
                return fut, fut.result(), None
            except Exception as e:  # noqa: BLE001  (KilledWorker, a lost connection)
                return fut, None, f"{type(e).__name__}: {e}"

        _run_batched(jobs, threads, done, submit, next_finished)
        return f"dask {address} ({n} worker{'s' if n != 1 else ''}" + \
            (f", {threads} threads)" if threads != n else ")")
    finally:
        client.close()


_RAY_HINT = "Start one (`ray start --head`) or check the address (auto, HOST:PORT, ray://HOST:PORT)."


def _ray_endpoint(address: str) -> Optional[tuple]:
    """``(host, port)`` of a Ray address given as ``HOST:PORT`` or ``ray://HOST:PORT``; None for ``auto``
    and anything else Ray resolves itself (``local``, a name it reads from its session files)."""
    rest = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def run_ray(jobs: list, address: str, done: Callable, connect_timeout: float = 10.0) -> str:
    """Run ``jobs`` on the Ray cluster at ``address`` (``auto``, ``HOST:PORT``) in batches, as on Dask; say where.

    Tasks have no retries: a batch whose worker process died is sent again
    one case a task (:func:`_run_batched`), so that only the case that
    kills its worker fails.  The cluster's CPUs count as its workers (a task
    takes one).

    A ``HOST:PORT`` address is first tried with a plain TCP connection
    (``connect_timeout`` seconds): ``ray.init`` retries an address where
    nothing listens without end, logging a warning every few seconds.

    Raises:
        WrpSchedulerError: The cluster cannot be reached (exit 2).
        WrpError: (exit 2) ``ray`` is not installed.
    """
    import socket  # noqa: PLC0415

    ray = _optional_package("ray", "--ray", "ray")
    started_here = not ray.is_initialized()
    endpoint = _ray_endpoint(address) if started_here else None
    if endpoint is not None:
        try:
            socket.create_connection(endpoint, timeout=connect_timeout).close()
        except OSError as e:
            raise WrpSchedulerError(f"cannot reach the Ray cluster at {address}: nothing answers at "
                                    f"{endpoint[0]}:{endpoint[1]} ({e.strerror or e})", hint=_RAY_HINT) from None
    try:
        if started_here:
            ray.init(address=address, log_to_driver=False, include_dashboard=False, logging_level="WARNING")
    except Exception as e:  # noqa: BLE001  (ConnectionError, RuntimeError: Ray raises several)
        raise WrpSchedulerError(f"cannot reach the Ray cluster at {address}: {type(e).__name__}: {e}",
                                hint=_RAY_HINT) from None
    try:
        n = max(1, int(ray.cluster_resources().get("CPU", 1)))
        remote = ray.remote(max_retries=0)(run_remote_cases)
        refs = []

        def submit(batch, seconds):
            ref = remote.remote(batch, seconds)
            refs.append(ref)
            return ref

        def next_finished():
            ready, _ = ray.wait(refs, num_returns=1)
            ref = ready[0]
            refs.remove(ref)
            try:
                return ref, ray.get(ref), None
            except Exception as e:  # noqa: BLE001  (WorkerCrashedError: a worker that died)
                return ref, None, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"

        _run_batched(jobs, n, done, submit, next_finished)
        return f"ray {address} ({n} CPU{'s' if n != 1 else ''})"
    finally:
        if started_here:
            ray.shutdown()


__all__ = ["run_serial", "run_local", "run_dask", "run_ray", "RemoteBatches", "remote_zygote",
           "run_remote_cases", "WrpSchedulerError"]
