"""Where each op and kernel of a capture comes from in the user's Python source.

``wrpkit.capture`` records, per op, the call that issued it (file, line,
function and a short stack: the annotations' ``call_sites``) and, per kernel,
the file and line of its ``def`` (``KernelSignature.source_file`` and
``source_line``).  :class:`Sources` is the one place that answers "where does
the op at path P come from" and "where is kernel (key, module) defined";
``wrp inspect``, ``trace``, ``profile``, ``graph`` and ``diff`` all ask it.

Op paths: a tuple (top-level index, then a ``(body, index)`` pair per
IF/WHILE body, body 1 being an IF's else body), or the text ``wrp inspect
--ops`` prints for it (``"3"``, ``"1.2"``, ``"1.e0"``): :func:`path_text` and
:func:`parse_path` convert.
"""

from __future__ import annotations

from typing import Optional

from .. import model as m

#: Bounds the validator holds call sites to (untrusted input).
MAX_FRAMES = 8
MAX_TEXT = 4096
MAX_PATH = 1 + 2 * 64
#: Unrecorded structure calls kept per capture (``Annotations.unrecorded_calls``).
MAX_UNRECORDED = 64


def iter_op_paths(ops, prefix: tuple = ()):
    """Yield ``(path, op)`` for every op, nested bodies included, in stream order."""
    for i, op in enumerate(ops):
        path = prefix + (i,)
        yield path, op
        for b, body in enumerate(m.nested_bodies(op)):
            yield from iter_op_paths(body, path + (b,))


def path_text(path) -> str:
    """``(1, 1, 0)`` -> ``"1.e0"``; ``(2, 0, 3)`` -> ``"2.3"`` (as ``wrp inspect --ops`` numbers ops)."""
    path = tuple(path)
    out = str(path[0]) if path else ""
    for k in range(1, len(path) - 1, 2):
        out += (".e" if path[k] == 1 else ".") + str(path[k + 1])
    return out


def parse_path(text) -> Optional[tuple]:
    """The path tuple of an op path's text (``"1.e0"`` -> ``(1, 1, 0)``); None when it is not one."""
    if isinstance(text, (tuple, list)):
        return tuple(int(v) for v in text)
    if isinstance(text, int):
        return (text,)
    try:
        parts = str(text).split(".")
        out = [int(parts[0])]
        for p in parts[1:]:
            if p.startswith("e"):
                out += [1, int(p[1:])]
            else:
                out += [0, int(p)]
        if any(v < 0 for v in out):
            return None
        return tuple(out)
    except (ValueError, IndexError):
        return None


def resolve(ops, path) -> Optional[m.Op]:
    """The op at ``path`` in ``ops``, or None when the path names none."""
    path = tuple(path)
    if not path or len(path) % 2 != 1:
        return None
    cur = ops
    op = None
    for k in range(0, len(path), 2):
        i = path[k]
        if not isinstance(i, int) or not 0 <= i < len(cur):
            return None
        op = cur[i]
        if k + 1 < len(path):
            bodies = m.nested_bodies(op)
            b = path[k + 1]
            if not isinstance(b, int) or not 0 <= b < len(bodies):
                return None
            cur = bodies[b]
    return op


def where_text(src: Optional[dict]) -> str:
    """``"sim.py:42 in step()"`` for a source dict of :meth:`Sources.op` (``"sim.py:7"`` for a kernel's); "" for None."""
    if not src or not src.get("file"):
        return ""
    text = f"{src['file']}:{src.get('line', 0)}"
    if src.get("function"):
        text += f" in {src['function']}()"
    return text


def call_site_key(src: Optional[dict]) -> Optional[str]:
    """``"sim.py:42"``: the key profile aggregates op times under; None without a source."""
    if not src or not src.get("file"):
        return None
    return f"{src['file']}:{src.get('line', 0)}"


def _frame(f) -> dict:
    return {"file": f.file, "line": int(f.line), "function": f.function}


