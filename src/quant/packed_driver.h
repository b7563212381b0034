// The loop shared by the packed (16-row interleaved) kernels: which row group meets which tile of tokens, in
// which order, and whether that tile prefetches. The kernels supply tile(TN, group, first_token, prefetch).
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace tandem {

// Runs tile(std::integral_constant<int, TN>, G, t, prefetch) over groups [g0, g1) and all n tokens, in tiles of
// MaxT, then 4, 2, 1 tokens.
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
            for (int64_t G = G0; G < G1; G++) tile(tn, G, t, t == 0 && TN >= 2);
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
