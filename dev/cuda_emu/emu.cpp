// The CPU emulator's runtime: fibers and the block scheduler, barriers and warp collectives,
// device memory, launches, the runtime API and the PTX instructions. See emu.h for what is
// (and is not) emulated.
#include "emu.h"
#include "include/cuda_fp16.h"
#include "include/cupti.h"

// The CUPTI shim's subscriber (one at a time; see report_launch).
struct CUpti_Subscriber_st {
    CUpti_CallbackFunc callback;
    void* userdata;
    bool active, driver, runtime;
};

#include <stdarg.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace emu {

uint3 tid, bid;
dim3 bdim, gdim;

// ----------------------------------------------------------------------------
// Fibers: a hand-written context switch on x86-64 (no signal-mask syscall, unlike
// swapcontext: a block switches millions of times), ucontext elsewhere.

#if defined(__x86_64__)
extern "C" void emu_switch(void** save_sp, void* to_sp);
asm(R"(
    .text
    .globl emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");
struct Fiber { void* sp; };
static void fiber_init(Fiber& f, char* stack, size_t size, void (*entry)()) {
    uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
    void** sp = (void**)top;
    *--sp = NULL;            // fake return address of entry: entry starts with rsp = 8 (mod 16)
    *--sp = (void*)entry;    // emu_switch's ret jumps here
    for (int i = 0; i < 6; i++) *--sp = NULL;  // rbp rbx r12 r13 r14 r15
    f.sp = sp;
}
static inline void fiber_switch(Fiber& from, Fiber& to) { emu_switch(&from.sp, to.sp); }
#else
#include <ucontext.h>
struct Fiber { ucontext_t uc; };
static void fiber_init(Fiber& f, char* stack, size_t size, void (*entry)()) {
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = stack;
    f.uc.uc_stack.ss_size = size;
    f.uc.uc_link = NULL;
    makecontext(&f.uc, entry, 0);
}
static inline void fiber_switch(Fiber& from, Fiber& to) { swapcontext(&from.uc, &to.uc); }
#endif

// ----------------------------------------------------------------------------
// State of the running launch and block

enum State { RUN, AT_SYNC, AT_WARP, DONE };
struct Copy { unsigned char* dst; const unsigned char* src; unsigned n; long group; };
struct Thread {
    Fiber fiber;
    char* stack;
    int state, lin;
    uint3 idx;
    long committed;             // cp.async groups committed so far
    std::vector<Copy> copies;   // cp.async not yet performed
};
typedef void (*CompleteFn)(unsigned char (*slots)[SLOT]);
struct Warp {
    int lanes, arrived, exited, kind;
    unsigned gen;
    alignas(16) unsigned char slot[2][32][SLOT];  // double-buffered by generation
};

enum { MAX_THREADS = 1024, STACK_BYTES = 64 << 10, SMEM_GUARD = 256 };
static Thread threads[MAX_THREADS];
static Warp warps[MAX_THREADS / 32];
static Fiber sched;
static Thread* cur = NULL;
static int nthreads, ndone, sync_arrived;
static const std::function<void()>* g_body;  // the launch: calls the kernel with its arguments
// Kernels run on the device thread only (on the host's in EMU_STREAMS=sync mode), so the
// block scheduler's state above is that thread's; what a thread is running is thread-local:
static thread_local const char* kname = NULL;      // kernel running (NULL: none)
static thread_local const char* op_what = NULL;    // stream operation running (NULL: host code)
static thread_local const char* op_stream = NULL;  // ... and its stream, for messages
static unsigned char* smem = NULL;
static size_t smem_bytes = 0, smem_cap = 0;
static uint64_t block_serial = 0;
static cudaError_t last_error = cudaSuccess;
static std::unordered_map<const void*, int> smem_optin;  // cudaFuncSetAttribute
static pid_t main_pid = getpid();
static struct { long long launches, blocks, threads, collectives, mma, ldmatrix, cp_async; } stats;

void die(const char* fmt, ...) {
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "EMU: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (kname && cur)
        fprintf(stderr, " [kernel %s, block (%u,%u,%u), thread (%u,%u,%u), on %s]", kname, bid.x, bid.y, bid.z,
                cur->idx.x, cur->idx.y, cur->idx.z, op_stream ? op_stream : "?");
    else if (kname)
        fprintf(stderr, " [kernel %s, on %s]", kname, op_stream ? op_stream : "?");
    else if (op_what)
        fprintf(stderr, " [%s, on %s]", op_what, op_stream ? op_stream : "?");
    fprintf(stderr, "\n");
    abort();
}

static const char* streams_mode();
static unsigned long long seed();
static long long stream_ops();
static long long stream_choices();
static void print_stats() {
    if (getpid() != main_pid || stats.launches == 0) return;
    fprintf(stderr, "# cuda_emu: %lld launches, %lld blocks, %lld threads, %lld warp collectives "
            "(%lld mma.sync, %lld ldmatrix), %lld cp.async; %lld stream operations (%lld picked among several "
            "streams), streams %s, EMU_SEED=%llu\n",
            stats.launches, stats.blocks, stats.threads, stats.collectives, stats.mma, stats.ldmatrix,
            stats.cp_async, stream_ops(), stream_choices(), streams_mode(), seed());
}
static int stats_registered = atexit(print_stats);

int lane() { return cur->lin & 31; }

static void yield_to_scheduler(int state) {
    cur->state = state;
    fiber_switch(cur->fiber, sched);
}

static void fiber_main() {
    (*g_body)();
    Warp& w = warps[cur->lin >> 5];
    if (sync_arrived)
        die("thread exited while %d threads of its block wait at __syncthreads (a barrier must be reached "
            "by the whole block)", sync_arrived);
    if (w.arrived)
        die("lane exited while %d lanes of its warp wait at a full-mask warp collective", w.arrived);
    ndone++;
    w.exited++;
    cur->copies.clear();  // cp.async still pending: its shared memory ends with the block
    yield_to_scheduler(DONE);
    abort();  // never resumed
}

// EMU_SKIP_BARRIER=NAME: every __syncthreads of kernel NAME returns at once, as if the source
// had none (the emulator's own self-check: dev/test/test_kernels_emu.sh runs the kernel tests
// with one barrier gone and expects the race it opens to be caught, without a second build).
static const char* const g_skip_barrier = getenv("EMU_SKIP_BARRIER");

void syncthreads() {
    if (!kname) die("__syncthreads outside a kernel");
    if (g_skip_barrier && !strcmp(g_skip_barrier, kname)) return;
    if (ndone) die("__syncthreads reached after %d threads of the block exited", ndone);
    if (++sync_arrived == nthreads) {
        sync_arrived = 0;
        for (int i = 0; i < nthreads; i++)
            if (threads[i].state == AT_SYNC) threads[i].state = RUN;
        return;
    }
    yield_to_scheduler(AT_SYNC);
}

static const char* kind_name(int k) {
    switch (k) {
        case K_SHFL: return "__shfl*_sync";
        case K_BALLOT: return "__ballot_sync/__any_sync/__all_sync";
        case K_SYNCWARP: return "__syncwarp";
        case K_MMA: return "mma.sync";
        case K_LDMATRIX: return "ldmatrix";
    }
    return "?";
}

static const unsigned char* collective(int kind, unsigned mask, const void* in, size_t bytes, CompleteFn complete) {
    if (!kname) die("warp collective %s outside a kernel", kind_name(kind));
    Warp& w = warps[cur->lin >> 5];
    const int l = cur->lin & 31;
    if (mask != 0xffffffffu) die("%s with mask 0x%08x: only full-warp masks are emulated", kind_name(kind), mask);
    if (w.lanes != 32) die("full-mask %s in a warp of %d threads (blockDim not a multiple of 32)", kind_name(kind), w.lanes);
    if (w.exited) die("full-mask %s after %d lanes of the warp exited", kind_name(kind), w.exited);
    if (w.arrived == 0) w.kind = kind;
    else if (w.kind != kind) die("divergent warp: lanes wait at %s and at %s", kind_name(w.kind), kind_name(kind));
    const int p = w.gen & 1;
    if (bytes) memcpy(w.slot[p][l], in, bytes);
    if (++w.arrived == 32) {
        stats.collectives++;
        w.arrived = 0;
        w.gen++;
        if (complete) complete(w.slot[p]);
        Thread* t0 = &threads[cur->lin & ~31];
        for (int i = 0; i < 32; i++)
            if (t0[i].state == AT_WARP) t0[i].state = RUN;
    } else {
        yield_to_scheduler(AT_WARP);
    }
    return &w.slot[p][0][0];
}

const unsigned char* warp_collective(int kind, unsigned mask, const void* in, size_t bytes) {
    return collective(kind, mask, in, bytes, NULL);
}

// ----------------------------------------------------------------------------
// Shared memory

void* dynamic_smem() {
    if (!kname) die("extern __shared__ outside a kernel");
    return smem;
}

void shared_var(void* p, size_t bytes) {
    static std::unordered_map<void*, uint64_t> poisoned;  // variable -> block it was poisoned for
    if (!kname) return;
    uint64_t& b = poisoned[p];
    if (b != block_serial) {
        memset(p, 0xff, bytes);
        b = block_serial;
    }
}

static unsigned char* smem_at(uint64_t addr, size_t n, const char* what) {
    if (addr + n > smem_bytes)
        die("%s: shared address 0x%llx + %zu beyond the %zu bytes of dynamic shared memory", what,
            (unsigned long long)addr, n, smem_bytes);
    return smem + addr;
}

}  // namespace emu

