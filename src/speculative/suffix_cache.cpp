#include "tandem/suffix_cache.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>

#include "tandem/error.h"

namespace tandem {

namespace {
constexpr uint64_t kIndexMask = (uint64_t(1) << 24) - 1;
constexpr size_t kMaxDocTokens = size_t(kIndexMask);

struct Candidate {
    const int32_t* seq;
    size_t len;
    size_t i;  // index of the token matching the context's last token
    uint64_t doc;  // 0: the context itself
    int match;
};
}  // namespace

SuffixCache::SuffixCache(SuffixCacheParams p) : p_(p) {
    if (p_.min_match < 2) p_.min_match = 2;  // the index is keyed by bigrams
}

void SuffixCache::add(const std::vector<int32_t>& tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    add_locked(tokens);
}

void SuffixCache::add_locked(const std::vector<int32_t>& tokens_in) {
    if (tokens_in.size() < 4 || p_.max_tokens < 4) return;
    const size_t keep = std::min({tokens_in.size(), kMaxDocTokens, p_.max_tokens});
    const uint64_t id = next_doc_++;
    Doc& d = docs_[id];
    d.toks.assign(tokens_in.end() - std::ptrdiff_t(keep), tokens_in.end());
    lru_.push_front(id);
    d.lru = lru_.begin();
    for (size_t i = 1; i < d.toks.size(); i++) {
        auto& v = index_[key(d.toks[i - 1], d.toks[i])];
        v.push_back(pos(id, i));
        if (v.size() >= 2 * kMaxPerKey) v.erase(v.begin(), v.begin() + std::ptrdiff_t(kMaxPerKey));  // keep the newest
    }
    stats_.documents++;
    stats_.tokens += d.toks.size();
    evict_locked();
}

void SuffixCache::evict_locked() {
    while (stats_.tokens > p_.max_tokens && !lru_.empty()) {
        const uint64_t id = lru_.back();
        lru_.pop_back();
        auto it = docs_.find(id);
        stats_.tokens -= it->second.toks.size();
        stats_.documents--;
        stats_.evicted_documents++;
        // its index entries go with it (lookups only meet the current bigram, so leaving them for a lookup to drop
        // let the index grow with every request ever learned: issue 26, defect 9)
        const auto& toks = it->second.toks;
        for (size_t i = 1; i < toks.size(); i++) {
            auto k = index_.find(key(toks[i - 1], toks[i]));
            if (k == index_.end()) continue;
            auto& v = k->second;
            v.erase(std::remove_if(v.begin(), v.end(), [&](uint64_t p) { return (p >> 24) == id; }), v.end());
            if (v.empty()) index_.erase(k);
        }
        docs_.erase(it);
    }
}

int SuffixCache::propose(const std::vector<int32_t>& ctx, int max_len, std::vector<int32_t>& out, int* match_len) {
    if (match_len) *match_len = 0;
    const size_t n = ctx.size();
    if (n < 2 || max_len <= 0) return 0;
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Candidate> cands;
    auto consider = [&](const int32_t* seq, size_t len, size_t i, uint64_t doc) {
        if (i + 1 >= len) return;  // nothing follows
        int m = 0;
        while (m < kMaxMatch && size_t(m) <= i && size_t(m) < n && seq[i - size_t(m)] == ctx[n - 1 - size_t(m)]) m++;
        if (m >= p_.min_match) cands.push_back({seq, len, i, doc, m});
    };
    // The context's own earlier occurrences of its last bigram, most recent first.
    for (size_t j = n - 2; j >= 1; j--)
        if (ctx[j] == ctx[n - 1] && ctx[j - 1] == ctx[n - 2]) consider(ctx.data(), n - 1, j, 0);
    // The documents', newest first; entries of evicted documents are pruned here.
    auto it = index_.find(key(ctx[n - 2], ctx[n - 1]));
    if (it != index_.end()) {
        auto& v = it->second;
        size_t w = 0;
        for (size_t r = 0; r < v.size(); r++) {
            if (docs_.count(v[r] >> 24)) v[w++] = v[r];
        }
        v.resize(w);
        for (size_t r = v.size(); r-- > 0;) {
            const Doc& d = docs_.at(v[r] >> 24);
            consider(d.toks.data(), d.toks.size(), size_t(v[r] & kIndexMask), v[r] >> 24);
        }
        if (v.empty()) index_.erase(it);
    }
    if (cands.empty()) return 0;
    int best = 0;
    for (const auto& c : cands) best = std::max(best, c.match);
    std::vector<const Candidate*> active;
    for (const auto& c : cands)
        if (c.match == best) active.push_back(&c);
    if (match_len) *match_len = best;

    double prob = 1.0;
    int emitted = 0;
    std::vector<std::pair<int32_t, int>> votes;  // token, count (in order of first vote: the most recent first)
    for (int step = 0; step < max_len; step++) {
        votes.clear();
        int voters = 0;
        for (const Candidate* c : active) {
            const size_t at = c->i + 1 + size_t(step);
            if (at >= c->len) continue;
            voters++;
            const int32_t t = c->seq[at];
            auto v = std::find_if(votes.begin(), votes.end(), [&](const auto& e) { return e.first == t; });
            if (v == votes.end()) votes.emplace_back(t, 1);
            else v->second++;
        }
        if (voters == 0) break;
        auto top = votes.begin();
        for (auto v = votes.begin(); v != votes.end(); ++v)
            if (v->second > top->second) top = v;
        prob *= double(top->second) / voters;
        if (prob < p_.min_prob) break;
        const int32_t t = top->first;
        out.push_back(t);
        emitted++;
        std::vector<const Candidate*> next;
        for (const Candidate* c : active) {
            const size_t at = c->i + 1 + size_t(step);
            if (at < c->len && c->seq[at] == t) next.push_back(c);
        }
        active.swap(next);
    }
    if (emitted > 0) {
        stats_.proposals++;
        stats_.proposed_tokens += size_t(emitted);
        for (const Candidate* c : active)  // the documents that supplied it are used now
            if (c->doc != 0) {
                auto d = docs_.find(c->doc);
                if (d != docs_.end()) lru_.splice(lru_.begin(), lru_, d->second.lru);
            }
    }
    return emitted;
}

SuffixCache::Stats SuffixCache::stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    Stats s = stats_;
    for (const auto& [k, v] : index_) s.index_entries += v.size();
    return s;
}

