#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "tandem/error.h"
#include "tandem/sampling.h"

namespace tandem {

namespace {

struct Cand {
    float logit;
    int32_t id;
};

bool by_logit_desc(const Cand& a, const Cand& b) { return a.logit > b.logit || (a.logit == b.logit && a.id < b.id); }

// Probabilities of the candidates (softmax), candidates sorted by logit, most probable first.
std::vector<float> softmax_sorted(std::vector<Cand>& c) {
    std::sort(c.begin(), c.end(), by_logit_desc);
    std::vector<float> p(c.size());
    if (c.empty()) return p;
    float mx = c[0].logit;
    double sum = 0;
    for (size_t i = 0; i < c.size(); i++) {
        p[i] = std::exp(c[i].logit - mx);
        sum += p[i];
    }
    for (float& v : p) v = float(v / sum);
    return p;
}

void apply_top_k(std::vector<Cand>& c, int k) {
    if (k <= 0 || size_t(k) >= c.size()) return;
    std::partial_sort(c.begin(), c.begin() + k, c.end(), by_logit_desc);
    c.resize(size_t(k));
}

void apply_top_p(std::vector<Cand>& c, float top_p) {
    if (top_p >= 1.0f || c.size() <= 1) return;
    std::vector<float> p = softmax_sorted(c);
    double cum = 0;
    for (size_t i = 0; i < c.size(); i++) {
        cum += p[i];
        if (cum >= top_p) {
            c.resize(i + 1);
            return;
        }
    }
}

void apply_min_p(std::vector<Cand>& c, float min_p) {
    if (min_p <= 0.0f || c.size() <= 1) return;
    float mx = -INFINITY;
    for (const auto& x : c) mx = std::max(mx, x.logit);
    const float thr = mx + std::log(min_p);
    c.erase(std::remove_if(c.begin(), c.end(), [&](const Cand& x) { return x.logit < thr; }), c.end());
}

// Locally typical sampling (Meister et al. 2022), as llama.cpp: keep the tokens whose surprisal is closest to
// the entropy until their mass reaches typical_p.
void apply_typical(std::vector<Cand>& c, float typ) {
    if (typ >= 1.0f || c.size() <= 1) return;
    std::vector<float> p = softmax_sorted(c);
    double ent = 0;
    for (float v : p)
        if (v > 0) ent -= double(v) * std::log(double(v));
    std::vector<size_t> idx(c.size());
    for (size_t i = 0; i < idx.size(); i++) idx[i] = i;
    auto shifted = [&](size_t i) { return std::fabs(-std::log(double(p[i])) - ent); };
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return shifted(a) < shifted(b); });
    double cum = 0;
    size_t keep = idx.size();
    for (size_t i = 0; i < idx.size(); i++) {
        cum += p[idx[i]];
        if (cum > typ) {
            keep = i + 1;
            break;
        }
    }
    std::vector<Cand> out;
    for (size_t i = 0; i < keep; i++) out.push_back(c[idx[i]]);
    c.swap(out);
}

}  // namespace

const char* sampler_kind_name(SamplerKind k) {
    switch (k) {
        case SamplerKind::TOP_K: return "top_k";
        case SamplerKind::TYPICAL_P: return "typ_p";
        case SamplerKind::TOP_P: return "top_p";
        case SamplerKind::MIN_P: return "min_p";
        case SamplerKind::TEMPERATURE: return "temperature";
    }
    return "?";
}

std::vector<SamplerKind> parse_sampler_names(const std::string& s, std::vector<std::string>* ignored) {
    static const std::unordered_map<std::string, SamplerKind> names = {
        {"top_k", SamplerKind::TOP_K},
        {"top-k", SamplerKind::TOP_K},
        {"typ_p", SamplerKind::TYPICAL_P},
        {"typical_p", SamplerKind::TYPICAL_P},
        {"typ-p", SamplerKind::TYPICAL_P},
        {"typical-p", SamplerKind::TYPICAL_P},
        {"typical", SamplerKind::TYPICAL_P},
        {"top_p", SamplerKind::TOP_P},
        {"top-p", SamplerKind::TOP_P},
        {"nucleus", SamplerKind::TOP_P},
        {"min_p", SamplerKind::MIN_P},
        {"min-p", SamplerKind::MIN_P},
        {"temperature", SamplerKind::TEMPERATURE},
        {"temp", SamplerKind::TEMPERATURE},
    };
    static const char* known_unimplemented[] = {"dry", "xtc", "infill", "penalties", "top_n_sigma", "top-n-sigma"};
    std::vector<SamplerKind> out;
    size_t i = 0;
    while (i <= s.size()) {
        size_t j = s.find_first_of(";,", i);
        if (j == std::string::npos) j = s.size();
        std::string name = s.substr(i, j - i);
        i = j + 1;
        if (name.empty()) continue;
        auto it = names.find(name);
        if (it != names.end()) {
            out.push_back(it->second);
            continue;
        }
        bool known = false;
        for (const char* k : known_unimplemented) known |= name == k;
        if (!known) throw Error("unknown sampler '" + name + "' (known: top_k, typ_p, top_p, min_p, temperature)");
        if (ignored) ignored->push_back(name);
    }
    return out;
}

