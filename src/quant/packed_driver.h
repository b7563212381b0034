// The loop shared by the packed (16-row interleaved) kernels: which row group meets which tile of tokens, in
// which order, and whether that tile prefetches. The kernels supply tile(TN, group, first_token, prefetch).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace tandem {

#if defined(__x86_64__)
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's _mm512_cvtepi32_ps / _mm512_cvtph_ps pass an intentionally undefined vector as the unused merge
// source, which -Wmaybe-uninitialized reports as a false positive in the kernels that include this header.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The instruction sets of the packed kernels (callers check cpu_features().avx512vnni).
#define TD_VNNI512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

// Software prefetch of every cache line of [p, p + bytes) 1 KiB ahead into L1 and 16 KiB ahead into L2: the far
// one keeps the memory streaming while a long tile computes (without it a 4-token pass cost the sum of the
// memory and compute times instead of the larger), the near one has the lines in L1 when the loads come.
inline void prefetch_stream(const void* p, size_t bytes) {
    const char* c = static_cast<const char*>(p);
    for (size_t o = 0; o < bytes; o += 64) {
        _mm_prefetch(c + 1024 + o, _MM_HINT_T0);
        _mm_prefetch(c + 16384 + o, _MM_HINT_T1);
    }
}
#endif

// Runs tile(std::integral_constant<int, TN>, G, t, std::bool_constant<prefetch>) over groups [g0, g1) and all n
// tokens, in tiles of MaxT, then 4, 2, 1 tokens.
//  - Blocks of kRowGroups groups (a few hundred KB of weights, kept in L2) meet each token tile in turn, whose
//    activations stay in L1 across the groups; group by group over all tokens would re-read every token's
//    activations for each group (prompt processing).
//  - The first tile of a group streams it from memory, later tiles find it in cache. Software prefetch pays once
//    a tile computes long enough to fall behind the memory (measured: a 4-token tile 1.7x faster with it, a
//    1-token tile 1.2x slower: the hardware prefetcher keeps up alone), so only tiles of 2+ tokens prefetch.
template <int MaxT, typename Tile>
inline void packed_tiles(int n, int64_t g0, int64_t g1, Tile&& tile) {
    static_assert(MaxT == 8 || MaxT == 4, "tile sizes: MaxT, 4, 2, 1");
    constexpr int64_t kRowGroups = 8;
    for (int64_t G0 = g0; G0 < g1; G0 += kRowGroups) {
        const int64_t G1 = std::min(g1, G0 + kRowGroups);
        int t = 0;
        auto run = [&](auto tn) {
            constexpr int TN = decltype(tn)::value;
            for (int64_t G = G0; G < G1; G++) {
                if (t == 0 && TN >= 2) tile(tn, G, t, std::true_type{});
                else tile(tn, G, t, std::false_type{});
            }
            t += TN;
        };
        while (n - t >= MaxT) run(std::integral_constant<int, MaxT>{});
        if constexpr (MaxT > 4) {
            if (n - t >= 4) run(std::integral_constant<int, 4>{});
        }
        if (n - t >= 2) run(std::integral_constant<int, 2>{});
        if (n - t >= 1) run(std::integral_constant<int, 1>{});
    }
}

}  // namespace tandem
