// wrp1_validator.h -- parse and validate a whole WRP1 image before Warp sees it.
//
// Every format a Warp release wrote (3, 10, 13-16, 18) is read, each under its
// own rules: the per-format layout (wrp1_layouts.h) selects record sizes,
// launch field offsets, metadata extras and which op types exist.
//
// validate_wrp1() checks the header, the section table, every metadata,
// memory and operation record (sizes exact, pad bytes zero, counts capped,
// nesting bounded) and, unless limits.semantic_checks is false, every cross
// reference: regions used by ops, relocations, bindings, meshes and pointer
// locations exist and the byte ranges fit; launched kernels and their modules
// exist.  The first violation throws wrp::Error(WRP_ERR_INVALID_FILE) whose
// message names the field and its byte offset in the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "wrp1_model.h"

namespace wrp {

Wrp1Graph validate_wrp1(const uint8_t* image, size_t size, const ValidationLimits& limits);

// The operations section, [begin, end) of `image` (internal; wrp1_ops.cpp).
void validate_operations(const uint8_t* image, uint64_t begin, uint64_t end, Wrp1Graph& graph, bool semantic);

// wrpkit's annotations section (internal; annotations.cpp).
void read_annotations(const uint8_t* image, uint64_t begin, uint64_t end, Wrp1Graph& graph);

// True for a name usable as a file in <stem>_modules/: a non-empty plain
// basename with no '/', '\\', ':' or NUL that is not "." or "..".
bool is_plain_basename(const std::string& name);

// True for a C identifier (how Warp names kernel symbols).
bool is_c_identifier(const std::string& s);

// "format 16 (written by Warp 1.18.0)" and the like (wrpkit's describe_format).
std::string describe_format(uint32_t version);

// Why a capture of an older format is not replayed and how to convert it:
// "format 16 (written by Warp 1.18.0): Warp 1.19.0 loads only format 18;
// convert it with `wrp upgrade IN OUT`" (wrpkit's upgrade_message).
std::string upgrade_message(uint32_t version);

}  // namespace wrp
