// memguard.cpp -- libwrp_memguard: guard pages around the memory Warp allocates for a
// capture's regions, for `wrp memcheck` (wrpkit/debug/memcheck.py, docs/memcheck.md).
//
// Warp's CPU replayer allocates each region of a loaded graph with malloc()
// (warp/native/apic.cpp, apic_init_cpu_graph_memory).  Preloaded into the memcheck
// child (LD_PRELOAD), this library answers those calls -- and only those: calls
// made from warp.so's code while the child has armed it around the load -- with
// memory that ends exactly where an inaccessible (PROT_NONE) zone begins, and
// that starts just after another.  A kernel that reads or writes past either end
// of a region faults at once, on the first bad access, instead of corrupting its
// neighbour silently.  The fault handler writes one line naming the region, the
// byte offset and whether it was a read or a write to stderr (the child's output
// memory file, which the parent reads), and lets the fault kill the process as
// usual: the parent already knows which op ran from its op slot.
//
// Every other allocation goes straight to glibc (__libc_malloc and friends, so no
// dlsym bootstrapping).  Nothing here allocates in the fault handler.

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <link.h>
#include <mutex>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

extern "C" {
void* __libc_malloc(size_t);
void __libc_free(void*);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
}

namespace {

constexpr int kMaxAllocations = 1 << 16;

// One guarded allocation: [reserve, reserve + reserve_size) is mapped, the data
// [base, base + size) readable and writable, everything else PROT_NONE.
struct Allocation {
    uintptr_t reserve;
    size_t reserve_size;
    uintptr_t base;
    size_t size;
    long long label;  // region id, -1 until the child names it
    std::atomic<bool> live;
};

Allocation g_alloc[kMaxAllocations];
std::atomic<int> g_count{0};
std::atomic<bool> g_armed{false};
std::atomic<uintptr_t> g_lo{UINTPTR_MAX}, g_hi{0};  // span of every reservation, for a quick "not ours"
std::mutex g_mutex;                                  // guards additions (the fault handler only reads)
int g_mode = 0;                                      // 0: data ends at a guard; 1: data starts at one
size_t g_guard = 4u << 20;                           // bytes of PROT_NONE on each side
size_t g_page = 4096;

// Code ranges of warp.so: only its calls are guarded (found once, when armed).
constexpr int kMaxRanges = 16;
uintptr_t g_code_lo[kMaxRanges], g_code_hi[kMaxRanges];
int g_code_n = 0;

struct sigaction g_previous_segv;

int find_warp(struct dl_phdr_info* info, size_t, void*)
{
    const char* name = info->dlpi_name ? info->dlpi_name : "";
    size_t n = strlen(name);
    static const char kWarp[] = "/warp.so";
    if (n < sizeof(kWarp) - 1 || strcmp(name + n - (sizeof(kWarp) - 1), kWarp) != 0)
        return 0;
    for (int i = 0; i < info->dlpi_phnum && g_code_n < kMaxRanges; ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) {
            g_code_lo[g_code_n] = info->dlpi_addr + ph.p_vaddr;
            g_code_hi[g_code_n] = info->dlpi_addr + ph.p_vaddr + ph.p_memsz;
            ++g_code_n;
        }
    }
    return 1;
}

bool from_warp(const void* caller)
{
    uintptr_t pc = reinterpret_cast<uintptr_t>(caller);
    for (int i = 0; i < g_code_n; ++i)
        if (pc >= g_code_lo[i] && pc < g_code_hi[i])
            return true;
    return false;
}