std::vector<SamplerKind> parse_sampler_seq(const std::string& s, std::vector<std::string>* ignored) {
    std::vector<SamplerKind> out;
    for (char c : s) {
        switch (c) {
            case 'k': out.push_back(SamplerKind::TOP_K); break;
            case 'y': out.push_back(SamplerKind::TYPICAL_P); break;
            case 'p': out.push_back(SamplerKind::TOP_P); break;
            case 'm': out.push_back(SamplerKind::MIN_P); break;
            case 't': out.push_back(SamplerKind::TEMPERATURE); break;
            case 'd':
            case 'x':
            case 'e':
            case 's':
                if (ignored) ignored->push_back(std::string(1, c));
                break;
            default: throw Error(strprintf("unknown sampler letter '%c' in sampling sequence (known: k y p m t)", c));
        }
    }
    return out;
}

int32_t argmax(const float* logits, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

Sampler::Sampler(const SamplerParams& params, int n_vocab) : params_(params), n_vocab_(n_vocab), rng_(params.seed) {
    for (const auto& [id, bias] : params_.logit_bias)
        if (id < 0 || id >= n_vocab)
            throw Error(strprintf("logit bias for token %d: outside the vocabulary (%d tokens)", id, n_vocab));
}

uint64_t derive_seed(uint64_t seed, uint64_t stream) {
    if (stream == 0) return seed;
    auto mix = [](uint64_t z) {
        z += 0x9e3779b97f4a7c15ull;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    };
    return mix(mix(seed) ^ mix(~stream));
}

size_t count_banned(const std::vector<std::pair<int32_t, float>>& bias) {
    std::vector<int32_t> ids;
    for (const auto& [id, b] : bias)
        if (b == -INFINITY) ids.push_back(id);
    std::sort(ids.begin(), ids.end());
    return size_t(std::unique(ids.begin(), ids.end()) - ids.begin());
}

void Sampler::distribution(const float* logits, const std::vector<int32_t>& history, Distribution& out,
                           const uint8_t* allowed) const {
    if (!try_distribution(logits, history, out, allowed))
        throw Error("sampling: no token is left (every token banned by the logit bias, or the logits are NaN)");
}

bool Sampler::try_distribution(const float* logits, const std::vector<int32_t>& history, Distribution& out,
                               const uint8_t* allowed) const {
    std::vector<Cand> c(static_cast<size_t>(n_vocab_));
    for (int i = 0; i < n_vocab_; i++) c[size_t(i)] = {allowed && !allowed[i] ? -INFINITY : logits[i], i};
    for (const auto& [id, bias] : params_.logit_bias) c[size_t(id)].logit += bias;
    if (!params_.banned_ends.empty()) {
        auto is_end = [&](int i) {
            return std::find(params_.banned_ends.begin(), params_.banned_ends.end(), i) != params_.banned_ends.end();
        };
        bool other = !allowed;
        for (int i = 0; !other && i < n_vocab_; i++) other = allowed[i] && !is_end(i);
        if (other)
            for (int32_t id : params_.banned_ends)
                if (id >= 0 && id < n_vocab_) c[size_t(id)].logit = -INFINITY;
    }

    const SamplerParams& P = params_;
    if (P.repeat_penalty != 1.0f || P.presence_penalty != 0.0f || P.frequency_penalty != 0.0f) {
        size_t n = history.size();
        size_t from = (P.penalty_last_n < 0 || size_t(P.penalty_last_n) >= n) ? 0 : n - size_t(P.penalty_last_n);
        std::unordered_map<int32_t, int> count;
        for (size_t i = from; i < n; i++)
            if (history[i] >= 0 && history[i] < n_vocab_) count[history[i]]++;
        for (const auto& [id, k] : count) {
            float& l = c[size_t(id)].logit;
            l = l > 0 ? l / P.repeat_penalty : l * P.repeat_penalty;
            l -= float(k) * P.frequency_penalty + P.presence_penalty;
        }
    }
    c.erase(
        std::remove_if(c.begin(), c.end(), [](const Cand& x) { return std::isnan(x.logit) || x.logit == -INFINITY; }),
        c.end());
    if (c.empty()) return false;

    out.p.assign(size_t(n_vocab_), 0.0f);
    out.support.clear();
    if (P.temp <= 0) {
        auto best = std::min_element(c.begin(), c.end(), by_logit_desc);
        out.p[size_t(best->id)] = 1.0f;
        out.support.push_back(best->id);
        return true;
    }
    for (SamplerKind k : P.order) {
        switch (k) {
            case SamplerKind::TOP_K: apply_top_k(c, P.top_k); break;
            case SamplerKind::TYPICAL_P: apply_typical(c, P.typical_p); break;
            case SamplerKind::TOP_P: apply_top_p(c, P.top_p); break;
            case SamplerKind::MIN_P: apply_min_p(c, P.min_p); break;
            case SamplerKind::TEMPERATURE:
                for (auto& x : c) x.logit /= P.temp;
                break;
        }
    }
    std::vector<float> p = softmax_sorted(c);
    for (size_t i = 0; i < c.size(); i++) {
        if (p[i] <= 0) continue;
        out.p[size_t(c[i].id)] = p[i];
        out.support.push_back(c[i].id);
    }
    return !out.support.empty();
}

double Sampler::uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }

int32_t Sampler::draw(const Distribution& d) {
    TD_ASSERT(!d.support.empty());
    if (d.support.size() == 1) return d.support[0];
    double r = uniform(), cum = 0;
    for (int32_t id : d.support) {
        cum += d.p[size_t(id)];
        if (r < cum) return id;
    }
    return d.support.back();
}

int32_t Sampler::sample(const float* logits, const std::vector<int32_t>& history) {
    distribution(logits, history, scratch_);
    return draw(scratch_);
}

}  // namespace tandem
