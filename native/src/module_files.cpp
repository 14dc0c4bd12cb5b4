// module_files.cpp -- see module_files.h.
#include "module_files.h"

#include <cstring>
#include <unistd.h>

#include "elf_symbols.h"
#include "error.h"
#include "sha256.h"

namespace wrp {
namespace {

constexpr uint64_t kMaxModuleBytes = uint64_t(1) << 30;
const char* const kRestore = "Keep the <stem>_modules/ directory that capture_save wrote beside the .wrp, or recapture.";

void verify_module(const ModuleImage& m, const Wrp1Graph& g, const std::string& display)
{
    if (const ModuleDigest* d = g.find_digest(m.filename)) {
        uint8_t actual[32];
        sha256(m.data, m.size, actual);
        if (d->size != m.size || std::memcmp(actual, d->sha256, 32) != 0)
            fail(WRP_ERR_INVALID_FILE,
                 "module file %s (%zu bytes, SHA-256 %s) does not match the %llu bytes and SHA-256 %s recorded in the "
                 "file's annotations: it was modified or belongs to another capture",
                 display.c_str(), m.size, to_hex(actual, 32).c_str(), static_cast<unsigned long long>(d->size),
                 to_hex(d->sha256, 32).c_str());
    }
    if (g.device != Device::Cpu)
        return;
    ElfSymbols symbols = read_elf_symbols(m.data, m.size, display);
    for (const KernelRecord& k : g.kernels) {
        const ModuleRecord* mod = g.find_module(k.module_hash);
        if (!mod || mod->binary_filename != m.filename)
            continue;
        for (const std::string* name : {&k.forward_name, &k.backward_name}) {
            if (name == &k.backward_name && !k.backward_used)
                continue;  // never looked up: Warp replays a module without it
            if (!name->empty() && !symbols.defined_functions.count(*name))
                fail(WRP_ERR_INVALID_FILE,
                     "module file %s does not define symbol %s of kernel %s (recorded at byte %llu): the module does "
                     "not belong to this capture",
                     display.c_str(), name->c_str(), quoted(k.key).c_str(), static_cast<unsigned long long>(k.at));
        }
    }
}

}  // namespace

std::vector<std::string> required_module_files(const Wrp1Graph& g)
{
    std::vector<std::string> files;
    auto add = [&](const std::string& f) {
        for (const std::string& have : files)
            if (have == f)
                return;
        files.push_back(f);
    };
    if (g.device == Device::Cpu) {
        for (const KernelRecord& k : g.kernels)
            if (const ModuleRecord* m = g.find_module(k.module_hash))
                add(m->binary_filename);
    } else {
        for (const ModuleRecord& m : g.modules)
            add(m.binary_filename);
    }
    return files;
}

std::string modules_dir_for(const std::string& wrp_path)
{
    std::string stem = wrp_path;
    if (stem.size() > 4 && stem.compare(stem.size() - 4, 4, ".wrp") == 0)
        stem.resize(stem.size() - 4);
    return stem + "_modules";
}

std::vector<ModuleImage> read_module_files(const std::string& wrp_path, const Wrp1Graph& g, bool checks)
{
    std::vector<std::string> names = required_module_files(g);
    std::vector<ModuleImage> out;
    if (names.empty())
        return out;
    std::string dir = modules_dir_for(wrp_path);
    std::string list;
    for (const std::string& n : names)
        list += (list.empty() ? "" : ", ") + printable(n);
    int dirfd = open_directory(dir, "modules directory",
                               format("The graph needs %zu module file(s) there: %s. %s", names.size(), list.c_str(), kRestore));
    try {
        for (const std::string& name : names) {
            std::string display = dir + "/" + printable(name);
            ModuleImage m;
            m.filename = name;
            try {
                m.mapping = MappedFile::open_at(dirfd, name, display, kMaxModuleBytes, "module file");
            } catch (const Error& e) {
                std::string msg = e.what();
                if (msg.find("No such file") != std::string::npos)
                    msg = "module file " + display + " is missing";
                throw Error(e.status(), msg + ". " + kRestore);
            }
            m.data = m.mapping.data();
            m.size = m.mapping.size();
            if (checks)
                verify_module(m, g, display);
            out.push_back(std::move(m));
        }
    } catch (...) {
        close(dirfd);
        throw;
    }
    close(dirfd);
    return out;
}

namespace {

const wrp_module_bytes* find_module_bytes(const wrp_module_bytes* modules, size_t count, const std::string& name)
{
    const wrp_module_bytes* found = nullptr;
    for (size_t i = 0; i < count; i++) {
        if (!modules[i].filename)
            fail(WRP_ERR_INVALID_ARGUMENT, "module entry %zu has a NULL filename", i);
        if (name == modules[i].filename) {
            if (found)
                fail(WRP_ERR_INVALID_ARGUMENT, "module %s is given twice", quoted(name).c_str());
            found = &modules[i];
        }
    }
    return found;
}

}  // namespace

std::vector<ModuleImage> select_bundle_modules(const std::vector<WrpkModule>& bundle, const wrp_module_bytes* extra,
                                               size_t num_extra, const Wrp1Graph& g, bool checks)
{
    if (num_extra > 0 && !extra)
        fail(WRP_ERR_INVALID_ARGUMENT, "module list is NULL but num_modules is %zu", num_extra);
    std::vector<ModuleImage> out;
    for (const std::string& name : required_module_files(g)) {
        const WrpkModule* found = nullptr;
        for (const WrpkModule& m : bundle) {
            if (m.binary_filename != name || !m.has_binary)
                continue;
            if (!found)
                found = &m;
            else if (found->size != m.size || (m.size && std::memcmp(found->data, m.data, m.size) != 0))
                fail(WRP_ERR_INVALID_FILE, "the bundle holds two different binaries for module file %s",
                     quoted(name).c_str());
        }
        ModuleImage m;
        m.filename = name;
        std::string display;
        if (found) {
            m.data = found->data;
            m.size = found->size;
            display = quoted(name) + " (in the bundle)";
        } else {
            const wrp_module_bytes* given = extra ? find_module_bytes(extra, num_extra, name) : nullptr;
            if (!given)
                fail(WRP_ERR_INVALID_FILE,
                     "module file %s is not in the bundle (it was written without module binaries); the graph needs "
                     "it. Rebuild the bundle from the capture with `wrp convert X.wrp X.wrpk`",
                     quoted(name).c_str());
            m.data = static_cast<const uint8_t*>(given->data);
            m.size = given->data ? given->size : 0;
            display = quoted(name) + " (from memory)";
        }
        if (m.size == 0)
            fail(WRP_ERR_INVALID_FILE, "module file %s is empty", display.c_str());
        if (checks)
            verify_module(m, g, display);
        out.push_back(std::move(m));
    }
    return out;
}

std::vector<ModuleImage> select_module_bytes(const wrp_module_bytes* modules, size_t count, const Wrp1Graph& g,
                                             bool checks)
{
    if (count > 0 && !modules)
        fail(WRP_ERR_INVALID_ARGUMENT, "module list is NULL but num_modules is %zu", count);
    std::vector<ModuleImage> out;
    for (const std::string& name : required_module_files(g)) {
        const wrp_module_bytes* found = find_module_bytes(modules, count, name);
        std::string display = quoted(name) + " (from memory)";
        if (!found)
            fail(WRP_ERR_INVALID_FILE, "module file %s was not provided; the graph needs it", quoted(name).c_str());
        if (found->size == 0 || !found->data)
            fail(WRP_ERR_INVALID_FILE, "module file %s is empty", display.c_str());
        ModuleImage m;
        m.filename = name;
        m.data = static_cast<const uint8_t*>(found->data);
        m.size = found->size;
        if (checks)
            verify_module(m, g, display);
        out.push_back(std::move(m));
    }
    return out;
}

}  // namespace wrp
