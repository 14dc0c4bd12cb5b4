// module_files.h -- the compiled module files a graph needs, read and checked.
//
// Only the files the graph names are read: for a CPU graph, the objects of
// the modules its kernels live in; for a CUDA graph, every module record
// (Warp's CUDA loader loads them all).  Each must be a non-empty regular file
// (not a symbolic link: its name comes from inside the file) in the modules
// directory, match the SHA-256 wrpkit recorded when annotations carry one,
// and, for CPU, define every kernel symbol the graph will look up in it.
// Each is read once into memory; the checks run on those bytes and exactly
// those bytes go to Warp, so a hard link (or a later write to the file)
// cannot change what was checked.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mapped_file.h"
#include "wrp1_model.h"
#include "wrp_replay.h"
#include "wrpk_reader.h"

namespace wrp {

struct ModuleImage {
    std::string filename;
    const uint8_t* data = nullptr;
    size_t size = 0;
    std::vector<uint8_t> owned;  // owns `data` when read from disk
};

// File names (binary_filename) the graph needs, in first-use order.
std::vector<std::string> required_module_files(const Wrp1Graph& g);

// `<stem>_modules/` for a .wrp path (stem = the path without ".wrp").
std::string modules_dir_for(const std::string& wrp_path);

// The modules directory of the .wrp the user named: `<stem>_modules/` beside
// it; for a symbolic link without one beside it, the one beside its target.
std::string find_modules_dir(const std::string& wrp_path);

struct SignedModules;

// `modules_dir` "" = find_modules_dir(wrp_path).  `verified` (a signed capture): the module files
// the signature check read and hashed; a needed file is taken from there (moved out, not read
// again), and one that was not there when the signature was checked is refused
// (WRP_ERR_UNTRUSTED, "added after signing").
std::vector<ModuleImage> read_module_files(const std::string& wrp_path, const std::string& modules_dir,
                                           const Wrp1Graph& g, bool checks, SignedModules* verified = nullptr);
std::vector<ModuleImage> select_module_bytes(const wrp_module_bytes* modules, size_t count, const Wrp1Graph& g,
                                             bool checks);

// The binaries a bundle carries (pointing into its bytes, not copied); a
// module the bundle lacks may come from `extra` (wrp_program_open_memory).
std::vector<ModuleImage> select_bundle_modules(const std::vector<WrpkModule>& bundle, const wrp_module_bytes* extra,
                                               size_t num_extra, const Wrp1Graph& g, bool checks);

}  // namespace wrp
