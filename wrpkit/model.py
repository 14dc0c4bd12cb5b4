"""The typed model of a captured Warp program.

Every class here mirrors one table of ``schema/wrp.fbs`` field for field, with
the same names, so that the WRP1 codec (:mod:`wrpkit.formats.wrp1`), the FlatBuffers
codec (:mod:`wrpkit.formats.wrpk`) and the JSON form (:mod:`wrpkit.formats.jsonform`) are
plain mappings of one model.  The model holds content only: where a record
was found in a file is kept in ``at`` (not compared, not serialized) so that
tools can point at byte offsets.

Large byte fields (``Region.data``, ``Module.binary``) may be zero-copy
``memoryview`` slices of a memory-mapped file; nothing here copies them.

The model is one namespace: the program and its tables are defined here, the operations and the
op table in :mod:`wrpkit.ops`, the byte-length vocabulary of the op table in
:mod:`wrpkit.region_lengths` and Warp's enumerations in :mod:`wrpkit.apic_types`, all of them
re-exported here (``from wrpkit import model as m; m.KernelLaunch``).  The roles of bindings are
:mod:`wrpkit.binding_roles`.
"""

from __future__ import annotations

from typing import Optional

from .records import field, record
from .apic_types import *  # noqa: F403  (re-exported: the model is one namespace)
from .apic_types import CudaBinaryKind, CudaFallbackReason, DeviceType, OpType
from .ops import *  # noqa: F403
from .ops import Bytes, KernelLaunch, walk_ops
from .region_lengths import *  # noqa: F403


@record(slots=True)
class CudaCompileRecipe:
    """NVRTC options of a CUDA module; all zero for CPU modules."""

    debug: int = 0
    optimization_level: int = 0
    verify_fp: int = 0
    fast_math: int = 0
    fuse_fp: int = 0
    lineinfo: int = 0
    arch_suffix: int = 0


@record(slots=True)
class Module:
    """One compiled Warp module (a file in ``<stem>_modules/``)."""

    module_hash: str
    module_name: str
    binary_filename: str
    target_arch: int = 0
    binary_digest: str = ""
    source_filename: str = ""
    source_digest: str = ""
    binary_kind: int = CudaBinaryKind.NONE
    fallback_reason: int = CudaFallbackReason.SOURCE_UNAVAILABLE
    recipe: CudaCompileRecipe = field(default_factory=CudaCompileRecipe)
    #: The binary's bytes when the container carries them (``.wrpk``, JSON),
    #: else None: a ``.wrp`` keeps them in ``<stem>_modules/``.
    binary: Optional[Bytes] = field(default=None, compare=False, repr=False)
    #: The ``.cu`` source's bytes, when carried and ``source_filename`` is set.
    source: Optional[Bytes] = field(default=None, compare=False, repr=False)


@record(slots=True)
class Kernel:
    """A kernel that launches in the graph; (module_hash, kernel_key) is unique."""

    kernel_key: str
    module_hash: str
    forward_name: str
    backward_name: str = ""
    forward_smem_bytes: int = 0
    backward_smem_bytes: int = 0
    block_dim: int = 1


@record(slots=True)
class Binding:
    """A named graph parameter; it always covers a whole region."""

    name: str
    region_id: int


@record(slots=True)
class Mesh:
    """A ``wp.Mesh`` rebuilt at load from regions (``APICMeshRecord``)."""

    num_points: int
    num_tris: int
    support_winding_number: bool
    bvh_constructor: int
    bvh_leaf_size: int
    points_region_id: int
    indices_region_id: int
    velocities_region_id: int
    original_ptr: int


@record(slots=True)
class PointerLocation:
    """``count`` 8-byte handle slots at ``offset + i * stride`` in a region."""

    region_id: int
    offset: int
    stride: int
    count: int


