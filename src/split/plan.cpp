// The split flags and the layer plan (include/tandem/split.h).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "tandem/error.h"
#include "tandem/split.h"
#include "tandem/strings.h"

namespace tandem {

SplitMode parse_split_mode(const std::string& v) {
    if (v == "layer") return SplitMode::LAYER;
    if (v == "none") return SplitMode::NONE;
    if (v == "row" || v == "tensor") return SplitMode::TENSOR;
    throw Error("--split-mode must be none, layer, tensor or row, not '" + v + "'");
}

std::vector<float> parse_split_weights(const std::string& v) {
    std::vector<float> w;
    std::string list = v;  // llama.cpp takes "3,1" and "3/1"
    std::replace(list.begin(), list.end(), '/', ',');
    for (const std::string& item : split_list(list)) {
        char* end = nullptr;
        const float f = std::strtof(item.c_str(), &end);
        if (item.empty() || *end != '\0' || !std::isfinite(f) || f < 0)
            throw Error("-ts/--tensor-split: '" + item + "' is not a share (a number >= 0)");
        w.push_back(f);
    }
    if (w.empty() || std::accumulate(w.begin(), w.end(), 0.0) <= 0)
        throw Error("-ts/--tensor-split: '" + v + "' gives no rank a share");
    return w;
}

std::vector<int> split_layers(int n_layer, int n_ranks, const std::vector<float>& weights, double rank0_extra) {
    if (n_ranks < 1) throw Error("a split needs at least one rank");
    if (n_layer < n_ranks)
        throw Error(
            strprintf("the model has %d layers, fewer than the %d ranks (each runs at least one)", n_layer, n_ranks));
    std::vector<double> w(size_t(n_ranks), 1.0);
    if (!weights.empty()) {
        if (int(weights.size()) > n_ranks)
            throw Error(strprintf("-ts gives %zu shares for %d ranks", weights.size(), n_ranks));
        std::fill(w.begin(), w.end(), 0.0);  // llama.cpp: ranks beyond the list get none
        std::copy(weights.begin(), weights.end(), w.begin());
    }
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    if (!(total > 0)) throw Error("-ts gives no rank a share");
    for (double x : w)
        if (x <= 0)
            throw Error(strprintf("-ts gives a rank no layers: with %d ranks every one needs a share > 0", n_ranks));
    // Each rank's share of the whole (its layers, and rank 0's head too) in layers, then one layer each and the rest
    // by largest remainder (ties to the earlier rank).
    const double whole = n_layer + std::max(0.0, rank0_extra);
    std::vector<double> exact(static_cast<size_t>(n_ranks));
    for (int r = 0; r < n_ranks; r++) exact[size_t(r)] = whole * w[size_t(r)] / total - (r == 0 ? rank0_extra : 0.0);
    std::vector<int> count(size_t(n_ranks), 1);
    std::vector<std::pair<double, int>> rem;
    int given = n_ranks;
    for (int r = 0; r < n_ranks; r++) {
        const int more = std::max(0, int(std::floor(exact[size_t(r)])) - 1);
        count[size_t(r)] += more;
        given += more;
        rem.push_back({exact[size_t(r)] - count[size_t(r)], r});  // < 0 where the one-layer minimum gave more
    }
    while (given > n_layer) {  // rounding down each could not overshoot, but the minimum of one each may
        int big = -1;  // the rank most over its share that can give a layer
        for (int r = 0; r < n_ranks; r++)
            if (count[size_t(r)] > 1 &&
                (big < 0 || count[size_t(r)] - exact[size_t(r)] > count[size_t(big)] - exact[size_t(big)]))
                big = r;
        TD_ASSERT(big >= 0);
        count[size_t(big)]--;
        given--;
    }
    std::stable_sort(rem.begin(), rem.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (size_t i = 0; given < n_layer; i = (i + 1) % rem.size(), given++) count[size_t(rem[i].second)]++;
    std::vector<int> first(size_t(n_ranks) + 1, 0);
    for (int r = 0; r < n_ranks; r++) first[size_t(r) + 1] = first[size_t(r)] + count[size_t(r)];
    return first;
}

std::string split_plan_text(const Cluster& c) {
    if (c.tensor()) return strprintf("tensor: every layer's heads and FFN over %d ranks", c.size());
    std::string s = "layers ";
    for (size_t r = 0; r + 1 < c.plan().size(); r++)
        s += strprintf("%s%d..%d", r ? " | " : "", c.plan()[r], c.plan()[r + 1] - 1);
    return s;
}

}  // namespace tandem
