"""Where in the user's program each captured op was issued (call sites).

While a :func:`wrpkit.capture` runs, every op Warp records goes through a
call into Warp's native library (``runtime.core.wp_*``: kernel launches,
copies, memsets, fills, scans, sorts, conditionals, ...).  :class:`CallSiteLog`
wraps those entry points for the duration of the capture only, and compares
the capture's operation count (``wp_apic_get_operation_count``) before and
after each call: the ops a call added are attributed to the Python stack at
that call, frames inside the ``warp`` and ``wrpkit`` packages left out, so
that the first frame kept is the user's ``wp.launch`` (or ``wp.copy``,
``array.zero_``, ``wp.capture_if``, ...).  Nothing here knows the list of
public Warp calls: any call that records an op is seen.

Conditional bodies: ``wp_apic_begin_branch`` starts appending a body's ops
to the same stream (so the count keeps growing from where the body starts),
``wp_apic_end_branch`` takes them out again as a body, and
``wp_apic_record_conditional`` records the IF/WHILE op itself with its
bodies.  The log follows the same steps, so every op gets its path through
nested bodies (top-level index, then ``(body, index)`` pairs; see the schema's
``CallSite``).

Nothing here may break a capture: any surprise leaves the op without a call
site.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

#: Frames kept per call site (innermost first).
MAX_FRAMES = 4

#: Warp's native entry points that steer the log rather than record an op.
_BEGIN, _END, _FREE, _COND = ("wp_apic_begin_branch", "wp_apic_end_branch", "wp_apic_free_branch_body",
                              "wp_apic_record_conditional")

#: Warp's native calls that change a structure a kernel may query (a mesh's BVH, a hash grid)
#: without recording an op in a CPU capture, each with the call as the user wrote it.  A capture
#: that runs one is logged (:attr:`CallSiteLog.unrecorded`): its replay runs without it.
UNRECORDED_CALLS = {
    "wp_mesh_refit_host": "Mesh.refit()",
    "wp_mesh_set_points_host": "Mesh.points = ...",
    "wp_mesh_set_velocities_host": "Mesh.velocities = ...",
    "wp_bvh_refit_host": "Bvh.refit()",
    "wp_bvh_rebuild_host": "Bvh.rebuild()",
    "wp_hash_grid_update_host": "HashGrid.build()",
    "wp_hash_grid_reserve_host": "HashGrid.reserve()",
}

_install_lock = threading.Lock()
_active_logs: list = []       # the CallSiteLogs of captures in progress
_originals: dict = {}         # name -> the native function the wrapper replaced
_aliases: list = []           # (object, attribute, original): other references to them (a CPU device's memset)
_core = None                  # the ctypes library the wrappers are installed on


def _package_dir(mod) -> str:
    return os.path.normcase(os.path.dirname(os.path.abspath(mod.__file__))) + os.sep


_internal_cache: dict = {}
_internal_dirs: tuple = ()


def _is_internal(filename: str) -> bool:
    v = _internal_cache.get(filename)
    if v is None:
        if filename.startswith("<frozen") or filename.startswith("<string>") or not filename:
            v = True
        else:
            v = os.path.normcase(os.path.abspath(filename)).startswith(_internal_dirs)
        _internal_cache[filename] = v
    return v


def user_stack(limit: int = MAX_FRAMES, skip: int = 1) -> tuple:
    """``((file, line, function), ...)``: the caller's stack, innermost first, without Warp's or wrpkit's frames."""
    out = []
    f = sys._getframe(skip)
    while f is not None and len(out) < limit:
        code = f.f_code
        if not _is_internal(code.co_filename):
            out.append((code.co_filename, f.f_lineno or 0, code.co_name))
        f = f.f_back
    return tuple(out)


def _ptr(v):
    """The integer address a ``c_void_p`` (or int, or None) holds; None for null."""
    v = getattr(v, "value", v)
    return int(v) if v else None


