// signature_keys.cpp -- the trusted keys of signed captures (TrustedKeys: PEM public keys and
// certificates) and where their paths come from ($WRPKIT_TRUSTED_KEYS, wrp_options); see signature.h.
// The checks that use them are signature.cpp's.
#include "signature_internal.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/pem.h>

#include "error.h"
#include "mapped_file.h"

namespace wrp {

using namespace sig;

namespace {

constexpr uint64_t kMaxTrustedFileBytes = uint64_t(64) << 20;

bool ends_with(const std::string& s, const char* suffix)
{
    size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// The digest ECDSA uses with a key on `k`'s curve; NULL when `k` is not an EC key on P-256, P-384, P-521.
const EVP_MD* curve_digest(EVP_PKEY* k, std::string* curve = nullptr)
{
    if (!k || EVP_PKEY_get_base_id(k) != EVP_PKEY_EC) {
        if (curve)
            *curve = "";
        return nullptr;
    }
    char name[80] = {};
    size_t len = 0;
    if (EVP_PKEY_get_group_name(k, name, sizeof(name), &len) != 1) {
        ERR_clear_error();
        name[0] = 0;
    }
    if (curve)
        *curve = name;
    if (!std::strcmp(name, "prime256v1") || !std::strcmp(name, "P-256") || !std::strcmp(name, "secp256r1"))
        return EVP_sha256();
    if (!std::strcmp(name, "secp384r1") || !std::strcmp(name, "P-384"))
        return EVP_sha384();
    if (!std::strcmp(name, "secp521r1") || !std::strcmp(name, "P-521"))
        return EVP_sha512();
    return nullptr;
}

// SHA-256 of the key's SubjectPublicKeyInfo PEM text: the `hint` model-signing writes.
std::string key_fingerprint(EVP_PKEY* k)
{
    BioPtr mem(BIO_new(BIO_s_mem()));
    if (!mem || PEM_write_bio_PUBKEY(mem.get(), k) != 1) {
        ERR_clear_error();
        out_of_memory_in_openssl();
    }
    char* text = nullptr;
    long n = BIO_get_mem_data(mem.get(), &text);
    return sha256_hex(text, n > 0 ? static_cast<size_t>(n) : 0);
}

// Read a whole small file; "" in `error` on success.
bool read_file(const std::string& path, uint64_t cap, std::string& out, std::string& error)
{
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        error = std::strerror(errno);
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        error = fstat(fd, &st) == 0 ? std::string("it is ") + file_kind(st.st_mode) : std::strerror(errno);
        close(fd);
        return false;
    }
    if (static_cast<uint64_t>(st.st_size) > cap) {
        error = format("it is %llu bytes, over the limit of %llu MiB", static_cast<unsigned long long>(st.st_size),
                       static_cast<unsigned long long>(cap >> 20));
        close(fd);
        return false;
    }
    int err = 0;
    bool ok = read_fd(fd, cap, out, err);
    close(fd);
    if (!ok)
        error = std::strerror(err);
    else if (out.size() > cap)
        error = format("it grew over the limit of %llu MiB while it was read", static_cast<unsigned long long>(cap >> 20));
    return ok && out.size() <= cap;
}

}  // namespace

// --- TrustedKeys ---------------------------------------------------------------------------

void TrustedKeys::Impl::load_pem_file(const std::string& path)
{
    std::string text, error;
    const std::string shown = one_line(path);
    if (!read_file(path, kMaxTrustedFileBytes, text, error))
        fail(WRP_ERR_INVALID_ARGUMENT, "cannot read trusted key %s: %s", shown.c_str(), error.c_str());
    if (text.size() > static_cast<size_t>(INT32_MAX))
        fail(WRP_ERR_INVALID_ARGUMENT, "trusted key %s is too large", shown.c_str());
    BioPtr bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
    if (!bio)
        out_of_memory_in_openssl();
    size_t found = 0;  // public keys and certificates; other PEM objects (EC PARAMETERS, ...) are skipped
    size_t index = 0;
    ERR_clear_error();
    for (;;) {
        char* raw_name = nullptr;
        char* raw_header = nullptr;
        unsigned char* raw_data = nullptr;
        long len = 0;
        int ok = PEM_read_bio(bio.get(), &raw_name, &raw_header, &raw_data, &len);
        std::unique_ptr<char, FreeOpenssl> name(raw_name), header(raw_header);
        std::unique_ptr<unsigned char, FreeOpenssl> data(raw_data);
        if (!ok) {
            unsigned long err = ERR_peek_last_error();
            bool end = ERR_GET_LIB(err) == ERR_LIB_PEM && ERR_GET_REASON(err) == PEM_R_NO_START_LINE;
            ERR_clear_error();
            if (end)
                break;
            fail(WRP_ERR_INVALID_ARGUMENT, "trusted key %s does not parse: PEM object %zu is malformed", shown.c_str(),
                 index + 1);
        }
        index++;
        const unsigned char* p = data.get();
        std::string kind = name.get();
        if (kind.find("PRIVATE KEY") != std::string::npos)
            fail(WRP_ERR_INVALID_ARGUMENT, "trusted key %s holds a private key, not a public one (pass its public "
                 "key: openssl ec -in KEY.pem -pubout -out PUB.pem)", shown.c_str());
        if (kind != "PUBLIC KEY" && kind != "CERTIFICATE")
            continue;
        found++;
        if (kind == "PUBLIC KEY") {
            PkeyPtr key(d2i_PUBKEY(nullptr, &p, len));
            ERR_clear_error();
            if (!key || p != data.get() + len)
                fail(WRP_ERR_INVALID_ARGUMENT, "trusted key %s does not parse: PEM object %zu is not a valid public "
                     "key", shown.c_str(), index);
            std::string curve;
            if (!curve_digest(key.get(), &curve))
                fail(WRP_ERR_INVALID_ARGUMENT, "trusted key %s is not an EC key on P-256, P-384 or P-521 (PEM object "
                     "%zu: %s)", shown.c_str(), index,
                     curve.empty() ? "not an elliptic-curve key" : ("curve " + one_line(curve)).c_str());
            fingerprints.push_back(key_fingerprint(key.get()));
            keys.push_back(std::move(key));
        } else {
            X509Ptr cert(d2i_X509(nullptr, &p, len));
            ERR_clear_error();
            if (!cert || p != data.get() + len)
                fail(WRP_ERR_INVALID_ARGUMENT, "trusted key %s does not parse: PEM object %zu is not a valid X.509 "
                     "certificate", shown.c_str(), index);
            certs.push_back(std::move(cert));
        }
    }
    if (!found)
        fail(WRP_ERR_INVALID_ARGUMENT, "trusted key %s holds no PEM public key or certificate", shown.c_str());
    count += found;
}

TrustedKeys::TrustedKeys()
    : impl_(new Impl)
{
}
TrustedKeys::~TrustedKeys() = default;
TrustedKeys::TrustedKeys(TrustedKeys&&) noexcept = default;
TrustedKeys& TrustedKeys::operator=(TrustedKeys&&) noexcept = default;

size_t TrustedKeys::count() const { return impl_->count; }

TrustedKeys TrustedKeys::load(const std::vector<std::string>& paths, bool from_environment)
{
    if (from_environment) {
        try {
            return load(paths, false);
        } catch (const Error& e) {
            if (e.status() != WRP_ERR_INVALID_ARGUMENT)
                throw;
            throw Error(e.status(), std::string("WRPKIT_TRUSTED_KEYS: ") + e.what());
        }
    }
    TrustedKeys out;
    if (paths.empty())
        fail(WRP_ERR_INVALID_ARGUMENT, "no trusted keys given");
    for (const std::string& path : paths) {
        if (path.empty())
            fail(WRP_ERR_INVALID_ARGUMENT, "a trusted key path is empty");
        const std::string shown = one_line(path);
        struct stat st;
        if (stat(path.c_str(), &st) != 0) {
            if (errno == ENOENT || errno == ENOTDIR)
                fail(WRP_ERR_INVALID_ARGUMENT, "trusted key not found: %s", shown.c_str());
            fail(WRP_ERR_INVALID_ARGUMENT, "cannot read trusted key %s: %s", shown.c_str(), std::strerror(errno));
        }
        if (!S_ISDIR(st.st_mode)) {
            out.impl_->load_pem_file(path);
            continue;
        }
        DIR* d = opendir(path.c_str());
        if (!d)
            fail(WRP_ERR_INVALID_ARGUMENT, "cannot read trusted keys folder %s: %s", shown.c_str(),
                 std::strerror(errno));
        std::vector<std::string> names;  // NAME.pem (not ".pem" itself) that is a file, a link to one included
        try {
            while (dirent* e = readdir(d)) {
                std::string name = e->d_name;
                struct stat est;
                if (name.size() > 4 && ends_with(name, ".pem") &&
                    stat((path + "/" + name).c_str(), &est) == 0 && S_ISREG(est.st_mode))
                    names.push_back(name);
            }
        } catch (...) {
            closedir(d);
            throw;
        }
        closedir(d);
        if (names.empty())
            fail(WRP_ERR_INVALID_ARGUMENT, "trusted keys folder %s holds no *.pem file", shown.c_str());
        std::sort(names.begin(), names.end());
        for (const std::string& name : names)
            out.impl_->load_pem_file(path + (ends_with(path, "/") ? "" : "/") + name);
    }
    return out;
}

// --- environment and paths -----------------------------------------------------------------

std::vector<std::string> trusted_keys_from_environment()
{
    std::vector<std::string> out;
    const char* value = std::getenv("WRPKIT_TRUSTED_KEYS");
    if (!value)
        return out;
    std::string text = value;
    size_t start = 0;
    while (start <= text.size()) {
        size_t colon = text.find(':', start);
        std::string part = text.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
        if (!part.empty())
            out.push_back(part);
        if (colon == std::string::npos)
            break;
        start = colon + 1;
    }
    return out;
}

std::vector<std::string> requested_trusted_keys(const char* const* given, size_t count, bool* from_environment)
{
    *from_environment = false;
    if (count > 0 && !given)
        fail(WRP_ERR_INVALID_ARGUMENT, "wrp_options.trusted_keys is NULL but num_trusted_keys is %zu", count);
    std::vector<std::string> out;
    for (size_t i = 0; i < count; i++) {
        if (!given[i] || !*given[i])
            fail(WRP_ERR_INVALID_ARGUMENT, "wrp_options.trusted_keys[%zu] is NULL or empty", i);
        out.push_back(given[i]);
    }
    if (out.empty()) {
        out = trusted_keys_from_environment();
        *from_environment = !out.empty();
    }
    return out;
}

std::string default_signature_path(const std::string& capture_path)
{
    size_t slash = capture_path.rfind('/');
    std::string dir = slash == std::string::npos ? "" : capture_path.substr(0, slash + 1);
    std::string name = slash == std::string::npos ? capture_path : capture_path.substr(slash + 1);
    size_t dot = name.rfind('.');
    if (dot != std::string::npos && dot > 0 && dot + 1 < name.size())
        name.resize(dot);
    return dir + name + ".sig";
}

}  // namespace wrp
