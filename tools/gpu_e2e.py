"""Helpers for ``tools/gpu-check``'s end-to-end steps (run by it; not a module of wrpkit).

Subcommands (each exits 0 on success, 1 on a mismatch or error):

``capture OUT_DIR --device DEV``
    Captures, on DEV, the programs of ``samples/saxpy.py`` and
    ``samples/while_loop.py`` (their ``make_arrays``/``step``), each saved two ways:
    ``<name>.wrp`` with stock Warp (``wp.capture_begin(device, apic=True)`` +
    ``wp.capture_save``) and ``<name>_rec.wrp`` with ``wrpkit.capture`` +
    ``Recording.save``.  Writes ``<name>_inputs.npz`` (values before the step),
    ``<name>_expected.npz`` (every binding after one *live* run of the step on
    DEV), ``<name>_in/<binding>.npy`` and ``<name>_outputs.txt``.

``stock FILE INPUTS.npz EXPECTED.npz --device DEV``
    Replays FILE with stock ``wp.capture_load`` + ``wp.capture_launch`` after
    copying the inputs in, and compares every expected binding.

``gate --device DEV``
    ``warp.init()``, lists the CUDA devices, fails when DEV is ``cuda:N`` and Warp
    sees none, then launches one kernel on DEV and checks its result.

``compare EXPECTED.npz NAME=FILE.npy...``
    Compares ``.npy`` files (``wrp-replay --output``) with the expected values.

Uses only Warp's public API, ``wrpkit.capture``/``wrpkit.save`` and ``samples/*.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
SAMPLES = ("saxpy", "while_loop")
RTOL, ATOL = 1e-5, 1e-6


def _load_sample(name: str):
    path = ROOT / "samples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"wrpkit_gpu_sample_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _compare(expected: dict, got: dict, label: str) -> bool:
    ok = True
    for n, want in expected.items():
        if n not in got:
            print(f"  {label}: {n}: MISSING")
            ok = False
            continue
        have = np.asarray(got[n])
        if have.shape != want.shape or have.dtype != want.dtype:
            print(f"  {label}: {n}: shape/dtype {have.shape} {have.dtype} != expected {want.shape} {want.dtype}")
            ok = False
            continue
        if np.issubdtype(want.dtype, np.floating):
            good = np.allclose(have, want, rtol=RTOL, atol=ATOL)
        else:
            good = np.array_equal(have, want)
        diff = float(np.max(np.abs(have.astype(np.float64) - want.astype(np.float64)))) if want.size else 0.0
        print(f"  {label}: {n}: {'ok' if good else 'MISMATCH'} (max abs diff {diff:.3g}, {want.size} values)")
        ok &= bool(good)
    return ok


def cmd_capture(out_dir: pathlib.Path, device: str) -> int:
    import warp as wp  # noqa: PLC0415

    import wrpkit  # noqa: PLC0415

    wp.config.log_level = wp.LOG_WARNING
    wp.init()
    print(f"warp {wp.config.version}, wrpkit {wrpkit.__version__} from {pathlib.Path(wrpkit.__file__).parent}")
    dev = wp.get_device(device)
    print(f"device {dev} ({getattr(dev, 'name', '?')}, arch {getattr(dev, 'arch', '?')})")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in SAMPLES:
        mod = _load_sample(name)
        bindings = list(dict.fromkeys(mod.INPUTS + mod.OUTPUTS))
        t0 = time.perf_counter()
        wp.force_load(device=device)  # compile/load every module before capturing (needed on CUDA)
        live = mod.make_arrays(device)
        mod.step(live)
        wp.synchronize_device(device)
        expected = {n: live[n].numpy() for n in bindings}
        np.savez(out_dir / f"{name}_expected.npz", **expected)
        print(f"{name}: live run on {device} in {time.perf_counter() - t0:.2f} s")

        # 1) stock Warp: capture_begin(apic=True) + capture_save
        arrays = mod.make_arrays(device)
        inputs = {n: arrays[n].numpy() for n in mod.INPUTS}
        np.savez(out_dir / f"{name}_inputs.npz", **inputs)
        (out_dir / f"{name}_in").mkdir(exist_ok=True)
        for n, v in inputs.items():
            np.save(out_dir / f"{name}_in" / f"{n}.npy", v)
        (out_dir / f"{name}_outputs.txt").write_text("\n".join(bindings) + "\n")
        wp.capture_begin(device=device, apic=True)
        try:
            mod.step(arrays)
        finally:
            graph = wp.capture_end(device=device)
        wp.capture_save(graph, str(out_dir / name), inputs={n: arrays[n] for n in mod.INPUTS},
                        outputs={n: arrays[n] for n in mod.OUTPUTS})
        print(f"{name}: stock capture saved: {out_dir / name}.wrp")

        # 2) wrpkit.capture + Recording.save
        arrays = mod.make_arrays(device)
        with wrpkit.capture(device=device) as rec:
            mod.step(arrays)
        path = rec.save(out_dir / f"{name}_rec.wrp", inputs={n: arrays[n] for n in mod.INPUTS},
                        outputs={n: arrays[n] for n in mod.OUTPUTS})
        print(f"{name}: wrpkit.capture saved: {path}")

        # wrpkit.load(...).run(...) against the live run
        t0 = time.perf_counter()
        out = wrpkit.load(path, device=device).run(inputs, outputs="*")
        if not _compare(expected, out, f"{name}: wrpkit.load().run"):
            return 1
        print(f"{name}: wrpkit.load().run matches live in {time.perf_counter() - t0:.2f} s")
    return 0


def cmd_gate(device: str) -> int:
    import warp as wp  # noqa: PLC0415

    wp.init()
    n = wp.get_cuda_device_count()
    print("cuda devices:", n)
    for i in range(n):
        d = wp.get_device(f"cuda:{i}")
        print(f"  cuda:{i} {d.name} arch sm_{d.arch} mempool {d.is_mempool_supported}")
    if device.startswith("cuda") and n < 1:
        print("no CUDA device: Warp sees none (driver? /dev/nvidia*?)")
        return 1

    @wp.kernel
    def gate_kernel(x: wp.array(dtype=wp.float32)):
        i = wp.tid()
        x[i] = x[i] * 2.0 + 1.0

    t0 = time.perf_counter()
    x = wp.array(np.arange(256, dtype=np.float32), device=device)
    wp.launch(gate_kernel, dim=256, inputs=[x], device=device)
    got = x.numpy()
    want = np.arange(256, dtype=np.float32) * 2.0 + 1.0
    if not np.array_equal(got, want):
        print(f"kernel on {device}: WRONG result {got[:4]} ... (expected {want[:4]} ...)")
        return 1
    print(f"kernel on {device}: compiled, launched and correct in {time.perf_counter() - t0:.2f} s "
          f"(cuda_output={wp.config.cuda_output}, mode={wp.config.mode})")
    return 0


def cmd_stock(file: str, inputs_npz: str, expected_npz: str, device: str) -> int:
    import warp as wp  # noqa: PLC0415

    wp.config.log_level = wp.LOG_WARNING
    wp.init()
    expected = dict(np.load(expected_npz))
    inputs = dict(np.load(inputs_npz))
    graph = wp.capture_load(file, device=device)
    for n, v in inputs.items():
        graph.set_param(n, wp.array(v, device=device))
    wp.capture_launch(graph)
    wp.synchronize_device(device)
    got = {}
    for n, want in expected.items():
        out = wp.empty(want.shape, dtype=wp.dtype_from_numpy(want.dtype), device=device)
        graph.get_param(n, out)
        got[n] = out.numpy()
    return 0 if _compare(expected, got, f"stock {pathlib.Path(file).name}") else 1


def cmd_compare(expected_npz: str, items: list) -> int:
    expected = dict(np.load(expected_npz))
    got = {}
    for it in items:
        n, _, f = it.partition("=")
        a = np.load(f)
        want = expected.get(n)
        if want is not None and (a.dtype != want.dtype or a.shape != want.shape) and a.nbytes == want.nbytes:
            # a capture without wrpkit's signature: wrp-replay writes the raw bytes (uint8)
            print(f"  {n}: {a.dtype}{a.shape} read as {want.dtype}{want.shape} (raw bytes, no signature)")
            a = np.ascontiguousarray(a).view(want.dtype).reshape(want.shape)
        got[n] = a
    return 0 if _compare(expected, got, "wrp-replay") else 1


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("out_dir", type=pathlib.Path)
    c.add_argument("--device", default="cuda:0")
    s = sub.add_parser("stock")
    s.add_argument("file")
    s.add_argument("inputs")
    s.add_argument("expected")
    s.add_argument("--device", default="cuda:0")
    g = sub.add_parser("gate")
    g.add_argument("--device", default="cuda:0")
    m = sub.add_parser("compare")
    m.add_argument("expected")
    m.add_argument("items", nargs="+")
    a = p.parse_args()
    if a.cmd == "capture":
        return cmd_capture(a.out_dir, a.device)
    if a.cmd == "gate":
        return cmd_gate(a.device)
    if a.cmd == "stock":
        return cmd_stock(a.file, a.inputs, a.expected, a.device)
    return cmd_compare(a.expected, a.items)


if __name__ == "__main__":
    sys.exit(main())
