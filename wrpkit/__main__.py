"""The ``wrp`` command's first code: ``python -m wrpkit`` and the installed ``wrp`` script.

It runs before anything else is imported, so that Ctrl-C (SIGINT) or SIGTERM at any moment,
imports included, ends the command with one line, ``interrupted``, and exit 130, never a
traceback (``docs/reliability.md``).  The command line itself is :data:`wrpkit.cli.main`.
"""

import os
import signal
import sys

from .errors import caused_by_interrupt as _caused_by_interrupt


_last_signal = [signal.SIGINT]


def _terminated(signum, frame):
    # SIGTERM ends a command as Ctrl-C does (the same exit code, 130): the same clean-up runs,
    # children are stopped and nothing half-written is left.
    _last_signal[0] = signum
    raise KeyboardInterrupt


def _unraisable(info, _default=sys.unraisablehook):
    # A signal that lands while Python runs a callback it cannot raise from (a weakref's, such as
    # importlib's module-lock one) would print "Exception ignored in ..." with a traceback and be
    # lost. It is sent again a moment later from another thread (sent from here, its handler would
    # run here again), so that it is raised in the command's own code once the callback is over.
    if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
        import threading  # noqa: PLC0415

        try:
            again = threading.Timer(0.001, os.kill, (os.getpid(), _last_signal[0]))
            again.daemon = True  # a command that ends first is not held up by it
            again.start()
        except (RuntimeError, OSError):
            pass
        return
    _default(info)


def main():
    """Run ``wrp`` with ``sys.argv``; return its exit code (for ``sys.exit``)."""
    # numpy's OpenBLAS starts a thread per core at import and, when the process limit (ulimit -u, a
    # cgroup's pids.max) refuses one, raises SIGINT on itself: "interrupted" for a process nobody
    # interrupted. wrpkit does no linear algebra, so one thread (and its buffers, under ulimit -v) is
    # enough; the replay children inherit it. A user's own setting stands.
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _terminated)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _terminated)
        sys.unraisablehook = _unraisable
        # The installed `wrp` (native/launcher/wrp_launcher.c) starts this process with SIGINT and
        # SIGTERM blocked, so that none is lost or fatal before this handler is in place: one that
        # came meanwhile is delivered now, as a KeyboardInterrupt caught below.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        if sys.argv[1:2] == ["inspect"]:
            # The common `wrp inspect` command lines run without click (issue 42: start-up);
            # any other returns None here and click parses it (wrpkit/cli/inspect_run.py).
            from .cli.inspect_run import fast  # noqa: PLC0415

            code = fast(sys.argv[2:])
            if code is not None:
                return code
        if sys.argv[1:2] == ["replay"]:
            # wrp-replay starts now, before click is imported (wrpkit/cli/replay_start.py); the command
            # takes it over if it forms the same arguments.
            from .cli.replay_start import prestart  # noqa: PLC0415

            try:
                prestart(sys.argv[2:])
            except Exception:  # noqa: BLE001  (a guess that failed: the command starts its own)
                pass
        from .cli import main as group

        return group.main(prog_name="wrp")
    except BaseException as e:
        # Ctrl-C or SIGTERM, also when its KeyboardInterrupt came wrapped in another error (an import it
        # cut short); an exit the command chose stands.
        if not isinstance(e, SystemExit) and _caused_by_interrupt(e):
            return _interrupted()
        raise
    finally:
        _ignore_signals()
        # A replayer started early that the command never took (click refused the command line
        # before the command ran) ends with it.
        spawn = sys.modules.get("wrpkit.run.contain.spawn")
        if spawn is not None:
            spawn.discard_prestarted()


def _ignore_signals() -> None:
    """Ignore SIGINT and SIGTERM from here to the exit.

    The command has ended (its outputs published or left as they were): a signal now would kill the
    interpreter as it shuts down (Python gives back the default action of signals it handled, and any
    thread may receive one).  One that lands while this runs has its handler raise KeyboardInterrupt
    here; it came after the command ended, so it is dropped and the ignoring done again (once a
    signal is ignored, Python runs no handler for it, even one already pending).
    """
    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            return
        except KeyboardInterrupt:
            continue


def _interrupted() -> int:
    # Reached when the interrupt comes before the command's own handler (imports, parsing): the
    # command's handler says the same, and prints the JSON error too with --json.
    try:
        if "--json" in sys.argv[1:]:
            sys.stdout.write('{"error": "interrupted", "exit_code": 130, "hint": null}\n')
            sys.stdout.flush()
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    except (OSError, KeyboardInterrupt):
        pass
    return 130


def run():
    """The ``wrp`` process: run :func:`main`, then end the process at once with its exit code.

    Once the command has returned, every output is published and every child ended; what is left
    is the interpreter's own teardown (each module's objects freed one by one), which takes 20-50 ms
    with numpy, click and rich loaded, a tenth of a small replay.  So the exit handlers run (children
    started ahead are ended, temporary folders removed), both streams are flushed, and the process
    ends there.  Anything unusual (a thread that is not a daemon still running, a stream that cannot
    be flushed) takes Python's ordinary exit instead.
    """
    try:
        code = main()
    except SystemExit as e:  # click ends a command with sys.exit
        if not (e.code is None or isinstance(e.code, int)):
            raise  # a message for Python to print
        code = e.code
    except KeyboardInterrupt:
        # A signal in the moment between the command's end and main()'s ignoring of it (its handler
        # for an exit already under way): said as any interrupt is; both signals are ignored now.
        code = _interrupted()
    import atexit  # noqa: PLC0415
    import threading  # noqa: PLC0415

    if any(t is not threading.main_thread() and t.is_alive() and not t.daemon for t in threading.enumerate()):
        return code  # Python's exit waits for it
    try:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except BaseException:  # noqa: BLE001  (a closed pipe, an interrupt: the ordinary exit reports it)
        return code
    os._exit(0 if code is None else code)


if __name__ == "__main__":
    sys.exit(run())