size_t __cvta_generic_to_shared(const void* p) {
    using namespace emu;
    const unsigned char* c = (const unsigned char*)p;
    if (!kname || c < smem || c > smem + smem_bytes)
        die("__cvta_generic_to_shared of %p: not in the block's dynamic shared memory (static __shared__ "
            "variables are not mapped into the emulated shared window)", p);
    return (size_t)(c - smem);
}

namespace emu {

// ----------------------------------------------------------------------------
// Device memory: 256-byte aligned, poisoned, with guard zones checked after every launch

enum { GUARD = 256 };
static const unsigned char GUARD_BYTE = 0xeb;
// The host allocates and frees while the device thread checks ranges and guards: the maps of
// device and pinned host buffers are guarded by mem_mu. (Objects the device thread uses are
// never destroyed: it may still run while exit() runs the static destructors.)
static std::mutex& mem_mu = *new std::mutex;
static std::map<uintptr_t, size_t>& allocs = *new std::map<uintptr_t, size_t>;       // user pointer -> bytes
static std::map<uintptr_t, size_t>& host_allocs = *new std::map<uintptr_t, size_t>;  // cudaMallocHost

bool device_range_ok(const void* p, size_t bytes) {
    if (bytes == 0) return true;
    std::lock_guard<std::mutex> lk(mem_mu);
    auto it = allocs.upper_bound((uintptr_t)p);
    if (it == allocs.begin()) return false;
    --it;
    return (uintptr_t)p + bytes <= it->first + it->second;
}

static size_t alloc_total(size_t bytes) { return (GUARD + bytes + GUARD + 255) & ~(size_t)255; }

static void check_guards(uintptr_t user, size_t bytes, const char* when) {
    const unsigned char* u = (const unsigned char*)user;
    const unsigned char* end = u - GUARD + alloc_total(bytes);
    for (const unsigned char* q = u - GUARD; q < end; q++) {
        if (q == u) q += bytes;
        if (q < end && *q != GUARD_BYTE)
            die("%s: a device buffer of %zu bytes was written out of bounds (byte at offset %lld)", when, bytes,
                (long long)(q - u));
    }
}

static void check_all_guards(const char* when) {
    std::lock_guard<std::mutex> lk(mem_mu);
    for (auto& a : allocs) check_guards(a.first, a.second, when);
}
static bool pinned_range(const void* p, size_t bytes) {  // inside one cudaMallocHost buffer?
    std::lock_guard<std::mutex> lk(mem_mu);
    auto it = host_allocs.upper_bound((uintptr_t)p);
    if (it == host_allocs.begin()) return false;
    --it;
    return (uintptr_t)p + bytes <= it->first + it->second;
}

// ----------------------------------------------------------------------------
// Traffic counts (emu.h, "Traffic"): per launch, the distinct 32-byte sectors of device
// memory loaded (not counting those the launch stored first) and stored, in a bitmap per
// buffer (two bits per sector), cleared when the launch ends. Only the thread running a device operation counts (kname or traffic_op set),
// so host code never does. A cudaFree synchronises the device before it drops a buffer's
// bitmap: no launch is running then.

static thread_local bool traffic_op = false;  // a library call or copy is counting its operands
struct TrafficBuf { uintptr_t base; size_t bytes; std::vector<uint64_t> bits[2]; bool touched; };
static std::map<uintptr_t, TrafficBuf*>& traffic_bufs = *new std::map<uintptr_t, TrafficBuf*>;  // under mem_mu
static std::vector<TrafficBuf*>& traffic_touched = *new std::vector<TrafficBuf*>;  // this launch's (device thread)
static std::atomic<unsigned long long> traffic_generation{0};  // bumped when a buffer goes
static thread_local TrafficBuf* traffic_last = NULL;           // the last buffer hit, valid for
static thread_local unsigned long long traffic_last_generation = 0;  // ... this generation
static Traffic traffic;                 // totals (written by the device thread)
static double launch_sectors[2];        // distinct sectors of the running launch

// The buffer holding [a, a + n), or NULL where that is not one device buffer.
static TrafficBuf* traffic_buf(uintptr_t a, size_t n) {
    TrafficBuf* b = traffic_last;
    const unsigned long long g = traffic_generation.load(std::memory_order_acquire);
    if (b && traffic_last_generation == g && a >= b->base && a + n <= b->base + b->bytes) return b;
    std::lock_guard<std::mutex> lk(mem_mu);
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return NULL;
    --it;
    if (a + n > it->first + it->second) return NULL;
    TrafficBuf*& t = traffic_bufs[it->first];
    if (!t) {
        t = new TrafficBuf{it->first, it->second, {}, false};
        for (int s = 0; s < 2; s++) t->bits[s].assign((it->second + 32 * 64 - 1) / (32 * 64), 0);
    }
    traffic_last = t;
    traffic_last_generation = g;
    return t;
}

static void traffic_count(uintptr_t a, size_t n, int store) {
    TrafficBuf* b = traffic_buf(a, n);
    if (!b) return;
    traffic.accessed[store] += (double)n;
    // A sector comes from DRAM at its first load, unless the launch has written it already
    // (then it is in the cache), and goes back once however often it is stored.
    std::vector<uint64_t>& bits = b->bits[store];
    const std::vector<uint64_t>& stored = b->bits[1];
    for (size_t sec = (a - b->base) / 32, last = (a + n - 1 - b->base) / 32; sec <= last; sec++) {
        const uint64_t bit = 1ull << (sec % 64);
        if ((bits[sec / 64] | stored[sec / 64]) & bit) continue;
        bits[sec / 64] |= bit;
        launch_sectors[store] += 1;
        if (!b->touched) { b->touched = true; traffic_touched.push_back(b); }
    }
}

void traffic_access(const void* p, size_t n, int store) {
    if ((kname || traffic_op) && n) traffic_count((uintptr_t)p, n, store != 0);
}

void traffic_range(const void* p, size_t n, int store) {
    traffic_op = true;
    traffic_access(p, n, store);
    traffic_op = false;
}

void traffic_flops(double flops) { traffic.flops += flops; }

void traffic_launch_done() {
    for (int s = 0; s < 2; s++) {
        traffic.sectors[s] += 32.0 * launch_sectors[s];
        launch_sectors[s] = 0;
    }
    for (TrafficBuf* b : traffic_touched) {
        for (int s = 0; s < 2; s++) std::fill(b->bits[s].begin(), b->bits[s].end(), 0);
        b->touched = false;
    }
    traffic_touched.clear();
    traffic.launches++;
}

void traffic_totals(Traffic* out) { *out = traffic; }

// cudaFree: the buffer's bitmap goes with it (the device is idle).
static void traffic_forget(uintptr_t base) {  // (under mem_mu)
    auto it = traffic_bufs.find(base);
    if (it == traffic_bufs.end()) return;
    delete it->second;
    traffic_bufs.erase(it);
    traffic_generation.fetch_add(1, std::memory_order_release);
}

}  // namespace emu