void* guarded(size_t size)
{
    if (size == 0 || size > (size_t(1) << 40))
        return nullptr;
    size_t data_pages = (size + g_page - 1) / g_page * g_page;
    size_t total = g_guard + data_pages + g_guard;
    void* r = mmap(nullptr, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return nullptr;
    uintptr_t reserve = reinterpret_cast<uintptr_t>(r);
    uintptr_t data = reserve + g_guard;
    if (mprotect(reinterpret_cast<void*>(data), data_pages, PROT_READ | PROT_WRITE) != 0) {
        munmap(r, total);
        return nullptr;
    }
    // Mode 0 puts the data's end on the guard: its start is then aligned to the largest
    // power of two dividing its size, enough for the elements it holds (an element's
    // alignment divides its size, and a region holds whole elements).
    uintptr_t base = g_mode == 0 ? data + data_pages - size : data;
    std::lock_guard<std::mutex> lock(g_mutex);
    int i = g_count.load();
    if (i >= kMaxAllocations) {
        munmap(r, total);
        return nullptr;
    }
    g_alloc[i].reserve = reserve;
    g_alloc[i].reserve_size = total;
    g_alloc[i].base = base;
    g_alloc[i].size = size;
    g_alloc[i].label = -1;
    g_alloc[i].live.store(true);
    g_count.store(i + 1);
    if (reserve < g_lo.load())
        g_lo.store(reserve);
    if (reserve + total > g_hi.load())
        g_hi.store(reserve + total);
    return reinterpret_cast<void*>(base);
}

Allocation* owner_of_pointer(const void* p)
{
    uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (a < g_lo.load(std::memory_order_relaxed) || a >= g_hi.load(std::memory_order_relaxed))
        return nullptr;
    int n = g_count.load();
    for (int i = 0; i < n; ++i)
        if (g_alloc[i].live.load() && g_alloc[i].base == a)
            return &g_alloc[i];
    return nullptr;
}

// Async-signal-safe decimal/hex formatting into a fixed buffer.
struct Line {
    char buf[256];
    size_t n = 0;
    void text(const char* s)
    {
        while (*s && n < sizeof(buf) - 1)
            buf[n++] = *s++;
    }
    void number(long long v)
    {
        char tmp[24];
        int k = 0;
        unsigned long long u = v < 0 ? 0ull - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
        do {
            tmp[k++] = static_cast<char>('0' + u % 10);
            u /= 10;
        } while (u && k < 23);
        if (v < 0 && n < sizeof(buf) - 1)
            buf[n++] = '-';
        while (k && n < sizeof(buf) - 1)
            buf[n++] = tmp[--k];
    }
    void hex(uintptr_t v)
    {
        static const char digits[] = "0123456789abcdef";
        text("0x");
        char tmp[20];
        int k = 0;
        do {
            tmp[k++] = digits[v & 15];
            v >>= 4;
        } while (v && k < 19);
        while (k && n < sizeof(buf) - 1)
            buf[n++] = tmp[--k];
    }
};

void on_segv(int sig, siginfo_t* info, void* context)
{
    uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
    int n = g_count.load();
    for (int i = 0; i < n; ++i) {
        const Allocation& a = g_alloc[i];
        if (!a.live.load() || addr < a.reserve || addr >= a.reserve + a.reserve_size)
            continue;
        if (addr >= a.base && addr < a.base + a.size)
            break;  // inside the data: not a guard fault
        int access = -1;  // unknown
#if defined(__x86_64__)
        // x86-64 page-fault error code: bit 1 set for a write.
        const ucontext_t* uc = static_cast<const ucontext_t*>(context);
        access = (uc->uc_mcontext.gregs[REG_ERR] & 2) ? 1 : 0;
        uintptr_t pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
#else
        (void)context;
        uintptr_t pc = 0;
#endif
        Line line;
        line.text("\nWRPKIT-MEMGUARD fault region=");
        line.number(a.label);
        line.text(" offset=");
        line.number(static_cast<long long>(addr) - static_cast<long long>(a.base));
        line.text(" size=");
        line.number(static_cast<long long>(a.size));
        line.text(" access=");
        line.text(access == 1 ? "write" : access == 0 ? "read" : "unknown");
        line.text(" pc=");
        line.hex(pc);
        line.text("\n");
        ssize_t w = write(2, line.buf, line.n);
        (void)w;
        break;
    }
    // Let the fault take its usual course: the previous handler (Python's
    // faulthandler, say) or the default action, on return from this one.
    sigaction(sig, &g_previous_segv, nullptr);
}

}  // namespace

extern "C" {

// --- the interface the memcheck child calls (through ctypes) ------------------

/// Guard warp.so's allocations from now on.  mode 0: each region ends at a guard
/// (overruns); 1: each starts at one (underruns).  guard_bytes: the PROT_NONE zone
/// on each side.  Returns 0, or -1 when warp.so is not loaded in this process.
__attribute__((visibility("default"))) int wrp_memguard_arm(int mode, unsigned long long guard_bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    g_page = page > 0 ? static_cast<size_t>(page) : 4096;
    g_mode = mode;
    if (guard_bytes)
        g_guard = (static_cast<size_t>(guard_bytes) + g_page - 1) / g_page * g_page;
    g_code_n = 0;
    dl_iterate_phdr(find_warp, nullptr);
    if (g_code_n == 0)
        return -1;
    static char altstack[1 << 16];
    stack_t ss{};
    ss.ss_sp = altstack;
    ss.ss_size = sizeof(altstack);
    sigaltstack(&ss, nullptr);
    struct sigaction sa{};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_previous_segv);
    g_armed.store(true);
    return 0;
}

/// Stop guarding new allocations (those made stay guarded until freed).
__attribute__((visibility("default"))) void wrp_memguard_disarm() { g_armed.store(false); }

/// Name the guarded allocation that starts at ptr (a region id); 0 when ptr is one, else -1.
__attribute__((visibility("default"))) int wrp_memguard_label(const void* ptr, long long label)
{
    Allocation* a = owner_of_pointer(ptr);
    if (!a)
        return -1;
    a->label = label;
    return 0;
}

// --- the allocator --------------------------------------------------------------

__attribute__((visibility("default"))) void* malloc(size_t size)
{
    // An allocation that cannot be guarded gets plain memory: its region is then unlabelled, and
    // memcheck lists it as unguarded (wrp_memguard_label fails for it).
    if (g_armed.load(std::memory_order_relaxed) && from_warp(__builtin_return_address(0)))
        if (void* p = guarded(size))
            return p;
    return __libc_malloc(size);
}

__attribute__((visibility("default"))) void free(void* p)
{
    if (!p)
        return;
    if (Allocation* a = owner_of_pointer(p)) {
        a->live.store(false);
        munmap(reinterpret_cast<void*>(a->reserve), a->reserve_size);
        return;
    }
    __libc_free(p);
}

__attribute__((visibility("default"))) void* calloc(size_t n, size_t size)
{
    return __libc_calloc(n, size);
}

__attribute__((visibility("default"))) void* realloc(void* p, size_t size)
{
    if (Allocation* a = owner_of_pointer(p)) {
        void* q = __libc_malloc(size);
        if (!q)
            return nullptr;
        memcpy(q, p, size < a->size ? size : a->size);
        free(p);
        return q;
    }
    return __libc_realloc(p, size);
}

}  // extern "C"