class CallSiteLog:
    """The call sites of one capture in progress: ``{op path: stack}``."""

    def __init__(self, apic):
        self._state = apic.apic_state
        self._count_fn = apic.runtime.core.wp_apic_get_operation_count
        self._lock = threading.RLock()
        self._ctx = [[self._count(), []]]   # [base count, [(relative path, stack)]] per open body, outermost first
        self._bodies: dict = {}             # body pointer -> its entries, until its conditional is recorded
        self.sites: dict = {}               # op path -> stack (filled as top-level ops are recorded)
        self.unrecorded: list = []          # [(call text, stack)]: UNRECORDED_CALLS that added no op

    def _count(self) -> int:
        return int(self._count_fn(self._state))

    def _is_mine(self, state) -> bool:
        return _ptr(state) == _ptr(self._state)

    # --- events (each guarded by the caller: an exception drops the op's call site only) ---

    def added(self, n0: int, n1: int, stack: tuple) -> None:
        with self._lock:
            base, entries = self._ctx[-1]
            for i in range(n0, n1):
                if i >= base:
                    self._add(entries, (i - base,), stack)

    def _add(self, entries: list, path: tuple, stack: tuple) -> None:
        if len(self._ctx) == 1 and entries is self._ctx[0][1]:
            self.sites.setdefault(path, stack)
        else:
            entries.append((path, stack))

    def begin_branch(self) -> None:
        with self._lock:
            self._ctx.append([self._count(), []])

    def end_branch(self, body) -> None:
        with self._lock:
            if len(self._ctx) > 1:
                _, entries = self._ctx.pop()
                p = _ptr(body)
                if p is not None:
                    self._bodies[p] = entries

    def free_body(self, body) -> None:
        with self._lock:
            self._bodies.pop(_ptr(body), None)

    def conditional(self, n0: int, n1: int, bodies, stack: tuple) -> None:
        with self._lock:
            taken = [self._bodies.pop(_ptr(b), []) if _ptr(b) is not None else [] for b in bodies]
            if n1 != n0 + 1:
                return
            base, entries = self._ctx[-1]
            if n0 < base:
                return
            index = n0 - base
            self._add(entries, (index,), stack)
            for body_no, inner in enumerate(taken):
                for rel, st in inner:
                    self._add(entries, (index, body_no) + rel, st)


def _counts(logs) -> list:
    """``[(log, its operation count now)]`` before a native call (a log that cannot say is left out)."""
    out = []
    for log in logs:
        try:
            out.append((log, log._count()))
        except Exception:  # noqa: BLE001 -- never break a capture
            pass
    return out


def _wrap(name: str, fn):
    if name == _BEGIN:
        def wrapper(*args):
            r = fn(*args)
            for log in _active_logs:
                if args and log._is_mine(args[0]):
                    try:
                        log.begin_branch()
                    except Exception:  # noqa: BLE001 -- never break a capture
                        pass
            return r
    elif name == _END:
        def wrapper(*args):
            r = fn(*args)
            for log in _active_logs:
                if args and log._is_mine(args[0]):
                    try:
                        log.end_branch(r)
                    except Exception:  # noqa: BLE001
                        pass
            return r
    elif name == _FREE:
        def wrapper(*args):
            for log in _active_logs:
                try:
                    log.free_body(args[0] if args else None)
                except Exception:  # noqa: BLE001
                    pass
            return fn(*args)
    elif name == _COND:
        def wrapper(*args):
            before = _counts([log for log in _active_logs if args and log._is_mine(args[0])])
            r = fn(*args)
            for log, n0 in before:
                try:
                    log.conditional(n0, log._count(), args[4:6], user_stack(skip=2))
                except Exception:  # noqa: BLE001
                    pass
            return r
    else:
        unrecorded = UNRECORDED_CALLS.get(name)

        def wrapper(*args):
            if not _active_logs:
                return fn(*args)
            before = _counts(_active_logs)
            r = fn(*args)
            stack = None
            for log, n0 in before:
                try:
                    n1 = log._count()
                    if n1 > n0:
                        if stack is None:
                            stack = user_stack(skip=2)
                        log.added(n0, n1, stack)
                    elif unrecorded is not None:
                        if stack is None:
                            stack = user_stack(skip=2)
                        log.unrecorded.append((unrecorded, stack))
                except Exception:  # noqa: BLE001
                    pass
            return r
    wrapper.__name__ = name
    wrapper.__wrapped__ = fn
    return wrapper


def _should_wrap(name: str, fn) -> bool:
    if not name.startswith("wp_") or not callable(fn):
        return False
    if name.startswith("wp_apic_"):
        return name in (_BEGIN, _END, _FREE, _COND)
    return True


def start(apic):
    """Begin logging the call sites of the capture ``apic`` (Warp's ``APICapture``).

    Returns:
        The :class:`CallSiteLog`, or None when Warp's internals are not as
        expected (the capture then records no call sites).
    """
    global _core, _internal_dirs
    try:
        import warp  # noqa: PLC0415

        import wrpkit  # noqa: PLC0415

        core = apic.runtime.core
        with _install_lock:
            log = CallSiteLog(apic)
            if not _active_logs:
                _internal_dirs = (_package_dir(warp), _package_dir(wrpkit))
                _internal_cache.clear()
                wrappers = {}
                for name, fn in list(vars(core).items()):
                    if _should_wrap(name, fn):
                        _originals[name] = fn
                        wrappers[id(fn)] = _wrap(name, fn)
                        setattr(core, name, wrappers[id(fn)])
                _core = core
                # Warp keeps some of them elsewhere too: a CPU device's memset and memtile.
                rt = apic.runtime
                devices = [getattr(rt, "cpu_device", None), *(getattr(rt, "cuda_devices", None) or [])]
                for dev in [d for d in devices if d is not None and hasattr(d, "__dict__")]:
                    for attr, v in list(vars(dev).items()):
                        w = wrappers.get(id(v))
                        if w is not None:
                            _aliases.append((dev, attr, v))
                            setattr(dev, attr, w)
            elif core is not _core:
                return None
            _active_logs.append(log)
        return log
    except Exception:  # noqa: BLE001 -- never break a capture
        return None


