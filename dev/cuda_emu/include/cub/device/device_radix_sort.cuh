// Shim: cub::DeviceRadixSort::SortPairs of the CPU emulator (see ../../../emu.h), per the CUB
// documentation: a first call with d_temp_storage == NULL only sets temp_storage_bytes;
// then the pairs are sorted by the key bits [begin_bit, end_bit) (signed keys ordered as
// numbers: the sign bit flipped first), stably. The temp storage is scribbled over, as the
// real sort uses it; every array must be device memory. The arguments are checked when it is
// called, the sort runs when the stream gets to it (the size query is not stream work).
#pragma once
#include <algorithm>
#include <numeric>
#include <type_traits>
#include <vector>

#include "../../cuda_runtime.h"

namespace cub {
struct DeviceRadixSort {
    template <class K, class V>
    static cudaError_t SortPairs(void* d_temp_storage, size_t& temp_storage_bytes, const K* keys_in, K* keys_out,
                                 const V* values_in, V* values_out, int num_items, int begin_bit = 0,
                                 int end_bit = (int)sizeof(K) * 8, cudaStream_t stream = 0) {
        static_assert(std::is_integral<K>::value && sizeof(K) <= 8, "emulated for integer keys");
        const size_t need = 512 + 2 * (size_t)(num_items > 0 ? num_items : 0) * (sizeof(K) + sizeof(V));
        if (d_temp_storage == NULL) { temp_storage_bytes = need; return cudaSuccess; }
        if (num_items < 0 || begin_bit < 0 || end_bit > (int)sizeof(K) * 8 || begin_bit >= end_bit) return cudaErrorInvalidValue;
        if (temp_storage_bytes < need || !emu::device_range_ok(d_temp_storage, temp_storage_bytes))
            emu::die("cub::DeviceRadixSort::SortPairs: temp storage of %zu bytes (need %zu) is not one device buffer",
                     temp_storage_bytes, need);
        const size_t n = (size_t)num_items;
        if (n == 0) return cudaSuccess;
        if (!emu::device_range_ok(keys_in, n * sizeof(K)) || !emu::device_range_ok(keys_out, n * sizeof(K)) ||
            !emu::device_range_ok(values_in, n * sizeof(V)) || !emu::device_range_ok(values_out, n * sizeof(V)))
            emu::die("cub::DeviceRadixSort::SortPairs: an input or output array is not device memory of %zu items", n);
        // The sort is stream work: it reads the keys when the stream gets to it.
        const size_t temp_bytes = temp_storage_bytes;
        // CUPTI sees at least one kernel launch (as the cuBLASLt shim reports one per matmul; a
        // GPU's onesweep sort launches a histogram, a scan and one kernel per 8 key bits).
        emu::report_launch(2, "cub::DeviceRadixSort::SortPairs");  // 2: CUPTI_CB_DOMAIN_RUNTIME_API
        emu::enqueue_compute(stream, "cub::DeviceRadixSort::SortPairs", [=]() {
            typedef typename std::make_unsigned<K>::type U;
            const U flip = std::is_signed<K>::value ? (U)((U)1 << (sizeof(K) * 8 - 1)) : (U)0;
            const U mask = (U)(end_bit - begin_bit >= (int)sizeof(U) * 8 ? ~(U)0 : (((U)1 << (end_bit - begin_bit)) - 1));
            auto digit = [&](size_t i) { return (U)((((U)keys_in[i] ^ flip) >> begin_bit) & mask); };
            std::vector<size_t> idx(n);
            std::iota(idx.begin(), idx.end(), (size_t)0);
            std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return digit(a) < digit(b); });
            std::vector<K> k(n);
            std::vector<V> v(n);
            for (size_t i = 0; i < n; i++) { k[i] = keys_in[idx[i]]; v[i] = values_in[idx[i]]; }
            memset(d_temp_storage, 0x5a, temp_bytes);
            memcpy(keys_out, k.data(), n * sizeof(K));
            memcpy(values_out, v.data(), n * sizeof(V));
            // Traffic (emu.h): one pass over the arrays, the least a sort moves (CUB's makes
            // one per digit of the key bits).
            emu::traffic_range(keys_in, n * sizeof(K), 0);
            emu::traffic_range(values_in, n * sizeof(V), 0);
            emu::traffic_range(keys_out, n * sizeof(K), 1);
            emu::traffic_range(values_out, n * sizeof(V), 1);
            emu::traffic_launch_done();
        });
        return cudaSuccess;
    }
};
}  // namespace cub
