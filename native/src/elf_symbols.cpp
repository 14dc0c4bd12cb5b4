// elf_symbols.cpp -- see elf_symbols.h.  Only what a relocatable object needs
// is accepted: ELF64, little-endian, ET_REL, this host's machine type.
#include "elf_symbols.h"

#include <cstdarg>
#include <vector>

#include "byte_reader.h"
#include "checked_math.h"
#include "error.h"

namespace wrp {
namespace {

#if defined(__x86_64__)
constexpr uint16_t kHostMachine = 62;  // EM_X86_64
#elif defined(__aarch64__)
constexpr uint16_t kHostMachine = 183;  // EM_AARCH64
#else
#error "unsupported host architecture for Warp CPU modules"
#endif

constexpr uint32_t kShtSymtab = 2, kShtStrtab = 3, kShtRela = 4, kShtNobits = 8, kShtRel = 9;
constexpr uint64_t kShfExecinstr = 0x4;
constexpr uint16_t kShnLoreserve = 0xff00;
constexpr uint64_t kMaxSymbols = 1u << 20;

struct SectionHeader {
    uint32_t type;
    uint64_t flags;
    uint64_t offset;
    uint64_t size;
    uint32_t link;
    uint32_t info;
    uint64_t entsize;
};

class ElfReader {
public:
    ElfReader(const uint8_t* data, size_t size, const std::string& display)
        : d_(data)
        , size_(size)
        , display_(display)
    {
    }

    [[noreturn]] void bad(const char* fmt, ...) const __attribute__((format(printf, 2, 3)))
    {
        va_list args;
        va_start(args, fmt);
        std::string what = vformat(fmt, args);
        va_end(args);
        fail(WRP_ERR_INVALID_FILE, "module file %s is not a valid CPU module object: %s", display_.c_str(), what.c_str());
    }