def stop(log) -> None:
    """Stop logging ``log``; the wrappers go when the last capture in progress stops."""
    global _core
    if log is None:
        return
    with _install_lock:
        if log in _active_logs:
            _active_logs.remove(log)
        if not _active_logs and _core is not None:
            for name, fn in _originals.items():
                try:
                    setattr(_core, name, fn)
                except Exception:  # noqa: BLE001
                    pass
            _originals.clear()
            for obj, attr, fn in _aliases:
                try:
                    setattr(obj, attr, fn)
                except Exception:  # noqa: BLE001
                    pass
            _aliases.clear()
            _core = None


# ---------------------------------------------------------------------------
# Paths relative to the program's root
# ---------------------------------------------------------------------------


def program_root() -> Path:
    """The directory relative source paths start from.

    The directory of the ``__main__`` script, unless there is none (``-c``,
    an interactive session) or it lies inside an installed package or the
    Python installation (``pytest``, ``wrp``): then the working directory.
    """
    main = getattr(sys.modules.get("__main__"), "__file__", None)
    if main:
        d = Path(os.path.abspath(main)).parent
        text = os.path.normcase(str(d))
        inside = [os.path.normcase(os.path.abspath(p)) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]
        import wrpkit  # noqa: PLC0415

        inside.append(os.path.normcase(os.path.dirname(os.path.abspath(wrpkit.__file__))))
        if "site-packages" not in text and "dist-packages" not in text and \
                not any(text == p or text.startswith(p + os.sep) for p in inside):
            return d
    return Path(os.getcwd())


def relative_source(filename: str, root: Path) -> str:
    """``filename`` relative to ``root`` ("/"-separated) when it lies under it, else absolute."""
    try:
        p = Path(os.path.abspath(filename))
    except Exception:  # noqa: BLE001
        return str(filename)
    try:
        return p.relative_to(root).as_posix()
    except ValueError:
        return p.as_posix()


def kernel_source(kernel, root=None) -> tuple:
    """``(file, line)`` of a Warp kernel's ``def`` (file relative to ``root``); ``("", 0)`` when unknown."""
    try:
        adj = kernel.adj
        filename = getattr(adj, "filename", "") or ""
        if not filename or filename.startswith("<") or filename == "unknown source file":
            return "", 0
        line = int(getattr(adj, "fun_lineno", 0) or 0)
        tree = getattr(adj, "tree", None)
        body = getattr(tree, "body", None) or []
        if line and body and hasattr(body[0], "lineno"):
            line += int(body[0].lineno) - 1  # fun_lineno is the first decorator's line; lineno the def's
        return relative_source(filename, root if root is not None else program_root()), max(line, 0)
    except Exception:  # noqa: BLE001 -- a kernel without a source location has none
        return "", 0


def encode_sites(log, prog, root=None) -> tuple:
    """The :class:`~wrpkit.formats.annotations.CallSite` of each op of ``prog`` that ``log`` placed, in stream order.

    Paths that name no op of ``prog`` are dropped.  Returns ``(call_sites, root name)``.
    """
    from ...checks.sources import iter_op_paths  # noqa: PLC0415
    from ...formats import annotations as ann  # noqa: PLC0415

    if log is None or not log.sites:
        return (), ""
    root = root if root is not None else program_root()
    out = []
    frames: dict = {}  # (file, line, function) -> SourceFrame: a step repeats the same few lines
    for path, _op in iter_op_paths(prog.ops):
        stack = log.sites.get(path)
        if not stack:
            continue
        row = []
        for f in stack:
            fr = frames.get(f)
            if fr is None:
                fr = frames[f] = ann.SourceFrame(relative_source(f[0], root), int(f[1]), str(f[2]))
            row.append(fr)
        out.append(ann.CallSite(path, tuple(row)))
    return tuple(out), (root.name if out else "")


def encode_unrecorded(log, root=None) -> tuple:
    """The :class:`~wrpkit.formats.annotations.UnrecordedCall` of each structure call ``log`` saw
    run without being recorded, in call order (at most ``MAX_UNRECORDED``)."""
    from ...checks.sources import MAX_UNRECORDED  # noqa: PLC0415
    from ...formats import annotations as ann  # noqa: PLC0415

    if log is None or not log.unrecorded:
        return ()
    root = root if root is not None else program_root()
    return tuple(ann.UnrecordedCall(call, tuple(ann.SourceFrame(relative_source(f[0], root), int(f[1]), str(f[2]))
                                                for f in stack))
                 for call, stack in log.unrecorded[:MAX_UNRECORDED])


__all__ = ["CallSiteLog", "start", "stop", "user_stack", "program_root", "relative_source", "kernel_source",
           "encode_sites", "encode_unrecorded", "UNRECORDED_CALLS", "MAX_FRAMES"]