// ----------------------------------------------------------------------------
// Streams and events: a device thread runs the streams' work, asynchronously to the host
//
// Every stream (the legacy default stream NULL included) is a FIFO of operations: kernels,
// copies, memsets, event records and waits, cuBLASLt/CUB calls, emu::enqueue work. An
// operation runs after the previous one of its stream and after its dependencies: the event
// a cudaStreamWaitEvent waits on (the stream position cudaEventRecord captured when it was
// issued), and the legacy stream's implicit synchronisation (an operation on the legacy
// stream waits for the work issued before it on every blocking stream; an operation on a
// blocking stream waits for the legacy stream's work issued before it; non-blocking streams
// are independent of it). The device thread picks among the streams whose next operation can
// run at random (EMU_SEED), so unordered streams interleave differently from seed to seed.
// It also lags behind the host: it sees the operations issued only once the host has queued
// a random number of them (up to kMaxLag), blocks in a synchronising call, polls an event or
// stream, or has left them alone for a few milliseconds (the device must progress without
// the host: a peer process's collective may wait for it). So a host that reads a pinned
// buffer before its copy is done reads the old contents, and a consumer stream that does not
// wait for its producer reads poison. emu::enqueue work (which may block on peer processes)
// runs on a thread of its own stream, other streams go on meanwhile. EMU_STREAMS=sync: every
// operation runs when it is issued, on the host thread (the old, synchronous emulator).

struct CUevent_st;
namespace emu {
struct Dep { CUstream_st* s; uint64_t seq; };  // done once s has completed its operation seq
enum OpKind { OP_DEVICE, OP_BLOCKING, OP_MARK };  // device thread / the stream's thread / no work
struct Op {
    uint64_t idx = 0, seq = 0;    // issue number (all streams), number in its stream
    OpKind kind = OP_DEVICE;
    std::string what;
    std::function<void()> fn;
    std::vector<Dep> deps;
    CUevent_st* ev = NULL;        // cudaEventRecord: stamps the event's time when it runs
};
}  // namespace emu

struct CUstream_st {
    unsigned flags = 0;
    int priority = 0;
    bool live = true;             // cudaStreamDestroy: the queued work still runs (as CUDA does)
    std::string name;             // in messages
    std::deque<emu::Op> q;        // issued, not yet started
    uint64_t issued = 0, done = 0;  // operations issued / completed (in order: FIFO)
    bool busy = false;            // its front operation is running
    // The thread that runs this stream's emu::enqueue work (started at the first), the
    // operation handed to it.
    std::thread* worker = NULL;
    emu::Op wop;
    bool wop_set = false;
    std::condition_variable wcv;
};
// An event is the position in a stream its last cudaEventRecord captured (s NULL: never
// recorded); it is complete once that stream completed its operation seq.
struct CUevent_st {
    unsigned flags = 0;
    bool live = true;
    CUstream_st* s = NULL;
    uint64_t seq = 0;
    double t = 0.0;               // when the record ran (host clock, ms)
};

