// fuzz_signature.cpp -- libFuzzer target: the input is a signature (schema/SIGNATURE-RULES.md).
//
// The verifier (src/signature.cpp) checks it against a fixed small capture
// written once to a temporary folder: `cap.wrp` (its bytes start "WRP1", so
// its modules folder is part of the signed set) and `cap_modules/` holding
// `a.o` and `b.o` (the exact bytes are kFiles below; tests/reliability/test_fuzz_native.py
// writes its seeds from the same list).  The trusted keys are made here too:
// an EC P-256 public key and a self-signed CA (P-256) whose leaf certificate
// signs with digitalSignature.  The first input byte picks what the rest is:
//   0  the bytes of a signature file as they are (steps 2 and 3: a bundle that
//      no trusted key signed stops at step 3);
//   1  the in-toto statement (the DSSE payload), put in a key bundle signed
//      here with the trusted key, so that mutations reach steps 4-6;
//   2  the same in a certificate bundle (leaf + CA) signed by the leaf's key.
// Every verdict must be wrp::Error with WRP_ERR_UNTRUSTED (or WRP_ERR_INVALID_FILE
// for a module file that cannot be read); anything else is a finding.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "error.h"
#include "signature.h"

namespace {

struct FixedFile {
    const char* name;  // relative to the capture's folder
    const char* bytes;
};
const FixedFile kFiles[] = {
    {"cap.wrp", "WRP1 signed fuzz capture\n"},
    {"cap_modules/a.o", "module a\n"},
    {"cap_modules/b.o", "module b\n"},
};

const char* const kPayloadType = "application/vnd.in-toto+json";

[[noreturn]] void die(const char* what)
{
    std::fprintf(stderr, "fuzz_signature: setup failed: %s\n", what);
    std::abort();
}

std::string base64(const std::string& bytes)
{
    std::vector<unsigned char> out(4 * ((bytes.size() + 2) / 3) + 1);
    int n = EVP_EncodeBlock(out.data(), reinterpret_cast<const unsigned char*>(bytes.data()),
                            static_cast<int>(bytes.size()));
    return std::string(reinterpret_cast<const char*>(out.data()), static_cast<size_t>(n));
}

std::string sha256_hex(const std::string& text)
{
    unsigned char md[32];
    unsigned int len = 0;
    EVP_Digest(text.data(), text.size(), md, &len, EVP_sha256(), nullptr);
    static const char digits[] = "0123456789abcdef";
    std::string s;
    for (unsigned i = 0; i < len; i++) {
        s += digits[md[i] >> 4];
        s += digits[md[i] & 15];
    }
    return s;
}

void write_file(const std::string& path, const std::string& text)
{
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0)
        die(path.c_str());
}

std::string public_pem(EVP_PKEY* key)
{
    BIO* mem = BIO_new(BIO_s_mem());
    if (!mem || PEM_write_bio_PUBKEY(mem, key) != 1)
        die("PEM_write_bio_PUBKEY");
    char* text = nullptr;
    long n = BIO_get_mem_data(mem, &text);
    std::string out(text, static_cast<size_t>(n));
    BIO_free(mem);
    return out;
}

void add_extension(X509* cert, X509* issuer, int nid, const char* value)
{
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (!ext || X509_add_ext(cert, ext, -1) != 1)
        die("X509_add_ext");
    X509_EXTENSION_free(ext);
}

X509* make_certificate(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, long not_before_s)
{
    static long serial = 1;
    X509* cert = X509_new();
    if (!cert)
        die("X509_new");
    X509_set_version(cert, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert), serial++);
    X509_gmtime_adj(X509_getm_notBefore(cert), not_before_s);
    X509_gmtime_adj(X509_getm_notAfter(cert), 3650L * 86400);
    X509_set_pubkey(cert, key);
    X509_NAME* name = X509_get_subject_name(cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn), -1, -1, 0);
    X509_set_issuer_name(cert, issuer ? X509_get_subject_name(issuer) : name);
    X509* by = issuer ? issuer : cert;
    if (issuer) {
        add_extension(cert, by, NID_basic_constraints, "CA:FALSE");
        add_extension(cert, by, NID_key_usage, "critical,digitalSignature");
    } else {
        add_extension(cert, by, NID_basic_constraints, "critical,CA:TRUE");
        add_extension(cert, by, NID_key_usage, "critical,keyCertSign,cRLSign");
    }
    if (X509_sign(cert, issuer_key, EVP_sha256()) <= 0)
        die("X509_sign");
    return cert;
}

