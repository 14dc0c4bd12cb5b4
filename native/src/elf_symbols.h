// elf_symbols.h -- structural check of a CPU module object and its symbols.
//
// CPU modules are ELF64 relocatable objects that warp-clang links in memory.
// Before an object is handed to the JIT, its section table, symbol table and
// relocation tables are bounds-checked here, and every kernel symbol the graph
// will look up must be a function DEFINED in this object (not merely
// referenced), so a wrong or tampered module fails with a clear message
// instead of inside LLVM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

namespace wrp {

struct ElfSymbols {
    std::set<std::string> defined_functions;  // global or weak STT_FUNC in an executable section
};

// `display` names the file in messages.  Throws wrp::Error(WRP_ERR_INVALID_FILE).
ElfSymbols read_elf_symbols(const uint8_t* data, size_t size, const std::string& display);

}  // namespace wrp