namespace emu {

static bool init_async() {
    const char* m = getenv("EMU_STREAMS");
    if (!m || !*m || !strcmp(m, "async")) return true;
    if (!strcmp(m, "sync")) return false;
    fprintf(stderr, "EMU: EMU_STREAMS=%s: expected async or sync\n", m);
    abort();
}
static unsigned long long init_seed() {
    const char* e = getenv("EMU_SEED");
    return e && *e ? strtoull(e, NULL, 0) : 1;
}
static const bool g_async = init_async();
static const unsigned long long g_seed = init_seed();
static const char* streams_mode() { return g_async ? "async" : "sync"; }
static unsigned long long seed() { return g_seed; }

// splitmix64: the host's draws (how far the device lags) and the device thread's (which
// stream runs next, how long it waits for a silent host) come from separate generators.
struct Rng {
    uint64_t x;
    uint64_t next() {
        uint64_t z = (x += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    unsigned below(unsigned n) { return (unsigned)(next() % n); }
};

enum { kMaxLag = 48, kMaxPending = 1 << 16 };
// All of the following is guarded by mu (and never destroyed, see mem_mu).
static std::mutex& mu = *new std::mutex;
static std::condition_variable& dev_cv = *new std::condition_variable;   // the device thread waits
static std::condition_variable& host_cv = *new std::condition_variable;  // a synchronising call waits
static std::vector<CUstream_st*>& streams = *new std::vector<CUstream_st*>;
static CUstream_st* const legacy = [] {
    CUstream_st* s = new CUstream_st;
    s->name = "the legacy default stream";
    streams.push_back(s);
    return s;
}();
static std::map<const void*, int>& live_handles = *new std::map<const void*, int>;  // 1 stream, 2 event
static Rng host_rng{g_seed * 0x2545f4914f6cdd1dull + 1}, dev_rng{g_seed ^ 0x5851f42d4c957f2dull};
static uint64_t issued_total = 0;  // operations issued so far
static uint64_t released = 0;      // ... of which the device thread may see
static uint64_t lag = 1 + host_rng.below(kMaxLag);  // release when this many are unreleased
static long long pending = 0, ops_total = 0, choices = 0;
static int nstreams = 0;
static bool shutting_down = false;
static std::thread* device = NULL;
static long long stream_ops() { return ops_total; }
static long long stream_choices() { return choices; }

static CUstream_st* S(cudaStream_t s) { return s ? s : legacy; }
static bool live(const void* h, int kind) {
    auto it = live_handles.find(h);
    return it != live_handles.end() && it->second == kind;
}
static bool stream_ok(cudaStream_t s) { return s == NULL || live(s, 1); }  // (under mu)
static bool blocking(const CUstream_st* s) { return !(s->flags & cudaStreamNonBlocking); }

static double now_ms() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

// Runs an operation on this thread, named in the messages of any abort inside it.
static void run_op(CUstream_st* s, Op& op) {
    if (op.kind == OP_MARK) {
        if (op.ev && op.ev->s == s && op.ev->seq == op.seq) op.ev->t = now_ms();  // not re-recorded since
        return;
    }
    op_what = op.what.c_str();
    op_stream = s->name.c_str();
    op.fn();
    op_what = op_stream = NULL;
}

static void complete(CUstream_st* s, uint64_t seq) {  // (under mu)
    s->done = seq;
    s->busy = false;
    pending--;
    host_cv.notify_all();
}

static void release() {  // the device thread may see everything issued (under mu)
    if (released == issued_total) return;  // (a polling host draws nothing more)
    released = issued_total;
    lag = 1 + host_rng.below(kMaxLag);
    dev_cv.notify_one();
}

static bool runnable(const CUstream_st* s, uint64_t visible) {
    if (s->busy || s->q.empty()) return false;
    const Op& op = s->q.front();
    if (op.idx > visible) return false;
    for (const Dep& d : op.deps)
        if (d.s->done < d.seq) return false;
    return true;
}

static void worker_main(CUstream_st* s) {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
        s->wcv.wait(lk, [s] { return s->wop_set || shutting_down; });
        if (!s->wop_set) return;
        Op op = std::move(s->wop);
        s->wop_set = false;
        lk.unlock();
        run_op(s, op);
        lk.lock();
        complete(s, op.seq);
        dev_cv.notify_one();
    }
}

// The device: one operation at a time (a kernel's blocks run one after another anyway), from
// a random stream among those that can go on. It sees the operations up to `visible`, and
// moves that to what the host released only when nothing it sees can run, so that its picks
// depend on the seed and the program's own order of issues and synchronisations rather than
// on thread timing (except where a silent host or another process's collective intervenes).
static void device_main() {
    std::unique_lock<std::mutex> lk(mu);
    uint64_t visible = 0;
    std::vector<CUstream_st*> ready;
    while (!shutting_down) {
        ready.clear();
        for (CUstream_st* s : streams)
            if (runnable(s, visible)) ready.push_back(s);
        if (ready.empty()) {
            if (visible < released) {
                visible = released;
            } else if (released < issued_total) {
                // The host has gone quiet with work queued: look at it after a short while,
                // whatever the host does. (A fixed while: dev_rng draws only the picks, so
                // that they do not depend on how often this happens.)
                if (dev_cv.wait_for(lk, std::chrono::milliseconds(2)) == std::cv_status::timeout) released = issued_total;
            } else {
                dev_cv.wait(lk);
            }
            continue;
        }
        choices += ready.size() > 1;
        CUstream_st* s = ready[ready.size() == 1 ? 0 : dev_rng.below((unsigned)ready.size())];
        Op op = std::move(s->q.front());
        s->q.pop_front();
        s->busy = true;
        if (op.kind == OP_MARK) {
            run_op(s, op);
            complete(s, op.seq);
        } else if (op.kind == OP_BLOCKING) {
            s->wop = std::move(op);
            s->wop_set = true;
            if (!s->worker) {
                s->worker = new std::thread(worker_main, s);
                s->worker->detach();  // it may be blocked on a peer at exit: never joined
            }
            s->wcv.notify_one();
        } else {
            lk.unlock();
            run_op(s, op);
            lk.lock();
            complete(s, op.seq);
        }
    }
}

// At exit the queued work is dropped (as CUDA does with a context torn down): the device
// thread finishes the operation it runs and stops; stream threads may be blocked on peers,
// the process ends them.
static void shutdown_device() {
    std::unique_lock<std::mutex> lk(mu);
    if (!device || shutting_down) return;
    shutting_down = true;
    dev_cv.notify_all();
    for (CUstream_st* s : streams) s->wcv.notify_all();
    host_cv.notify_all();
    if (std::this_thread::get_id() == device->get_id()) return;
    lk.unlock();
    device->join();
}

// Queues an operation on s (lk holds mu); returns its number in s. `extra`: an event waited on.
static uint64_t issue(std::unique_lock<std::mutex>& lk, CUstream_st* s, OpKind kind, const char* what,
                      std::function<void()> fn, CUevent_st* ev = NULL, Dep extra = Dep{NULL, 0}) {
    Op op;
    op.kind = kind;
    op.what = what;
    op.fn = std::move(fn);
    op.ev = ev;
    op.idx = ++issued_total;
    op.seq = ++s->issued;
    if (ev) {
        ev->s = s;
        ev->seq = op.seq;
    }
    ops_total++;
    if (!g_async || shutting_down) {
        // Synchronous mode: it runs now, on this thread. (After the device thread stopped at
        // exit, the work is dropped.)
        if (!shutting_down) {
            lk.unlock();
            run_op(s, op);
            lk.lock();
        }
        s->done = op.seq;
        return op.seq;
    }
    if (!device) {
        device = new std::thread(device_main);
        atexit(shutdown_device);  // registered after print_stats: runs before it
    }
    if (s == legacy) {
        for (CUstream_st* b : streams)
            if (b != legacy && blocking(b) && b->done < b->issued) op.deps.push_back(Dep{b, b->issued});
    } else if (blocking(s) && legacy->done < legacy->issued) {
        op.deps.push_back(Dep{legacy, legacy->issued});
    }
    if (extra.s && extra.s != s && extra.s->done < extra.seq) op.deps.push_back(extra);
    s->q.push_back(std::move(op));
    pending++;
    const uint64_t seq = s->issued;
    if (issued_total - released >= lag) release();
    if (pending > kMaxPending) {  // a full launch queue blocks the host, as on a GPU
        release();
        host_cv.wait(lk, [] { return pending <= kMaxPending / 2 || shutting_down; });
    }
    return seq;
}

// A synchronising call: the host waits (lk holds mu) until done(); the device sees all the
// work issued so far meanwhile.
template <class P>
static void host_wait(std::unique_lock<std::mutex>& lk, const char* api, P done) {
    if (done() || shutting_down) return;
    if (op_what) die("%s inside stream work (%s): it would wait for itself", api, op_what);
    release();
    host_cv.wait(lk, [&] { return done() || shutting_down; });
}
// Every stream's work issued so far (cudaDeviceSynchronize; also cudaFree, cudaFreeHost).
static void sync_all(std::unique_lock<std::mutex>& lk, const char* api) {
    std::vector<Dep> snap;
    for (CUstream_st* s : streams) snap.push_back(Dep{s, s->issued});
    host_wait(lk, api, [&] {
        for (const Dep& d : snap)
            if (d.s->done < d.seq) return false;
        return true;
    });
}
static void sync_all(const char* api) {
    std::unique_lock<std::mutex> lk(mu);
    sync_all(lk, api);
}

static void enqueue_as(cudaStream_t s, OpKind kind, const char* what, std::function<void()> work) {
    std::unique_lock<std::mutex> lk(mu);
    if (!stream_ok(s)) {
        lk.unlock();
        die("%s on %p: not a live stream", what, (void*)s);
    }
    issue(lk, S(s), kind, what, std::move(work));
}
void enqueue(cudaStream_t s, const char* what, std::function<void()> work) {
    enqueue_as(s, OP_BLOCKING, what, std::move(work));
}
void enqueue_compute(cudaStream_t s, const char* what, std::function<void()> work) {
    enqueue_as(s, OP_DEVICE, what, std::move(work));
}

}  // namespace emu

using namespace emu;

static cudaError_t fail(cudaError_t e, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static cudaError_t fail(cudaError_t e, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "EMU: note: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " -> %s\n", cudaGetErrorName(e));
    va_end(ap);
    return e;
}

// ----------------------------------------------------------------------------
// Memory: allocation is a host call (new memory is no stream's business); cudaFree and
// cudaFreeHost wait for the device first (CUDA's cudaFree synchronises the device; the
// emulator does the same for cudaFreeHost rather than free memory a queued copy uses).

static size_t device_bytes = 0;  // in live cudaMalloc buffers (cudaMemGetInfo; under mem_mu)
static const size_t kDeviceMem = (size_t)80 << 30;

cudaError_t cudaMalloc(void** p, size_t bytes) {
    if (kname) die("cudaMalloc inside a kernel");
    unsigned char* raw = (unsigned char*)aligned_alloc(256, alloc_total(bytes));
    if (!raw) return fail(cudaErrorMemoryAllocation, "cudaMalloc(%zu)", bytes);
    memset(raw, GUARD_BYTE, alloc_total(bytes));
    unsigned char* user = raw + GUARD;
    memset(user, 0xff, bytes);
    std::lock_guard<std::mutex> lk(mem_mu);
    allocs[(uintptr_t)user] = bytes;
    device_bytes += (bytes + 255) & ~(size_t)255;
    *p = user;
    return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
    if (p == NULL) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lk(mem_mu);
        if (allocs.find((uintptr_t)p) == allocs.end())
            return fail(cudaErrorInvalidValue, "cudaFree(%p): not a cudaMalloc pointer", p);
    }
    sync_all("cudaFree");
    std::lock_guard<std::mutex> lk(mem_mu);
    auto it = allocs.find((uintptr_t)p);
    check_guards(it->first, it->second, "cudaFree");
    device_bytes -= (it->second + 255) & ~(size_t)255;
    emu::traffic_forget(it->first);
    allocs.erase(it);
    free((unsigned char*)p - GUARD);
    return cudaSuccess;
}

// Pinned host memory: plain aligned host memory, registered so that cudaFreeHost can check
// its argument and copies know it is pinned (asynchronous). cudaMemGetInfo: free = the
// device's memory less the live cudaMalloc buffers.
cudaError_t cudaMallocHost(void** p, size_t bytes) {
    if (kname) die("cudaMallocHost inside a kernel");
    void* m = aligned_alloc(256, (bytes + 255) & ~(size_t)255);
    if (!m) return fail(cudaErrorMemoryAllocation, "cudaMallocHost(%zu)", bytes);
    std::lock_guard<std::mutex> lk(mem_mu);
    host_allocs[(uintptr_t)m] = bytes;
    *p = m;
    return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
    if (p == NULL) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lk(mem_mu);
        if (host_allocs.find((uintptr_t)p) == host_allocs.end())
            return fail(cudaErrorInvalidValue, "cudaFreeHost(%p): not a cudaMallocHost pointer", p);
    }
    sync_all("cudaFreeHost");
    std::lock_guard<std::mutex> lk(mem_mu);
    host_allocs.erase((uintptr_t)p);
    free(p);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    std::lock_guard<std::mutex> lk(mem_mu);
    *free_bytes = kDeviceMem - device_bytes;
    *total_bytes = kDeviceMem;
    return cudaSuccess;
}