std::string der(X509* cert)
{
    unsigned char* out = nullptr;
    int n = i2d_X509(cert, &out);
    if (n <= 0)
        die("i2d_X509");
    std::string s(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    OPENSSL_free(out);
    return s;
}

struct Fixture {
    std::string dir;
    std::vector<std::string> made;  // removed at exit, deepest first
    std::unique_ptr<wrp::TrustedKeys> keys;
    std::string capture_bytes;
    EVP_PKEY* key = nullptr;
    EVP_PKEY* leaf_key = nullptr;
    std::string key_hint;
    std::string leaf_der, ca_der;
};

Fixture* g_fixture = nullptr;

void cleanup()
{
    if (!g_fixture)
        return;
    for (auto it = g_fixture->made.rbegin(); it != g_fixture->made.rend(); ++it)
        ::remove(it->c_str());
}

Fixture& fixture()
{
    if (g_fixture)
        return *g_fixture;
    auto* f = new Fixture;
    char tmpl[] = "/tmp/wrp-fuzz-signature-XXXXXX";
    if (!mkdtemp(tmpl))
        die("mkdtemp");
    f->dir = tmpl;
    f->made.push_back(f->dir);
    if (mkdir((f->dir + "/cap_modules").c_str(), 0700) != 0)
        die("mkdir");
    f->made.push_back(f->dir + "/cap_modules");
    for (const FixedFile& file : kFiles) {
        write_file(f->dir + "/" + file.name, file.bytes);
        f->made.push_back(f->dir + "/" + file.name);
    }
    f->capture_bytes = kFiles[0].bytes;

    f->key = EVP_EC_gen("P-256");
    EVP_PKEY* ca_key = EVP_EC_gen("P-256");
    f->leaf_key = EVP_EC_gen("P-256");
    if (!f->key || !ca_key || !f->leaf_key)
        die("EVP_EC_gen");
    X509* ca = make_certificate(ca_key, "fuzz CA", nullptr, ca_key, -7200);
    X509* leaf = make_certificate(f->leaf_key, "fuzz signer", ca, ca_key, -3600);
    f->leaf_der = der(leaf);
    f->ca_der = der(ca);
    std::string key_pem = public_pem(f->key);
    f->key_hint = sha256_hex(key_pem);
    write_file(f->dir + "/key.pem", key_pem);
    f->made.push_back(f->dir + "/key.pem");
    BIO* mem = BIO_new(BIO_s_mem());
    if (!mem || PEM_write_bio_X509(mem, ca) != 1)
        die("PEM_write_bio_X509");
    char* text = nullptr;
    long n = BIO_get_mem_data(mem, &text);
    write_file(f->dir + "/ca.pem", std::string(text, static_cast<size_t>(n)));
    f->made.push_back(f->dir + "/ca.pem");
    BIO_free(mem);
    X509_free(ca);
    X509_free(leaf);
    EVP_PKEY_free(ca_key);
    f->keys.reset(new wrp::TrustedKeys(wrp::TrustedKeys::load({f->dir + "/key.pem", f->dir + "/ca.pem"})));
    g_fixture = f;
    std::atexit(cleanup);
    return *f;
}

std::string sign(EVP_PKEY* key, const std::string& payload)
{
    std::string pae = "DSSEv1 " + std::to_string(std::strlen(kPayloadType)) + " " + kPayloadType + " " +
        std::to_string(payload.size()) + " " + payload;
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    size_t len = 0;
    if (!ctx || EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, key) != 1 ||
        EVP_DigestSign(ctx, nullptr, &len, reinterpret_cast<const unsigned char*>(pae.data()), pae.size()) != 1)
        die("EVP_DigestSign");
    std::string sig(len, '\0');
    if (EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(&sig[0]), &len,
                       reinterpret_cast<const unsigned char*>(pae.data()), pae.size()) != 1)
        die("EVP_DigestSign");
    sig.resize(len);
    EVP_MD_CTX_free(ctx);
    return sig;
}

std::string bundle(const Fixture& f, const std::string& payload, bool certificate)
{
    std::string material = certificate
        ? "{\"x509CertificateChain\": {\"certificates\": [{\"rawBytes\": \"" + base64(f.leaf_der) +
              "\"}, {\"rawBytes\": \"" + base64(f.ca_der) + "\"}]}}"
        : "{\"publicKey\": {\"hint\": \"" + f.key_hint + "\"}, \"tlogEntries\": []}";
    return "{\"mediaType\": \"application/vnd.dev.sigstore.bundle.v0.3+json\", \"verificationMaterial\": " + material +
        ", \"dsseEnvelope\": {\"payload\": \"" + base64(payload) + "\", \"payloadType\": \"" + kPayloadType +
        "\", \"signatures\": [{\"sig\": \"" + base64(sign(certificate ? f.leaf_key : f.key, payload)) +
        "\", \"keyid\": \"\"}]}}";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size)
{
    if (size == 0)
        return 0;
    Fixture& f = fixture();
    const int mode = data[0] % 3;
    std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
    std::string sig = mode == 0 ? rest : bundle(f, rest, mode == 2);
    wrp::CaptureToVerify capture;
    capture.path = f.dir + "/cap.wrp";
    capture.data = reinterpret_cast<const uint8_t*>(f.capture_bytes.data());
    capture.size = f.capture_bytes.size();
    wrp::SignedModules modules;
    static const bool verbose = std::getenv("WRP_FUZZ_VERBOSE") != nullptr;  // for triage and regression tests
    try {
        wrp::verify_signature_bytes(capture, *f.keys, "fuzz.sig", reinterpret_cast<const uint8_t*>(sig.data()),
                                    sig.size(), &modules);
        if (verbose)
            std::fprintf(stderr, "fuzz: mode=%d status=0: ok (%zu module file(s) kept)\n", mode, modules.files.size());
    } catch (const wrp::Error& e) {
        if (verbose)
            std::fprintf(stderr, "fuzz: mode=%d status=%d: %s\n", mode, static_cast<int>(e.status()), e.what());
        if (e.status() != WRP_ERR_UNTRUSTED && e.status() != WRP_ERR_INVALID_FILE) {
            std::fprintf(stderr, "fuzz_signature: unexpected status %d: %s\n", static_cast<int>(e.status()), e.what());
            std::abort();
        }
    }
    // Anything else thrown (std::bad_alloc, nlohmann's exceptions, ...) escapes and libFuzzer reports it.
    return 0;
}
