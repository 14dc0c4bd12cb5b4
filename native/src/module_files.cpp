// module_files.cpp -- see module_files.h.
#include "module_files.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "elf_symbols.h"
#include "error.h"
#include "sha256.h"
#include "signature.h"

namespace wrp {
namespace {

constexpr uint64_t kMaxModuleBytes = uint64_t(1) << 30;
const char* const kRestore =
    "Keep the <stem>_modules/ directory that capture_save wrote beside the .wrp (or pass --modules-dir DIR), or "
    "recapture.";

void verify_module(const ModuleImage& m, const Wrp1Graph& g, const std::string& display)
{
    if (const ModuleDigest* d = g.find_digest(m.filename)) {
        uint8_t actual[32];
        sha256(m.data, m.size, actual);
        if (d->size != m.size || std::memcmp(actual, d->sha256, 32) != 0)
            fail(WRP_ERR_INVALID_FILE,
                 "module file %s (%zu bytes, SHA-256 %s) does not match the %llu bytes and SHA-256 %s recorded in the "
                 "file's annotations: it was modified or belongs to another capture. Copy the original module "
                 "file from the folder capture_save wrote, or recapture",
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

std::string find_modules_dir(const std::string& wrp_path)
{
    std::string beside = modules_dir_for(wrp_path);
    struct stat st;
    if (stat(beside.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        return beside;
    if (lstat(wrp_path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode))
        return beside;
    char* target = realpath(wrp_path.c_str(), nullptr);
    if (!target)
        return beside;
    std::string other = modules_dir_for(target);
    std::free(target);
    if (stat(other.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        return other;
    return beside;
}

namespace {

// Another `*_modules` directory beside the .wrp holding every needed file: the
// folder of a .wrp that was renamed alone.  "" if none.
std::string sibling_modules_dir(const std::string& wrp_path, const std::string& own,
                                const std::vector<std::string>& names)
{
    size_t slash = wrp_path.rfind('/');
    std::string parent = slash == std::string::npos ? "." : wrp_path.substr(0, slash ? slash : 1);
    DIR* d = opendir(parent.c_str());
    if (!d)
        return "";
    std::string found;
    size_t seen = 0;
    while (dirent* e = readdir(d)) {
        if (++seen > 10000)
            break;
        std::string name = e->d_name;
        if (name.size() <= 8 || name.compare(name.size() - 8, 8, "_modules") != 0)
            continue;
        std::string dir = (parent == "." && slash == std::string::npos ? "" : parent + (parent == "/" ? "" : "/")) + name;
        if (dir == own)
            continue;
        bool all = true;
        for (const std::string& n : names) {
            struct stat st;
            if (n.find('/') != std::string::npos || stat((dir + "/" + n).c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
                all = false;
                break;
            }
        }
        if (all && (found.empty() || dir < found))
            found = dir;
    }
    closedir(d);
    return found;
}

// Read one module file once into memory.  Every refusal says its reason and the fix for that reason.
std::vector<uint8_t> read_module_at(int dirfd, const std::string& name, const std::string& display)
{
    int fd = openat(dirfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT)
            fail(WRP_ERR_INVALID_FILE, "module file %s is missing. %s", display.c_str(), kRestore);
        if (err == ELOOP)
            fail(WRP_ERR_INVALID_FILE,
                 "module file %s is a symbolic link; module file names come from inside the file, so links there "
                 "are not followed. Replace the link with a copy of its target (cp --remove-destination "
                 "\"$(readlink -f %s)\" %s)", display.c_str(), display.c_str(), display.c_str());
        fail_if_resource_limit(err, "open module file " + display);  // ulimit -n: exit 1, in words
        if (err == EACCES || err == EPERM || err == EIO)  // unreadable, not broken: an I/O error (exit 1)
            fail(WRP_ERR_RUNTIME, "cannot read module file %s: %s", display.c_str(), std::strerror(err));
        fail(WRP_ERR_INVALID_FILE, "cannot open module file %s: %s. %s", display.c_str(), std::strerror(err), kRestore);
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        const char* kind = fstat(fd, &st) == 0 ? file_kind(st.st_mode) : "unreadable";
        close(fd);
        fail(WRP_ERR_INVALID_FILE, "module file %s is %s. Replace it with the module file from the folder "
             "capture_save wrote, or recapture", display.c_str(), kind);
    }
    if (st.st_size <= 0) {
        close(fd);
        fail(WRP_ERR_INVALID_FILE, "module file %s is empty (0 bytes). Copy the module file again from where the "
             "capture was made, or recapture", display.c_str());
    }
    if (static_cast<uint64_t>(st.st_size) > kMaxModuleBytes) {
        close(fd);
        fail(WRP_ERR_INVALID_FILE, "module file %s is %llu bytes, larger than the limit of %llu bytes",
             display.c_str(), static_cast<unsigned long long>(st.st_size),
             static_cast<unsigned long long>(kMaxModuleBytes));
    }
    std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < bytes.size()) {
        ssize_t n = read(fd, bytes.data() + got, bytes.size() - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int err = n < 0 ? errno : 0;
            close(fd);
            fail(WRP_ERR_INVALID_FILE, "cannot read module file %s: %s", display.c_str(),
                 err ? std::strerror(err) : "it became shorter while it was read");
        }
        got += static_cast<size_t>(n);
    }
    close(fd);
    return bytes;
}

}  // namespace

std::vector<ModuleImage> read_module_files(const std::string& wrp_path, const std::string& modules_dir,
                                           const Wrp1Graph& g, bool checks, SignedModules* verified)
{
    std::vector<std::string> names = required_module_files(g);
    std::vector<ModuleImage> out;
    if (names.empty())
        return out;
    std::string dir = modules_dir.empty() ? find_modules_dir(wrp_path) : modules_dir;
    std::string list;
    for (const std::string& n : names)
        list += (list.empty() ? "" : ", ") + printable(n);
    std::string fix = format("The graph needs %zu module file(s) there: %s. %s", names.size(), list.c_str(), kRestore);
    struct stat st;
    if (modules_dir.empty() && stat(dir.c_str(), &st) != 0) {
        std::string other = sibling_modules_dir(wrp_path, dir, names);
        if (!other.empty())
            fix = format("%s beside it holds every module file this graph needs (was the .wrp renamed?): pass "
                         "--modules-dir %s, or rename that folder to %s", other.c_str(), other.c_str(), dir.c_str());
    }
    int dirfd = open_directory(dir, "modules directory", fix);
    try {
        for (const std::string& name : names) {
            std::string display = dir + "/" + printable(name);
            ModuleImage m;
            m.filename = name;
            auto hashed = verified ? verified->files.find(name) : decltype(verified->files.begin())();
            if (verified && hashed != verified->files.end()) {
                m.owned = std::move(hashed->second);  // the bytes the signature check hashed, not read again
                verified->files.erase(hashed);
            } else {
                // Not read by the signature check: missing, a symbolic link, over the size limit (each
                // refused here as without a signature), or new since it was checked.
                m.owned = read_module_at(dirfd, name, display);
                if (verified)
                    fail(WRP_ERR_UNTRUSTED, "added after signing: %s%s", verified->resource_prefix.c_str(),
                         printable(name).c_str());
            }
            m.data = m.owned.data();
            m.size = m.owned.size();
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
