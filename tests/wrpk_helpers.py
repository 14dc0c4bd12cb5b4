"""Shared inputs of tests/formats/test_wrpk.py and tests/formats/test_jsonform.py.

* :func:`program_names` / :func:`load_inputs`: real captures of every program
  of ``tests/programs.py``, from its one capture cache (``cached_capture``).
* :func:`synthetic_program`: a hand-built program that holds every op type
  with non-default values in every field (including the ones stock Warp never
  writes: MEMCPY_H2D, ALLOC, BVH_*, HASH_GRID_UPDATE, a padded BSR_TRANSPOSE
  tail), a CUDA module with an exported source, meshes, pointer locations and
  a real ``Annotations`` FlatBuffer.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import flatbuffers

from wrpkit import model as m

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import programs  # noqa: E402

PROGRAMS = dict(programs.PROGRAMS)


def program_names() -> list:
    """Names to parametrize over: every registered program."""
    return sorted(PROGRAMS)


def load_inputs() -> dict:
    """``{name: (wrp bytes, {module file: bytes})}`` for every program, from the run's one capture cache."""
    from wrpkit.formats.container import open_capture  # noqa: PLC0415

    paths = programs.cached_captures()
    out = {}
    for name, path in paths.items():
        with open_capture(path) as cap:
            out[name] = (Path(path).read_bytes(), {k: bytes(v) for k, v in cap.module_files().items()})
    return out


# ---------------------------------------------------------------------------
# A synthetic program with every op type
# ---------------------------------------------------------------------------

MOD_HASH = "0123456789abcdef" * 4
MOD2_HASH = "fedcba9876543210" * 4


def annotations_bytes() -> bytes:
    """A real ``Annotations`` FlatBuffer built with the flatc-generated object API."""
    from wrpkit.formats.fbs.Annotations import AnnotationsT  # noqa: PLC0415
    from wrpkit.formats.fbs.ArraySignature import ArraySignatureT  # noqa: PLC0415
    from wrpkit.formats.fbs.DataType import DataTypeT  # noqa: PLC0415
    from wrpkit.formats.fbs.KernelArgument import KernelArgumentT  # noqa: PLC0415
    from wrpkit.formats.fbs.KernelSignature import KernelSignatureT  # noqa: PLC0415
    from wrpkit.formats.fbs.ModuleDigest import ModuleDigestT  # noqa: PLC0415
    from wrpkit.formats.fbs.StructField import StructFieldT  # noqa: PLC0415

    f32 = DataTypeT(name="float32", scalar=11, shape=[], size=4)
    vec3 = DataTypeT(name="vec3f", scalar=11, shape=[3], size=12)
    st = DataTypeT(name="Particles", scalar=0, size=16,
                   fields=[StructFieldT(name="pos", offset=0, type=vec3), StructFieldT(name="w", offset=12, type=f32)])
    ann = AnnotationsT(
        producer="wrpkit tests",
        signature=[ArraySignatureT(name="x", dtype=f32, shape=[4, 4], strides=[16, 4], byteOffset=0, isInput=True),
                   ArraySignatureT(name="y", dtype=st, shape=[2], strides=[16], byteOffset=8, isOutput=True)],
        kernelSignatures=[KernelSignatureT(kernelKey="k", moduleHash=MOD_HASH, arguments=[
            KernelArgumentT(name="x", type="array(ndim=2, dtype=float32)", valueSize=40, dtype=f32, ndim=2),
            KernelArgumentT(name="s", type="float32", valueSize=4)])],
        moduleDigests=[ModuleDigestT(binaryFilename="wp___main___0123456.sm86.ptx", sha256=list(range(32)),
                                     size=17)],
    )
    b = flatbuffers.Builder(1024)
    b.Finish(ann.Pack(b), file_identifier=b"WRPK")
    return bytes(b.Output())


def _launch(key, mh, forward=True, base=0):
    params = [m.LaunchParam(1, 2, 0, 40, 8), m.LaunchParam(2, 1, 40, 8, 8), m.LaunchParam(3, 0, 48, 4, 4)]
    relocs = [m.Relocation(0, 1, 16 + base, m.RelocKind.DATA_PTR), m.Relocation(8, -1, 0, m.RelocKind.NULL_PTR),
              m.Relocation(0, -1, 0xDEADBEEF12345678, m.RelocKind.HANDLE)]
    adj = []
    if not forward:
        adj = [m.LaunchParam(4, 1, 52, 40, 8), m.LaunchParam(5, 0, 92, 8, 8), m.LaunchParam(6, 0, 100, 4, 4)]
        relocs = relocs + [m.Relocation(0, 2, 4, m.RelocKind.DATA_PTR)]
    value = bytes((i * 7 + base) & 0xFF for i in range(104 if not forward else 52))
    return m.KernelLaunch((7, 3, 0, 0), 2, 21, 21, 65535, 256, 1024, 1, forward, 2, key, mh, params, adj, relocs,
                          value)


