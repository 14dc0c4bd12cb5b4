"""The child processes of ``tools/warp_examples_compat.py``: build one Warp example and capture one
step of it with stock Warp (``_capture``), and stock Warp's replay of that capture, the truth
(``_stock``).  The rules are the main tool's docstring's; this module holds no route."""

from __future__ import annotations

import builtins
import json
import os
import sys
import time
from pathlib import Path

#: Option values given to an example where its parser has the option (see warp_examples_compat's docstring).
SMALL_OPTIONS = {"--device": "cpu", "--stage-path": "None", "--stage_path": "None", "--num-frames": "2",
                 "--num_frames": "2", "--train-iters": "2", "--num-iters": "2", "--iters": "2",
                 "--iterations": "2", "--spin-up-steps": "2", "--lead-steps": "2"}
FLAG_OPTIONS = ("--headless", "--quiet")

#: Methods of ``Example`` captured, the first the class defines.
CAPTURE_METHODS = ("step", "render")


def examples_root() -> Path:
    """The installed wheel's ``warp/examples`` folder (found without importing Warp)."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.find_spec("warp")
    return Path(spec.origin).parent / "examples"


# --------------------------------------------------------------------------------------------
# Child process: build and capture one example


class _Captured(BaseException):
    """Raised out of the hooked step once the capture is saved: ends the example's main loop."""


def _state_arrays(example) -> dict:
    """The state rule: ``{path: wp.array}`` of the example object (see the module's docstring)."""
    import warp as wp  # noqa: PLC0415

    found: dict = {}
    seen: set = set()

    def add(name, value):
        if isinstance(value, wp.array) and id(value) not in seen and value.device.is_cpu \
                and value.ptr is not None and value.size > 0:
            seen.add(id(value))
            found[name] = value

    attrs = sorted(vars(example).items())
    for name, value in attrs:
        add(name, value)
    for name, value in attrs:
        if isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                add(f"{name}.{i}", item)
        elif hasattr(value, "__dict__") and not isinstance(value, (type, wp.array)) \
                and type(value).__module__ != "builtins":
            try:
                sub = sorted(vars(value).items())
            except TypeError:
                continue
            for sname, svalue in sub:
                add(f"{name}.{sname}", svalue)
    return found


def _refusal(error: BaseException, what: str) -> str:
    """Who stopped the capture, and where: the words before the error's own text in a skip reason.

    "Warp refuses to capture X" when Warp raised it and says why in terms of capture; otherwise
    "X fails inside a capture at FILE:LINE" (e.g. host code reading a value that no kernel has
    computed yet: a capture does not run kernels, so what it reads is whatever memory held).
    """
    import traceback  # noqa: PLC0415

    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return f"{what} fails inside a capture"
    last = frames[-1]
    warp_dir = str(examples_root().parent.parent) + os.sep
    in_warp = last.filename.startswith(warp_dir)
    where = f"{last.filename[len(warp_dir):] if in_warp else Path(last.filename).name}:{last.lineno}"
    if in_warp and "capture" in str(error).lower():
        return f"Warp refuses to capture {what} ({where})"
    return f"{what} fails inside a capture at {where}"


def _hook_argparse() -> None:
    """Give every example parser :data:`SMALL_OPTIONS` and :data:`FLAG_OPTIONS` it defines."""
    import argparse as ap  # noqa: PLC0415

    real = ap.ArgumentParser.parse_known_args

    def parse_known_args(self, args=None, namespace=None):
        if args is None:
            args = []
            for action in self._actions:
                for opt in action.option_strings:
                    if opt in SMALL_OPTIONS and action.nargs in (None, "?"):
                        args += [opt, SMALL_OPTIONS[opt]]
                    elif opt in FLAG_OPTIONS and action.nargs == 0 and action.const is True:
                        args.append(opt)
        return real(self, args, namespace)

    ap.ArgumentParser.parse_known_args = parse_known_args


