// The embedding on the GPU: out = wte[token] + wpe[position] (GPT-2), or wte[token] alone for
// a model without learned positions (Llama: wpe NULL, RoPE rotates q and k instead), and its
// backward into dwte and dwpe. One header for both families' embedding, as llm.c's
// llmc/encoder.cuh. CPU twins: encoder_forward / encoder_backward in kernels/cpu_kernels.h.
// The conventions (storage, accumulation, launchers, preconditions) are kernels/cuda_common.cuh's.
//
//   wte and dwte hold the vocabulary rows [vocab_begin, vocab_end) (tensor parallelism: this
//   rank's slice; 0 and the padded vocabulary: all), row 0 being token vocab_begin.
//   encoder_forward_cuda        out[N,C] = wte[inp - vocab_begin] + wpe[t] (wpe NULL:
//                               wte[...] alone, Llama); a token outside the range embeds
//                               as zero (out = wpe[t], or 0)                        no scratch
//   encoder_backward_cuda       dwte[inp[n] - vocab_begin] += dout[n] for tokens in the
//                               range (the others are skipped); dwpe[t] += (accumulate) or
//                               = (not: dwpe not read) sum_b dout[b,t], t < T (dwpe NULL: none)
//                               scratch: encoder_backward_scratch_bytes(B, T, vocab)
//                               (3 int arrays of N + CUB radix-sort temp storage; needs
//                               the CUDA device current when called). Token ids must be
//                               in [0, vocab). The positions are sorted by token id
//                               (stable CUB radix sort); the first position of each run
//                               sums the run in position order, so every dwte row receives
//                               its additions in the same order as the CPU twin (bitwise
//                               equal fp32 sums before the final 16-bit rounding).
#ifndef FSDP_KERNELS_CUDA_ENCODER_CUH
#define FSDP_KERNELS_CUDA_ENCODER_CUH

#include <cub/device/device_radix_sort.cuh>

#include "kernels/cuda_common.cuh"

// One thread per 8 channels of one row.
template <class T16>
static __global__ void __launch_bounds__(256)
encoder_forward_kernel(T16* __restrict__ out, const int* __restrict__ inp,
                       const T16* __restrict__ wte, const T16* __restrict__ wpe,
                       int N, int T, int C, int vocab_begin, int vocab_end) {
    const int C8 = C / 8;
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * C8) return;
    const int n = (int)(idx / C8);
    const size_t col = (idx % C8) * 8;
    const int t = n % T;
    const int tok = inp[n];
    float a[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};  // another rank's token: zero here
    if (tok >= vocab_begin && tok < vocab_end) load8(a, wte + (size_t)(tok - vocab_begin) * C + col);
    if (wpe != NULL) {  // uniform: no learned positions (Llama) is one launch's choice
        float b[8];
        load8(b, wpe + (size_t)t * C + col);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] += b[k];
    }
    store8(out + (size_t)n * C + col, a);
}

static __global__ void iota_kernel(int* __restrict__ x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = i;
}

// dwte. One warp per (sorted position i, 256-channel chunk blockIdx.y); only the first
// position of each run of equal token ids works: it adds the run's dout rows, in position
// order, to its dwte row, starting from the row's current value (the CPU twin's order). A run
// of a token outside [vocab_begin, vocab_end) is another rank's row: skipped whole.
// Runs are read 32 entries at a time (ballot: a run is a prefix of the chunk) and the rows
// four at a time so that several loads are in flight.
template <class T16>
static __global__ void __launch_bounds__(32)
encoder_backward_wte_kernel(T16* __restrict__ dwte, const T16* __restrict__ dout,
                            const int* __restrict__ sorted_tok, const int* __restrict__ sorted_pos,
                            int N, int C, int vocab_begin, int vocab_end) {
    const int i = blockIdx.x;
    const int tok = sorted_tok[i];
    if (i > 0 && sorted_tok[i - 1] == tok) return;  // uniform over the warp
    if (tok < vocab_begin || tok >= vocab_end) return;
    const int lane = threadIdx.x;
    const int pack = blockIdx.y * 32 + lane;
    const bool active = pack < C / 8;               // idle lanes still join the shuffles
    const size_t col = (size_t)pack * 8;
    T16* wrow = dwte + (size_t)(tok - vocab_begin) * C + col;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
    if (active) load8(acc, wrow);
    for (int j0 = i; j0 < N; j0 += 32) {
        const int j = j0 + lane;
        const bool in_run = j < N && sorted_tok[j] == tok;
        const int my_pos = in_run ? sorted_pos[j] : 0;
        const int cnt = __popc(__ballot_sync(0xffffffffu, in_run));
        for (int q = 0; q < cnt; q += 4) {
            float d[4][8];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int pos = __shfl_sync(0xffffffffu, my_pos, (q + u) & 31);
                if (active && q + u < cnt) {
                    load8(d[u], dout + (size_t)pos * C + col);
                } else {
#pragma unroll
                    for (int k = 0; k < 8; k++) d[u][k] = 0.0f;
                }
            }
#pragma unroll
            for (int u = 0; u < 4; u++) {
                if (q + u < cnt) {
#pragma unroll
                    for (int k = 0; k < 8; k++) acc[k] += d[u][k];
                }
            }
        }
        if (cnt < 32) break;  // the run ended inside this chunk
    }
    if (active) store8(wrow, acc);
}

// dwpe[t] += (accumulate) or = the sum over b (in order) of dout[b, t]. One warp per (t,
// 256-channel chunk).
template <class T16>
static __global__ void __launch_bounds__(32)
encoder_backward_wpe_kernel(T16* __restrict__ dwpe, const T16* __restrict__ dout,
                            int B, int T, int C, int accumulate) {
    const int t = blockIdx.x;
    const int pack = blockIdx.y * 32 + threadIdx.x;
    if (pack >= C / 8) return;
    const size_t col = (size_t)pack * 8;
    float acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++) acc[k] = 0.0f;
