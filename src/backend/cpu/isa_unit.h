// Included first by every per-ISA translation unit (src/backend/cpu/x86, src/backend/cpu/arm): checks that the unit is built as
// one (CMake passes -DTD_ISA=isa_<level> with that level's compiler flags) and holds what the kernels of every
// level share: the tile loop of the packed kernels. Everything here is declared inside namespace
// tandem::TD_ISA, so each level gets its own compiled copy (see backend/cpu/isa.h).
#pragma once
#ifndef TD_ISA
#error "a per-ISA unit: build it through CMakeLists.txt (tandem_isa_unit), which sets TD_ISA and the level's flags"
#endif
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/isa.h"
#include "backend/cpu/act_q8.h"
#include "quant/packed_layout.h"

namespace tandem::TD_ISA {

// Runs tile(std::integral_constant<int, TN>, G, t, std::bool_constant<prefetch>) over row groups [g0, g1) and
// all n tokens, in tiles of MaxT, then 4, 2, 1 tokens.
//  - Blocks of kRowGroups groups (a few hundred KB of weights, kept in L2) meet each token tile in turn, whose
//    activations stay in L1 across the groups; group by group over all tokens would re-read every token's
//    activations for each group (prompt processing).
//  - The first tile of a group streams it from memory, later tiles find it in cache. Software prefetch pays once
//    a tile computes long enough to fall behind the memory (measured on Zen 4 with the 512-bit kernels: a 4-token
//    tile 1.7x faster with it, a 1-token tile 1.2x slower: the hardware prefetcher keeps up alone), so only
//    tiles of 2+ tokens ask for it.
template <int MaxT, typename Tile>
inline void packed_tiles(int n, int64_t g0, int64_t g1, Tile&& tile) {
    static_assert(MaxT == 8 || MaxT == 4, "tile sizes: MaxT, 4, 2, 1");
    constexpr int64_t kRowGroups = 8;
    for (int64_t G0 = g0; G0 < g1; G0 += kRowGroups) {
        const int64_t G1 = G0 + kRowGroups < g1 ? G0 + kRowGroups : g1;
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

}  // namespace tandem::TD_ISA
