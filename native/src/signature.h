// signature.h -- signed captures: the checks of schema/SIGNATURE-RULES.md.
//
// A signature is an OpenSSF model-signing (OMS) bundle: a Sigstore bundle
// holding a DSSE envelope whose payload is an in-toto statement listing every
// signed file (name, SHA-256) relative to the capture's folder.  The verdict
// is reached before the capture is decoded and before anything is loaded
// into Warp: wrp_program_open() runs it right after mapping the file, on the
// very bytes it then parses; the module files of a .wrp are read once here,
// and the bytes hashed are handed to the loader (SignedModules), so the
// bytes checked are the bytes loaded.
//
// Verdicts of the rules' steps 1-6 are wrp::Error(WRP_ERR_UNTRUSTED) whose
// message starts with the rules' words ("not signed: ...", "signature
// malformed: ...", "not signed by a trusted key: ...", "not covered by the
// signature: ...", "changed after signing: ...", "removed after signing:
// ...", "added after signing: ..."); a trusted-key path that is missing,
// unreadable or holds no usable key is WRP_ERR_INVALID_ARGUMENT.  Every
// cryptographic operation is OpenSSL's libcrypto; JSON is nlohmann::json,
// parsed without exceptions and type-checked before every use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace wrp {

// The PEM objects of the trusted files, in the order given (files in the
// order given; a directory's *.pem files in byte order of name).
class TrustedKeys {
public:
    TrustedKeys();
    ~TrustedKeys();
    TrustedKeys(TrustedKeys&&) noexcept;
    TrustedKeys& operator=(TrustedKeys&&) noexcept;
    TrustedKeys(const TrustedKeys&) = delete;
    TrustedKeys& operator=(const TrustedKeys&) = delete;

    // Load `paths` (PEM files, or directories whose *.pem files are all
    // loaded).  Throws WRP_ERR_INVALID_ARGUMENT naming the path when one is
    // missing or unreadable, holds a private key, a key that is not EC on
    // P-256, P-384 or P-521, or no public key or certificate at all (other
    // PEM objects, such as EC PARAMETERS, are skipped).  `from_environment`:
    // the paths came from $WRPKIT_TRUSTED_KEYS, which the message then names.
    static TrustedKeys load(const std::vector<std::string>& paths, bool from_environment = false);

    // Number of PEM objects loaded (public keys + certificates).
    size_t count() const;

    struct Impl;
    const Impl& impl() const { return *impl_; }

private:
    std::unique_ptr<Impl> impl_;
};

// What the verifier read of a .wrp's modules folder: each regular file it
// hashed (not a symbolic link, at most 1 GiB), by plain name, so that the
// loader takes exactly these bytes (read_module_files).
struct SignedModules {
    std::string resource_prefix;  // "STEM_modules/"
    std::map<std::string, std::vector<uint8_t>> files;
};

// The capture whose signature is checked.
struct CaptureToVerify {
    std::string path;            // as given (its folder holds the signature and the modules folder)
    const uint8_t* data = nullptr;  // the capture's bytes (the mapping the open goes on with)
    size_t size = 0;
    std::string modules_dir;     // .wrp: "" = <stem>_modules/ as the loader finds it
};

// The paths of $WRPKIT_TRUSTED_KEYS (':'-separated; empty parts skipped);
// none when it is unset or empty.
std::vector<std::string> trusted_keys_from_environment();

// The trusted keys an open of a file asks for: wrp_options.trusted_keys as
// given (a NULL array with a count, or a NULL or empty entry, is
// WRP_ERR_INVALID_ARGUMENT), else $WRPKIT_TRUSTED_KEYS (*from_environment is
// then true).  Empty when neither names any: no signature is required.
std::vector<std::string> requested_trusted_keys(const char* const* given, size_t count, bool* from_environment);

// `DIR/STEM.sig` for a capture path as given (its last suffix replaced by
// ".sig", as Python's Path.with_suffix).
std::string default_signature_path(const std::string& capture_path);

// Steps 1-6 for `capture`, its signature at `signature_path` ("" = the
// default).  `modules` (may be NULL) receives the module files hashed.
void verify_signature(const CaptureToVerify& capture, const TrustedKeys& keys, const std::string& signature_path,
                      SignedModules* modules);

// Steps 2-6 on signature bytes already read (`signature_path` is only named
// in messages).  The fuzz target calls this directly.
void verify_signature_bytes(const CaptureToVerify& capture, const TrustedKeys& keys, const std::string& signature_path,
                            const uint8_t* bundle, size_t bundle_size, SignedModules* modules);

}  // namespace wrp
