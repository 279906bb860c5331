// NCCL for the CPU emulator: include/nccl.h says what is emulated. Written from the NCCL
// user guide (API reference, "In-place Operations", "Error handling and communicator abort",
// non-blocking communicators), not from NCCL's sources.
//
// Transport. The ranks of a communicator are processes of this machine. ncclGetUniqueId makes
// a random POSIX shared-memory name (and the slot size) and puts it in the id; the caller
// broadcasts the id's bytes itself. Each rank's ncclCommInitRank* opens (creating it if it is
// the first) the segment /dev/shm/<name>: a header (the rendezvous, a barrier, each rank's pid
// and device and the collective it is running) and one slot of slot_bytes per rank. The
// segment is sparse (tmpfs backs only the pages touched). The last rank to attach unlinks the
// name, so nothing is left in /dev/shm once a communicator exists, whatever happens to the
// processes later; an abort or destroy before that unlinks it too (best effort).
//
// Collectives. The host call checks the arguments (as NCCL does: ncclInvalidArgument /
// ncclInvalidUsage, with the reason in ncclGetLastError) and hands a self-contained work item
// (everything captured by value, the communicator's shared state by shared_ptr) to
// emu::enqueue on the stream: it runs in stream order, on a thread of that stream (on the
// calling thread with EMU_STREAMS=sync). A work item moves the data in chunks of at most one
// slot: each rank copies its part into its own slot, a barrier, each rank reads what it needs
// from every slot, a barrier (the slots are free again). Reductions go in rank order 0, 1, ...
// on every rank, so the result is deterministic and identical everywhere.
//
// Waiting. A work item blocked in a barrier gives up (and the communicator is in error, as
// ncclCommGetAsyncError then says) when: this communicator was aborted (ncclCommAbort from the
// host: no error to report, the communicator is gone); a peer aborted its end (ncclRemoteError);
// a peer process died (ncclRemoteError, as NCCL reports a broken connection); or the watchdog
// EMU_NCCL_TIMEOUT (seconds) expired (ncclSystemError). The watchdog is not NCCL's: when the
// work runs on the thread that issued it (synchronous streams), nothing else could abort it, so
// it defaults to 600 s there (the backend's default --comm-timeout); on a device thread it is
// off unless EMU_NCCL_TIMEOUT is set, as the host can poll and abort.
#include <nccl.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

// ----------------------------------------------------------------------------
// ncclGetLastError: one process-wide message (NCCL's comm argument is unused), written by the
// host calls and by work items on a device thread, hence the mutex; the caller gets a copy
// owned by its thread, so a later error cannot change the string it is reading.

std::mutex g_err_mu;
char g_err[600];

void set_last_error_v(const char* fmt, va_list ap) {
    std::lock_guard<std::mutex> lock(g_err_mu);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
}
__attribute__((format(printf, 2, 3))) ncclResult_t refuse(ncclResult_t r, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_last_error_v(fmt, ap);
    va_end(ap);
    return r;
}