def child_capture(example_py: Path, out_dir: Path) -> dict:
    """Run ``example_py`` as ``__main__``, capture one step (see the module's docstring), save ``out_dir/capture.wrp``.

    Returns (and writes as ``out_dir/meta.json``) ``{"status": "captured" | "skip" | "error",
    "reason", "method", "arrays": {name: {"dtype", "shape", "nbytes"}}, "seconds"}``.
    """
    import runpy  # noqa: PLC0415

    import warp as wp  # noqa: PLC0415

    wp.config.quiet = True
    out_dir.mkdir(parents=True, exist_ok=True)
    meta: dict = {"status": "error", "reason": "the example never called Example.step()", "method": None,
                  "arrays": {}}
    t0 = time.time()
    real_build_class = builtins.__build_class__

    def capture(self, method, orig, args, kwargs):
        arrays = _state_arrays(self)
        wp.synchronize_device("cpu")
        try:
            wp.capture_begin(device="cpu", apic=True)
            try:
                orig(self, *args, **kwargs)
            finally:
                graph = wp.capture_end(device="cpu")
        except Exception as e:  # noqa: BLE001 - what Warp refuses is the answer
            what = f"Example.{method}()" if method in CAPTURE_METHODS else method
            meta.update(status="skip", reason=f"{_refusal(e, what)}: {type(e).__name__}: {e}".strip())
            raise _Captured from e
        wp.capture_save(graph, str(out_dir / "capture.wrp"), inputs=arrays, outputs=arrays)
        meta.update(status="captured", reason="", method=method, arrays={
            n: {"dtype": str(a.dtype.__name__ if hasattr(a.dtype, "__name__") else a.dtype),
                "shape": list(a.shape), "nbytes": int(a.capacity)} for n, a in arrays.items()})
        raise _Captured

    def capture_launch(real, kernel, args, kwargs):
        result = real(kernel, *args, **kwargs)
        params = [a.label for a in kernel.adj.args]
        bound = dict(zip(("dim", "inputs", "outputs"), args))
        bound.update(kwargs)
        values = list(bound.get("inputs") or []) + list(bound.get("outputs") or [])
        arrays = {}
        for label, v in zip(params, values):
            if isinstance(v, wp.array) and v.device.is_cpu and v.size > 0 and id(v) not in map(id, arrays.values()):
                arrays[label] = v
        meta["method"] = f"{real.__name__}({kernel.key})"

        class _Launcher:
            def __init__(self):
                self.__dict__.update(arrays)

        def again(_self):
            real(kernel, *args, **kwargs)

        capture(_Launcher(), meta["method"], again, (), {})
        return result

    def hook_launch(name):
        real = getattr(wp, name)

        def launch(kernel, *args, **kwargs):
            if meta["method"] is None and not busy and getattr(getattr(kernel, "module", None), "name", "") == "__main__":
                busy.append(1)
                return capture_launch(real, kernel, args, kwargs)
            return real(kernel, *args, **kwargs)

        setattr(wp, name, launch)

    busy: list = []

    def build_class(func, name, *bases, **kw):
        cls = real_build_class(func, name, *bases, **kw)
        if name == "Example" and cls.__module__ == "__main__" and meta["method"] is None:
            for method in CAPTURE_METHODS:
                orig = cls.__dict__.get(method)
                if callable(orig):
                    def hooked(self, *args, _orig=orig, _method=method, **kwargs):
                        _orig(self, *args, **kwargs)
                        return capture(self, _method, _orig, args, kwargs)

                    setattr(cls, method, hooked)
                    meta["method"] = method
                    meta["reason"] = f"the example never called Example.{method}()"
                    break
            else:
                meta["reason"] = "Example defines no step() or render()"
        return cls

    _hook_argparse()
    wp.clear_kernel_cache = wp.clear_lto_cache = lambda *a, **k: None
    hook_launch("launch")
    hook_launch("launch_tiled")
    builtins.__build_class__ = build_class
    printed = _LastLine(sys.stdout)
    sys.stdout = printed
    sys.argv = [str(example_py)]
    sys.path.insert(0, str(example_py.parent))
    os.chdir(out_dir)
    try:
        runpy.run_path(str(example_py), run_name="__main__")
        if meta["status"] == "error":  # it ran to its end without a capture
            meta.update(status="skip", reason=meta["reason"] if meta["method"] or "defines no" in meta["reason"]
                        else "no class Example with step() or render()")
    except _Captured:
        pass
    except SystemExit as e:
        if meta["status"] != "captured":
            said = printed.last
            needs_cuda = "cuda" in said.lower() and ("only" in said.lower() or "requires" in said.lower())
            meta.update(status="skip", reason=(f"needs CUDA: the example says {said!r}" if needs_cuda else
                                               f"the example exited ({e.code}) before calling Example.step()"
                                               + (f", saying {said!r}" if said else "")))
    except BaseException as e:  # noqa: BLE001 - classified by the parent
        if meta["status"] != "skip":
            meta.update(status="error", reason=f"{type(e).__name__}: {e}".strip())
    finally:
        builtins.__build_class__ = real_build_class
        sys.stdout = printed.stream
    meta["seconds"] = round(time.time() - t0, 1)
    (out_dir / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta



class _LastLine:
    """``sys.stdout`` passed through, keeping the last line the example printed (why it stopped early)."""

    def __init__(self, stream):
        self.stream, self.last = stream, ""

    def write(self, text):
        lines = [line.strip() for line in str(text).splitlines() if line.strip()]
        if lines:
            self.last = lines[-1]
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)

def child_stock(wrp: Path, names: list, out: Path) -> dict:
    """Stock Warp's truth: ``wp.capture_load`` + one ``wp.capture_launch`` of ``wrp`` on the CPU.

    Every binding in ``names`` is saved to ``out`` as its raw bytes (``graph.get_param``).
    """
    import numpy as np  # noqa: PLC0415
    import warp as wp  # noqa: PLC0415

    wp.config.quiet = True
    try:
        graph = wp.capture_load(str(wrp), device="cpu")
        wp.capture_launch(graph)
        wp.synchronize_device("cpu")
    except Exception as e:  # noqa: BLE001 - what stock Warp refuses is the answer
        return {"ok": False, "reason": f"{type(e).__name__}: {e}"}
    import ctypes  # noqa: PLC0415

    import warp._src.context as wp_context  # noqa: PLC0415

    core = wp_context.runtime.core
    core.wp_apic_get_param_size.restype = ctypes.c_size_t
    arrays = {}
    for n in names:
        buf = wp.zeros(core.wp_apic_get_param_size(graph._native_graph, n.encode()), dtype=wp.uint8, device="cpu")
        graph.get_param(n, buf)
        arrays[n] = buf.numpy().copy()
    np.savez(out, **arrays)
    return {"ok": True, "reason": ""}