@record(slots=True)
class Region:
    """One base allocation; ``data`` holds its initial bytes when present."""

    region_id: int
    element_size: int
    size: int
    has_initial_data: bool
    data: Optional[Bytes] = field(default=None, compare=False, repr=False)
    at: int = field(default=-1, compare=False, repr=False)


@record(slots=True)
class Program:
    """A captured Warp program: everything a ``.wrp`` file holds.

    ``annotations`` keeps wrpkit's extra section (an ``Annotations``
    FlatBuffer) as raw bytes so that round trips stay byte-identical; use
    :func:`wrpkit.formats.annotations.read_annotations` to read it.
    """

    format_version: int
    warp_version: str
    device_type: int
    target_arch: int
    modules: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    bindings: list = field(default_factory=list)
    meshes: list = field(default_factory=list)
    pointer_locations: list = field(default_factory=list)
    regions: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    annotations: bytes = b""
    #: Answers derived from the fields, kept with the program they describe (``checks/effects``'
    #: region sizes and kernel signatures): a module-level cache keyed by ``id()`` held every
    #: program's regions, and so its data, alive. Not an init field: ``records.replace`` starts empty.
    _derived: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def device(self) -> str:
        """``"cpu"`` or ``"cuda"``."""
        return "cpu" if self.device_type == DeviceType.CPU else "cuda"

    def region(self, region_id: int) -> Optional[Region]:
        """The region with this id, or None."""
        for r in self.regions:
            if r.region_id == region_id:
                return r
        return None

    def region_map(self) -> dict:
        """``{region_id: Region}``."""
        return {r.region_id: r for r in self.regions}

    def binding_map(self) -> dict:
        """``{name: region_id}``, one entry per binding name, in first-written order.

        A name written more than once (an in-place binding, or a graph that
        ``capture_save`` saved twice) resolves as Warp's loader resolves it:
        the last record wins (``graph->bindings[name] = region_id`` in
        ``apic.cpp``).
        """
        out: dict = {}
        for b in self.bindings:
            out[b.name] = b.region_id
        return out

    def resolved_bindings(self) -> list:
        """One :class:`Binding` per name, in first-written order, each with the region Warp's loader uses."""
        return [Binding(n, r) for n, r in self.binding_map().items()]

    def required_module_files(self) -> list:
        """The module files Warp's loader needs, in first-use order.

        On CPU, the binaries of the modules the kernels are in (Warp loads
        only those); on CUDA, every module's binary.  Exported ``.cu``
        sources are never required: they serve only Warp's compile fallback.
        wrp-replay applies the same rule (``required_module_files`` in
        native/src/module_files.cpp).
        """
        names: list = []
        if self.device_type == DeviceType.CPU:
            by_hash = {mod.module_hash: mod for mod in self.modules}
            for k in self.kernels:
                mod = by_hash.get(k.module_hash)
                if mod is not None and mod.binary_filename not in names:
                    names.append(mod.binary_filename)
        else:
            for mod in self.modules:
                if mod.binary_filename not in names:
                    names.append(mod.binary_filename)
        return names

    def optional_module_files(self) -> list:
        """Files a loader passes to Warp when present but does not require:
        the exported ``.cu`` sources of a CUDA capture (for Warp's compile
        fallback).  None on CPU."""
        if self.device_type == DeviceType.CPU:
            return []
        return [mod.source_filename for mod in self.modules if mod.source_filename]

    def op_counts(self) -> dict:
        """Count of each op name over all nesting depths, in op-number order."""
        counts: dict = {}
        for _, op in walk_ops(self.ops):
            counts[op.op_type] = counts.get(op.op_type, 0) + 1
        return {OpType(k).name: counts[k] for k in sorted(counts)}

    def launch_counts(self) -> dict:
        """``{(module_hash, kernel_key): launches}`` over all nesting depths."""
        counts: dict = {}
        for _, op in walk_ops(self.ops):
            if isinstance(op, KernelLaunch):
                key = (op.module_hash, op.kernel_key)
                counts[key] = counts.get(key, 0) + 1
        return counts