double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Spinning back-off: yield first (a peer on another core answers within microseconds), then
// sleep, so that waiting ranks leave the (2) cores to the ranks that have work.
void pause_spin(unsigned* spins) {
    if (*spins < 200) {
        (*spins)++;
        sched_yield();
    } else {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

// EMU_NCCL_TIMEOUT: seconds (> 0), or -1 when unset.
double env_timeout() {
    static const double t = [] {
        const char* s = getenv("EMU_NCCL_TIMEOUT");
        const double v = s ? atof(s) : -1.0;
        return v > 0 ? v : -1.0;
    }();
    return t;
}

// ----------------------------------------------------------------------------
// The unique id and the shared segment

const uint32_t kIdMagic = 0x454d4e43;  // "CNME"
const int kMaxRanks = 256;
const size_t kDefaultSlot = (size_t)1 << 20;  // 1 MiB per rank: the model's larger units take several chunks

struct IdContents {
    uint32_t magic;
    uint32_t pad;
    uint64_t slot_bytes;
    char name[64];  // "/emu_nccl.<pid>.<random>"
};
static_assert(sizeof(IdContents) <= NCCL_UNIQUE_ID_BYTES, "the id does not fit ncclUniqueId");

struct RankInfo {
    int32_t present;  // claimed by the rank that attached with this rank number
    int32_t pid;
    int32_t device;
    int32_t pad;
    // The collective this rank is running (published before the first barrier of each one):
    // every rank compares all of them, so ranks that disagree fail together.
    uint64_t seq, count;
    int32_t kind, dtype, op, root;
};
struct Header {
    uint32_t nranks;     // set by the first rank to attach (0 -> n)
    uint32_t arrived;    // ranks attached so far
    uint32_t bar_count;  // barrier: arrivals in the current round
    uint32_t bar_sense;  // barrier: flips when a round completes
    uint32_t aborted;    // 1 + the rank that called ncclCommAbort, 0 if none
    uint32_t pad[11];
    RankInfo ranks[kMaxRanks];
};
const size_t kDataOffset = (sizeof(Header) + 4095) & ~(size_t)4095;

// Process-shared atomics on the segment's plain fields (address-free lock-free builtins).
uint32_t ld(const uint32_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void st(uint32_t* p, uint32_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

// A peer process that is gone (or a zombie: dead, not yet reaped by its launcher).
bool pid_dead(int pid) {
    if (pid <= 0) return false;
    if (kill(pid, 0) == -1 && errno == ESRCH) return true;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE* f = fopen(path, "r");
    if (!f) return false;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char* p = strrchr(buf, ')');  // "pid (comm) S ...": the state follows the name
    return p && (p[2] == 'Z' || p[2] == 'X');
}

// ----------------------------------------------------------------------------
// Communicator

enum Kind { K_ALLGATHER = 1, K_REDUCESCATTER, K_ALLREDUCE, K_BROADCAST, K_REDUCE };
const char* kind_name(int k) {
    switch (k) {
        case K_ALLGATHER: return "ncclAllGather";
        case K_REDUCESCATTER: return "ncclReduceScatter";
        case K_ALLREDUCE: return "ncclAllReduce";
        case K_BROADCAST: return "ncclBroadcast";
        case K_REDUCE: return "ncclReduce";
    }
    return "?";
}

// What the host and the work items share. Work items hold it by shared_ptr, so that
// ncclCommAbort / ncclCommDestroy can release the handle while one is still blocked.
struct State {
    std::string name;
    int nranks = 0, rank = 0, device = 0;
    size_t slot_bytes = 0;
    Header* hdr = NULL;
    unsigned char* data = NULL;
    size_t map_bytes = 0;
    std::atomic<int> async_err{ncclSuccess};  // the first error of a work item or of the rendezvous
    std::atomic<bool> aborted{false};          // ncclCommAbort: work items give up
    std::atomic<uint64_t> outstanding{0};      // work items issued and not finished
    // Touched by work items only (they run one at a time, in issue order).
    uint64_t next_seq = 0;
    uint32_t local_sense = 0;

    unsigned char* slot(int r) const { return data + (size_t)r * slot_bytes; }
    void fail(ncclResult_t r) {
        int expected = ncclSuccess;
        async_err.compare_exchange_strong(expected, (int)r);
    }
    ~State() {
        if (hdr) munmap(hdr, map_bytes);
    }
};

}  // namespace

struct ncclComm {
    std::shared_ptr<State> st;
    // Host side only (the thread that makes the NCCL calls).
    enum Phase { INIT, READY, FINALIZING, FINALIZED } phase = INIT;
    bool blocking = true;
    bool unlinked = false;  // the shared-memory name is gone (unlinked by the last rank to attach)
    int pending_polls = 0;  // ncclCommGetAsyncError answers ncclInProgress this many more times
    uint64_t issued = 0;    // collectives issued (their seq numbers)
    uint64_t calls = 0;     // collectives called (every other one answers ncclInProgress, non-blocking)
};

namespace {

std::mutex g_live_mu;
std::set<ncclComm*> g_live;  // communicators created and not yet destroyed / aborted
int g_group_depth = 0;

bool live(ncclComm* c) {
    std::lock_guard<std::mutex> lock(g_live_mu);
    return g_live.count(c) != 0;
}

// The rendezvous, polled (non-blocking init) or looped (blocking init): ncclInProgress until
// every rank attached and the first few polls passed; then every rank must be on its own
// device (NCCL refuses two ranks of a communicator on one GPU).
ncclResult_t init_progress(ncclComm* c) {
    State& s = *c->st;
    Header* h = s.hdr;
    const bool all = ld(&h->arrived) == (uint32_t)s.nranks;
    if (all)
        for (int r = 0; r < s.nranks; r++)
            for (int q = 0; q < r; q++)
                if (h->ranks[q].device == h->ranks[r].device) {
                    s.fail(ncclInvalidUsage);
                    return refuse(ncclInvalidUsage,
                                  "duplicate GPU: ranks %d and %d of the communicator both use device %d (one device "
                                  "per rank; under the emulator set EMU_DEVICE_COUNT)",
                                  q, r, h->ranks[r].device);
                }
    const uint32_t ab = ld(&h->aborted);
    if (ab) {
        s.fail(ncclRemoteError);
        return refuse(ncclRemoteError, "rank %u aborted the communicator during its initialisation", ab - 1);
    }
    if (c->pending_polls > 0) c->pending_polls--;
    if (all) return c->pending_polls == 0 ? ncclSuccess : ncclInProgress;
    for (int r = 0; r < s.nranks; r++)
        if (r != s.rank && ld((const uint32_t*)&h->ranks[r].present) && pid_dead(h->ranks[r].pid)) {
            s.fail(ncclRemoteError);
            return refuse(ncclRemoteError, "rank %d (pid %d) exited during the communicator's initialisation", r,
                          h->ranks[r].pid);
        }
    return ncclInProgress;
}

// ----------------------------------------------------------------------------
// Work items (run by emu::enqueue, maybe on a device thread)

struct Op {
    int kind;
    const unsigned char* send;
    unsigned char* recv;
    size_t count;  // sendcount (AllGather), recvcount (ReduceScatter), count (the others)
    ncclDataType_t dtype;
    ncclRedOp_t op;
    int root;
    uint64_t seq;
    std::thread::id issuer;
};

struct Wait {
    const Op& o;
    double t0, limit;  // watchdog: limit seconds from t0 (<= 0: none)
};

// Sense-reversing barrier over the segment. ncclSuccess, or the error that made it give up
// (recorded in the state, and in ncclGetLastError unless the communicator was aborted here).
ncclResult_t barrier(State& s, Wait& w) {
    Header* h = s.hdr;
    s.local_sense ^= 1u;
    if (__atomic_add_fetch(&h->bar_count, 1u, __ATOMIC_ACQ_REL) == (uint32_t)s.nranks) {
        st(&h->bar_count, 0);
        st(&h->bar_sense, s.local_sense);
        return ncclSuccess;
    }
    unsigned spins = 0;
    double last_check = now_s();
    while (ld(&h->bar_sense) != s.local_sense) {
        if (s.aborted.load()) {
            s.fail(ncclInvalidUsage);  // nobody reads it: the handle is gone
            return ncclInvalidUsage;
        }
        const uint32_t ab = ld(&h->aborted);
        if (ab) {
            s.fail(ncclRemoteError);
            return refuse(ncclRemoteError, "%s (rank %d): rank %u aborted the communicator", kind_name(w.o.kind),
                          s.rank, ab - 1);
        }
        pause_spin(&spins);
        const double now = now_s();
        if (now - last_check < 0.05) continue;
        last_check = now;
        for (int r = 0; r < s.nranks; r++)
            if (r != s.rank && pid_dead(h->ranks[r].pid)) {
                s.fail(ncclRemoteError);
                return refuse(ncclRemoteError, "%s (rank %d): rank %d (pid %d) exited", kind_name(w.o.kind), s.rank, r,
                              h->ranks[r].pid);
            }
        if (w.limit > 0 && now - w.t0 > w.limit) {
            s.fail(ncclSystemError);
            return refuse(ncclSystemError,
                          "%s (rank %d): the peers did not reach it within EMU_NCCL_TIMEOUT %.0f s (emulator watchdog)",
                          kind_name(w.o.kind), s.rank, w.limit);
        }
    }
    return ncclSuccess;
}

// Element types: storage S, arithmetic in C (float for the 16-bit floats, whose result is
// rounded back to S after every operation, as NCCL reduces in the data type: an fp32 sum,
// product, max or min of two bf16 or fp16 values rounded to nearest even is the correctly
// rounded 16-bit result, as fp32's 24 bits are at least 2p + 2 for p = 8 or 11).
template <class S> struct Tr {
    typedef S C;
    static C load(S v) { return v; }
    static S store(C v) { return v; }
};
template <> struct Tr<__nv_bfloat16> {
    typedef float C;
    static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Tr<__half> {
    typedef float C;
    static float load(__half v) { return __half2float(v); }
    static __half store(float v) { return __float2half_rn(v); }
};

template <class C> C combine(C a, C b, ncclRedOp_t op) {
    if constexpr (std::is_integral_v<C>) {
        typedef std::make_unsigned_t<C> U;  // wrap around instead of signed overflow
        switch (op) {
            case ncclProd: return (C)(U)((U)a * (U)b);
            case ncclMax: return a > b ? a : b;
            case ncclMin: return a < b ? a : b;
            default: return (C)(U)((U)a + (U)b);
        }
    } else {
        switch (op) {
            case ncclProd: return a * b;
            case ncclMax: return a > b ? a : b;
            case ncclMin: return a < b ? a : b;
            default: return a + b;
        }
    }
}

// dst[i] = src[0][i] op src[1][i] op ... in rank order. ncclAvg: floating types multiply each
// input by 1/nranks first (NCCL's pre-multiplied sum), integers divide the sum.
template <class S>
void reduce_t(unsigned char* dst, const unsigned char* const* src, int n, size_t count, ncclRedOp_t op) {
    typedef Tr<S> T;
    typedef typename T::C C;
    const bool avg = op == ncclAvg, pre = avg && !std::is_integral_v<C>;
    const C scale = (C)(1.0 / n);
    for (size_t i = 0; i < count; i++) {
        S v;
        memcpy(&v, src[0] + i * sizeof(S), sizeof(S));
        C acc = pre ? T::load(T::store(T::load(v) * scale)) : T::load(v);
        for (int r = 1; r < n; r++) {
            memcpy(&v, src[r] + i * sizeof(S), sizeof(S));
            const C x = pre ? T::load(T::store(T::load(v) * scale)) : T::load(v);
            acc = T::load(T::store(combine<C>(acc, x, avg ? ncclSum : op)));
        }
        if (avg && std::is_integral_v<C>) acc = (C)(acc / (C)n);
        const S out = T::store(acc);
        memcpy(dst + i * sizeof(S), &out, sizeof(S));
    }
}

void reduce(unsigned char* dst, const unsigned char* const* src, int n, size_t count, ncclDataType_t dt,
            ncclRedOp_t op) {
    switch (dt) {
        case ncclInt8: reduce_t<int8_t>(dst, src, n, count, op); break;
        case ncclUint8: reduce_t<uint8_t>(dst, src, n, count, op); break;
        case ncclInt32: reduce_t<int32_t>(dst, src, n, count, op); break;
        case ncclUint32: reduce_t<uint32_t>(dst, src, n, count, op); break;
        case ncclInt64: reduce_t<int64_t>(dst, src, n, count, op); break;
        case ncclUint64: reduce_t<uint64_t>(dst, src, n, count, op); break;
        case ncclFloat16: reduce_t<__half>(dst, src, n, count, op); break;
        case ncclFloat32: reduce_t<float>(dst, src, n, count, op); break;
        case ncclFloat64: reduce_t<double>(dst, src, n, count, op); break;
        case ncclBfloat16: reduce_t<__nv_bfloat16>(dst, src, n, count, op); break;
        default: break;  // refused at the call
    }
}

size_t type_size(ncclDataType_t dt) {
    switch (dt) {
        case ncclInt8: case ncclUint8: return 1;
        case ncclFloat16: case ncclBfloat16: return 2;
        case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
        case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
        default: return 0;
    }
}

// The collective's data movement, chunk by chunk through the slots.
ncclResult_t move_data(State& s, const Op& o, Wait& w) {
    const int n = s.nranks, me = s.rank;
    const size_t es = type_size(o.dtype), slot = s.slot_bytes;
    std::vector<const unsigned char*> src((size_t)n);
    ncclResult_t r = ncclSuccess;
    switch (o.kind) {
        case K_ALLGATHER: {
            const size_t B = o.count * es;
            const bool in_place = o.send == o.recv + (size_t)me * B;
            for (size_t at = 0; at < B; at += slot) {
                const size_t c = B - at < slot ? B - at : slot;
                memcpy(s.slot(me), o.send + at, c);
                if ((r = barrier(s, w))) return r;
                for (int q = 0; q < n; q++)
                    if (!(q == me && in_place)) memcpy(o.recv + (size_t)q * B + at, s.slot(q), c);
                if ((r = barrier(s, w))) return r;
            }
            break;
        }
        case K_REDUCESCATTER: {
            // Each slot holds n pieces of ce elements: piece d is what rank d reduces.
            size_t ce = slot / ((size_t)n * es);
            if (ce == 0) ce = 1;
            for (size_t at = 0; at < o.count; at += ce) {
                const size_t c = o.count - at < ce ? o.count - at : ce;
                for (int d = 0; d < n; d++)
                    memcpy(s.slot(me) + (size_t)d * c * es, o.send + ((size_t)d * o.count + at) * es, c * es);
                if ((r = barrier(s, w))) return r;
                for (int q = 0; q < n; q++) src[q] = s.slot(q) + (size_t)me * c * es;
                reduce(o.recv + at * es, src.data(), n, c, o.dtype, o.op);
                if ((r = barrier(s, w))) return r;
            }
            break;
        }
        case K_ALLREDUCE:
        case K_REDUCE: {
            const size_t ce = slot / es;
            for (size_t at = 0; at < o.count; at += ce) {
                const size_t c = o.count - at < ce ? o.count - at : ce;
                memcpy(s.slot(me), o.send + at * es, c * es);
                if ((r = barrier(s, w))) return r;
                for (int q = 0; q < n; q++) src[q] = s.slot(q);
                if (o.kind == K_ALLREDUCE || me == o.root) reduce(o.recv + at * es, src.data(), n, c, o.dtype, o.op);
                if ((r = barrier(s, w))) return r;
            }
            break;
        }
        case K_BROADCAST: {
            const size_t B = o.count * es;
            for (size_t at = 0; at < B; at += slot) {
                const size_t c = B - at < slot ? B - at : slot;
                if (me == o.root) memcpy(s.slot(me), o.send + at, c);
                if ((r = barrier(s, w))) return r;
                if (!(me == o.root && o.send == o.recv)) memcpy(o.recv + at, s.slot(o.root), c);
                if ((r = barrier(s, w))) return r;
            }
            break;
        }
    }
    return ncclSuccess;
}

void run_op(const std::shared_ptr<State>& sp, const Op& o) {
    State& s = *sp;
    struct Done {
        State& s;
        ~Done() { s.outstanding.fetch_sub(1); }
    } done{s};
    // After an error or an abort nothing more runs (NCCL: nothing can be assumed about the
    // operations enqueued after an error).
    if (s.aborted.load() || s.async_err.load() != ncclSuccess) return;
    if (o.seq != s.next_seq) {
        s.fail(ncclInvalidUsage);
        refuse(ncclInvalidUsage,
               "%s (rank %d): collective #%llu of the communicator ran before #%llu (collectives of one communicator "
               "issued on streams that do not order them)",
               kind_name(o.kind), s.rank, (unsigned long long)o.seq, (unsigned long long)s.next_seq);
        return;
    }
    s.next_seq++;
    Wait w = {o, now_s(), env_timeout()};
    if (w.limit <= 0 && std::this_thread::get_id() == o.issuer) w.limit = 600.0;
    RankInfo& mine = s.hdr->ranks[s.rank];
    mine.seq = o.seq;
    mine.count = o.count;
    mine.kind = o.kind;
    mine.dtype = o.dtype;
    mine.op = o.op;
    mine.root = o.root;
    if (barrier(s, w)) return;  // publishes every rank's RankInfo
    for (int q = 0; q < s.nranks; q++) {
        const RankInfo& p = s.hdr->ranks[q];
        if (p.seq != o.seq || p.count != o.count || p.kind != o.kind || p.dtype != o.dtype || p.op != o.op ||
            p.root != o.root) {
            s.fail(ncclInvalidUsage);
            refuse(ncclInvalidUsage,
                   "collective #%llu: rank %d called %s(count %zu, type %d, op %d, root %d) but rank %d called "
                   "%s(count %llu, type %d, op %d, root %d) (every rank must issue the same collectives in the same "
                   "order)",
                   (unsigned long long)o.seq, s.rank, kind_name(o.kind), o.count, (int)o.dtype, (int)o.op, o.root, q,
                   kind_name(p.kind), (unsigned long long)p.count, p.dtype, p.op, p.root);
            return;
        }
    }
    move_data(s, o, w);
}

// ----------------------------------------------------------------------------
// Host side of the calls

ncclResult_t check_comm(ncclComm* c, const char* fn) {
    if (!c) return refuse(ncclInvalidArgument, "%s: comm is NULL", fn);
    if (!live(c)) return refuse(ncclInvalidArgument, "%s: %p is not a live communicator (destroyed or aborted?)", fn, (void*)c);
    return ncclSuccess;
}

// A communicator may be used only once its state is ncclSuccess (after ncclInProgress the
// caller must poll ncclCommGetAsyncError until then).
ncclResult_t check_ready(ncclComm* c, const char* fn) {
    if (ncclResult_t r = check_comm(c, fn)) return r;
    const int e = c->st->async_err.load();
    if (e != ncclSuccess) return (ncclResult_t)e;  // ncclGetLastError keeps saying what went wrong
    if (c->phase == ncclComm::INIT || c->pending_polls > 0)
        return refuse(ncclInvalidUsage,
                      "%s called while the communicator is ncclInProgress (poll ncclCommGetAsyncError until ncclSuccess "
                      "first)",
                      fn);
    if (c->phase != ncclComm::READY) return refuse(ncclInvalidUsage, "%s on a finalized communicator", fn);
    return ncclSuccess;
}

bool overlap(const unsigned char* a, size_t na, const unsigned char* b, size_t nb) {
    return na && nb && a < b + nb && b < a + na;
}

ncclResult_t collective(int kind, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t dt,
                        ncclRedOp_t op, int root, ncclComm* c, cudaStream_t stream) {
    const char* fn = kind_name(kind);
    if (ncclResult_t r = check_ready(c, fn)) return r;
    const size_t es = type_size(dt);
    if ((int)dt < 0 || (int)dt >= ncclNumTypes || es == 0) return refuse(ncclInvalidArgument, "%s: invalid data type %d", fn, (int)dt);
    const bool reducing = kind == K_REDUCESCATTER || kind == K_ALLREDUCE || kind == K_REDUCE;
    if (reducing && ((int)op < 0 || (int)op >= ncclNumOps))
        return refuse(ncclInvalidArgument, "%s: invalid reduction operation %d (custom operators are not emulated)", fn, (int)op);
    State& s = *c->st;
    const int n = s.nranks, me = s.rank;
    if ((kind == K_BROADCAST || kind == K_REDUCE) && (root < 0 || root >= n))
        return refuse(ncclInvalidArgument, "%s: root %d is not a rank of this %d-rank communicator", fn, root, n);
    if (count == 0) return ncclSuccess;  // nothing to move
    if (count > ((size_t)1 << 40) / es / (size_t)n) return refuse(ncclInvalidArgument, "%s: count %zu is too large", fn, count);
    // Bytes read from sendbuff and written to recvbuff on this rank.
    size_t sb = count * es, rb = count * es;
    if (kind == K_ALLGATHER) rb *= (size_t)n;
    if (kind == K_REDUCESCATTER) sb *= (size_t)n;
    if (kind == K_BROADCAST && me != root) sb = 0;  // sendbuff is only used on the root
    if (kind == K_REDUCE && me != root) rb = 0;     // recvbuff is only used on the root
    const unsigned char* sp = (const unsigned char*)sendbuff;
    unsigned char* rp = (unsigned char*)recvbuff;
    if (sb && !sp) return refuse(ncclInvalidArgument, "%s: sendbuff is NULL", fn);
    if (rb && !rp) return refuse(ncclInvalidArgument, "%s: recvbuff is NULL", fn);
    // NCCL checks that the buffers are device memory; the emulator can check the extent too (a
    // GPU would read or write past the buffer).
    if (sb && !emu::device_range_ok(sp, sb))
        return refuse(ncclInvalidArgument, "%s: sendbuff %p + %zu bytes (count %zu) is not inside one cudaMalloc buffer",
                      fn, sendbuff, sb, count);
    if (rb && !emu::device_range_ok(rp, rb))
        return refuse(ncclInvalidArgument, "%s: recvbuff %p + %zu bytes (count %zu) is not inside one cudaMalloc buffer",
                      fn, recvbuff, rb, count);
    // In place is defined (NCCL "In-place Operations"): AllGather sendbuff == recvbuff + rank *
    // sendcount, ReduceScatter recvbuff == sendbuff + rank * recvcount, the others sendbuff ==
    // recvbuff. Any other overlap is undefined in NCCL; refused here.
    bool in_place = sp == rp;
    if (kind == K_ALLGATHER) in_place = sp == rp + (size_t)me * count * es;
    if (kind == K_REDUCESCATTER) in_place = rp == sp + (size_t)me * count * es;
    if (!in_place && overlap(sp, sb, rp, rb))
        return refuse(ncclInvalidArgument,
                      "%s (rank %d): sendbuff %p (%zu bytes) and recvbuff %p (%zu bytes) overlap without being in place "
                      "(undefined in NCCL)",
                      fn, me, sendbuff, sb, recvbuff, rb);
    Op o = {kind, sp, rp, count, dt, op, root, c->issued++, std::this_thread::get_id()};
    std::shared_ptr<State> keep = c->st;
    s.outstanding.fetch_add(1);
    emu::enqueue(stream, fn, [keep, o]() { run_op(keep, o); });
    emu::report_launch(1, fn);  // NCCL launches a kernel per collective (cuLaunchKernelEx)
    // Non-blocking: every other call answers "still being enqueued" for one poll, so that the
    // caller's ncclInProgress handling runs too.
    if (!c->blocking && (c->calls++ & 1)) {
        c->pending_polls = 1;
        return ncclInProgress;
    }
    return ncclSuccess;
}

// Blocks (blocking communicators, ncclCommDestroy) until the work items issued so far are
// done, or an error / the watchdog.
ncclResult_t drain(ncclComm* c, const char* fn) {
    State& s = *c->st;
    const double t0 = now_s(), limit = env_timeout() > 0 ? env_timeout() : 600.0;
    unsigned spins = 0;
    while (s.outstanding.load() != 0) {
        if (s.async_err.load() != ncclSuccess) return (ncclResult_t)s.async_err.load();
        if (now_s() - t0 > limit)
            return refuse(ncclSystemError, "%s: operations still pending after %.0f s (emulator watchdog)", fn, limit);
        pause_spin(&spins);
    }
    return ncclSuccess;
}

void release(ncclComm* c) {
    {
        std::lock_guard<std::mutex> lock(g_live_mu);
        g_live.erase(c);
    }
    if (!c->unlinked) shm_unlink(c->st->name.c_str());  // best effort: it may be gone already
    delete c;  // work items still running keep the State (and the mapping) alive
}

}  // namespace

// ----------------------------------------------------------------------------
// The API

const char* ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
        case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
        case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
        case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
        case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
        default: return "unknown result code";
    }
}

const char* ncclGetLastError(ncclComm_t) {
    static thread_local char copy[sizeof g_err];
    std::lock_guard<std::mutex> lock(g_err_mu);
    memcpy(copy, g_err, sizeof copy);
    return copy;
}

ncclResult_t ncclGetVersion(int* version) {
    if (!version) return refuse(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
    if (!uniqueId) return refuse(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    uint64_t rnd = 0;
    if (getrandom(&rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) rnd = (uint64_t)now_s() * 2654435761u ^ (uint64_t)getpid();
    IdContents id;
    memset(&id, 0, sizeof id);
    id.magic = kIdMagic;
    // EMU_NCCL_SLOT_BYTES: the chunk size (a test may make it small to exercise chunking).
    const char* e = getenv("EMU_NCCL_SLOT_BYTES");
    size_t slot = e && atoll(e) > 0 ? (size_t)atoll(e) : kDefaultSlot;
    slot = (slot + 63) & ~(size_t)63;
    if (slot > ((size_t)1 << 30)) slot = (size_t)1 << 30;
    id.slot_bytes = slot;
    snprintf(id.name, sizeof id.name, "/emu_nccl.%d.%016llx", (int)getpid(), (unsigned long long)rnd);
    memset(uniqueId, 0, sizeof *uniqueId);
    memcpy(uniqueId->internal, &id, sizeof id);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
    const char* fn = "ncclCommInitRankConfig";
    if (!comm) return refuse(ncclInvalidArgument, "%s: comm is NULL", fn);
    *comm = NULL;
    if (nranks < 1 || nranks > kMaxRanks)
        return refuse(ncclInvalidArgument, "%s: nranks %d (the emulator allows 1..%d)", fn, nranks, kMaxRanks);
    if (rank < 0 || rank >= nranks) return refuse(ncclInvalidArgument, "%s: rank %d is not in [0, %d)", fn, rank, nranks);
    bool blocking = true;
    if (config) {
        if (config->magic != 0xcafebeef || config->size != sizeof(ncclConfig_t))
            return refuse(ncclInvalidArgument, "%s: config was not initialised with NCCL_CONFIG_INITIALIZER", fn);
        if (config->blocking != NCCL_CONFIG_UNDEF_INT && config->blocking != 0 && config->blocking != 1)
            return refuse(ncclInvalidArgument, "%s: invalid config blocking attribute value %d", fn, config->blocking);
        blocking = config->blocking != 0;  // undefined: blocking, NCCL's default
    }
    IdContents id;
    memcpy(&id, commId.internal, sizeof id);
    if (id.magic != kIdMagic || id.slot_bytes == 0 || id.name[0] != '/' || !memchr(id.name, 0, sizeof id.name))
        return refuse(ncclInvalidArgument, "%s: commId was not made by ncclGetUniqueId (or not broadcast intact)", fn);
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return refuse(ncclUnhandledCudaError, "%s: cudaGetDevice failed", fn);

    auto s = std::make_shared<State>();
    s->name = id.name;
    s->nranks = nranks;
    s->rank = rank;
    s->device = device;
    s->slot_bytes = (size_t)id.slot_bytes;
    s->map_bytes = kDataOffset + (size_t)nranks * s->slot_bytes;
    const int fd = shm_open(id.name, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return refuse(ncclSystemError, "%s: shm_open(%s): %s", fn, id.name, strerror(errno));
    struct stat sb;
    // Only ever grow it: a rank that truncated it smaller would pull the pages from under the others.
    if (fstat(fd, &sb) != 0 || ((size_t)sb.st_size < s->map_bytes && ftruncate(fd, (off_t)s->map_bytes) != 0)) {
        const int e = errno;
        close(fd);
        shm_unlink(id.name);
        return refuse(ncclSystemError, "%s: sizing %s to %zu bytes: %s", fn, id.name, s->map_bytes, strerror(e));
    }
    void* m = mmap(NULL, s->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        shm_unlink(id.name);
        return refuse(ncclSystemError, "%s: mmap of %s (%zu bytes): %s", fn, id.name, s->map_bytes, strerror(errno));
    }
    s->hdr = (Header*)m;
    s->data = (unsigned char*)m + kDataOffset;
    Header* h = s->hdr;
    uint32_t expect = 0;
    if (!__atomic_compare_exchange_n(&h->nranks, &expect, (uint32_t)nranks, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
        expect != (uint32_t)nranks) {
        shm_unlink(id.name);
        return refuse(ncclInvalidUsage, "%s: rank %d says the communicator has %d ranks, another rank said %u", fn, rank,
                      nranks, expect);
    }
    RankInfo& mine = h->ranks[rank];
    int32_t free_slot = 0;
    if (!__atomic_compare_exchange_n(&mine.present, &free_slot, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        shm_unlink(id.name);
        return refuse(ncclInvalidUsage, "%s: two processes initialised rank %d of the same communicator", fn, rank);
    }
    mine.pid = (int32_t)getpid();
    mine.device = device;
    ncclComm* c = new ncclComm;
    c->st = s;
    c->blocking = blocking;
    c->pending_polls = 2;  // "the first few polls": the caller's ncclInProgress loop runs
    // The last rank to arrive unlinks the name: every rank has it open by then.
    if (__atomic_add_fetch(&h->arrived, 1u, __ATOMIC_ACQ_REL) == (uint32_t)nranks) {
        shm_unlink(id.name);
        c->unlinked = true;
    }
    {
        std::lock_guard<std::mutex> lock(g_live_mu);
        g_live.insert(c);
    }
    *comm = c;
    if (!blocking) return ncclInProgress;
    const double t0 = now_s(), limit = env_timeout() > 0 ? env_timeout() : 600.0;
    unsigned spins = 0;
    for (;;) {
        const ncclResult_t r = init_progress(c);
        if (r == ncclSuccess) {
            c->phase = ncclComm::READY;
            return ncclSuccess;
        }
        if (r != ncclInProgress) return r;
        if (now_s() - t0 > limit)
            return refuse(ncclSystemError, "%s: the other ranks did not join within %.0f s (emulator watchdog)", fn, limit);
        pause_spin(&spins);
    }
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
    return ncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* asyncError) {
    if (ncclResult_t r = check_comm(c, "ncclCommGetAsyncError")) return r;
    if (!asyncError) return refuse(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
    State& s = *c->st;
    const int e = s.async_err.load();
    if (e != ncclSuccess) {
        *asyncError = (ncclResult_t)e;
        return ncclSuccess;
    }
    switch (c->phase) {
        case ncclComm::INIT: {
            const ncclResult_t r = init_progress(c);
            if (r == ncclSuccess) c->phase = ncclComm::READY;
            *asyncError = r;
            break;
        }
        case ncclComm::READY:
            if (c->pending_polls > 0) {
                c->pending_polls--;
                *asyncError = ncclInProgress;
            } else {
                *asyncError = ncclSuccess;
            }
            break;
        case ncclComm::FINALIZING:
            if (c->pending_polls > 0) c->pending_polls--;
            if (c->pending_polls == 0 && s.outstanding.load() == 0) {
                c->phase = ncclComm::FINALIZED;
                *asyncError = ncclSuccess;
            } else {
                *asyncError = ncclInProgress;
            }
            break;
        case ncclComm::FINALIZED: *asyncError = ncclSuccess; break;
    }
    return ncclSuccess;
}

// Flushes the communicator's operations. Non-blocking: answers ncclInProgress, and the state
// becomes ncclSuccess once every operation issued on it has completed.
ncclResult_t ncclCommFinalize(ncclComm_t c) {
    const char* fn = "ncclCommFinalize";
    if (ncclResult_t r = check_comm(c, fn)) return r;
    if (c->phase == ncclComm::FINALIZING || c->phase == ncclComm::FINALIZED)
        return refuse(ncclInvalidUsage, "%s: the communicator is already finalized", fn);
    if (c->phase == ncclComm::INIT || c->pending_polls > 0)
        return refuse(ncclInvalidUsage, "%s called while the communicator is ncclInProgress", fn);
    if (c->blocking) {
        const ncclResult_t r = drain(c, fn);
        c->phase = ncclComm::FINALIZED;
        return r;
    }
    c->phase = ncclComm::FINALIZING;
    c->pending_polls = 2;
    return ncclInProgress;
}

// Frees the local resources; finalizes first when the caller did not (NCCL's documented
// behaviour), waiting for the operations in flight.
ncclResult_t ncclCommDestroy(ncclComm_t c) {
    const char* fn = "ncclCommDestroy";
    if (!c) return ncclSuccess;
    if (ncclResult_t r = check_comm(c, fn)) return r;
    if (c->phase == ncclComm::FINALIZING && c->pending_polls > 0)
        return refuse(ncclInvalidUsage, "%s before ncclCommFinalize's ncclInProgress was polled to ncclSuccess", fn);
    ncclResult_t r = ncclSuccess;
    if (c->phase != ncclComm::FINALIZED && c->phase != ncclComm::INIT) r = drain(c, fn);
    if (r != ncclSuccess) c->st->aborted.store(true);  // let a blocked work item go
    release(c);
    return r;
}

// Aborts the operations in flight (a work item blocked on its peers gives up), tells the peers
// (their collectives fail with ncclRemoteError), frees the communicator. Never blocks.
ncclResult_t ncclCommAbort(ncclComm_t c) {
    if (!c) return ncclSuccess;
    if (ncclResult_t r = check_comm(c, "ncclCommAbort")) return r;
    State& s = *c->st;
    s.aborted.store(true);
    uint32_t none = 0;
    __atomic_compare_exchange_n(&s.hdr->aborted, &none, (uint32_t)s.rank + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    release(c);
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int* count) {
    if (ncclResult_t r = check_comm(c, "ncclCommCount")) return r;
    if (!count) return refuse(ncclInvalidArgument, "ncclCommCount: count is NULL");
    *count = c->st->nranks;
    return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t c, int* device) {
    if (ncclResult_t r = check_comm(c, "ncclCommCuDevice")) return r;
    if (!device) return refuse(ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
    *device = c->st->device;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t c, int* rank) {
    if (ncclResult_t r = check_comm(c, "ncclCommUserRank")) return r;
    if (!rank) return refuse(ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
    *rank = c->st->rank;
    return ncclSuccess;
}

// Groups only nest: the calls inside run as they are issued. That is what a group of
// collectives on one communicator per process amounts to; aggregation across communicators
// of one thread is not emulated.
ncclResult_t ncclGroupStart(void) {
    g_group_depth++;
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
    if (g_group_depth == 0) return refuse(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    g_group_depth--;
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
    return collective(K_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream);
}
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    return collective(K_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    return collective(K_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    return collective(K_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream);
}
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
    return collective(K_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}
