// The TCP transport of comm.h: for ranks that have no MPI world between them.
//
// Forming the world (comm_tcp_init, in the calling thread):
//   1. Every rank opens a listening socket (an ephemeral port on every interface) and works
//      out an address the others can reach: FSDP_SOCKET_ADDR, else the IPv4 address of its
//      host name, else its first non-loopback interface (Debian maps the host name to
//      127.0.1.1, which no other node can reach).
//   2. The ranks learn each other's addresses:
//        file:DIR          each rank publishes DIR/<run_id>.rank<r> ("addr port hostname\n",
//                          written atomically by util/atomic_file.h) and reads the files of
//                          the lower ranks, polling until they appear;
//        tcp://HOST:PORT   rank 0 listens on PORT; every other rank connects to it (retrying
//                          until rank 0 is up) and sends its address; rank 0 answers everyone
//                          with the full table once all have arrived. That connection is
//                          then the mesh link between rank 0 and that rank.
//   3. Full mesh: for i < j, rank j connects to rank i and sends a hello (run id, its rank,
//      the rank it means to reach, a random nonce); rank i answers ACK or NAK. A rank's
//      listening socket is served at the same time as its own connects, so every hello is
//      answered at once whatever the other ranks are doing.
//   Stale files: the run id in a file's name keeps other launches' files out; a file left by
//   a crashed earlier attempt with the same run id names a dead port (connection refused), or
//   a port some other process got since (no ACK from the rank we mean: NAK, or no answer
//   within 5 s). Either way the connecting rank drops the attempt and reads the file again
//   until the fresh one replaces it. A rank deletes its file as soon as every higher rank
//   has connected (nobody reads it after that), so only a crash mid-rendezvous leaves one.
//
// Operations: one communication thread per process runs every operation of every group in
// the order the operations were issued (a fixed-size FIFO queue; issuing blocks when it is
// full). A non-blocking start enqueues and returns a ticket (a global, increasing sequence
// number); comm_wait sleeps until the thread has finished that ticket; a blocking operation
// is a start and a wait. So a gather or reduce-scatter really progresses while the caller
// computes, and every pair of ranks sees the byte stream between them in the same order on
// both sides (the ranks issue the same operations in the same order).
//
// Every message carries a small header (operation, group, the operation's number on the
// group, message number, byte count); a receiver checks it, so ranks that issued different
// collectives, or different sizes, fail with a message saying so instead of reading garbage.
//
// Failures end the process: a peer's EOF or reset, or no progress within the world's
// timeout, prints one line and _exit(1)s, which closes the sockets, so the peers fail in turn.
// While no operation is queued the thread still watches every socket for hang-ups, so a rank
// busy computing notices a dead peer too.
//
// Naming the stalled rank. A rank waiting in a ring or behind a root usually waits for a
// healthy rank that waits in turn (rank 0 in a ring of 4 waits for rank 3, which waits for
// the stalled rank 2). Only a rank that waits at the first exchange of an operation for a
// peer that has sent nothing of it (nor taken any of its bytes) knows that this peer has not
// joined the operation: every algorithm here sends at once at its first exchange. Such a
// rank gives up after the timeout naming that peer, and first sends an ABORT header naming
// it to every peer whose stream from it is between messages; a rank that reads an ABORT
// where it expected a message ends with the same name and passes it on. A rank that knows
// no culprit waits a grace period longer (a quarter of the timeout, 0.5 to 30 s) for such an
// ABORT before naming only the peer it waits for, as possibly waiting itself.
#define _GNU_SOURCE
#include "comm/comm_impl.h"
#include "util/atomic_file.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define QUEUE_CAP 64                    // operations in flight per process
#define SMALL_BYTES (64 << 10)          // all_reduce/broadcast up to this go through one rank
#define MAX_IO ((size_t)1 << 30)        // bytes per send/recv call (Linux stops near 2 GiB)
#define HANDSHAKE_ATTEMPT_S 5.0         // a connect + hello without an answer is retried
#define FILE_POLL_S 0.05                // how often a missing rendezvous file is looked for
#define MAX_PENDING 64                  // accepted connections whose hello has not arrived

// ---------------------------------------------------------------------------------------
// Small helpers

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// poll()'s timeout in ms until deadline (INFINITY: -1), at most cap_s seconds when cap_s > 0.
static int poll_ms(double deadline, double cap_s) {
    double left = deadline - now_s();
    if (cap_s > 0 && left > cap_s) left = cap_s;
    if (isinf(left)) return -1;
    if (left <= 0) return 0;
    if (left > 1e6) return 1000000000;
    return (int)(left * 1e3) + 1;
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);  // a signal may cut it short: every caller loops on a deadline
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }

static size_t dtype_size(CommDtype dt) { return dt == COMM_F64 ? 8 : 4; }