    ElfSymbols read()
    {
        if (size_ < 64 || d_[0] != 0x7f || d_[1] != 'E' || d_[2] != 'L' || d_[3] != 'F')
            bad("no ELF header");
        if (d_[4] != 2 || d_[5] != 1 || d_[6] != 1)
            bad("not a little-endian ELF64 version 1 object");
        if (load<uint16_t>(d_ + 16) != 1)
            bad("ELF type %u is not a relocatable object (ET_REL)", load<uint16_t>(d_ + 16));
        if (load<uint16_t>(d_ + 18) != kHostMachine)
            bad("machine type %u does not match this host (%u)", load<uint16_t>(d_ + 18), kHostMachine);
        uint64_t shoff = load<uint64_t>(d_ + 40);
        uint16_t shentsize = load<uint16_t>(d_ + 58);
        shnum_ = load<uint16_t>(d_ + 60);
        if (shentsize != 64 || shnum_ == 0 || !range_fits(shoff, uint64_t(shnum_) * 64, size_))
            bad("section header table (offset %llu, %u entries of %u bytes) does not fit in %zu bytes",
                static_cast<unsigned long long>(shoff), shnum_, shentsize, size_);
        if (load<uint16_t>(d_ + 62) >= shnum_)
            bad("section name table index is out of range");
        for (uint16_t i = 0; i < shnum_; i++) {
            const uint8_t* h = d_ + shoff + 64 * uint64_t(i);
            SectionHeader s{load<uint32_t>(h + 4), load<uint64_t>(h + 8), load<uint64_t>(h + 24), load<uint64_t>(h + 32),
                            load<uint32_t>(h + 40), load<uint32_t>(h + 44), load<uint64_t>(h + 56)};
            if (s.type != kShtNobits && !range_fits(s.offset, s.size, size_))
                bad("section %u (offset %llu, %llu bytes) runs past the end of the file", i,
                    static_cast<unsigned long long>(s.offset), static_cast<unsigned long long>(s.size));
            if (s.link >= shnum_)
                bad("section %u links to section %u of %u", i, s.link, shnum_);
            sections_.push_back(s);
        }

        int symtab = -1;
        for (uint16_t i = 0; i < shnum_; i++) {
            if (sections_[i].type != kShtSymtab)
                continue;
            if (symtab >= 0)
                bad("more than one symbol table");
            symtab = i;
        }
        if (symtab < 0)
            bad("no symbol table");
        const SectionHeader& st = sections_[symtab];
        if (st.entsize != 24 || st.size % 24 != 0 || st.size / 24 > kMaxSymbols)
            bad("symbol table has entry size %llu and %llu bytes", static_cast<unsigned long long>(st.entsize),
                static_cast<unsigned long long>(st.size));
        const SectionHeader& strtab = sections_[st.link];
        if (strtab.type != kShtStrtab || strtab.size == 0 || d_[strtab.offset + strtab.size - 1] != 0)
            bad("symbol names are not a NUL-terminated string table");
        uint64_t num_symbols = st.size / 24;
        check_relocations(symtab, num_symbols);

        ElfSymbols out;
        for (uint64_t k = 0; k < num_symbols; k++) {
            const uint8_t* sym = d_ + st.offset + 24 * k;
            uint32_t name = load<uint32_t>(sym);
            uint8_t info = sym[4];
            uint16_t shndx = load<uint16_t>(sym + 6);
            uint64_t value = load<uint64_t>(sym + 8), sym_size = load<uint64_t>(sym + 16);
            if (name >= strtab.size)
                bad("symbol %llu has a name offset outside the string table", static_cast<unsigned long long>(k));
            if (shndx != 0 && shndx < kShnLoreserve && shndx >= shnum_)
                bad("symbol %llu refers to section %u of %u", static_cast<unsigned long long>(k), shndx, shnum_);
            bool function = (info & 0xf) == 2;
            bool global = (info >> 4) == 1 || (info >> 4) == 2;
            if (!function || !global || shndx == 0 || shndx >= kShnLoreserve)
                continue;
            const SectionHeader& sec = sections_[shndx];
            if (!(sec.flags & kShfExecinstr) || !range_fits(value, sym_size, sec.size))
                bad("function symbol %llu lies outside its executable section", static_cast<unsigned long long>(k));
            out.defined_functions.insert(reinterpret_cast<const char*>(d_ + strtab.offset + name));
        }
        return out;
    }

private:
    // Relocation entries must name existing symbols and sections, so the JIT
    // linker never indexes past its tables.
    void check_relocations(int symtab, uint64_t num_symbols) const
    {
        for (uint16_t i = 0; i < shnum_; i++) {
            const SectionHeader& s = sections_[i];
            if (s.type != kShtRela && s.type != kShtRel)
                continue;
            uint64_t entsize = s.type == kShtRela ? 24 : 16;
            if (s.entsize != entsize || s.size % entsize != 0)
                bad("relocation section %u has entry size %llu", i, static_cast<unsigned long long>(s.entsize));
            if (s.link != uint32_t(symtab) || s.info >= shnum_)
                bad("relocation section %u does not refer to the symbol table and a valid section", i);
            for (uint64_t off = 0; off < s.size; off += entsize) {
                uint64_t r_info = load<uint64_t>(d_ + s.offset + off + 8);
                if ((r_info >> 32) >= num_symbols)
                    bad("relocation %llu of section %u names symbol %llu of %llu", static_cast<unsigned long long>(off / entsize),
                        i, static_cast<unsigned long long>(r_info >> 32), static_cast<unsigned long long>(num_symbols));
            }
        }
    }

    const uint8_t* d_;
    size_t size_;
    const std::string& display_;
    uint16_t shnum_ = 0;
    std::vector<SectionHeader> sections_;
};

}  // namespace

ElfSymbols read_elf_symbols(const uint8_t* data, size_t size, const std::string& display)
{
    return ElfReader(data, size, display).read();
}

}  // namespace wrp