// Copies, per the runtime API's "API synchronization behavior":
//   cudaMemcpy (on the legacy stream): host -> device from pageable memory: the legacy stream
//   is synchronised, the host buffer staged, and the call returns before the copy is done;
//   from pinned memory it returns once it is done; device -> host returns once done;
//   device -> device does not wait; host -> host is synchronous.
//   cudaMemcpyAsync: device -> pageable host returns once done; from pageable host memory
//   the buffer is staged when the call returns (the host may reuse it); host -> host is
//   synchronous; everything else (pinned host memory, device -> device) is fully
//   asynchronous: the copy happens when the stream gets to it.
static cudaError_t copy(const char* api, void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                        cudaStream_t st, bool sync_api) {
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return fail(cudaErrorInvalidValue, "%s kind %d", api, (int)kind);
    bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyDefault) {  // unified addressing: where the pointers are
        dst_dev = device_range_ok(dst, 1);
        src_dev = device_range_ok(src, 1);
    }
    if (dst_dev && !device_range_ok(dst, n))
        return fail(cudaErrorInvalidValue, "%s: destination %p + %zu bytes is not inside one device buffer", api, dst, n);
    if (src_dev && !device_range_ok(src, n))
        return fail(cudaErrorInvalidValue, "%s: source %p + %zu bytes is not inside one device buffer", api, src, n);
    std::unique_lock<std::mutex> lk(mu);
    if (!sync_api && !stream_ok(st))
        return fail(cudaErrorInvalidResourceHandle, "%s on %p: not a live stream", api, (void*)st);
    if (n == 0) return cudaSuccess;
    CUstream_st* s = sync_api ? legacy : S(st);
    bool wait = false, stage = false;
    if (!dst_dev && !src_dev) {
        wait = true;
    } else if (!dst_dev) {
        wait = sync_api || !pinned_range(dst, n);
    } else if (!src_dev) {
        if (pinned_range(src, n)) {
            wait = sync_api;
        } else {
            stage = true;
            if (sync_api) {
                CUstream_st* l = legacy;
                const uint64_t last = l->issued;
                host_wait(lk, api, [l, last] { return l->done >= last; });
            }
        }
    }
    uint64_t seq;
    if (stage) {
        std::vector<unsigned char> buf((const unsigned char*)src, (const unsigned char*)src + n);
        seq = issue(lk, s, OP_DEVICE, api, [dst, buf = std::move(buf)]() { memcpy(dst, buf.data(), buf.size()); });
    } else {
        seq = issue(lk, s, OP_DEVICE, api, [dst, src, n, dst_dev, src_dev]() {
            memcpy(dst, src, n);
            if (dst_dev && src_dev) {  // device -> device: a copy kernel's traffic (transfers are not counted)
                emu::traffic_range(src, n, 0);
                emu::traffic_range(dst, n, 1);
                emu::traffic_launch_done();
            }
        });
    }
    if (wait) host_wait(lk, api, [s, seq] { return s->done >= seq; });
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
    return copy("cudaMemcpy", dst, src, n, kind, NULL, true);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t s) {
    return copy("cudaMemcpyAsync", dst, src, n, kind, s, false);
}
// Both memsets of device memory are asynchronous to the host; cudaMemset is on the legacy stream.
static cudaError_t set(const char* api, void* p, int value, size_t n, cudaStream_t st, bool sync_api) {
    if (!device_range_ok(p, n))
        return fail(cudaErrorInvalidValue, "%s: %p + %zu bytes is not inside one device buffer", api, p, n);
    std::unique_lock<std::mutex> lk(mu);
    if (!sync_api && !stream_ok(st))
        return fail(cudaErrorInvalidResourceHandle, "%s on %p: not a live stream", api, (void*)st);
    if (n) issue(lk, sync_api ? legacy : S(st), OP_DEVICE, api, [p, value, n]() {
        memset(p, value, n);
        emu::traffic_range(p, n, 1);
        emu::traffic_launch_done();
    });
    return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t n) { return set("cudaMemset", p, value, n, NULL, true); }
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s) { return set("cudaMemsetAsync", p, value, n, s, false); }

// ----------------------------------------------------------------------------
// Device, streams, events, errors

// The emulated GPU: an sm_90 (227 KiB of shared memory per block with the opt-in), or with
// EMU_SM=75 an sm_75 (a T4: no bf16 tensor cores, 64 KiB with the opt-in), for the host-side
// choices of older GPUs (the kernels themselves run whatever the number).
static int emu_sm() {
    const char* s = getenv("EMU_SM");
    return s && !strcmp(s, "75") ? 75 : 90;
}
static int optin_smem() { return emu_sm() == 75 ? 65536 : 232448; }

long long clock64() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int emu::device_count() {
    const char* s = getenv("EMU_DEVICE_COUNT");
    const int n = s ? atoi(s) : 1;
    return n >= 1 && n <= 64 ? n : 1;
}
static int current_device = 0;
cudaError_t cudaGetDeviceCount(int* count) { *count = emu::device_count(); return cudaSuccess; }
cudaError_t cudaSetDevice(int dev) {
    if (dev < 0 || dev >= emu::device_count()) return fail(cudaErrorInvalidDevice, "cudaSetDevice(%d)", dev);
    current_device = dev;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* dev) { *dev = current_device; return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int dev) {
    if (dev < 0 || dev >= emu::device_count()) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties(%d)", dev);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuda_emu (CPU emulation of an sm_%d GPU)", emu_sm());
    p->totalGlobalMem = kDeviceMem;
    p->sharedMemPerBlock = 48 << 10;
    p->sharedMemPerBlockOptin = optin_smem();
    p->sharedMemPerMultiprocessor = 228 << 10;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024; p->maxThreadsDim[1] = 1024; p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 0x7fffffff; p->maxGridSize[1] = 65535; p->maxGridSize[2] = 65535;
    p->multiProcessorCount = 132;
    p->major = emu_sm() / 10;
    p->minor = emu_sm() % 10;
    p->l2CacheSize = 50 << 20;
    p->maxThreadsPerMultiProcessor = 2048;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr attr, int dev) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, dev) != cudaSuccess) return cudaErrorInvalidDevice;
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
        case cudaDevAttrWarpSize: *v = 32; break;
        case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
        case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
        case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
        default: die("cudaDeviceGetAttribute: attribute %d not emulated", (int)attr);
    }
    return cudaSuccess;
}
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > optin_smem())
            return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %d): the limit is %d", value,
                        optin_smem());
        smem_optin[func] = value;
        return cudaSuccess;
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) return cudaSuccess;
    die("cudaFuncSetAttribute: attribute %d not emulated", (int)attr);
}
cudaError_t cudaDeviceSynchronize(void) {
    sync_all("cudaDeviceSynchronize");
    return cudaSuccess;
}