class Sources:
    """The recorded source of a capture's ops and kernels (empty for a stock capture).

    Build it with :meth:`of` from a program; malformed annotations read as
    none (``wrp validate`` reports them), and call sites whose path names no
    op are ignored.
    """

    def __init__(self, annotations=None, ops=None):
        self._ops: dict = {}
        self._kernels: dict = {}
        self.root = ""
        #: ``[{"call": "Mesh.refit()", "file", "line", "function", "stack"}]``: structure calls the
        #: capture ran that Warp did not record (``Annotations.unrecorded_calls``).
        self.unrecorded: list = []
        if annotations is None:
            return
        self.root = annotations.source_root or ""
        for u in getattr(annotations, "unrecorded_calls", ())[:MAX_UNRECORDED]:
            frames = [_frame(f) for f in u.frames[:MAX_FRAMES]]
            self.unrecorded.append({"call": u.call[:MAX_TEXT], **(frames[0] if frames else {}), "stack": frames})
        for site in annotations.call_sites:
            path = tuple(site.op_path)
            if not site.frames or path in self._ops:
                continue
            if ops is not None and resolve(ops, path) is None:
                continue
            frames = [_frame(f) for f in site.frames[:MAX_FRAMES]]
            self._ops[path] = {**frames[0], "stack": frames}
        self.add_kernels(annotations.kernel_signatures)

    def add_kernels(self, signatures) -> None:
        """Learn where kernels are defined from ``KernelSignature`` records (e.g. typed by ``--kernels``);
        a kernel already known keeps its place."""
        for k in signatures:
            if getattr(k, "source_file", ""):
                self._kernels.setdefault((k.module_hash, k.kernel_key),
                                         {"file": k.source_file, "line": int(k.source_line)})

    @classmethod
    def of(cls, program) -> "Sources":
        """The sources recorded in ``program``'s annotations (empty when it has none or they are malformed)."""
        from ..errors import WrpError  # noqa: PLC0415
        from ..formats.annotations import read_annotations  # noqa: PLC0415

        try:
            ann = read_annotations(program)
        except WrpError:
            ann = None
        return cls(ann, program.ops)

    def __bool__(self) -> bool:
        return bool(self._ops or self._kernels)

    @property
    def has_call_sites(self) -> bool:
        return bool(self._ops)

    def op(self, path) -> Optional[dict]:
        """Where the op at ``path`` (tuple or text) was issued: ``{"file", "line", "function", "stack": [...]}``, or None."""
        if not self._ops:
            return None
        p = path if type(path) is tuple else parse_path(path)
        return self._ops.get(p) if p is not None else None

    def kernel(self, module_hash: str, kernel_key: str) -> Optional[dict]:
        """Where kernel ``kernel_key`` of module ``module_hash`` is defined: ``{"file", "line"}``, or None."""
        return self._kernels.get((module_hash, kernel_key))

    def op_where(self, path) -> str:
        """``"sim.py:42 in step()"`` for the op at ``path``; "" when unknown."""
        return where_text(self.op(path))

    def kernel_where(self, module_hash: str, kernel_key: str) -> str:
        """``"kernels.py:7"`` for a kernel; "" when unknown."""
        return where_text(self.kernel(module_hash, kernel_key))


def op_source(program, path) -> Optional[dict]:
    """Where the op at ``path`` of ``program`` was issued (see :meth:`Sources.op`)."""
    return Sources.of(program).op(path)


def kernel_source(program, module_hash: str, kernel_key: str) -> Optional[dict]:
    """Where a kernel of ``program`` is defined (see :meth:`Sources.kernel`)."""
    return Sources.of(program).kernel(module_hash, kernel_key)


__all__ = ["Sources", "op_source", "kernel_source", "iter_op_paths", "path_text", "parse_path", "resolve",
           "where_text", "call_site_key", "MAX_FRAMES", "MAX_TEXT", "MAX_PATH", "MAX_UNRECORDED"]
