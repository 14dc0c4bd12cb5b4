"""A small, bounds-checked reader of ELF64 relocatable objects (Warp's CPU modules).

wrpkit uses it to pin code, not discover it: before a CPU module is handed
to Warp's JIT, every kernel symbol the graph names must be *defined* in that
module's own object file, and a kernel name that would resolve to a C library
or process symbol (``free``, ``printf``) is refused.  Only the ELF header, the
section headers, ``.symtab`` and its string table are read; every offset and
size is checked against the file before use.
"""

from __future__ import annotations

import struct

from ..records import record
from ..errors import WrpModuleError

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")  # ELF64 header (64 bytes)
_SHDR = struct.Struct("<IIQQQQIIQQ")  # ELF64 section header (64 bytes)
_SYM = struct.Struct("<IBBHQQ")  # ELF64 symbol (24 bytes)

SHT_SYMTAB = 2
SHN_UNDEF = 0
EM_NAMES = {62: "x86_64", 183: "aarch64"}


@record(frozen=True)
class ObjectInfo:
    """What wrpkit needs to know about one object file.

    Attributes:
        machine: ``"x86_64"``, ``"aarch64"`` or ``"em<N>"``.
        defined: Names of symbols defined in the object (functions and data).
        undefined: Names the object imports.
    """

    machine: str
    defined: frozenset
    undefined: frozenset


def read_object(data, name: str = "object") -> ObjectInfo:
    """Read the machine and symbol table of an ELF64 little-endian relocatable object.

    Args:
        data: The file's bytes.
        name: The file name, for messages.

    Raises:
        WrpModuleError: The bytes are not such an object, or a table lies
            outside the file.
    """
    buf = memoryview(data)
    size = len(buf)

    def bad(msg):
        return WrpModuleError(f"module file {name!r} is not a valid ELF64 object: {msg}",
                              hint="The modules folder is corrupted or was not written by Warp; recapture.")

    if size < _EHDR.size:
        raise bad("too small for an ELF header")
    (ident, e_type, machine, _ver, _entry, _phoff, shoff, _flags, ehsize, _phentsize, _phnum, shentsize,
     shnum, _shstrndx) = _EHDR.unpack_from(buf, 0)
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
        raise bad("not a 64-bit little-endian ELF file")
    if e_type != 1:
        raise bad(f"ELF type {e_type} is not a relocatable object (1)")
    if shentsize != _SHDR.size or shnum == 0 or shnum > 65535 or shoff > size or shnum * _SHDR.size > size - shoff:
        raise bad("section header table lies outside the file")
    sections = [_SHDR.unpack_from(buf, shoff + i * _SHDR.size) for i in range(shnum)]
    defined, undefined = set(), set()
    for sh in sections:
        if sh[1] != SHT_SYMTAB:
            continue
        off, length, link, entsize = sh[4], sh[5], sh[6], sh[9]
        if entsize != _SYM.size or off > size or length > size - off or length % _SYM.size or link >= shnum:
            raise bad("symbol table lies outside the file")
        str_off, str_len = sections[link][4], sections[link][5]
        if str_off > size or str_len > size - str_off:
            raise bad("string table lies outside the file")
        strtab = bytes(buf[str_off:str_off + str_len])
        for i in range(1, length // _SYM.size):
            st_name, info, _other, shndx, _value, _size = _SYM.unpack_from(buf, off + i * _SYM.size)
            if st_name >= len(strtab):
                raise bad("symbol name lies outside the string table")
            end = strtab.find(b"\0", st_name)
            sym = strtab[st_name:end if end >= 0 else len(strtab)].decode("utf-8", "replace")
            if not sym:
                continue
            (undefined if shndx == SHN_UNDEF else defined).add(sym)
    return ObjectInfo(EM_NAMES.get(machine, f"em{machine}"), frozenset(defined), frozenset(undefined))


def symbol_bytes(data, symbol: str, name: str = "object") -> tuple:
    """Where a defined symbol's bytes (a function's machine code) lie in an ELF64 object.

    Args:
        data: The object's bytes.
        symbol: The symbol name, e.g. ``"k_scale_1a2b3c4d_cpu_forward"``.
        name: The file name, for messages.

    Returns:
        ``(file offset, size)`` of the symbol inside its section.

    Raises:
        WrpModuleError: The bytes are not an ELF64 object, the symbol is not
            defined in it, or its range lies outside its section.
    """
    buf = memoryview(data)
    read_object(buf, name)  # every header and table checked
    shoff, shnum = _EHDR.unpack_from(buf, 0)[6], _EHDR.unpack_from(buf, 0)[12]
    sections = [_SHDR.unpack_from(buf, shoff + i * _SHDR.size) for i in range(shnum)]
    for sh in sections:
        if sh[1] != SHT_SYMTAB:
            continue
        off, length, link = sh[4], sh[5], sh[6]
        strtab = bytes(buf[sections[link][4]:sections[link][4] + sections[link][5]])
        want = symbol.encode()
        for i in range(1, length // _SYM.size):
            st_name, _info, _other, shndx, value, sym_size = _SYM.unpack_from(buf, off + i * _SYM.size)
            end = strtab.find(b"\0", st_name)
            if strtab[st_name:end if end >= 0 else len(strtab)] != want or shndx == SHN_UNDEF or shndx >= shnum:
                continue
            sec_off, sec_size = sections[shndx][4], sections[shndx][5]
            if value > sec_size or sym_size > sec_size - value or sec_off + sec_size > len(buf):
                break
            return sec_off + value, sym_size
    raise WrpModuleError(f"symbol {symbol!r} is not defined in module file {name!r}")


#: Names a kernel symbol may never take: resolving them would call into the C
#: library or the process instead of the module's own code.
FORBIDDEN_SYMBOLS = frozenset("""
free malloc calloc realloc printf fprintf sprintf snprintf puts system exit abort memcpy memset memmove strcpy
strcat strlen dlopen dlsym open close read write fork execve execv execl popen mmap munmap mprotect
""".split())


def check_kernel_symbols(info: ObjectInfo, symbols, name: str) -> list:
    """Problems with the kernel symbols a graph expects from one module object.

    Args:
        info: The object's symbol table.
        symbols: Symbol names the graph's kernels name (forward and backward).
        name: The object file name, for messages.

    Returns:
        One message per symbol that is forbidden or not defined in the object.
    """
    out = []
    for sym in symbols:
        if not sym:
            continue
        if sym in FORBIDDEN_SYMBOLS or not (sym.endswith("_forward") or sym.endswith("_backward")):
            out.append(f"kernel symbol {sym!r} is not a Warp kernel entry point (it could resolve to a C library "
                       f"or process function)")
        elif sym not in info.defined:
            out.append(f"kernel symbol {sym!r} is not defined in module file {name!r}")
    return out