// Stream and event handles are checked for liveness (their objects are kept: queued work may
// still refer to them). Priorities: the range of sm_90 (0 least, -5 greatest); the emulated
// device ignores them.
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int priority) {
    if (flags & ~(unsigned)cudaStreamNonBlocking) return fail(cudaErrorInvalidValue, "cudaStreamCreate flags 0x%x", flags);
    std::lock_guard<std::mutex> lk(mu);
    CUstream_st* n = new CUstream_st;
    n->flags = flags;
    n->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
    n->name = "stream " + std::to_string(++nstreams) + (blocking(n) ? " (blocking)" : " (non-blocking)");
    streams.push_back(n);
    live_handles[n] = 1;
    *s = n;
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) { return cudaStreamCreateWithPriority(s, flags, 0); }
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithPriority(s, cudaStreamDefault, 0); }
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::lock_guard<std::mutex> lk(mu);
    if (!live(s, 1)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p): not a live stream", (void*)s);
    live_handles.erase(s);
    s->live = false;  // its queued work completes (CUDA releases the stream after that)
    return cudaSuccess;
}
// The legacy stream's work waits for the blocking streams: synchronising it waits for theirs.
cudaError_t cudaStreamSynchronize(cudaStream_t st) {
    std::unique_lock<std::mutex> lk(mu);
    if (!stream_ok(st)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize(%p): not a live stream", (void*)st);
    std::vector<Dep> snap;
    for (CUstream_st* s : streams)
        if (s == S(st) || (st == NULL && blocking(s))) snap.push_back(Dep{s, s->issued});
    host_wait(lk, "cudaStreamSynchronize", [&] {
        for (const Dep& d : snap)
            if (d.s->done < d.seq) return false;
        return true;
    });
    return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t st) {
    std::lock_guard<std::mutex> lk(mu);
    if (!stream_ok(st)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery(%p): not a live stream", (void*)st);
    if (S(st)->done >= S(st)->issued) return cudaSuccess;
    release();  // a host that polls is waiting: the device sees the work
    return cudaErrorNotReady;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
    if (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming))
        return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags flags 0x%x", flags);
    std::lock_guard<std::mutex> lk(mu);
    *e = new CUevent_st;
    (*e)->flags = flags;
    live_handles[*e] = 2;
    return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    std::lock_guard<std::mutex> lk(mu);
    if (!live(e, 2)) return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy(%p): not a live event", (void*)e);
    live_handles.erase(e);
    e->live = false;  // kept: a queued record still stamps it, waits already copied its position
    return cudaSuccess;
}
// Captures the work issued to s so far (a later record does not move what earlier
// cudaStreamWaitEvent calls wait for: they copied the position).
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    std::unique_lock<std::mutex> lk(mu);
    if (!live(e, 2)) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord(%p): not a live event", (void*)e);
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord on %p: not a live stream", (void*)s);
    issue(lk, S(s), OP_MARK, "cudaEventRecord", nullptr, e);
    return cudaSuccess;
}
static bool event_done(const CUevent_st* e) { return !e->s || e->s->done >= e->seq; }  // never recorded: done
cudaError_t cudaEventQuery(cudaEvent_t e) {
    std::lock_guard<std::mutex> lk(mu);
    if (!live(e, 2)) return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery(%p): not a live event", (void*)e);
    if (event_done(e)) return cudaSuccess;
    release();  // a host that polls is waiting: the device sees the work
    return cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    std::unique_lock<std::mutex> lk(mu);
    if (!live(e, 2)) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize(%p): not a live event", (void*)e);
    if (!e->s) return cudaSuccess;
    CUstream_st* s = e->s;
    const uint64_t seq = e->seq;
    host_wait(lk, "cudaEventSynchronize", [s, seq] { return s->done >= seq; });
    return cudaSuccess;
}
// Work issued to s after this call waits for the event's captured work (nothing, if it was
// never recorded).
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    std::unique_lock<std::mutex> lk(mu);
    if (!live(e, 2)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent(%p): not a live event", (void*)e);
    if (!stream_ok(s)) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent on %p: not a live stream", (void*)s);
    if (flags != 0) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent flags 0x%x", flags);
    issue(lk, S(s), OP_MARK, "cudaStreamWaitEvent", nullptr, NULL, Dep{e->s, e->seq});
    return cudaSuccess;
}
// Times are the host clock when the device thread reached the records.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    std::lock_guard<std::mutex> lk(mu);
    if (!live(a, 2) || !live(b, 2)) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of a destroyed event");
    if ((a->flags | b->flags) & cudaEventDisableTiming)
        return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an event created with cudaEventDisableTiming");
    if (!a->s || !b->s) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an unrecorded event");
    if (!event_done(a) || !event_done(b)) return cudaErrorNotReady;
    *ms = (float)(b->t - a->t);
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) { const cudaError_t e = last_error; last_error = cudaSuccess; return e; }
cudaError_t cudaPeekAtLastError(void) { return last_error; }
const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    }
    return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        default: return cudaGetErrorName(e);
    }
}

// ----------------------------------------------------------------------------
// Launch: every block of the grid in turn, every thread of the block a fiber

namespace emu {

static void deadlock() {
    int at_sync = 0, at_warp = 0;
    for (int i = 0; i < nthreads; i++) {
        at_sync += threads[i].state == AT_SYNC;
        at_warp += threads[i].state == AT_WARP;
    }
    cur = NULL;
    die("deadlock in block (%u,%u,%u): %d threads wait at __syncthreads, %d at warp collectives, %d exited",
        bid.x, bid.y, bid.z, at_sync, at_warp, ndone);
}

static void run_block() {
    const int n = nthreads;
    ndone = sync_arrived = 0;
    for (int w = 0; w * 32 < n; w++) {
        warps[w].lanes = n - 32 * w < 32 ? n - 32 * w : 32;
        warps[w].arrived = warps[w].exited = 0;
        warps[w].gen = 0;
    }
    for (int i = 0; i < n; i++) {
        Thread& t = threads[i];
        if (!t.stack) {  // lazily, with a guard page below each stack
            const size_t page = (size_t)sysconf(_SC_PAGESIZE);
            char* m = (char*)mmap(NULL, STACK_BYTES + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) die("mmap of a fiber stack failed");
            mprotect(m, page, PROT_NONE);
            t.stack = m + page;
        }
        fiber_init(t.fiber, t.stack, STACK_BYTES, fiber_main);
        t.state = RUN;
        t.lin = i;
        t.idx = make_uint3(i % bdim.x, (i / bdim.x) % bdim.y, i / (bdim.x * bdim.y));
        t.committed = 0;
        t.copies.clear();
    }
    memset(smem, 0xff, smem_bytes + SMEM_GUARD);
    block_serial++;
    // One warp at a time, as far as it goes (to __syncthreads or its end), its lanes one at a
    // time from one warp collective to the next: the warps get as far apart as the barriers
    // allow. The order (ascending or descending warps and lanes) alternates every sweep,
    // and by block.
    const int nwarps = (n + 31) / 32;
    bool up = block_serial & 1;
    while (ndone < n) {
        bool ran = false;
        for (int wk = 0; wk < nwarps; wk++) {
            const int w = up ? wk : nwarps - 1 - wk, lanes = warps[w].lanes;
            for (bool any = true; any;) {
                any = false;
                for (int lk = 0; lk < lanes; lk++) {
                    Thread& t = threads[32 * w + (up ? lk : lanes - 1 - lk)];
                    if (t.state != RUN) continue;
                    cur = &t;
                    tid = t.idx;
                    fiber_switch(sched, t.fiber);
                    any = ran = true;
                }
            }
        }
        cur = NULL;
        up = !up;
        if (!ran) deadlock();
    }
    for (int i = 0; i < SMEM_GUARD; i++)
        if (smem[smem_bytes + i] != 0xff) die("write past the end of the %zu bytes of dynamic shared memory", smem_bytes);
    stats.blocks++;
    stats.threads += n;
}

// Runs a launch's grid (on the device thread), then checks every buffer's guard zones.
static void run_kernel(const char* name, dim3 grid, dim3 block, size_t smem_req, const std::function<void()>& body) {
    if (smem_cap < smem_req + SMEM_GUARD) {
        free(smem);
        smem_cap = smem_req + SMEM_GUARD;
        smem = (unsigned char*)aligned_alloc(128, (smem_cap + 127) & ~(size_t)127);
    }
    smem_bytes = smem_req;
    kname = name;
    g_body = &body;
    bdim = block;
    gdim = grid;
    nthreads = (int)((unsigned long long)block.x * block.y * block.z);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                bid = make_uint3(x, y, z);
                run_block();
            }
    check_all_guards(name);
    traffic_launch_done();
    kname = NULL;
}

// The launch is checked now (the runtime reports a bad configuration at the launch, through
// cudaGetLastError); the grid runs when its stream gets to it, with the arguments captured
// in body.
// The CUPTI shim: one subscriber (a process-wide registration, as CUPTI's), called back on
// the host thread that launches.
static CUpti_Subscriber_st cupti_sub;

void report_launch(int domain, const char* what) {
    if (!cupti_sub.active) return;
    if ((domain == CUPTI_CB_DOMAIN_DRIVER_API && !cupti_sub.driver) || (domain == CUPTI_CB_DOMAIN_RUNTIME_API && !cupti_sub.runtime))
        return;
    const CUpti_CallbackId cbid = domain == CUPTI_CB_DOMAIN_DRIVER_API ? CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel
                                                                       : CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000;
    for (int site = CUPTI_API_ENTER; site <= CUPTI_API_EXIT; site++) {
        CUpti_CallbackData d = {(CUpti_ApiCallbackSite)site, what};
        cupti_sub.callback(cupti_sub.userdata, (CUpti_CallbackDomain)domain, cbid, &d);
    }
}

