// signature_internal.h -- what the checks of a signature (signature.cpp) and the trusted keys
// (signature_keys.cpp) share: OpenSSL objects freed with their scope, TrustedKeys' contents and a few
// text and reading helpers.  Internal to libwrp_replay; see signature.h.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include "signature.h"

namespace wrp {
namespace sig {

// --- OpenSSL objects, freed with their scope -------------------------------------------------

// A unique_ptr deleter that calls OpenSSL's own free function for the type.
template <auto Free>
struct OpenSslFree {
    template <class T>
    void operator()(T* p) const { Free(p); }
};
// sk_X509_pop_free and OPENSSL_free are macros: the deleters that need a body of their own.
struct FreeCertStack {
    void operator()(STACK_OF(X509) * p) const { sk_X509_pop_free(p, X509_free); }
};
struct FreeOpenssl {
    void operator()(void* p) const { OPENSSL_free(p); }
};

using BioPtr = std::unique_ptr<BIO, OpenSslFree<BIO_free>>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslFree<EVP_PKEY_free>>;
using X509Ptr = std::unique_ptr<X509, OpenSslFree<X509_free>>;
using StorePtr = std::unique_ptr<X509_STORE, OpenSslFree<X509_STORE_free>>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, OpenSslFree<X509_STORE_CTX_free>>;
using MdCtxPtr = std::unique_ptr<EVP_MD_CTX, OpenSslFree<EVP_MD_CTX_free>>;
using CertStackPtr = std::unique_ptr<STACK_OF(X509), FreeCertStack>;

[[noreturn]] inline void out_of_memory_in_openssl() { throw std::bad_alloc(); }

// A path or name in a one-line message: control bytes become \xNN; everything else as it is.
std::string one_line(const std::string& s);

// Lowercase hex SHA-256 of `size` bytes (OpenSSL's).
std::string sha256_hex(const void* data, size_t size);

// Read `fd` to its end into `out`, keeping at most `limit` + 1 bytes (so that a file that grew past
// `limit` shows as longer than it); false with `err` set on a read error.
bool read_fd(int fd, size_t limit, std::string& out, int& err);

}  // namespace sig

struct TrustedKeys::Impl {
    std::vector<sig::PkeyPtr> keys;
    std::vector<std::string> fingerprints;  // of keys[i]
    std::vector<sig::X509Ptr> certs;
    size_t count = 0;

    void load_pem_file(const std::string& path);
};

}  // namespace wrp