namespace {
constexpr char kMagic[4] = {'T', 'D', 'S', 'C'};
constexpr uint32_t kVersion = 1;
}  // namespace

bool SuffixCache::load(const std::string& path) {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!f) return false;
    auto bad = [&](const char* what) { throw Error(path + ": not a suffix cache file (" + what + ")"); };
    char magic[4];
    uint32_t version = 0;
    uint64_t n_docs = 0;
    if (std::fread(magic, 1, 4, f.get()) != 4 || std::memcmp(magic, kMagic, 4) != 0) bad("magic");
    if (std::fread(&version, 4, 1, f.get()) != 1 || version != kVersion) bad("version");
    if (std::fread(&n_docs, 8, 1, f.get()) != 1 || n_docs > (uint64_t(1) << 32)) bad("document count");
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<int32_t> toks;
    for (uint64_t d = 0; d < n_docs; d++) {
        uint32_t len = 0;
        if (std::fread(&len, 4, 1, f.get()) != 1 || len > kMaxDocTokens) bad("document length");
        toks.resize(len);
        if (len && std::fread(toks.data(), 4, len, f.get()) != len) bad("truncated");
        add_locked(toks);
    }
    return true;
}

void SuffixCache::save(const std::string& path) const {
    std::lock_guard<std::mutex> lock(mu_);
    const std::string tmp = path + ".tmp";
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(tmp.c_str(), "wb"), &std::fclose);
    if (!f) throw Error("cannot write " + tmp);
    const uint64_t n_docs = docs_.size();
    bool ok = std::fwrite(kMagic, 1, 4, f.get()) == 4 && std::fwrite(&kVersion, 4, 1, f.get()) == 1 &&
              std::fwrite(&n_docs, 8, 1, f.get()) == 1;
    for (auto it = lru_.rbegin(); ok && it != lru_.rend(); ++it) {  // least recent first: load() restores the order
        const auto& t = docs_.at(*it).toks;
        const uint32_t len = uint32_t(t.size());
        ok = std::fwrite(&len, 4, 1, f.get()) == 1 && std::fwrite(t.data(), 4, len, f.get()) == len;
    }
    if (!ok || std::fclose(f.release()) != 0) throw Error("cannot write " + tmp);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("cannot rename " + tmp + " to " + path);
}

}  // namespace tandem