void launch_impl(const char* name, const void* fn, dim3 grid, dim3 block, size_t smem_req, cudaStream_t st,
                 unsigned max_threads, std::function<void()> body) {
    if (kname) die("kernel %s launched from inside a kernel (dynamic parallelism is not emulated)", name);
    stats.launches++;
    report_launch(CUPTI_CB_DOMAIN_RUNTIME_API, "cudaLaunchKernel");
    const unsigned long long n = (unsigned long long)block.x * block.y * block.z;
    cudaError_t err = cudaSuccess;
    if (n == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
        n > 1024 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535) {
        err = fail(cudaErrorInvalidConfiguration, "launch of %s with grid (%u,%u,%u), block (%u,%u,%u)", name,
                   grid.x, grid.y, grid.z, block.x, block.y, block.z);
    } else if (max_threads && n > max_threads) {
        err = fail(cudaErrorLaunchOutOfResources, "launch of %s with %llu threads per block, __launch_bounds__(%u)",
                   name, n, max_threads);
    } else if (smem_req > (48 << 10)) {
        auto it = smem_optin.find(fn);
        const size_t limit = it == smem_optin.end() ? (size_t)(48 << 10) : (size_t)it->second;
        if (smem_req > limit)
            err = fail(cudaErrorInvalidValue, "launch of %s with %zu bytes of dynamic shared memory, opted in for %zu",
                       name, smem_req, limit);
    }
    std::unique_lock<std::mutex> lk(mu);
    if (err == cudaSuccess && !stream_ok(st))
        err = fail(cudaErrorInvalidResourceHandle, "launch of %s on %p: not a live stream", name, (void*)st);
    if (err != cudaSuccess) { last_error = err; return; }
    issue(lk, S(st), OP_DEVICE, name, [name, grid, block, smem_req, body = std::move(body)]() {
        run_kernel(name, grid, block, smem_req, body);
    });
}

// ----------------------------------------------------------------------------
// PTX: the asm statements, parsed once per template string

enum PtxKind { P_MMA, P_LDSM, P_CP_ASYNC, P_COMMIT, P_WAIT, P_WAIT_ALL };
struct Opnd { int reg; long long imm; };            // reg < 0: an immediate
struct Group { bool mem; std::vector<Opnd> v; };    // {..} list, [addr] or a single operand
struct Ptx { PtxKind kind; int num; bool trans; std::vector<Group> g; };

static Ptx parse_ptx(const char* text) {
    std::string s(text);
    for (char& c : s) if (c == '\n' || c == '\t') c = ' ';
    while (!s.empty() && (s.back() == ' ' || s.back() == ';')) s.pop_back();
    size_t b = s.find_first_not_of(' ');
    if (b == std::string::npos) die("empty asm statement");
    const size_t e = s.find(' ', b);
    const std::string op = s.substr(b, e == std::string::npos ? std::string::npos : e - b);
    Ptx p;
    p.num = 0;
    p.trans = false;
    // operands: split at commas outside {} and []
    std::string rest = e == std::string::npos ? "" : s.substr(e);
    int depth = 0;
    std::string item;
    std::vector<std::string> items;
    for (char c : rest + ",") {
        if (c == '{' || c == '[') depth++;
        if (c == '}' || c == ']') depth--;
        if (c == ',' && depth == 0) {
            if (item.find_first_not_of(' ') != std::string::npos) items.push_back(item);
            item.clear();
        } else {
            item += c;
        }
    }
    for (const std::string& it : items) {
        Group g;
        g.mem = it.find('[') != std::string::npos;
        for (size_t i = 0; i < it.size(); i++) {
            if (it[i] == '%') {
                g.v.push_back(Opnd{atoi(it.c_str() + i + 1), 0});
            } else if ((it[i] >= '0' && it[i] <= '9') && (i == 0 || it[i - 1] == ' ' || it[i - 1] == '{')) {
                g.v.push_back(Opnd{-1, atoll(it.c_str() + i)});
                while (i + 1 < it.size() && it[i + 1] >= '0' && it[i + 1] <= '9') i++;
            } else if (it[i] == '+' || it[i] == '-') {
                die("asm \"%s\": address offsets are not emulated", text);
            }
            if (it[i] == '%') while (i + 1 < it.size() && it[i + 1] >= '0' && it[i + 1] <= '9') i++;
        }
        p.g.push_back(g);
    }
    auto shape = [&](std::initializer_list<size_t> sizes) {
        if (p.g.size() != sizes.size()) die("asm \"%s\": %zu operands, expected %zu", text, p.g.size(), sizes.size());
        size_t i = 0;
        for (size_t n : sizes) {
            if (p.g[i].v.size() != n) die("asm \"%s\": operand %zu has %zu parts, expected %zu", text, i, p.g[i].v.size(), n);
            i++;
        }
    };
    if (op == "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" ||
        op == "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") {
        p.kind = P_MMA;
        p.num = op.find(".f16.f16.") != std::string::npos;  // 1: .f16 A/B, 0: .bf16
        shape({4, 4, 2, 4});
    } else if (op.rfind("ldmatrix.sync.aligned.m8n8.x", 0) == 0) {
        const std::string tail = op.substr(28);  // "4.trans.shared.b16"
        p.kind = P_LDSM;
        p.num = atoi(tail.c_str());
        p.trans = tail.find(".trans") != std::string::npos;
        const std::string after = tail.substr(1 + (p.trans ? 6 : 0));
        if ((p.num != 1 && p.num != 2 && p.num != 4) || (after != ".shared.b16" && after != ".shared::cta.b16"))
            die("unsupported PTX: %s", op.c_str());
        shape({(size_t)p.num, 1});
        if (!p.g[1].mem) die("asm \"%s\": the address must be [..]", text);
    } else if (op == "cp.async.cg.shared.global" || op == "cp.async.ca.shared.global" ||
               op == "cp.async.cg.shared::cta.global" || op == "cp.async.ca.shared::cta.global") {
        p.kind = P_CP_ASYNC;
        p.num = op.find(".cg.") != std::string::npos;  // 1: .cg (16 bytes only)
        shape({1, 1, 1});
    } else if (op == "cp.async.commit_group") {
        p.kind = P_COMMIT;
        shape({});
    } else if (op == "cp.async.wait_group") {
        p.kind = P_WAIT;
        shape({1});
    } else if (op == "cp.async.wait_all") {
        p.kind = P_WAIT_ALL;
        shape({});
    } else {
        die("unsupported PTX instruction: %s", op.c_str());
    }
    return p;
}

static inline uint64_t get(const AsmArg* a, size_t na, const Opnd& o) {
    if (o.reg < 0) return (uint64_t)o.imm;
    if ((size_t)o.reg >= na) die("asm operand %%%d does not exist", o.reg);
    if (!a[o.reg].p) return a[o.reg].v;
    if (a[o.reg].size == 4) return *(const uint32_t*)a[o.reg].p;  // "+f"/"+r" read back
    uint64_t v = 0;
    memcpy(&v, a[o.reg].p, a[o.reg].size);
    return v;
}
static void set32(const AsmArg* a, size_t na, const Opnd& o, uint32_t v) {
    if (o.reg < 0 || (size_t)o.reg >= na || !a[o.reg].p || a[o.reg].size != 4) die("asm output operand %%%d is not a 32-bit lvalue", o.reg);
    memcpy(a[o.reg].p, &v, 4);
}

