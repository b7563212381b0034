#include "tandem/embedding.h"

#include <cmath>

#include "tandem/error.h"
#include "tandem/gguf.h"

namespace tandem {

Pooling pooling_from_name(const std::string& name) {
    if (name == "none") return Pooling::NONE;
    if (name == "mean") return Pooling::MEAN;
    if (name == "cls") return Pooling::CLS;
    if (name == "last") return Pooling::LAST;
    if (name == "rank")
        throw Error(
            "pooling 'rank' needs a reranking model (a classification head); tandem runs generative models only");
    throw Error("unknown pooling '" + name + "' (expected none, mean, cls or last)");
}

const char* pooling_name(Pooling p) {
    switch (p) {
        case Pooling::NONE: return "none";
        case Pooling::MEAN: return "mean";
        case Pooling::CLS: return "cls";
        case Pooling::LAST: return "last";
    }
    return "?";
}

Pooling default_pooling(const GgufFile& f) {
    const std::string arch = f.get_str("general.architecture").value_or("llama");
    const auto t = f.get_int(arch + ".pooling_type");
    if (!t) return Pooling::LAST;
    switch (*t) {
        case 0: return Pooling::NONE;
        case 1: return Pooling::MEAN;
        case 2: return Pooling::CLS;
        case 3: return Pooling::LAST;
        default:
            throw Error(strprintf("%s.pooling_type = %lld is not supported (none, mean, cls and last are)",
                                  arch.c_str(), static_cast<long long>(*t)));
    }
}

std::vector<float> pool_embeddings(const float* hidden, int n, int n_embd, Pooling p) {
    TD_ASSERT(n >= 1 && n_embd >= 1);
    const size_t E = size_t(n_embd);
    switch (p) {
        case Pooling::NONE: return std::vector<float>(hidden, hidden + size_t(n) * E);
        case Pooling::CLS: return std::vector<float>(hidden, hidden + E);
        case Pooling::LAST: return std::vector<float>(hidden + size_t(n - 1) * E, hidden + size_t(n) * E);
        case Pooling::MEAN: {
            std::vector<double> sum(E, 0.0);
            for (int t = 0; t < n; t++)
                for (size_t i = 0; i < E; i++) sum[i] += hidden[size_t(t) * E + i];
            std::vector<float> out(E);
            for (size_t i = 0; i < E; i++) out[i] = float(sum[i] / n);
            return out;
        }
    }
    return {};
}

void normalize_embedding(float* v, int n, int norm) {
    double scale = 1.0;
    if (norm == 0) {
        double mx = 0;
        for (int i = 0; i < n; i++) mx = std::max(mx, double(std::fabs(v[i])));
        scale = mx > 0 ? 32760.0 / mx : 0.0;
    } else if (norm > 0) {
        double sum = 0;
        for (int i = 0; i < n; i++) sum += norm == 2 ? double(v[i]) * v[i] : std::pow(std::fabs(double(v[i])), norm);
        const double len = norm == 2 ? std::sqrt(sum) : std::pow(sum, 1.0 / norm);
        scale = len > 0 ? 1.0 / len : 0.0;
    }
    if (scale != 1.0)
        for (int i = 0; i < n; i++) v[i] = float(v[i] * scale);
}

}  // namespace tandem