#pragma unroll 4
    for (int b = 0; b < B; b++) {
        float d[8];
        load8(d, dout + ((size_t)b * T + t) * C + col);
#pragma unroll
        for (int k = 0; k < 8; k++) acc[k] += d[k];
    }
    float w[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (accumulate) load8(w, dwpe + (size_t)t * C + col);
#pragma unroll
    for (int k = 0; k < 8; k++) w[k] += acc[k];
    store8(dwpe + (size_t)t * C + col, w);
}

// wpe NULL: token embeddings only.
template <class T16>
static inline void encoder_forward_cuda(T16* out, const int* inp, const T16* wte,
                                        const typename NoDeduce<T16>::type* wpe, int B, int T, int C,
                                        int vocab_begin, int vocab_end, cudaStream_t stream) {
    CUDA_REQUIRE(B >= 0 && T > 0 && C > 0 && C % 8 == 0 && 0 <= vocab_begin && vocab_begin <= vocab_end,
                 "need C %% 8 == 0 and 0 <= vocab_begin <= vocab_end (B=%d T=%d C=%d vocab [%d, %d))", B, T, C, vocab_begin,
                 vocab_end);
    CUDA_REQUIRE(is_aligned16(out) && is_aligned16(wte) && is_aligned16(wpe),
                 "out, wte and wpe must be 16-byte aligned");  // a NULL wpe passes
    const int N = B * T;
    if (N == 0) return;
    const size_t threads = (size_t)N * (C / 8);
    encoder_forward_kernel<<<(unsigned)ceil_div(threads, (size_t)256), 256, 0, stream>>>(
        out, inp, wte, wpe, N, T, C, vocab_begin, vocab_end);
    CUDA_LAUNCH_CHECK();
}

// Bits of the sort key: token ids are in [0, vocab).
static inline int encoder_sort_bits(int vocab) {
    int bits = 1;
    while (bits < 31 && (1 << bits) < vocab) bits++;
    return bits;
}
static inline size_t encoder_backward_cub_bytes(int N, int vocab) {
    size_t bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs((void*)NULL, bytes, (const int*)NULL, (int*)NULL,
                                               (const int*)NULL, (int*)NULL, N, 0,
                                               encoder_sort_bits(vocab)));
    return bytes;
}
// Scratch layout: sorted ids [N] | positions 0..N-1 [N] | sorted positions [N] | CUB temp.
static inline size_t encoder_backward_scratch_bytes(int B, int T, int vocab) {
    const int N = B * T;
    return 3 * align_up_256((size_t)N * sizeof(int)) + align_up_256(encoder_backward_cub_bytes(N, vocab));
}

// dwpe NULL (no learned positions): dwte only, the dwpe kernel is not launched.
template <class T16>
static inline void encoder_backward_cuda(T16* dwte, typename NoDeduce<T16>::type* dwpe, void* scratch, size_t scratch_bytes,
                                         const T16* dout, const int* inp, int B, int T, int C,
                                         int vocab, int vocab_begin, int vocab_end, int accumulate,
                                         cudaStream_t stream) {
    CUDA_REQUIRE(B >= 0 && T > 0 && C > 0 && C % 8 == 0 && vocab > 0 && 0 <= vocab_begin && vocab_begin <= vocab_end,
                 "need C %% 8 == 0, vocab > 0 and 0 <= vocab_begin <= vocab_end (B=%d T=%d C=%d vocab=%d [%d, %d))", B, T, C,
                 vocab, vocab_begin, vocab_end);
    CUDA_REQUIRE(is_aligned16(dwte) && is_aligned16(dwpe) && is_aligned16(dout),
                 "dwte, dwpe and dout must be 16-byte aligned");
    const int N = B * T;
    if (N == 0) {  // empty sums
        if (!accumulate && dwpe != NULL) CUDA_CHECK(cudaMemsetAsync(dwpe, 0, (size_t)T * C * sizeof(T16), stream));
        return;
    }
    const size_t need = encoder_backward_scratch_bytes(B, T, vocab);
    CUDA_REQUIRE(scratch != NULL && scratch_bytes >= need && is_aligned16(scratch),
                 "scratch of %zu bytes (16-byte aligned) needed, got %zu", need, scratch_bytes);
    const size_t ints = align_up_256((size_t)N * sizeof(int));
    char* base = (char*)scratch;
    int* sorted_tok = (int*)base;
    int* pos = (int*)(base + ints);
    int* sorted_pos = (int*)(base + 2 * ints);
    void* cub_temp = base + 3 * ints;
    size_t cub_bytes = need - 3 * ints;

    iota_kernel<<<ceil_div(N, 256), 256, 0, stream>>>(pos, N);
    CUDA_LAUNCH_CHECK();
    // Stable: equal ids keep increasing positions.
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, cub_bytes, inp, sorted_tok, pos, sorted_pos,
                                               N, 0, encoder_sort_bits(vocab), stream));
    const int chunks = ceil_div(C / 8, 32);
    encoder_backward_wte_kernel<<<dim3(N, chunks), 32, 0, stream>>>(dwte, dout, sorted_tok,
                                                                    sorted_pos, N, C, vocab_begin, vocab_end);
    CUDA_LAUNCH_CHECK();
    if (dwpe == NULL) return;
    encoder_backward_wpe_kernel<<<dim3(T, chunks), 32, 0, stream>>>(dwpe, dout, B, T, C, accumulate);
    CUDA_LAUNCH_CHECK();
}

#endif  // FSDP_KERNELS_CUDA_ENCODER_CUH