// Element `hi` (0: the low half) of a .bf16x2 or .f16x2 register, exactly.
static float x2_elem(uint32_t reg, int hi, bool f16) {
    const uint32_t h = hi ? reg >> 16 : reg & 0xffffu;
    if (f16) return __half2float(__ushort_as_half((unsigned short)h));
    const uint32_t u = h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// mma.m16n8k16, .bf16 or .f16 A/B, .f32 C/D (PTX ISA, "Matrix Fragments for mma.m16n8k16
// with floating point type": the same layout for both), groupID = lane >> 2,
// threadID_in_group = lane % 4:
//   A: a0..a7 (two per register, lower index in the lower half)
//      row = groupID for a0, a1, a4, a5, groupID + 8 for a2, a3, a6, a7
//      col = threadID_in_group * 2 + (i & 1), + 8 for i >= 4
//   B: b0..b3: row = threadID_in_group * 2 + (i & 1), + 8 for i >= 2; col = groupID
//   C, D: c0..c3: row = groupID, + 8 for i >= 2; col = threadID_in_group * 2 + (i & 1)
struct MmaIn { uint32_t a[4], b[2]; float c[4]; int f16; };
static void mma_complete(unsigned char (*s)[SLOT]) {
    stats.mma++;
    traffic_flops(2.0 * 16 * 8 * 16);
    double A[16][16], B[16][8], D[16][8];  // D starts as C; exact products, double sums
    int f16 = 0;
    for (int L = 0; L < 32; L++) {
        MmaIn in;
        memcpy(&in, s[L], sizeof in);
        if (L == 0) f16 = in.f16;
        if (in.f16 != f16) die("mma: lanes of a warp execute .bf16 and .f16 forms together");
        const int g = L >> 2, t = L & 3;
        for (int i = 0; i < 8; i++) {
            const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
            const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
            A[row][col] = x2_elem(in.a[i / 2], i & 1, f16);
        }
        for (int i = 0; i < 4; i++) B[t * 2 + (i & 1) + (i >= 2 ? 8 : 0)][g] = x2_elem(in.b[i / 2], i & 1, f16);
        for (int i = 0; i < 4; i++) D[i < 2 ? g : g + 8][t * 2 + (i & 1)] = in.c[i];
    }
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++)
            for (int c = 0; c < 8; c++) D[r][c] += A[r][k] * B[k][c];
    for (int L = 0; L < 32; L++) {
        const int g = L >> 2, t = L & 3;
        float d[4];
        for (int i = 0; i < 4; i++) d[i] = (float)D[i < 2 ? g : g + 8][t * 2 + (i & 1)];
        memcpy(s[L], d, sizeof d);
    }
}

// ldmatrix.m8n8.x{1,2,4}.b16 (PTX ISA): threads 8i..8i+7 give the addresses of the 8 rows
// (8 x 16 bits, 16-byte aligned) of matrix i; register i of lane l receives, of matrix i,
// row l/4, columns 2(l%4) and 2(l%4)+1 (lower column in the lower half); with .trans the
// matrix is read transposed: rows 2(l%4) and 2(l%4)+1 of column l/4.
struct LdsmIn { uint64_t addr; int num, trans; };
static void ldsm_complete(unsigned char (*s)[SLOT]) {
    stats.ldmatrix++;
    LdsmIn in[32];
    for (int L = 0; L < 32; L++) memcpy(&in[L], s[L], sizeof in[L]);
    for (int L = 0; L < 32; L++)
        if (in[L].num != in[0].num || in[L].trans != in[0].trans) die("ldmatrix: lanes of a warp execute different shapes");
    const int num = in[0].num;
    for (int r = 0; r < 8 * num; r++) {
        if (in[r].addr & 15) die("ldmatrix: row address 0x%llx of lane %d is not 16-byte aligned", (unsigned long long)in[r].addr, r);
        smem_at(in[r].addr, 16, "ldmatrix");
    }
    for (int L = 0; L < 32; L++) {
        uint32_t reg[4] = {0, 0, 0, 0};
        for (int i = 0; i < num; i++) {
            for (int h = 0; h < 2; h++) {
                const int row = in[0].trans ? 2 * (L % 4) + h : L / 4;
                const int col = in[0].trans ? L / 4 : 2 * (L % 4) + h;
                uint16_t e;
                memcpy(&e, smem + in[8 * i + row].addr + 2 * col, 2);
                reg[i] |= (uint32_t)e << (16 * h);
            }
        }
        memcpy(s[L], reg, sizeof reg);
    }
}

static void cp_async_complete_until(long group_limit) {  // performs the copies of groups < limit
    std::vector<Copy>& q = cur->copies;
    size_t keep = 0;
    for (size_t i = 0; i < q.size(); i++) {
        if (q[i].group < group_limit) memcpy(q[i].dst, q[i].src, q[i].n);
        else q[keep++] = q[i];
    }
    q.resize(keep);
}

void ptx(const char* text, std::initializer_list<AsmArg> args) {
    static std::vector<std::pair<const char*, Ptx>> cache;  // a handful of asm statements
    if (!kname) die("asm \"%s\" outside a kernel", text);
    size_t ci = 0;
    while (ci < cache.size() && cache[ci].first != text) ci++;
    if (ci == cache.size()) cache.emplace_back(text, parse_ptx(text));
    const Ptx& p = cache[ci].second;
    const AsmArg* a = args.begin();
    const size_t na = args.size();
    switch (p.kind) {
        case P_MMA: {
            MmaIn in;
            in.f16 = p.num;
            for (int i = 0; i < 4; i++) in.a[i] = (uint32_t)get(a, na, p.g[1].v[i]);
            for (int i = 0; i < 2; i++) in.b[i] = (uint32_t)get(a, na, p.g[2].v[i]);
            for (int i = 0; i < 4; i++) {
                const uint32_t u = (uint32_t)get(a, na, p.g[3].v[i]);
                memcpy(&in.c[i], &u, 4);
            }
            const unsigned char* s = collective(K_MMA, 0xffffffffu, &in, sizeof in, mma_complete);
            float d[4];
            memcpy(d, s + SLOT * lane(), sizeof d);
            for (int i = 0; i < 4; i++) {
                uint32_t u;
                memcpy(&u, &d[i], 4);
                set32(a, na, p.g[0].v[i], u);
            }
            break;
        }
        case P_LDSM: {
            LdsmIn in = {get(a, na, p.g[1].v[0]), p.num, p.trans};
            const unsigned char* s = collective(K_LDMATRIX, 0xffffffffu, &in, sizeof in, ldsm_complete);
            uint32_t reg[4];
            memcpy(reg, s + SLOT * lane(), sizeof reg);
            for (int i = 0; i < p.num; i++) set32(a, na, p.g[0].v[i], reg[i]);
            break;
        }
        case P_CP_ASYNC: {
            const uint64_t dst = get(a, na, p.g[0].v[0]), n = get(a, na, p.g[2].v[0]);
            const unsigned char* src = (const unsigned char*)(uintptr_t)get(a, na, p.g[1].v[0]);
            if (p.num ? n != 16 : (n != 4 && n != 8 && n != 16)) die("cp.async of %llu bytes", (unsigned long long)n);
            if ((dst % n) || ((uintptr_t)src % n)) die("cp.async: addresses not aligned to the %llu-byte copy size", (unsigned long long)n);
            if (!device_range_ok(src, n)) die("cp.async: source %p + %llu bytes is not inside a device buffer", src, (unsigned long long)n);
            // The destination is undefined until the copy completes (at the wait): poisoned now.
            unsigned char* d = smem_at(dst, n, "cp.async");
            memset(d, 0xff, n);
            cur->copies.push_back(Copy{d, src, (unsigned)n, cur->committed});
            traffic_access(src, n, 0);  // a global load (its shared-memory side is not counted)
            stats.cp_async++;
            break;
        }
        case P_COMMIT: cur->committed++; break;
        case P_WAIT: cp_async_complete_until(cur->committed - (long)get(a, na, p.g[0].v[0])); break;
        case P_WAIT_ALL: cur->committed++; cp_async_complete_until(cur->committed); break;
    }
}

}  // namespace emu

// ----------------------------------------------------------------------------
// The CUPTI shim (include/cupti.h)

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback, void* userdata) {
    if (!subscriber || !callback) return CUPTI_ERROR_INVALID_PARAMETER;
    if (emu::cupti_sub.active) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    emu::cupti_sub = {callback, userdata, true, false, false};
    *subscriber = &emu::cupti_sub;
    return CUPTI_SUCCESS;
}
CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain) {
    if (subscriber != &emu::cupti_sub || !emu::cupti_sub.active) return CUPTI_ERROR_INVALID_PARAMETER;
    if (domain == CUPTI_CB_DOMAIN_DRIVER_API) emu::cupti_sub.driver = enable != 0;
    else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) emu::cupti_sub.runtime = enable != 0;
    else return CUPTI_ERROR_INVALID_PARAMETER;
    return CUPTI_SUCCESS;
}
CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber) {
    if (subscriber != &emu::cupti_sub || !emu::cupti_sub.active) return CUPTI_ERROR_INVALID_PARAMETER;
    emu::cupti_sub = {};
    return CUPTI_SUCCESS;
}
CUptiResult cuptiGetResultString(CUptiResult result, const char** str) {
    *str = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS"
         : result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"
                                                                    : "CUPTI_ERROR_INVALID_PARAMETER";
    return CUPTI_SUCCESS;
}