def synthetic_program() -> tuple:
    """``(program, modules)``: a CUDA program holding every op type and every kind of record."""
    recipe = m.CudaCompileRecipe(1, 3, 1, 1, 0, 1, 1)
    mods = [
        m.Module(MOD_HASH, "__main__", "wp___main___0123456.sm86.ptx", 86, "ab" * 32,
                 "wp___main___0123456.sm86.cu", "cd" * 32, m.CudaBinaryKind.PTX, m.CudaFallbackReason.AVAILABLE,
                 recipe),
        m.Module(MOD2_HASH, "other", "wp_other_fedcba9.sm86.cubin", 86),
    ]
    files = {mods[0].binary_filename: b".version 8.0\n.target sm_86\n" * 7,
             mods[0].source_filename: b"// exported source\nextern \"C\" __global__ void k() {}\n",
             mods[1].binary_filename: bytes(range(256)) * 3}
    kernels = [m.Kernel("k", MOD_HASH, "k_0123_cuda_kernel_forward", "k_0123_cuda_kernel_backward", 16, 32, 256),
               m.Kernel("k2", MOD2_HASH, "k2_fedc_cuda_kernel_forward", "", 0, 0, 128)]
    regions = [
        m.Region(1, 4, 64, True, bytes(range(64))),
        m.Region(2, 1, 100, False),
        m.Region(3, 12, 48, True, bytes(range(100, 148))),
        m.Region(4, 4, 24, True, bytes(24)),
        m.Region(5, 8, 56, True, b"\xff" * 56),
        m.Region(7, 1, 0, True, b""),
        m.Region(9, 16, 1 << 20, False),
    ]
    ops = [
        _launch("k", MOD_HASH),
        _launch("k", MOD_HASH, forward=False, base=3),
        m.MemcpyH2D(1, 8, b"hello, world"),
        m.MemcpyD2D(2, 1, 16, 4, 32),
        m.Memset(2, 0xAB, 4, 96),
        m.Alloc(9, 1 << 20),
        m.If(4, 0, [m.Memset(2, -1, 0, 8), _launch("k2", MOD2_HASH, base=5)],
             [m.While(4, 4, [m.Memtile(1, 0, 16, b"\x01\x02\x03\x04"), m.If(4, 8, [], [m.Alloc(2, 5)])])]),
        m.While(4, 12, [_launch("k2", MOD2_HASH, base=9)]),
        m.Scan(2, 1, 0, 0, 16, 4, 4, 1, m.ApicScalarType.FLOAT32, True),
        m.Memtile(5, 8, 6, b"\x00\x00\x80\x3f\x00\x00\x00\x40"),
        m.SegmentedSort(1, 2, 3, 4, 0, 8, 16, 24, 8, 2, m.ApicScalarType.INT32),
        m.RadixSort(1, 2, 0, 64, 8, 0, 32, 4, m.ApicScalarType.UINT32),
        m.RunlengthEncode(1, 2, 3, 4, 0, 4, 8, 12, 16),
        m.BsrFromTriplets(2, 4, 3, 3, 9, True, 0xFFFFFFFF, 1, 2, 3, 4, 5, 1, 2, 3, 4, -1, 8, 16, 24, 32, 40, 48,
                          56, 64, 72, 0),
        m.BsrTranspose(3, 3, 9, 1, 2, 3, 4, 5, 1, 2, 3, 8, 16, 24, 32, 40, 48, 56, 64, (0, 3, 6, 9)),
        m.BsrTranspose(3, 3, 9, 1, -1, 3, 4, -1, 1, 2, -1, 0, 0, 0, 0, 0, 0, 0, 0, ()),
        m.Reduction(1, -1, 2, 16, 0, 0, 8, 4, 0, 1, 1, m.ApicScalarType.FLOAT64),
        m.Reduction(1, 3, 2, 16, 0, 4, 8, 4, 4, 3, 2, m.ApicScalarType.FLOAT32),
        m.BvhRefit(0x7FFF00001234, -1),
        m.BvhRebuild(0x7FFF00005678, 2),
        m.HashGridUpdate(0x7FFF00009ABC, 0.125, 3, 4, 0, 0, 4, 12, 4, 1, True),
        m.Memset(1, 0, (1 << 64) - 1, 0),
    ]
    prog = m.Program(
        format_version=18, warp_version="1.19.0", device_type=m.DeviceType.CUDA, target_arch=86,
        modules=mods, kernels=kernels,
        bindings=[m.Binding("x", 1), m.Binding("out", 2), m.Binding("ünïcode ✓", 5)],
        meshes=[m.Mesh(4, 2, True, 0, 1, 3, 4, 0, 0xDEADBEEF12345678),
                m.Mesh(3, 1, False, 0, 4, 3, 4, 5, 0x1234)],
        pointer_locations=[m.PointerLocation(5, 8, 16, 3)],
        regions=regions, ops=ops, annotations=annotations_bytes())
    return prog, files
