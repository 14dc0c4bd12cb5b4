"""Capture and replay programs for the legacy WRP1 fixtures.

This file is executed by the interpreter of an *old* Warp release (1.13 .. 1.18),
inside a throw-away venv made by ``tools/make_legacy_fixtures.py``.  It must
therefore not import ``wrpkit`` and must only use Warp API that exists in every
one of those releases (``capture_begin(apic=True)``, ``capture_save(graph, path,
inputs=, outputs=)``, ``capture_load(path, device=)``, ``Graph.set_param`` and
``Graph.get_param``).

Sub-commands (all work on one release folder ``--out``):

``capture``
    For every case this release supports: write the case's kernel module file(s)
    (``<case>_kernels*.py``) into ``--out``, import them under their file stem
    (so module names, and with them kernel keys and module hashes, are stable),
    capture the case on ``cpu`` with ``apic=True`` and ``capture_save`` it to
    ``<case>.wrp`` + ``<case>_modules/``.  Writes ``<case>_inputs.npz`` (the
    values the replay sets) and a ``_cases.json`` work file.

``replay --case NAME``
    In a fresh process: ``capture_load`` the case, ``set_param`` every input
    from ``<case>_inputs.npz``, ``capture_launch`` once, ``get_param`` every
    binding and write ``<case>_expected.npz``.

``manifest``
    Turn ``_cases.json`` into ``manifest.json``.

The capture-time contents of every array come from seed ``CAPTURE_SEED``; the
values the replay sets come from seed ``INPUT_SEED``, so a replay that ignores
``set_param`` does not reproduce the expected outputs.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import struct
import sys
import textwrap

import numpy as np

CAPTURE_SEED = 7
INPUT_SEED = 1234
N = 32

# ---------------------------------------------------------------------------
# Kernel module sources. Each one is written to ``<out>/<module>.py`` and
# imported under the name ``<module>``. Keep them free of version-specific API.
# ---------------------------------------------------------------------------

HEADER = "import warp as wp\n\n"
NO_BWD = 'wp.set_module_options({"enable_backward": False})\n\n'

SOURCES = {
    "saxpy_kernels": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.kernel
        def saxpy(a: float, x: wp.array(dtype=float), y: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = a * x[i] + y[i]
        """
    ),
    "struct_kernels": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.struct
        class Params:
            scale: float
            offset: wp.vec3
            count: int


        @wp.kernel
        def apply_params(p: Params, v: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
            i = wp.tid()
            if i < p.count:
                out[i] = v[i] * p.scale + p.offset
            else:
                out[i] = v[i]
        """
    ),
    "struct_array_kernels": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.struct
        class Buffers:
            src: wp.array(dtype=float)
            dst: wp.array(dtype=float)
            gain: float


        @wp.kernel
        def apply_buffers(b: Buffers):
            i = wp.tid()
            b.dst[i] = b.src[i] * b.gain + float(i)
        """
    ),
    "capture_if_kernels": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.kernel
        def set_flag(x: wp.array(dtype=float), flag: wp.array(dtype=wp.int32)):
            if x[0] > 0.0:
                flag[0] = 1
            else:
                flag[0] = 0


        @wp.kernel
        def add_one(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = x[i] + 1.0


        @wp.kernel
        def sub_one(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = x[i] - 1.0
        """
    ),
    "capture_while_kernels": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.kernel
        def init_loop(iters: wp.array(dtype=wp.int32), counter: wp.array(dtype=wp.int32), cond: wp.array(dtype=wp.int32)):
            counter[0] = iters[0]
            if iters[0] > 0:
                cond[0] = 1
            else:
                cond[0] = 0


        @wp.kernel
        def relax(x: wp.array(dtype=float)):
            i = wp.tid()
            x[i] = x[i] * 0.5 + 1.0


        @wp.kernel
        def step_loop(counter: wp.array(dtype=wp.int32), cond: wp.array(dtype=wp.int32)):
            counter[0] = counter[0] - 1
            if counter[0] > 0:
                cond[0] = 1
            else:
                cond[0] = 0
        """
    ),
    "backward_kernels": HEADER + 'wp.set_module_options({"enable_backward": True})\n\n' + textwrap.dedent(
        """\
        @wp.kernel
        def poly(x: wp.array(dtype=float), w: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = w[i] * x[i] * x[i] + x[i]
        """
    ),
    "collision_kernels_a": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.kernel
        def scale(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = x[i] * 2.0
        """
    ),
    "collision_kernels_b": HEADER + NO_BWD + textwrap.dedent(
        """\
        @wp.kernel
        def scale(x: wp.array(dtype=float), out: wp.array(dtype=float)):
            i = wp.tid()
            out[i] = x[i] * 3.0 + 1.0
        """
    ),
}

# ---------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------


def _f32(rng, n=N):
    return rng.standard_normal(n).astype(np.float32)


def make_saxpy(rng):
    return {"x": _f32(rng), "y": _f32(rng), "out": np.zeros(N, np.float32)}


def make_struct(rng):
    return {"v": rng.standard_normal((N, 3)).astype(np.float32), "out": np.zeros((N, 3), np.float32)}


def make_struct_array(rng):
    return {"src": _f32(rng), "dst": np.zeros(N, np.float32)}


def make_capture_if(rng):
    x = _f32(rng)
    return {"x": x, "flag": np.zeros(1, np.int32), "out": np.zeros(N, np.float32)}


def make_capture_while(rng):
    return {
        "x": _f32(rng),
        "iters": np.array([int(rng.integers(3, 7))], np.int32),
        "counter": np.zeros(1, np.int32),
        "cond": np.zeros(1, np.int32),
    }


def make_backward(rng):
    return {
        "x": _f32(rng),
        "w": _f32(rng),
        "y": np.zeros(N, np.float32),
        "y_grad": np.ones(N, np.float32) + np.float32(0.25) * _f32(rng),
        "x_grad": np.zeros(N, np.float32),
        "w_grad": np.zeros(N, np.float32),
    }


def make_scan(rng):
    return {"values": rng.integers(-50, 50, N).astype(np.int32), "prefix": np.zeros(N, np.int32)}


def make_radix_sort(rng):
    # radix_sort_pairs needs 2*count elements of scratch in both arrays.
    keys = np.zeros(2 * N, np.int32)
    keys[:N] = rng.integers(0, 1000, N)
    vals = np.zeros(2 * N, np.int32)
    vals[:N] = np.arange(N, dtype=np.int32)
    return {"keys": keys, "values": vals}


def make_collision(rng):
    return {"x": _f32(rng), "out_a": np.zeros(N, np.float32), "out_b": np.zeros(N, np.float32)}


def step_saxpy(wp, mods, a):
    wp.launch(mods["saxpy_kernels"].saxpy, dim=N, inputs=[2.5, a["x"], a["y"], a["out"]], device="cpu")


def step_struct(wp, mods, a):
    m = mods["struct_kernels"]
    p = m.Params()
    p.scale = 1.5
    p.offset = wp.vec3(0.25, -0.5, 2.0)
    p.count = N - 5
    wp.launch(m.apply_params, dim=N, inputs=[p, a["v"], a["out"]], device="cpu")


def step_struct_array(wp, mods, a):
    m = mods["struct_array_kernels"]
    b = m.Buffers()
    b.src = a["src"]
    b.dst = a["dst"]
    b.gain = -0.75
    wp.launch(m.apply_buffers, dim=N, inputs=[b], device="cpu")


def step_capture_if(wp, mods, a):
    m = mods["capture_if_kernels"]
    wp.launch(m.set_flag, dim=1, inputs=[a["x"], a["flag"]], device="cpu")
    wp.capture_if(
        a["flag"],
        on_true=lambda: wp.launch(m.add_one, dim=N, inputs=[a["x"], a["out"]], device="cpu"),
        on_false=lambda: wp.launch(m.sub_one, dim=N, inputs=[a["x"], a["out"]], device="cpu"),
    )


def step_capture_while(wp, mods, a):
    m = mods["capture_while_kernels"]
    wp.launch(m.init_loop, dim=1, inputs=[a["iters"], a["counter"], a["cond"]], device="cpu")

    def body():
        wp.launch(m.relax, dim=N, inputs=[a["x"]], device="cpu")
        wp.launch(m.step_loop, dim=1, inputs=[a["counter"], a["cond"]], device="cpu")

    wp.capture_while(a["cond"], body)


def step_backward(wp, mods, a):
    m = mods["backward_kernels"]
    wp.launch(m.poly, dim=N, inputs=[a["x"], a["w"]], outputs=[a["y"]], device="cpu")
    wp.launch(
        m.poly,
        dim=N,
        inputs=[a["x"], a["w"]],
        outputs=[a["y"]],
        adj_inputs=[a["x_grad"], a["w_grad"]],
        adj_outputs=[a["y_grad"]],
        adjoint=True,
        device="cpu",
    )


def step_scan(wp, mods, a):
    wp.utils.array_scan(a["values"], a["prefix"], inclusive=True)


def step_radix_sort(wp, mods, a):
    wp.utils.radix_sort_pairs(a["keys"], a["values"], N)


def step_collision(wp, mods, a):
    wp.launch(mods["collision_kernels_a"].scale, dim=N, inputs=[a["x"], a["out_a"]], device="cpu")
    wp.launch(mods["collision_kernels_b"].scale, dim=N, inputs=[a["x"], a["out_b"]], device="cpu")


# name: (kernel modules, make, step, inputs, outputs, wp dtype per array, min format, doc)
CASES = {
    "saxpy": (["saxpy_kernels"], make_saxpy, step_saxpy, ["x", "y"], ["out"], {}, 0,
              "one launch: out = 2.5*x + y (float scalar + three arrays)"),
    "struct": (["struct_kernels"], make_struct, step_struct, ["v"], ["out"], {"v": "vec3", "out": "vec3"}, 0,
               "a @wp.struct argument by value {float, vec3, int} plus vec3 arrays"),
    "struct_array": (["struct_array_kernels"], make_struct_array, step_struct_array, ["src"], ["dst"], {}, 0,
                     "a @wp.struct argument holding two arrays and a float (pointers inside a struct)"),
    "capture_if": (["capture_if_kernels"], make_capture_if, step_capture_if, ["x"], ["out", "flag"], {}, 10,
                   "launch that sets a flag, then wp.capture_if(flag, add_one, sub_one)"),
    "capture_while": (["capture_while_kernels"], make_capture_while, step_capture_while, ["x", "iters"],
                      ["counter", "cond"], {}, 10,
                      "init launch, then wp.capture_while(cond) over two launches; x is updated in place"),
    "backward": (["backward_kernels"], make_backward, step_backward, ["x", "w", "y_grad"],
                 ["y", "x_grad", "w_grad"], {}, 0,
                 "forward launch and an adjoint (adjoint=True) launch of the same kernel"),
    "scan": ([], make_scan, step_scan, ["values"], ["prefix"], {}, 14,
             "wp.utils.array_scan, int32, inclusive"),
    "radix_sort": ([], make_radix_sort, step_radix_sort, ["keys", "values"], [], {}, 14,
                   "wp.utils.radix_sort_pairs, int32 keys, 32 pairs (arrays hold 2*count)"),
    "collision": (["collision_kernels_a", "collision_kernels_b"], make_collision, step_collision, ["x"],
                  ["out_a", "out_b"], {}, 0,
                  "two kernels with the same key 'scale' in two modules (1.14 keeps one kernel record)"),
}


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def init_warp(cache_dir):
    import warp as wp  # noqa: PLC0415

    wp.config.kernel_cache_dir = cache_dir
    # Generic x86-64 target: the committed objects must not need this host's ISA extensions.
    if hasattr(wp.config, "cpu_compiler_flags"):
        wp.config.cpu_compiler_flags = ""
    if hasattr(wp, "LOG_WARNING"):
        wp.config.log_level = wp.LOG_WARNING
    else:
        wp.config.quiet = True
    wp.init()
    import warp.utils  # noqa: F401, PLC0415

    return wp


def import_module_file(out, name):
    path = os.path.join(out, name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def read_format(path):
    with open(path, "rb") as f:
        head = f.read(8)
    assert head[:4] == b"WRP1", head
    return struct.unpack_from("<I", head, 4)[0]


def top_level_ops(path):
    """Top-level op types of the OPERATIONS section (layout identical in every release)."""
    data = open(path, "rb").read()
    nsec = struct.unpack_from("<I", data, 12)[0]
    table = struct.unpack_from("<Q", data, 16)[0]
    for i in range(nsec):
        typ, _flags, off, size, _usize = struct.unpack_from("<IIQQQ", data, table + 32 * i)
        if typ == 3:
            count = struct.unpack_from("<I", data, off)[0]
            pos, ops = off + 4, []
            for _ in range(count):
                op, tot = struct.unpack_from("<II", data, pos)
                ops.append(op)
                pos += tot
            return ops
    return []


def wp_dtype_name(np_arr, override):
    if override:
        return override
    return {"float32": "float32", "int32": "int32"}[str(np_arr.dtype)]


def to_wp(wp, arr, dtype_name):
    dtype = {"vec3": wp.vec3, "float32": wp.float32, "int32": wp.int32}[dtype_name]
    return wp.array(arr, dtype=dtype, device="cpu")


# ---------------------------------------------------------------------------
# Sub-commands
# ---------------------------------------------------------------------------


def cmd_capture(args):
    wp = init_warp(args.kernel_cache)
    fmt_expected = None
    results, absent = {}, {}
    names = args.case or list(CASES)
    for name in names:
        mod_names, make, step, inputs, outputs, overrides, min_fmt, doc = CASES[name]
        if fmt_expected is not None and fmt_expected < min_fmt:
            absent[name] = f"needs format >= {min_fmt}; this release writes {fmt_expected}"
            continue
        for m in mod_names:
            with open(os.path.join(args.out, m + ".py"), "w") as f:
                f.write(SOURCES[m])
        mods = {m: import_module_file(args.out, m) for m in mod_names}
        cap_np = make(np.random.default_rng(CAPTURE_SEED))
        in_np = make(np.random.default_rng(INPUT_SEED))
        dtypes = {k: wp_dtype_name(v, overrides.get(k)) for k, v in cap_np.items()}
        arrays = {k: to_wp(wp, v, dtypes[k]) for k, v in cap_np.items()}
        # make sure the modules are compiled and loaded before the capture
        for m in mods.values():
            wp.load_module(m, device="cpu")
        wrp = os.path.join(args.out, name + ".wrp")
        try:
            wp.capture_begin(device="cpu", apic=True)
            try:
                step(wp, mods, arrays)
            finally:
                graph = wp.capture_end(device="cpu")
            wp.capture_save(
                graph,
                wrp,
                inputs={k: arrays[k] for k in inputs},
                outputs={k: arrays[k] for k in outputs},
            )
        except Exception as e:  # noqa: BLE001
            absent[name] = f"{type(e).__name__}: {e}".strip()
            print(f"[{wp.__version__}] case {name}: not captured: {absent[name]}", file=sys.stderr)
            for m in mod_names:
                os.remove(os.path.join(args.out, m + ".py"))
            continue
        fmt = read_format(wrp)
        fmt_expected = fmt
        if fmt < min_fmt:
            # the release captured it, but not as the op we want (e.g. scan executed eagerly)
            pass
        np.savez(os.path.join(args.out, name + "_inputs.npz"), **{k: in_np[k] for k in inputs})
        kernels = []
        for m in mod_names:
            for attr in sorted(vars(mods[m])):
                obj = getattr(mods[m], attr)
                if isinstance(obj, wp.Kernel):
                    kernels.append({"key": obj.key, "module": obj.module.name, "source_file": m + ".py"})
        mod_dir = os.path.join(args.out, name + "_modules")
        results[name] = {
            "doc": doc,
            "wrp": name + ".wrp",
            "modules_dir": name + "_modules",
            "module_files": sorted(os.listdir(mod_dir)) if os.path.isdir(mod_dir) else [],
            "kernel_sources": [m + ".py" for m in mod_names],
            "kernels": kernels,
            "inputs_file": name + "_inputs.npz",
            "expected_file": name + "_expected.npz",
            "inputs": inputs,
            "outputs": outputs,
            "bindings": {
                k: {"dtype": dtypes[k], "shape": list(arrays[k].shape), "numpy_shape": list(cap_np[k].shape),
                    "numpy_dtype": str(cap_np[k].dtype)}
                for k in dict.fromkeys(inputs + outputs)
            },
            "format_version": fmt,
            "top_level_ops": top_level_ops(wrp),
            "file_size": os.path.getsize(wrp),
        }
        print(f"[{wp.__version__}] case {name}: format {fmt}, ops {results[name]['top_level_ops']}")
    # a case whose op is missing from this format is reported absent (checked after the first capture)
    fmt = next((r["format_version"] for r in results.values()), None)
    for name in list(results):
        if fmt is not None and fmt < CASES[name][6]:
            absent[name] = f"needs format >= {CASES[name][6]}; this release writes {fmt}"
            _remove_case(args.out, name, results.pop(name))
    with open(os.path.join(args.out, "_cases.json"), "w") as f:
        json.dump(
            {
                "warp_version": wp.__version__,
                "cpu_compiler_flags": getattr(wp.config, "cpu_compiler_flags", None),
                "cases": results,
                "absent": absent,
            },
            f,
            indent=2,
        )


def _remove_case(out, name, info):
    import shutil  # noqa: PLC0415

    for p in [info["wrp"], info["inputs_file"], *info["kernel_sources"]]:
        if os.path.exists(os.path.join(out, p)):
            os.remove(os.path.join(out, p))
    shutil.rmtree(os.path.join(out, info["modules_dir"]), ignore_errors=True)


def cmd_replay(args):
    wp = init_warp(args.kernel_cache)
    work = json.load(open(os.path.join(args.out, "_cases.json")))
    info = work["cases"][args.case[0]]
    graph = wp.capture_load(os.path.join(args.out, info["wrp"]), device="cpu")
    inputs = np.load(os.path.join(args.out, info["inputs_file"]))
    for name in info["inputs"]:
        graph.set_param(name, to_wp(wp, inputs[name], info["bindings"][name]["dtype"]))
    wp.capture_launch(graph)
    wp.synchronize_device("cpu")
    result = {}
    for name, b in info["bindings"].items():
        out = to_wp(wp, np.zeros(b["numpy_shape"], b["numpy_dtype"]), b["dtype"])
        graph.get_param(name, out)
        result[name] = out.numpy().copy()
    np.savez(os.path.join(args.out, info["expected_file"]), **result)
    print(f"[{wp.__version__}] replayed {args.case[0]}")


def cmd_manifest(args):
    work = json.load(open(os.path.join(args.out, "_cases.json")))
    fmts = sorted({c["format_version"] for c in work["cases"].values()})
    manifest = {
        "warp_version": work["warp_version"],
        "format_version": fmts[0] if len(fmts) == 1 else fmts,
        "generated_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "generator": "tools/make_legacy_fixtures.py (programs: tools/legacy_programs.py)",
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}, device cpu",
        "cpu_compiler_flags": work.get("cpu_compiler_flags"),
        "capture_seed": CAPTURE_SEED,
        "input_seed": INPUT_SEED,
        "notes": (
            "Arrays hold CAPTURE_SEED data at capture time (that is the memory snapshot in the .wrp); "
            "the replay sets every binding listed in 'inputs' from <case>_inputs.npz, launches once and reads "
            "every binding with get_param into <case>_expected.npz (replayed by the producing release in a "
            "fresh process). Kernel sources: the <module>.py files, imported under their file stem as module "
            "name."
        ),
        "cases": work["cases"],
        "absent": work["absent"],
    }
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2, sort_keys=False)
        f.write("\n")
    os.remove(os.path.join(args.out, "_cases.json"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("command", choices=["capture", "replay", "manifest"])
    p.add_argument("--out", required=True)
    p.add_argument("--kernel-cache", required=False)
    p.add_argument("--case", action="append")
    args = p.parse_args(argv)
    {"capture": cmd_capture, "replay": cmd_replay, "manifest": cmd_manifest}[args.command](args)


if __name__ == "__main__":
    main()
