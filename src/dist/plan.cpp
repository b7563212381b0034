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
    if (v == "row" || v == "tensor")
        throw Error("--split-mode " + v +
                    ": a tensor (row) split across ranks is not implemented; --split-mode layer splits the layers "
                    "(README \"Several machines\")");
    throw Error("--split-mode must be none, layer or row, not '" + v + "'");
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

std::vector<int> split_layers(int n_layer, int n_ranks, const std::vector<float>& weights) {
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
    // One layer each, the rest by largest remainder of the shares (ties to the earlier rank).
    const int rest = n_layer - n_ranks;
    std::vector<int> count(size_t(n_ranks), 1);
    std::vector<std::pair<double, int>> rem;
    int given = 0;
    for (int r = 0; r < n_ranks; r++) {
        const double exact = rest * w[size_t(r)] / total;
        const int whole = int(std::floor(exact));
        count[size_t(r)] += whole;
        given += whole;
        rem.push_back({exact - whole, r});
    }
    std::stable_sort(rem.begin(), rem.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (int i = 0; given < rest; i++, given++) count[size_t(rem[size_t(i)].second)]++;
    std::vector<int> first(size_t(n_ranks) + 1, 0);
    for (int r = 0; r < n_ranks; r++) first[size_t(r) + 1] = first[size_t(r)] + count[size_t(r)];
    return first;
}

std::string split_plan_text(const Cluster& c) {
    std::string s;
    for (size_t r = 0; r + 1 < c.plan().size(); r++)
        s += strprintf("%s%d..%d", r ? " | " : "", c.plan()[r], c.plan()[r + 1] - 1);
    return s;
}

}  // namespace tandem