// TCP_NODELAY: a collective's small messages must not wait for Nagle. The buffer sizes are
// left to the kernel's autotuning, which grows them up to net.ipv4.tcp_rmem/tcp_wmem's
// maximum (several MiB): setting SO_SNDBUF/SO_RCVBUF would switch autotuning off and be
// capped by net.core.rmem_max/wmem_max, often a few hundred KiB - smaller, not larger.
static void tune_socket(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// FNV-1a: a tag for a group, the same on every member.
static uint32_t fnv1a(uint32_t h, const void* data, size_t n) {
    const unsigned char* p = (const unsigned char*)data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

// ---------------------------------------------------------------------------------------
// The transport's state

typedef enum { OP_BARRIER, OP_ALL_REDUCE, OP_BROADCAST, OP_GATHER, OP_GATHERV, OP_ALL_GATHER,
               OP_REDUCE_SCATTER, OP_FINALIZE, OP_KINDS } OpKind;
static const char* const op_kind_names[OP_KINDS] = {
    "barrier", "all_reduce", "broadcast", "gather", "gatherv", "all_gather", "reduce_scatter", "finalize"};

typedef struct {
    int* members;       // group rank -> global rank
    uint32_t tag;       // the same on every member, different for each group (checked per message)
    uint64_t seq;       // operations issued on this group so far
} TcpGroup;

typedef struct {
    OpKind kind;
    const char* name;           // for messages ("split" runs as an all_gather)
    Comm* c;
    uint64_t seq;               // the operation's number on its group
    const void* send;
    void* recv;
    size_t count;               // bytes, or elements for all_reduce and reduce_scatter
    const size_t* recv_bytes;   // gatherv (root)
    int root;
    CommDtype dtype;
    CommOp op;
} TcpOp;

typedef struct {
    int rank, world;
    double timeout_s;
    int* fds;                   // [world]: the socket to each rank, -1 for this one

    pthread_mutex_t mu;         // guards the queue, head/tail and watch
    pthread_cond_t done_cv;     // an operation finished
    pthread_cond_t space_cv;    // the queue has room
    TcpOp queue[QUEUE_CAP];
    uint64_t head, tail;        // operations finished / issued; ticket k is done when head >= k
    int watch;                  // the idle thread watches the sockets for hang-ups
    int wake[2];                // a pipe: issuing an operation wakes the idle thread
    pthread_t thread;

    // Owned by the communication thread.
    char* scratch;
    size_t scratch_cap;
    struct pollfd* pfds;        // [2 * world + 1]
} TcpWorld;

// Fatal errors of the communication thread: one line, then the process ends. _exit, not exit:
// the main thread may be inside CUDA or OpenMP, whose exit-time teardown must not run under
// it. stdout is flushed first unless the main thread holds it (it may be blocked writing).
static void tcp_die(const TcpWorld* t, const char* fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void tcp_die(const TcpWorld* t, const char* fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (ftrylockfile(stdout) == 0) {
        fflush(stdout);
        funlockfile(stdout);
    }
    fprintf(stderr, "error: [rank %d] comm tcp: %s\n", t->rank, msg);
    fflush(stderr);
    _exit(1);
}

static char* scratch(TcpWorld* t, size_t bytes) {
    if (bytes > t->scratch_cap) {
        free(t->scratch);
        t->scratch = (char*)malloc(bytes);
        if (!t->scratch) tcp_die(t, "out of memory allocating %zu bytes of scratch", bytes);
        t->scratch_cap = bytes;
    }
    return t->scratch;
}

// ---------------------------------------------------------------------------------------
// Moving bytes: every message is a header and a payload. exchange() progresses a set of
// sends and receives to distinct peers at once with non-blocking calls and poll(), so two
// ranks sending each other large buffers never deadlock.

#define WIRE_MAGIC 0x46534457u  // "FSDW"
// An ABORT takes the place of a message header: kind, tag and seq are the operation the
// sender gave up on, step the global rank it found stalled; no payload follows.
#define ABORT_MAGIC 0x46534441u // "FSDA"

typedef struct {
    uint32_t magic;
    uint32_t kind;      // OpKind
    uint32_t tag;       // the group's tag
    uint32_t step;      // the message's number within the operation
    uint64_t seq;       // the operation's number on the group
    uint64_t bytes;     // payload bytes that follow
} WireHeader;

typedef struct {
    int peer;                   // global rank
    int is_send;
    WireHeader hdr;             // what is sent, or what must arrive
    WireHeader got;             // receives: what arrived
    char* buf;                  // payload
    size_t len;
    size_t done;                // header + payload bytes moved
    size_t payload_done;        // payload bytes moved
    const size_t* limit;        // sends: payload bytes available so far (a forwarded receive's)
    const void* with;           // receives: combine each arriving element with with[i]
    CommDtype dtype;
    CommOp op;
    size_t combined;            // elements combined so far
} Xfer;

typedef struct {
    TcpWorld* t;
    const TcpOp* op;
    const int* members;         // group rank -> global rank
    uint32_t tag;
    int me, size;               // this rank's group rank, the group's size
    uint32_t step;              // exchanges of this operation so far (both sides count alike)
    const Xfer* xs;             // the exchange in progress (which streams are mid-message)
    int n_xs;
} Run;

static void xfer_init(Run* r, Xfer* x, int is_send, int grank, const void* buf, size_t len) {
    memset(x, 0, sizeof(*x));
    x->peer = r->members[grank];
    x->is_send = is_send;
    x->buf = (char*)buf;
    x->len = len;
    x->hdr = (WireHeader){WIRE_MAGIC, (uint32_t)r->op->kind, r->tag, r->step, r->op->seq, len};
}

// dst[i] = dst[i] (op) src[i] for i in [i0, i1). For a sum, dst holds the partial that
// arrived and src this rank's part: the order of additions is fixed by the algorithm alone.
static void combine(void* dst, const void* src, size_t i0, size_t i1, CommDtype dt, CommOp op) {
#define COMBINE(T, ADD)                                                                \
    do {                                                                               \
        T* d = (T*)dst;                                                                \
        const T* s = (const T*)src;                                                    \
        if (op == COMM_SUM)      for (size_t i = i0; i < i1; i++) d[i] = ADD;          \
        else if (op == COMM_MAX) for (size_t i = i0; i < i1; i++) d[i] = s[i] > d[i] ? s[i] : d[i]; \
        else                     for (size_t i = i0; i < i1; i++) d[i] = s[i] < d[i] ? s[i] : d[i]; \
    } while (0)
    switch (dt) {
    case COMM_F64: COMBINE(double, d[i] + s[i]); break;
    case COMM_F32: COMBINE(float, d[i] + s[i]); break;
    // Signed overflow wraps (as MPI does in practice) instead of being undefined.
    case COMM_I32: COMBINE(int32_t, (int32_t)((uint32_t)d[i] + (uint32_t)s[i])); break;
    }
#undef COMBINE
}

static void die_closed(Run* r, int peer) {
    tcp_die(r->t, "rank %d closed its connection during %s (it exited or died)", peer, r->op->name);
}

static int xfer_complete(const Xfer* x) { return x->done == sizeof(WireHeader) + x->len; }

// Sends an ABORT naming `culprit` to every peer whose stream from this rank is between
// messages (not in the middle of a send of the exchange in progress), without blocking: the
// process ends right after, and a peer that then reads from us finds the ABORT before the
// end of the stream. Best effort: a full socket buffer just leaves that peer the hang-up.
static void send_aborts(TcpWorld* t, const TcpOp* op, uint32_t tag, const Xfer* xs, int n, int culprit) {
    WireHeader h = {ABORT_MAGIC, (uint32_t)op->kind, tag, (uint32_t)culprit, op->seq, 0};
    for (int peer = 0; peer < t->world; peer++) {
        if (t->fds[peer] < 0) continue;
        int mid = 0;
        for (int i = 0; i < n; i++)
            mid |= xs[i].is_send && xs[i].peer == peer && xs[i].done > 0 && !xfer_complete(&xs[i]);
        if (!mid && send(t->fds[peer], &h, sizeof(h), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {}
    }
}

// "rank C (this rank)" or "rank C", for messages about a culprit.
static const char* this_rank_note(const TcpWorld* t, uint32_t culprit) { return (int)culprit == t->rank ? " (this rank)" : ""; }

static void check_header(Run* r, const Xfer* x) {
    const WireHeader* a = &x->got;
    const WireHeader* e = &x->hdr;
    if (a->magic == ABORT_MAGIC) {
        // A peer found the stalled rank and gave up: end with its verdict, and pass it on.
        send_aborts(r->t, r->op, r->tag, r->xs, r->n_xs, (int)a->step);
        tcp_die(r->t, "%s on a group of %d ranks: rank %u%s made no progress for %g s (stalled or dead); rank %d found it and gave up",
                r->op->name, r->size, a->step, this_rank_note(r->t, a->step), r->t->timeout_s, x->peer);
    }
    if (a->magic != WIRE_MAGIC)
        tcp_die(r->t, "%s: rank %d sent bytes that are not a message of this transport", r->op->name, x->peer);
    if (a->kind != e->kind || a->tag != e->tag || a->seq != e->seq || a->step != e->step || a->bytes != e->bytes)
        tcp_die(r->t, "%s: rank %d is at %s #%llu of group %08x (message %u, %llu bytes) while this rank is at "
                "%s #%llu of group %08x (message %u, %llu bytes): the ranks issued different collectives or sizes",
                r->op->name, x->peer, a->kind < OP_KINDS ? op_kind_names[a->kind] : "?",
                (unsigned long long)a->seq, a->tag, a->step, (unsigned long long)a->bytes,
                op_kind_names[e->kind], (unsigned long long)e->seq, e->tag, e->step,
                (unsigned long long)e->bytes);
}

// Payload bytes a send may move now.
static size_t xfer_sendable(const Xfer* x) {
    size_t avail = x->limit ? min_sz(*x->limit, x->len) : x->len;
    return avail - x->payload_done;
}

// Moves what the socket takes or has without blocking. Returns whether any byte moved.
static int xfer_progress(Run* r, Xfer* x) {
    const size_t H = sizeof(WireHeader);
    int fd = r->t->fds[x->peer];
    int moved = 0;
    while (!xfer_complete(x)) {
        struct iovec iov[2];
        int n = 0;
        char* hp = x->is_send ? (char*)&x->hdr : (char*)&x->got;
        if (x->done < H) iov[n++] = (struct iovec){hp + x->done, H - x->done};
        size_t room = x->is_send ? xfer_sendable(x) : x->len - x->payload_done;
        if (room > 0) iov[n++] = (struct iovec){x->buf + x->payload_done, min_sz(room, MAX_IO)};
        if (n == 0) break;  // a forwarding send that has sent all that has arrived
        struct msghdr m;
        memset(&m, 0, sizeof(m));
        m.msg_iov = iov;
        m.msg_iovlen = (size_t)n;
        ssize_t k = x->is_send ? sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(fd, &m, MSG_DONTWAIT);
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (errno == ECONNRESET || errno == EPIPE || errno == ENOTCONN || errno == ETIMEDOUT)
                die_closed(r, x->peer);
            tcp_die(r->t, "%s: %s rank %d: %s", r->op->name, x->is_send ? "send to" : "receive from",
                    x->peer, strerror(errno));
        }
        if (k == 0) die_closed(r, x->peer);  // receives only: a send of n > 0 bytes never returns 0
        size_t before = x->done;
        x->done += (size_t)k;
        x->payload_done = x->done > H ? x->done - H : 0;
        moved = 1;
        if (!x->is_send && before < H && x->done >= H) check_header(r, x);
        if (!x->is_send && x->with) {
            size_t ready = x->payload_done / dtype_size(x->dtype);
            if (ready > x->combined) {
                combine(x->buf, x->with, x->combined, ready, x->dtype, x->op);
                x->combined = ready;
            }
        }
    }
    return moved;
}

// Completes every transfer in xs (at most one send and one receive per peer). The deadline
// is progress-based: the world's timeout counts from the last byte moved. Who is named when
// it passes: see "Naming the stalled rank" at the top.
static void exchange(Run* r, Xfer* xs, int n) {
    TcpWorld* t = r->t;
    double timeout = t->timeout_s > 0 ? t->timeout_s : INFINITY;
    double grace = fmin(fmax(0.25 * timeout, 0.5), 30.0);
    double last = now_s();
    r->xs = xs;
    r->n_xs = n;
    for (;;) {
        int pending = 0, moved = 0;
        for (int i = 0; i < n; i++) {
            if (xfer_complete(&xs[i])) continue;
            moved |= xfer_progress(r, &xs[i]);
            pending += !xfer_complete(&xs[i]);
        }
        if (!pending) break;
        if (moved) {
            last = now_s();
            continue;
        }
        // At the operation's first exchange every peer that has joined it sends at once and
        // reads at once: a receive with nothing arrived, or a send the peer does not take,
        // names a peer that has not joined (`absent`). Otherwise the peer we wait for may
        // itself be waiting (`waiting_for`).
        int k = 0, waiting_for = -1, send_peer = -1, absent = -1, absent_send = -1;
        for (int i = 0; i < n; i++) {
            Xfer* x = &xs[i];
            if (xfer_complete(x)) continue;
            if (!x->is_send && waiting_for < 0) waiting_for = x->peer;
            if (!x->is_send && r->step == 0 && x->done == 0 && absent < 0) absent = x->peer;
            if (x->is_send && send_peer < 0) send_peer = x->peer;
            // a forwarding send with nothing to forward waits for its receive, not for its peer
            if (x->is_send && xfer_sendable(x) == 0 && x->done >= sizeof(WireHeader)) continue;
            if (x->is_send && r->step == 0 && absent_send < 0) absent_send = x->peer;
            t->pfds[k++] = (struct pollfd){t->fds[x->peer], (short)(x->is_send ? POLLOUT : POLLIN | POLLRDHUP), 0};
        }
        if (absent < 0) absent = absent_send;
        if (waiting_for < 0) waiting_for = send_peer;
        if (k == 0) tcp_die(t, "%s: internal error: nothing to wait for", r->op->name);
        double limit = absent >= 0 ? timeout : timeout + grace;
        if (now_s() - last >= limit) {
            if (absent >= 0) {
                send_aborts(t, r->op, r->tag, xs, n, absent);
                tcp_die(t, "%s on a group of %d ranks: rank %d made no progress for %g s (stalled or dead): "
                        "it has not joined the operation", r->op->name, r->size, absent, t->timeout_s);
            }
            tcp_die(t, "%s on a group of %d ranks made no progress for %g s waiting for rank %d "
                    "(stalled or dead, or itself waiting for another rank)", r->op->name, r->size, t->timeout_s + grace, waiting_for);
        }
        // The stop watch (comm_set_stop_watch) counts from the last byte moved, too; the poll
        // wakes once a second to look.
        comm_stop_check(r->op->c->w, t->rank, "tcp", r->op->name, r->size, now_s() - last);
        if (poll(t->pfds, (nfds_t)k, poll_ms(last + limit, 1.0)) < 0 && errno != EINTR)
            tcp_die(t, "%s: poll: %s", r->op->name, strerror(errno));
    }
    r->step++;
}

// ---------------------------------------------------------------------------------------
// Algorithms over a group. Chunks: n elements split over p ranks, the first n % p one longer.

static void chunk_of(size_t n, int p, int i, size_t* off, size_t* len) {
    size_t q = n / (size_t)p, rem = n % (size_t)p, ui = (size_t)i;
    *off = ui * q + (ui < rem ? ui : rem);
    *len = q + (ui < rem);
}

// Ring all-gather of buf[n elements of esize] whose chunk me is already in place: in step s
// rank me passes chunk me - s to the right and gets chunk me - s - 1 from the left.
static void ring_all_gather(Run* r, char* buf, size_t n, size_t esize) {
    int p = r->size, me = r->me;
    if (p == 1) return;
    int right = (me + 1) % p, left = (me + p - 1) % p;
    for (int s = 0; s < p - 1; s++) {
        int cs = (me - s + p) % p, cr = (me - s - 1 + 2 * p) % p;
        size_t os, ls, orr, lr;
        chunk_of(n, p, cs, &os, &ls);
        chunk_of(n, p, cr, &orr, &lr);
        Xfer xs[2];
        xfer_init(r, &xs[0], 1, right, buf + os * esize, ls * esize);
        xfer_init(r, &xs[1], 0, left, buf + orr * esize, lr * esize);
        exchange(r, xs, 2);
    }
}

// Ring reduce-scatter of in[n elements]: this rank's chunk of the reduction goes to out (or,
// when out is NULL, to scratch; the pointer is returned). In step s rank me sends its partial
// of chunk me - s - 1 to the right and receives the partial of chunk me - s - 2 from the left,
// combining its own part as the bytes arrive. Chunk c is thus reduced in the fixed order
// c + 1, c + 2, ..., c (mod p): it depends on the group size only, so results repeat exactly.
static char* ring_reduce_scatter(Run* r, const char* in, size_t n, CommDtype dt, CommOp op, char* out) {
    int p = r->size, me = r->me;
    size_t es = dtype_size(dt);
    if (p == 1) {
        if (out && n) memcpy(out, in, n * es);
        return out ? out : (char*)in;
    }
    int right = (me + 1) % p, left = (me + p - 1) % p;
    size_t maxc = n / (size_t)p + (n % (size_t)p != 0);
    char* slot[2] = {NULL, NULL};
    if (p > 2 || !out) {
        char* sc = scratch(r->t, 2 * maxc * es + 1);
        slot[0] = sc;
        slot[1] = sc + maxc * es;
    }
    char* result = NULL;
    for (int s = 0; s < p - 1; s++) {
        int cs = (me - s - 1 + 2 * p) % p, cr = (me - s - 2 + 2 * p) % p;
        size_t os, ls, orr, lr;
        chunk_of(n, p, cs, &os, &ls);
        chunk_of(n, p, cr, &orr, &lr);
        const char* src = s == 0 ? in + os * es : slot[(s - 1) & 1];
        char* dst = (s == p - 2 && out) ? out : slot[s & 1];
        Xfer xs[2];
        xfer_init(r, &xs[0], 1, right, src, ls * es);
        xfer_init(r, &xs[1], 0, left, dst, lr * es);
        xs[1].with = in + orr * es;
        xs[1].dtype = dt;
        xs[1].op = op;
        exchange(r, xs, 2);
        result = dst;
    }
    return result;
}

// Broadcast: small buffers straight from the root; large ones down a chain in group order
// from the root, each rank forwarding bytes as they arrive (the link rate, whatever p is).
static void do_broadcast(Run* r, void* buf, size_t bytes, int root) {
    int p = r->size, me = r->me;
    if (p == 1) return;
    Xfer* xs = (Xfer*)malloc((size_t)p * sizeof(Xfer));
    int n = 0;
    if (bytes <= SMALL_BYTES || p == 2) {
        if (me == root) {
            for (int g = 0; g < p; g++)
                if (g != root) xfer_init(r, &xs[n++], 1, g, buf, bytes);
        } else {
            xfer_init(r, &xs[n++], 0, root, buf, bytes);
        }
    } else {
        int pos = (me - root + p) % p;
        if (pos > 0) xfer_init(r, &xs[n++], 0, (me + p - 1) % p, buf, bytes);
        if (pos < p - 1) {
            xfer_init(r, &xs[n], 1, (me + 1) % p, buf, bytes);
            if (pos > 0) xs[n].limit = &xs[0].payload_done;
            n++;
        }
    }
    exchange(r, xs, n);
    free(xs);
}

// Gather: the root receives every rank's bytes at offsets[g] (offsets NULL: g * bytes).
// counts (root, may be NULL: every rank sends bytes) is what the root expects from each.
static void do_gather(Run* r, const void* send, size_t bytes, void* recv, const size_t* counts, int root) {
    int p = r->size, me = r->me;
    if (me != root) {
        if (p == 1) return;
        Xfer x;
        xfer_init(r, &x, 1, root, send, bytes);
        exchange(r, &x, 1);
        return;
    }
    if (counts && counts[root] != bytes)
        tcp_die(r->t, "%s: the root sends %zu bytes but its recv_bytes[%d] says %zu", r->op->name, bytes, root,
                counts[root]);
    Xfer* xs = (Xfer*)malloc((size_t)p * sizeof(Xfer));
    int n = 0;
    size_t off = 0;
    for (int g = 0; g < p; g++) {
        size_t len = counts ? counts[g] : bytes;
        char* dst = recv ? (char*)recv + off : NULL;
        if (g == me) {
            if (len && dst != (const char*)send) memmove(dst, send, len);
        } else {
            xfer_init(r, &xs[n++], 0, g, dst, len);
        }
        off += len;
    }
    if (n > 0) exchange(r, xs, n);
    free(xs);
}

// all_reduce: small buffers are gathered to group rank 0, reduced there in rank order and
// broadcast; large ones are a ring reduce-scatter then a ring all-gather. Either way each
// element is reduced by exactly one rank in an order fixed by the group size, so every rank
// gets the same bits, run after run.
static void do_all_reduce(Run* r, void* xv, size_t n, CommDtype dt, CommOp op) {
    int p = r->size, me = r->me;
    if (p == 1) return;
    size_t es = dtype_size(dt), bytes = n * es;
    char* x = (char*)xv;
    if (bytes <= SMALL_BYTES || n < (size_t)p) {
        if (me == 0) {
            char* parts = scratch(r->t, (size_t)(p - 1) * bytes + 1);
            Xfer* xs = (Xfer*)malloc((size_t)p * sizeof(Xfer));
            for (int g = 1; g < p; g++) xfer_init(r, &xs[g - 1], 0, g, parts + (size_t)(g - 1) * bytes, bytes);
            exchange(r, xs, p - 1);
            free(xs);
            for (int g = 1; g < p; g++) combine(x, parts + (size_t)(g - 1) * bytes, 0, n, dt, op);
        } else {
            Xfer xo;
            xfer_init(r, &xo, 1, 0, x, bytes);
            exchange(r, &xo, 1);
        }
        // Straight from rank 0 (a chain would only add hops for these sizes).
        Xfer* xs = (Xfer*)malloc((size_t)p * sizeof(Xfer));
        int k = 0;
        if (me == 0) {
            for (int g = 1; g < p; g++) xfer_init(r, &xs[k++], 1, g, x, bytes);
        } else {
            xfer_init(r, &xs[k++], 0, 0, x, bytes);
        }
        exchange(r, xs, k);
        free(xs);
        return;
    }
    char* mine = ring_reduce_scatter(r, x, n, dt, op, NULL);
    size_t off, len;
    chunk_of(n, p, me, &off, &len);
    memcpy(x + off * es, mine, len * es);
    ring_all_gather(r, x, n, es);
}

static void do_barrier(Run* r) {
    do_gather(r, NULL, 0, NULL, NULL, 0);
    do_broadcast(r, NULL, 0, 0);
}

static void run_op(TcpWorld* t, const TcpOp* op) {
    const TcpGroup* g = (const TcpGroup*)op->c->impl;
    Run r = {t, op, g->members, g->tag, op->c->rank, op->c->size, 0, NULL, 0};
    switch (op->kind) {
    case OP_BARRIER: do_barrier(&r); break;
    case OP_ALL_REDUCE: do_all_reduce(&r, op->recv, op->count, op->dtype, op->op); break;
    case OP_BROADCAST: do_broadcast(&r, op->recv, op->count, op->root); break;
    case OP_GATHER: do_gather(&r, op->send, op->count, op->recv, NULL, op->root); break;
    case OP_GATHERV: do_gather(&r, op->send, op->count, op->recv, op->recv_bytes, op->root); break;
    case OP_ALL_GATHER: {
        char* full = (char*)op->recv;
        char* mine = full + (size_t)r.me * op->count;
        if (op->count && mine != (const char*)op->send) memmove(mine, op->send, op->count);
        ring_all_gather(&r, full, (size_t)r.size * op->count, 1);
        break;
    }
    case OP_REDUCE_SCATTER:
        ring_reduce_scatter(&r, (const char*)op->send, (size_t)r.size * op->count, COMM_F32, COMM_SUM,
                            (char*)op->recv);
        break;
    case OP_FINALIZE:
        // After the first barrier every rank has finished its last operation; from now on a
        // peer closing its sockets is the normal end, not a death. The second barrier keeps
        // any rank from closing before every rank has stopped watching.
        do_barrier(&r);
        pthread_mutex_lock(&t->mu);
        t->watch = 0;
        pthread_mutex_unlock(&t->mu);
        do_barrier(&r);
        break;
    case OP_KINDS: break;
    }
}

// ---------------------------------------------------------------------------------------
// The communication thread and the queue

// Waits for the wake pipe; while watching, a hang-up on any socket ends the process (only
// hang-ups: data a peer sent early for the next operation is left in the socket).
static void idle_wait(TcpWorld* t, int watch) {
    int n = 0;
    t->pfds[n++] = (struct pollfd){t->wake[0], POLLIN, 0};
    if (watch)
        for (int r = 0; r < t->world; r++)
            if (t->fds[r] >= 0) t->pfds[n++] = (struct pollfd){t->fds[r], POLLRDHUP, 0};
    while (poll(t->pfds, (nfds_t)n, -1) < 0)
        if (errno != EINTR) tcp_die(t, "poll: %s", strerror(errno));
    int closed = -1;
    for (int i = 1; i < n; i++) {
        if (!t->pfds[i].revents) continue;
        for (int r = 0; r < t->world; r++)
            if (t->fds[r] == t->pfds[i].fd && closed < 0) closed = r;
    }
    if (closed >= 0) {
        // A peer that gave up on a stalled rank left an ABORT before its hang-up, and the
        // others hang up right after it, in any order: give them a moment, then look at every
        // socket (MSG_PEEK: data of a next operation stays). An ABORT says more than the
        // first hang-up.
        for (int attempt = 0; attempt < 2; attempt++) {
            for (int r = 0; r < t->world; r++) {
                WireHeader h;
                if (t->fds[r] < 0) continue;
                if (recv(t->fds[r], &h, sizeof(h), MSG_PEEK | MSG_DONTWAIT) == (ssize_t)sizeof(h) && h.magic == ABORT_MAGIC)
                    tcp_die(t, "rank %d gave up on %s #%llu of group %08x: rank %u%s made no progress for %g s (stalled or dead)",
                            r, h.kind < OP_KINDS ? op_kind_names[h.kind] : "?", (unsigned long long)h.seq, h.tag, h.step,
                            this_rank_note(t, h.step), t->timeout_s);
            }
            if (attempt == 0) {
                struct timespec pause = {0, 200 * 1000 * 1000};
                nanosleep(&pause, NULL);
            }
        }
    }
    if (closed >= 0) tcp_die(t, "rank %d closed its connection between operations (it exited or died)", closed);
    char drain[64];
    while (read(t->wake[0], drain, sizeof(drain)) > 0) {}
}

static void* comm_thread(void* arg) {
    TcpWorld* t = (TcpWorld*)arg;
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (t->head == t->tail) {
            int watch = t->watch;
            pthread_mutex_unlock(&t->mu);
            idle_wait(t, watch);
            pthread_mutex_lock(&t->mu);
        }
        TcpOp op = t->queue[t->head % QUEUE_CAP];
        pthread_mutex_unlock(&t->mu);

        run_op(t, &op);

        pthread_mutex_lock(&t->mu);
        t->head++;
        pthread_cond_broadcast(&t->done_cv);
        pthread_cond_signal(&t->space_cv);
        pthread_mutex_unlock(&t->mu);
        if (op.kind == OP_FINALIZE) return NULL;
    }
}

// Queues op on c; returns its ticket. Blocks while the queue is full.
static CommTicket tcp_enqueue(Comm* c, TcpOp* op) {
    TcpWorld* t = (TcpWorld*)c->w->impl;
    TcpGroup* g = (TcpGroup*)c->impl;
    op->c = c;
    if (!op->name) op->name = op_kind_names[op->kind];
    pthread_mutex_lock(&t->mu);
    while (t->tail - t->head >= QUEUE_CAP) pthread_cond_wait(&t->space_cv, &t->mu);
    op->seq = g->seq++;
    t->queue[t->tail % QUEUE_CAP] = *op;
    CommTicket ticket = (CommTicket)++t->tail;
    pthread_mutex_unlock(&t->mu);
    if (write(t->wake[1], "", 1) < 0) {}  // full pipe (EAGAIN): the thread is awake anyway
    return ticket;
}

static void tcp_wait(Comm* c, CommTicket ticket) {
    TcpWorld* t = (TcpWorld*)c->w->impl;
    pthread_mutex_lock(&t->mu);
    while (t->head < (uint64_t)ticket) pthread_cond_wait(&t->done_cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

static void tcp_run(Comm* c, TcpOp* op) { tcp_wait(c, tcp_enqueue(c, op)); }

// ---------------------------------------------------------------------------------------
// The CommOps table

static void tcp_barrier(Comm* c) {
    TcpOp op = {.kind = OP_BARRIER};
    tcp_run(c, &op);
}

static void tcp_all_reduce(Comm* c, void* x, size_t n, CommDtype dtype, CommOp rop) {
    TcpOp op = {.kind = OP_ALL_REDUCE, .recv = x, .count = n, .dtype = dtype, .op = rop};
    tcp_run(c, &op);
}

static void tcp_broadcast(Comm* c, void* buf, size_t bytes, int root) {
    TcpOp op = {.kind = OP_BROADCAST, .recv = buf, .count = bytes, .root = root};
    tcp_run(c, &op);
}

static void tcp_gather(Comm* c, const void* send, size_t bytes, void* recv, int root) {
    TcpOp op = {.kind = OP_GATHER, .send = send, .count = bytes, .recv = recv, .root = root};
    tcp_run(c, &op);
}

static void tcp_gatherv(Comm* c, const void* send, size_t bytes, void* recv, const size_t* recv_bytes, int root) {
    TcpOp op = {.kind = OP_GATHERV, .send = send, .count = bytes, .recv = recv, .recv_bytes = recv_bytes, .root = root};
    tcp_run(c, &op);
}

static CommTicket tcp_all_gather_start(Comm* c, const void* shard, void* full, size_t bytes) {
    TcpOp op = {.kind = OP_ALL_GATHER, .send = shard, .recv = full, .count = bytes};
    return tcp_enqueue(c, &op);
}

static CommTicket tcp_reduce_scatter_f32_start(Comm* c, const float* full, float* shard, size_t n) {
    TcpOp op = {.kind = OP_REDUCE_SCATTER, .send = full, .recv = shard, .count = n};
    return tcp_enqueue(c, &op);
}

static Comm* new_comm(CommWorld* w, int rank, int size, int* members, uint32_t tag) {
    TcpGroup* g = (TcpGroup*)calloc(1, sizeof(TcpGroup));
    g->members = members;
    g->tag = tag;
    Comm* c = (Comm*)calloc(1, sizeof(Comm));
    c->w = w;
    c->rank = rank;
    c->size = size;
    c->impl = g;
    return c;
}

static void free_comm(Comm* c) {
    if (!c) return;
    TcpGroup* g = (TcpGroup*)c->impl;
    free(g->members);
    free(g);
    free(c);
}

// Collective over c: every rank learns every (color, key); a group is the ranks of one color
// sorted by key, then by rank in c.
static Comm* tcp_split(Comm* c, int color, int key) {
    int p = c->size;
    int32_t mine[2] = {color, key};
    int32_t* all = (int32_t*)malloc((size_t)p * sizeof(mine));
    TcpOp op = {.kind = OP_ALL_GATHER, .name = "split", .send = mine, .recv = all, .count = sizeof(mine)};
    tcp_run(c, &op);
    const TcpGroup* parent = (const TcpGroup*)c->impl;
    int* idx = (int*)malloc((size_t)p * sizeof(int));
    int n = 0;
    for (int i = 0; i < p; i++) {
        if (all[2 * i] != color) continue;
        int j = n++;  // insertion sort: stable, so equal keys stay in parent rank order
        while (j > 0 && all[2 * idx[j - 1] + 1] > all[2 * i + 1]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    int* members = (int*)malloc((size_t)n * sizeof(int));
    int rank = -1;
    for (int j = 0; j < n; j++) {
        members[j] = parent->members[idx[j]];
        if (idx[j] == c->rank) rank = j;
    }
    // The tag: from the parent's tag, the split's number on the parent and the color - the
    // same on every member, different from every other group.
    uint32_t tag = fnv1a(parent->tag, &op.seq, sizeof(op.seq));
    tag = fnv1a(tag, &color, sizeof(color));
    Comm* nc = new_comm(c->w, rank, n, members, tag);
    comm_register_group(c->w, nc);
    free(idx);
    free(all);
    return nc;
}

// Closes the sockets and frees everything (the thread has ended, or never started).
static void destroy_world(CommWorld* w) {
    TcpWorld* t = (TcpWorld*)w->impl;
    for (int r = 0; r < t->world; r++)
        if (t->fds[r] >= 0) close(t->fds[r]);
    if (t->wake[0] >= 0) close(t->wake[0]);
    if (t->wake[1] >= 0) close(t->wake[1]);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->done_cv);
    pthread_cond_destroy(&t->space_cv);
    for (int i = 0; i < w->n_groups; i++) free_comm(w->groups[i]);
    free(w->groups);
    free_comm(w->world);
    free(t->scratch);
    free(t->pfds);
    free(t->fds);
    free(t);
    free(w);
}

static void tcp_finalize(CommWorld* w) {
    TcpWorld* t = (TcpWorld*)w->impl;
    TcpOp op = {.kind = OP_FINALIZE};
    tcp_run(w->world, &op);
    pthread_join(t->thread, NULL);
    destroy_world(w);
}

// Ends this process now. _exit closes every socket at once (in the kernel, as the process
// ends), so each peer's current or next operation, or its idle watch, fails on the hang-up.
// Closing them one by one here instead would race with the communication thread, which
// could report a spurious error on a socket closed under it.
static void tcp_abort(CommWorld* w, int code) {
    fflush(stdout);
    fflush(stderr);
    _exit(code);
}

static const CommOps tcp_ops = {
    .name = "tcp",
    .split = tcp_split,
    .barrier = tcp_barrier,
    .all_reduce = tcp_all_reduce,
    .broadcast = tcp_broadcast,
    .gather = tcp_gather,
    .gatherv = tcp_gatherv,
    .all_gather_start = tcp_all_gather_start,
    .reduce_scatter_f32_start = tcp_reduce_scatter_f32_start,
    .wait = tcp_wait,
    .finalize = tcp_finalize,
    .abort = tcp_abort,
};

// ---------------------------------------------------------------------------------------
// Rendezvous and mesh

#define HELLO_MAGIC 0x46534448u  // "FSDH"
typedef enum { HELLO_MESH = 1, HELLO_JOIN, HELLO_ACK, HELLO_NAK, HELLO_FAIL, HELLO_ENTRY } HelloKind;

// Every handshake message. NAK: "not me, try again" (a stale address); FAIL: a
// misconfiguration both sides must report.
typedef struct {
    uint32_t magic, kind;
    int32_t from, to, world, port;
    uint64_t nonce;             // random per process: tells a retry from a second process
    char addr[64];              // from's advertised IPv4 address (of its listening socket)
    char host[128];             // from's host name (ranks with the same one share a node)
    char run_id[256];
    char text[256];             // NAK/FAIL: why
} Hello;

typedef struct {
    char addr[64];
    int port;
} Address;

typedef struct {
    const char* spec;           // the rendezvous string, for messages
    int rank, world;
    const char* run_id;
    double timeout_s, deadline;
    uint64_t nonce;
    int listen_fd, port;
    char addr[64], host[128];
    int* fds;                   // [world]
    char (*hosts)[128];         // [world]
    uint64_t* nonces;           // [world]: the process behind each fd
    Address* table;             // [world]: advertised addresses (tcp://: rank 0 sends them all)
    int file_mode;
    char dir[512], safe_id[256], file[1024];
    char master[256];
    int master_port;
    char* err;
    size_t errlen;
} Rdv;

static int rdv_fail(Rdv* v, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static int rdv_fail(Rdv* v, const char* fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(v->err, v->errlen, "rendezvous %s: %s", v->spec, msg);
    return 1;
}

static Hello make_hello(const Rdv* v, HelloKind kind, int to) {
    Hello h;
    memset(&h, 0, sizeof(h));
    h.magic = HELLO_MAGIC;
    h.kind = (uint32_t)kind;
    h.from = v->rank;
    h.to = to;
    h.world = v->world;
    h.port = v->port;
    h.nonce = v->nonce;
    snprintf(h.addr, sizeof(h.addr), "%s", v->addr);
    snprintf(h.host, sizeof(h.host), "%s", v->host);
    snprintf(h.run_id, sizeof(h.run_id), "%s", v->run_id);
    return h;
}

static void hello_terminate(Hello* h) {
    h->addr[sizeof(h->addr) - 1] = 0;
    h->host[sizeof(h->host) - 1] = 0;
    h->run_id[sizeof(h->run_id) - 1] = 0;
    h->text[sizeof(h->text) - 1] = 0;
}

// Sends or receives exactly len bytes before deadline. Returns 0, ETIMEDOUT, ECONNRESET (also
// for EOF) or another errno.
static int io_deadline(int fd, void* buf, size_t len, int is_send, double deadline) {
    size_t done = 0;
    while (done < len) {
        ssize_t k = is_send ? send(fd, (char*)buf + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : recv(fd, (char*)buf + done, len - done, MSG_DONTWAIT);
        if (k > 0) {
            done += (size_t)k;
            continue;
        }
        if (k == 0) return ECONNRESET;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return errno == EPIPE ? ECONNRESET : errno;
        if (now_s() >= deadline) return ETIMEDOUT;
        struct pollfd p = {fd, (short)(is_send ? POLLOUT : POLLIN), 0};
        if (poll(&p, 1, poll_ms(deadline, 0)) < 0 && errno != EINTR) return errno;
    }
    return 0;
}

static int send_hello(int fd, Hello* h, double deadline) { return io_deadline(fd, h, sizeof(*h), 1, deadline); }

static int recv_hello(int fd, Hello* h, double deadline) {
    int e = io_deadline(fd, h, sizeof(*h), 0, deadline);
    if (!e) hello_terminate(h);
    return e;
}

// Starts a non-blocking connect to addr:port (a dotted address or a host name). Returns the
// socket (connected or connecting) or -1 with *why set.
static int start_connect(const char* addr, int port, char* why, size_t whylen) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    int rc = getaddrinfo(addr, service, &hints, &res);
    if (rc != 0 || !res) {
        snprintf(why, whylen, "cannot resolve %s: %s", addr, gai_strerror(rc));
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, whylen, "socket: %s", strerror(errno));
        freeaddrinfo(res);
        return -1;
    }
    tune_socket(fd);
    rc = connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    if (rc < 0 && errno != EINPROGRESS && errno != EINTR) {
        snprintf(why, whylen, "%s", strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

// A connect that completes before deadline: the socket, or -1 with *why set.
static int connect_deadline(const char* addr, int port, double deadline, char* why, size_t whylen) {
    int fd = start_connect(addr, port, why, whylen);
    if (fd < 0) return -1;
    for (;;) {
        struct pollfd p = {fd, POLLOUT, 0};
        int rc = poll(&p, 1, poll_ms(deadline, 0));
        if (rc < 0 && errno == EINTR) continue;
        if (rc <= 0) {
            snprintf(why, whylen, "%s", rc == 0 ? "connect timed out" : strerror(errno));
            close(fd);
            return -1;
        }
        int e = 0;
        socklen_t el = sizeof(e);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
        if (e) {
            snprintf(why, whylen, "%s", strerror(e));
            close(fd);
            return -1;
        }
        return fd;
    }
}

// The address the other ranks should use to reach this one.
static int advertised_address(Rdv* v) {
    const char* env = getenv("FSDP_SOCKET_ADDR");
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    if (env && *env) {
        int rc = getaddrinfo(env, NULL, &hints, &res);
        if (rc != 0 || !res) return rdv_fail(v, "FSDP_SOCKET_ADDR=%s: not an IPv4 address or host name (%s)", env,
                                            rc ? gai_strerror(rc) : "no address");
        inet_ntop(AF_INET, &((struct sockaddr_in*)res->ai_addr)->sin_addr, v->addr, sizeof(v->addr));
        freeaddrinfo(res);
        return 0;
    }
    if (getaddrinfo(v->host, NULL, &hints, &res) == 0) {
        for (struct addrinfo* a = res; a; a = a->ai_next) {
            struct in_addr ip = ((struct sockaddr_in*)a->ai_addr)->sin_addr;
            if ((ntohl(ip.s_addr) >> 24) == 127) continue;
            inet_ntop(AF_INET, &ip, v->addr, sizeof(v->addr));
            freeaddrinfo(res);
            return 0;
        }
        freeaddrinfo(res);
    }
    struct ifaddrs* ifs = NULL;
    if (getifaddrs(&ifs) == 0) {
        for (struct ifaddrs* i = ifs; i; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
            if (!(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK)) continue;
            inet_ntop(AF_INET, &((struct sockaddr_in*)i->ifa_addr)->sin_addr, v->addr, sizeof(v->addr));
            freeifaddrs(ifs);
            return 0;
        }
        freeifaddrs(ifs);
    }
    snprintf(v->addr, sizeof(v->addr), "127.0.0.1");  // one host only
    return 0;
}

static int open_listener(Rdv* v, int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return rdv_fail(v, "socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    tune_socket(fd);  // accepted sockets inherit TCP_NODELAY
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    sa.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr*)&sa, sizeof(sa)) < 0 || listen(fd, SOMAXCONN) < 0) {
        int e = errno;
        close(fd);
        if (port) return rdv_fail(v, "cannot listen on port %d: %s", port, strerror(e));
        return rdv_fail(v, "cannot listen on a port: %s", strerror(e));
    }
    socklen_t sl = sizeof(sa);
    getsockname(fd, (struct sockaddr*)&sa, &sl);
    v->listen_fd = fd;
    v->port = ntohs(sa.sin_port);
    return 0;
}

static int mkdir_p(const char* dir) {
    char path[512];
    snprintf(path, sizeof(path), "%s", dir);
    for (char* p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(path, 0777) < 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(path, 0777) < 0 && errno != EEXIST) return -1;
    return 0;
}

static void rank_file(const Rdv* v, int r, char* out, size_t n) {
    snprintf(out, n, "%s/%s.rank%d", v->dir, v->safe_id, r);
}

// Writes this rank's file atomically: a reader sees all of it or nothing. The temporary name
// carries the pid: a relaunched rank may publish while one of a killed attempt still does.
static int publish_file(Rdv* v) {
    if (mkdir_p(v->dir) < 0) return rdv_fail(v, "cannot create %s: %s", v->dir, strerror(errno));
    rank_file(v, v->rank, v->file, sizeof(v->file));
    char line[256], err[1300];
    int n = snprintf(line, sizeof(line), "%s %d %s\n", v->addr, v->port, v->host);
    if (atomic_write_file(v->file, line, (size_t)n, ATOMIC_TMP_PID, err, sizeof(err)) != 0) {
        v->file[0] = 0;
        return rdv_fail(v, "%s", err);
    }
    return 0;
}

static int read_rank_file(const char* path, Address* a) {
    FILE* f = fopen(path, "r");
    if (!f) return -1;
    char host[128];
    int ok = fscanf(f, "%63s %d %127s", a->addr, &a->port, host) == 3 && a->port > 0 && a->port < 65536;
    fclose(f);
    return ok ? 0 : -1;
}

// One connection this rank makes to a lower rank during the mesh: connect, send a hello,
// read the answer; on anything but an ACK from that rank, start over a little later.
enum { LINK_IDLE, LINK_CONNECTING, LINK_SENDING, LINK_AWAITING, LINK_DONE };
typedef struct {
    int fd, state;
    Hello out, in;
    size_t out_done, in_done;
    double retry_at, attempt_end;
    int seen;               // file mode: the rank's file was read at least once
    char where[96];         // addr:port of the last attempt
    char why[256];          // why the last attempt failed
} Link;

// An accepted connection whose hello has not fully arrived.
typedef struct {
    int fd;
    Hello in;
    size_t in_done;
    double drop_at;
} Pending;

static void link_retry(Link* L, const char* why) {
    if (L->fd >= 0) close(L->fd);
    L->fd = -1;
    L->state = LINK_IDLE;
    L->retry_at = now_s() + FILE_POLL_S;
    snprintf(L->why, sizeof(L->why), "%s", why);
}

static void link_start(Rdv* v, int i, Link* L) {
    Address a;
    if (v->file_mode) {
        char path[1100];
        rank_file(v, i, path, sizeof(path));
        if (read_rank_file(path, &a) < 0) {
            L->retry_at = now_s() + FILE_POLL_S;
            return;
        }
        L->seen = 1;
    } else {
        a = v->table[i];
    }
    snprintf(L->where, sizeof(L->where), "%s:%d", a.addr, a.port);
    char why[256];
    L->fd = start_connect(a.addr, a.port, why, sizeof(why));
    if (L->fd < 0) {
        link_retry(L, why);
        return;
    }
    L->state = LINK_CONNECTING;
    L->out = make_hello(v, HELLO_MESH, i);
    L->out_done = L->in_done = 0;
    L->attempt_end = now_s() + HANDSHAKE_ATTEMPT_S;
}

// Progresses link L to rank i after poll said its socket is ready. Returns 1 on a fatal
// answer (error in v->err).
static int link_progress(Rdv* v, int i, Link* L) {
    if (L->state == LINK_CONNECTING) {
        int e = 0;
        socklen_t el = sizeof(e);
        getsockopt(L->fd, SOL_SOCKET, SO_ERROR, &e, &el);
        if (e) {
            link_retry(L, strerror(e));
            return 0;
        }
        L->state = LINK_SENDING;
    }
    if (L->state == LINK_SENDING) {
        ssize_t k = send(L->fd, (char*)&L->out + L->out_done, sizeof(Hello) - L->out_done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ENOTCONN) {
            link_retry(L, strerror(errno));
            return 0;
        }
        if (k > 0) L->out_done += (size_t)k;
        if (L->out_done == sizeof(Hello)) L->state = LINK_AWAITING;
        return 0;
    }
    if (L->state == LINK_AWAITING) {
        ssize_t k = recv(L->fd, (char*)&L->in + L->in_done, sizeof(Hello) - L->in_done, MSG_DONTWAIT);
        if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            link_retry(L, k == 0 ? "the connection closed during the handshake" : strerror(errno));
            return 0;
        }
        if (k > 0) L->in_done += (size_t)k;
        if (L->in_done < sizeof(Hello)) return 0;
        Hello* h = &L->in;
        hello_terminate(h);
        if (h->magic != HELLO_MAGIC) {
            link_retry(L, "not a rank of this transport");
        } else if (h->kind == HELLO_FAIL) {
            return rdv_fail(v, "rank %d at %s refused this rank: %s", i, L->where, h->text);
        } else if (h->kind == HELLO_ACK && h->from == i && !strcmp(h->run_id, v->run_id)) {
            v->fds[i] = L->fd;
            snprintf(v->hosts[i], sizeof(v->hosts[i]), "%s", h->host);
            v->nonces[i] = h->nonce;
            L->fd = -1;
            L->state = LINK_DONE;
        } else {
            char why[256];
            snprintf(why, sizeof(why), "%.90s answered: %.150s", L->where,
                     h->kind == HELLO_NAK ? h->text : "not the rank expected");
            link_retry(L, why);
        }
    }
    return 0;
}

static void answer(int fd, const Rdv* v, HelloKind kind, const char* text) {
    Hello h = make_hello(v, kind, -1);
    snprintf(h.text, sizeof(h.text), "%s", text);
    send_hello(fd, &h, now_s() + 1.0);
}

// Handles a complete hello on an accepted connection. Returns 1 on a misconfiguration that
// ends the rendezvous (error in v->err); the socket is kept (in v->fds) or closed.
static int handle_hello(Rdv* v, int fd, Hello* h, int joins) {
    char text[256];
    int want = joins ? HELLO_JOIN : HELLO_MESH;
    if (h->magic != HELLO_MAGIC || (int)h->kind != want) {
        if (h->magic == HELLO_MAGIC) answer(fd, v, HELLO_NAK, "unexpected handshake message");
        close(fd);  // a stray connection: not for us
        return 0;
    }
    if (strcmp(h->run_id, v->run_id) != 0) {
        // Another launch (or an earlier attempt) reached us: tell it, and carry on.
        snprintf(text, sizeof(text), "run id mismatch: rank %d runs '%.100s', the connecting rank '%.100s'",
                 v->rank, v->run_id, h->run_id);
        answer(fd, v, joins ? HELLO_FAIL : HELLO_NAK, text);
        close(fd);
        return 0;
    }
    if (!joins && h->to != v->rank) {
        snprintf(text, sizeof(text), "this is rank %d, not rank %d", v->rank, h->to);
        answer(fd, v, HELLO_NAK, text);
        close(fd);
        return 0;
    }
    int fatal = 0;
    if (h->world != v->world) {
        snprintf(text, sizeof(text), "world size mismatch: rank %d has %d ranks, rank %d has %d", v->rank, v->world,
                 h->from, h->world);
        fatal = 1;
    } else if (h->from <= v->rank || h->from >= v->world) {
        snprintf(text, sizeof(text), "rank %d connected to rank %d: only a higher rank of %d may", h->from, v->rank,
                 v->world);
        fatal = 1;
    } else if (v->fds[h->from] >= 0 && v->nonces[h->from] != h->nonce) {
        snprintf(text, sizeof(text), "two processes claim rank %d (listening at %.64s:%d and %.64s:%d): ranks must be "
                 "distinct", h->from, v->table[h->from].addr, v->table[h->from].port, h->addr, h->port);
        fatal = 1;
    }
    if (fatal) {
        answer(fd, v, HELLO_FAIL, text);
        close(fd);
        return rdv_fail(v, "%s", text);
    }
    if (!joins) {
        Hello ack = make_hello(v, HELLO_ACK, h->from);
        if (send_hello(fd, &ack, now_s() + 1.0) != 0) {
            close(fd);  // it gave up on this attempt; it will try again
            return 0;
        }
    }
    if (v->fds[h->from] >= 0) close(v->fds[h->from]);  // the same process retried: the newest wins
    v->fds[h->from] = fd;
    v->nonces[h->from] = h->nonce;
    snprintf(v->hosts[h->from], sizeof(v->hosts[h->from]), "%s", h->host);
    snprintf(v->table[h->from].addr, sizeof(v->table[h->from].addr), "%s", h->addr);
    v->table[h->from].port = h->port;
    return 0;
}

// The rendezvous's timeout message for the first thing missing.
static int mesh_timeout(Rdv* v, int lo, Link* links, int joins) {
    for (int i = lo; i < v->rank; i++) {
        Link* L = &links[i];
        if (L->state == LINK_DONE) continue;
        char path[1100];
        rank_file(v, i, path, sizeof(path));
        if (v->file_mode && !L->seen)
            return rdv_fail(v, "rank %d's file %s did not appear within %g s", i, path, v->timeout_s);
        return rdv_fail(v, "cannot connect to rank %d at %s%s%s: %s (after %g s)", i, L->where,
                        v->file_mode ? " from " : "", v->file_mode ? path : "",
                        L->why[0] ? L->why : "no answer", v->timeout_s);
    }
    char list[200] = "";
    int missing = 0, first = -1;
    for (int r = joins ? 1 : v->rank + 1; r < v->world; r++) {
        if (v->fds[r] >= 0) continue;
        if (first < 0) first = r;
        size_t len = strlen(list);
        if (missing < 8) snprintf(list + len, sizeof(list) - len, "%s%d", missing ? ", " : "", r);
        else if (missing == 8) snprintf(list + len, sizeof(list) - len, ", ...");
        missing++;
    }
    char note[1200] = "";
    if (v->file_mode) {
        char path[1100];
        rank_file(v, first, path, sizeof(path));
        struct stat st;
        if (stat(path, &st) == 0)
            snprintf(note, sizeof(note), " (rank %d's file exists: it may be waiting for a lower rank)", first);
        else
            snprintf(note, sizeof(note), " (no file %s)", path);
    }
    return rdv_fail(v, "rank%s %s did not connect within %g s%s", missing > 1 ? "s" : "", list, v->timeout_s,
                    note);
}

// Forms this rank's part of the mesh: connects to ranks lo..rank-1 and accepts every higher
// rank (joins: rank 0 of a tcp:// rendezvous accepting every other rank's JOIN instead).
static int mesh(Rdv* v, int lo, int joins) {
    int W = v->world;
    Link* links = (Link*)calloc((size_t)W, sizeof(Link));
    Pending pend[MAX_PENDING];
    int n_pend = 0;
    struct pollfd* pfds = (struct pollfd*)malloc((size_t)(1 + W + MAX_PENDING) * sizeof(struct pollfd));
    int* who = (int*)malloc((size_t)(1 + W + MAX_PENDING) * sizeof(int));  // what each pfd is
    for (int i = 0; i < W; i++) links[i].fd = -1;
    int rc = 0;
    for (;;) {
        double now = now_s();
        int lower_done = 1;
        for (int i = lo; i < v->rank; i++) {
            Link* L = &links[i];
            if (L->state == LINK_IDLE && now >= L->retry_at) link_start(v, i, L);
            else if (L->state != LINK_IDLE && L->state != LINK_DONE && now >= L->attempt_end)
                link_retry(L, "no answer to the handshake within 5 s");
            lower_done &= L->state == LINK_DONE;
        }
        int higher_done = 1;
        for (int r = joins ? 1 : v->rank + 1; r < W; r++) higher_done &= v->fds[r] >= 0;
        if (lower_done && higher_done) break;
        if (now >= v->deadline) {
            rc = mesh_timeout(v, lo, links, joins);
            break;
        }

        // While MAX_PENDING hellos are outstanding, more connections wait in the backlog.
        int n = 0;
        pfds[n] = (struct pollfd){n_pend < MAX_PENDING ? v->listen_fd : -1, POLLIN, 0};
        who[n++] = -1;
        for (int i = lo; i < v->rank; i++) {
            Link* L = &links[i];
            if (L->state == LINK_IDLE || L->state == LINK_DONE) continue;
            pfds[n] = (struct pollfd){L->fd, (short)(L->state == LINK_AWAITING ? POLLIN : POLLOUT), 0};
            who[n++] = i;
        }
        for (int k = 0; k < n_pend; k++) {
            pfds[n] = (struct pollfd){pend[k].fd, POLLIN, 0};
            who[n++] = W + k;
        }
        if (poll(pfds, (nfds_t)n, poll_ms(v->deadline, FILE_POLL_S)) < 0) {
            if (errno == EINTR) continue;
            rc = rdv_fail(v, "poll: %s", strerror(errno));
            break;
        }
        for (int k = 1; k < n && !rc; k++)
            if (pfds[k].revents && who[k] < W) rc = link_progress(v, who[k], &links[who[k]]);
        // Pending hellos (from the end, so that removing one keeps the others' indices).
        for (int k = n - 1; k >= 1 && !rc; k--) {
            if (who[k] < W) continue;
            Pending* p = &pend[who[k] - W];
            int drop = 0;
            if (pfds[k].revents) {
                ssize_t got = recv(p->fd, (char*)&p->in + p->in_done, sizeof(Hello) - p->in_done, MSG_DONTWAIT);
                if (got > 0) p->in_done += (size_t)got;
                else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) drop = 1;
            }
            if (!drop && p->in_done == sizeof(Hello)) {
                hello_terminate(&p->in);
                rc = handle_hello(v, p->fd, &p->in, joins);
                p->fd = -1;  // handle_hello kept or closed it
                drop = 1;
            } else if (!drop && now_s() >= p->drop_at) {
                drop = 1;  // a stray connection that sends nothing
            }
            if (drop) {
                if (p->fd >= 0) close(p->fd);
                pend[who[k] - W] = pend[--n_pend];
            }
        }
        if (!rc && pfds[0].revents) {
            while (n_pend < MAX_PENDING) {
                int fd = accept4(v->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) break;  // EAGAIN: none left (errors: the connector will retry)
                pend[n_pend++] = (Pending){.fd = fd, .in_done = 0, .drop_at = now_s() + HANDSHAKE_ATTEMPT_S};
            }
        }
        if (rc) break;
    }
    for (int k = 0; k < n_pend; k++) close(pend[k].fd);
    for (int i = 0; i < W; i++)
        if (links[i].fd >= 0) close(links[i].fd);
    free(links);
    free(pfds);
    free(who);
    return rc;
}

// tcp://: a rank other than 0 joins through rank 0 and receives the table.
static int join_master(Rdv* v) {
    double backoff = 0.05;
    char why[256] = "";
    int fd = -1;
    while (fd < 0) {
        if (now_s() >= v->deadline)
            return rdv_fail(v, "cannot connect: %s (after %g s)", why[0] ? why : "timed out", v->timeout_s);
        double attempt = fmin(v->deadline, now_s() + HANDSHAKE_ATTEMPT_S);
        fd = connect_deadline(v->master, v->master_port, attempt, why, sizeof(why));
        if (fd < 0) {
            sleep_s(fmin(backoff, fmax(0.0, v->deadline - now_s())));
            backoff = fmin(2 * backoff, 1.0);
        }
    }
    Hello h = make_hello(v, HELLO_JOIN, 0);
    int e = send_hello(fd, &h, v->deadline);
    if (!e) e = recv_hello(fd, &h, v->deadline);
    if (e == 0 && h.magic != HELLO_MAGIC) e = EPROTO;
    if (e == 0 && (h.kind == HELLO_FAIL || h.kind == HELLO_NAK)) {
        close(fd);
        return rdv_fail(v, "rank 0 refused this rank: %s", h.text);
    }
    if (e == 0 && h.kind != HELLO_ACK) e = EPROTO;
    for (int r = 0; r < v->world && !e; r++) {
        Hello entry;
        e = recv_hello(fd, &entry, v->deadline);
        if (!e && (entry.magic != HELLO_MAGIC || entry.kind != HELLO_ENTRY || entry.from != r)) e = EPROTO;
        if (e) break;
        snprintf(v->table[r].addr, sizeof(v->table[r].addr), "%s", entry.addr);
        v->table[r].port = entry.port;
        snprintf(v->hosts[r], sizeof(v->hosts[r]), "%s", entry.host);
    }
    if (e) {
        close(fd);
        if (e == ETIMEDOUT) return rdv_fail(v, "rank 0 did not see every rank within %g s", v->timeout_s);
        if (e == ECONNRESET) return rdv_fail(v, "rank 0 closed the connection before the world formed (see its error)");
        if (e == EPROTO) return rdv_fail(v, "the process on that port is not rank 0 of this transport");
        return rdv_fail(v, "talking to rank 0: %s", strerror(e));
    }
    v->fds[0] = fd;
    return 0;
}

// tcp://: rank 0 sends every joined rank the ACK and the table.
static int send_table(Rdv* v) {
    snprintf(v->table[0].addr, sizeof(v->table[0].addr), "%s", v->addr);
    v->table[0].port = v->port;
    snprintf(v->hosts[0], sizeof(v->hosts[0]), "%s", v->host);
    for (int r = 1; r < v->world; r++) {
        Hello ack = make_hello(v, HELLO_ACK, r);
        int e = send_hello(v->fds[r], &ack, v->deadline);
        for (int q = 0; q < v->world && !e; q++) {
            Hello entry = make_hello(v, HELLO_ENTRY, r);
            entry.from = q;
            entry.port = v->table[q].port;
            snprintf(entry.addr, sizeof(entry.addr), "%s", v->table[q].addr);
            snprintf(entry.host, sizeof(entry.host), "%s", v->hosts[q]);
            e = send_hello(v->fds[r], &entry, v->deadline);
        }
        if (e) return rdv_fail(v, "sending the table to rank %d: %s", r, strerror(e));
    }
    return 0;
}

static int rendezvous(Rdv* v) {
    if (advertised_address(v)) return 1;
    if (v->file_mode) {
        if (open_listener(v, 0) || publish_file(v) || mesh(v, 0, 0)) return 1;
        // Every higher rank has connected: nobody reads this file any more.
        unlink(v->file);
        v->file[0] = 0;
        return 0;
    }
    if (v->rank == 0) {
        if (open_listener(v, v->master_port) || mesh(v, 0, 1)) return 1;
        return send_table(v);
    }
    if (open_listener(v, 0) || join_master(v)) return 1;
    return mesh(v, 1, 0);
}

static int parse_rendezvous(Rdv* v, const char* spec) {
    if (!strncmp(spec, "file:", 5)) {
        if (!spec[5]) return rdv_fail(v, "no directory after file:");
        if (strlen(spec + 5) >= sizeof(v->dir) - 1) return rdv_fail(v, "directory name too long");
        v->file_mode = 1;
        snprintf(v->dir, sizeof(v->dir), "%s", spec + 5);
        size_t n = strlen(v->dir);
        while (n > 1 && v->dir[n - 1] == '/') v->dir[--n] = 0;
        return 0;
    }
    if (!strncmp(spec, "tcp://", 6)) {
        const char* hp = spec + 6;
        const char* colon = strrchr(hp, ':');
        char* end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : 0;
        if (!colon || colon == hp || (size_t)(colon - hp) >= sizeof(v->master) || !end || *end || port < 1 ||
            port > 65535)
            return rdv_fail(v, "expected tcp://HOST:PORT with a port in 1..65535");
        snprintf(v->master, sizeof(v->master), "%.*s", (int)(colon - hp), hp);
        v->master_port = (int)port;
        return 0;
    }
    return rdv_fail(v, "unknown kind (expected file:DIR or tcp://HOST:PORT)");
}

static uint64_t random_nonce(int rank) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != (ssize_t)sizeof(x)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = ((uint64_t)getpid() << 32) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)rank;
    }
    return x;
}

CommWorld* comm_tcp_init(int rank, int world, const char* rendezvous_spec, const char* run_id,
                         double timeout_s, char* err, size_t errlen) {
    Rdv v;
    memset(&v, 0, sizeof(v));
    v.spec = rendezvous_spec ? rendezvous_spec : "(none)";
    v.rank = rank;
    v.world = world;
    v.run_id = run_id ? run_id : "";
    v.timeout_s = timeout_s;
    v.deadline = timeout_s > 0 ? now_s() + timeout_s : INFINITY;
    v.listen_fd = -1;
    v.err = err;
    v.errlen = errlen;
    if (world < 1 || rank < 0 || rank >= world) {
        rdv_fail(&v, "rank %d of %d is not a valid rank", rank, world);
        return NULL;
    }
    if (!v.run_id[0] || strlen(v.run_id) >= sizeof(((Hello*)0)->run_id)) {
        rdv_fail(&v, "the run id must be 1 to 255 characters");
        return NULL;
    }
    // A world of one meets nobody: no rendezvous needed (a build without MPI runs a single
    // process this way).
    if (world > 1 && (!rendezvous_spec || parse_rendezvous(&v, rendezvous_spec))) {
        if (!rendezvous_spec) rdv_fail(&v, "no rendezvous given");
        return NULL;
    }
    // The run id names files: anything but [A-Za-z0-9._-] becomes '_' there (the handshake
    // still compares the run id itself).
    snprintf(v.safe_id, sizeof(v.safe_id), "%s", v.run_id);
    for (char* p = v.safe_id; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '.' ||
              *p == '-' || *p == '_'))
            *p = '_';
    if (gethostname(v.host, sizeof(v.host) - 1) != 0) snprintf(v.host, sizeof(v.host), "unknown");
    v.nonce = random_nonce(rank);

    // A send to a dead peer must fail with EPIPE, not kill the process (MSG_NOSIGNAL covers
    // our sends; this covers everyone else's). A handler the program installed is kept.
    struct sigaction sa;
    if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);

    v.fds = (int*)malloc((size_t)world * sizeof(int));
    v.hosts = (char(*)[128])calloc((size_t)world, sizeof(*v.hosts));
    v.nonces = (uint64_t*)calloc((size_t)world, sizeof(uint64_t));
    v.table = (Address*)calloc((size_t)world, sizeof(Address));
    for (int r = 0; r < world; r++) v.fds[r] = -1;
    snprintf(v.hosts[rank], sizeof(v.hosts[rank]), "%s", v.host);

    int failed = world > 1 && rendezvous(&v);
    if (v.listen_fd >= 0) close(v.listen_fd);
    free(v.table);
    free(v.nonces);
    if (failed) {
        for (int r = 0; r < world; r++)
            if (v.fds[r] >= 0) close(v.fds[r]);
        if (v.file[0]) unlink(v.file);
        free(v.fds);
        free(v.hosts);
        return NULL;
    }

    TcpWorld* t = (TcpWorld*)calloc(1, sizeof(TcpWorld));
    t->rank = rank;
    t->world = world;
    t->timeout_s = timeout_s;
    t->fds = v.fds;
    t->watch = 1;
    t->wake[0] = t->wake[1] = -1;
    t->pfds = (struct pollfd*)malloc((size_t)(2 * world + 1) * sizeof(struct pollfd));
    for (int r = 0; r < world; r++)
        if (t->fds[r] >= 0) tune_socket(t->fds[r]);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->done_cv, NULL);
    pthread_cond_init(&t->space_cv, NULL);

    CommWorld* w = (CommWorld*)calloc(1, sizeof(CommWorld));
    w->ops = &tcp_ops;
    w->timeout_s = timeout_s;
    w->impl = t;
    for (int r = 0; r < world; r++) {
        if (strcmp(v.hosts[r], v.host) != 0) continue;
        if (r < rank) w->local_rank++;
        w->local_size++;
    }
    free(v.hosts);
    int* members = (int*)malloc((size_t)world * sizeof(int));
    for (int r = 0; r < world; r++) members[r] = r;
    w->world = new_comm(w, rank, world, members, fnv1a(2166136261u, "world", 5));

    if (pipe2(t->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        snprintf(err, errlen, "comm tcp: pipe: %s", strerror(errno));
        destroy_world(w);
        return NULL;
    }
    // The thread blocks every signal: SIGTERM/SIGUSR1 and friends go to the program's own
    // threads, whose handlers expect to run there.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int prc = pthread_create(&t->thread, NULL, comm_thread, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (prc != 0) {
        snprintf(err, errlen, "comm tcp: cannot start the communication thread: %s", strerror(prc));
        destroy_world(w);
        return NULL;
    }
    return w;
}
