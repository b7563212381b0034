// A draft-free proposer over everything a server has seen (SpecType::SUFFIX, after SuffixDecoding, Oliaro et al.
// 2024): the prompts and outputs of finished requests are kept as token documents; a proposal continues the
// current context's longest suffix that occurs in them or in the context itself, following at each step the
// continuation most often seen after that suffix, for as long as it stays likely.
//
// Matching: every document position is indexed by the hash of the two tokens ending there (the most recent
// kMaxPerKey positions per key); the candidates for a context are the positions whose bigram matches its last two
// tokens, each extended backwards to its match length (at most kMaxMatch); the candidates of the longest match
// length (at least min_match) are kept.
// Expansion: at step i the candidates vote with the token that follows them; the most frequent token t is
// proposed if the product of the vote fractions so far stays >= min_prob; candidates that disagree drop out.
// The proposal is one-hot (like an n-gram), so the verification rule stays exact.
//
// Memory is bounded by max_tokens: whole documents are evicted least recently used first (a document is used
// when it is added or supplies a proposal). Thread-safe: HTTP threads never call it, but the inference thread and
// the cache's owner may (add/propose/stats lock one mutex).
#pragma once
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace tandem {

struct SuffixCacheParams {
    size_t max_tokens = 1 << 20;  // documents kept, in tokens
    int min_match = 2;  // shortest context suffix that may propose
    float min_prob = 0.1f;  // stop when the continuation's estimated probability falls below this
};

class SuffixCache {
public:
    explicit SuffixCache(SuffixCacheParams p = {});

    // Adds a finished sequence (prompt + output). Sequences shorter than 4 tokens are ignored.
    void add(const std::vector<int32_t>& tokens);
    // Up to max_len tokens continuing `context` (its own earlier occurrences count too). Returns how many
    // were appended to `out`; `match_len`, if given, receives the length of the suffix matched.
    int propose(const std::vector<int32_t>& context, int max_len, std::vector<int32_t>& out, int* match_len = nullptr);

    struct Stats {
        size_t documents = 0, tokens = 0, evicted_documents = 0, proposals = 0, proposed_tokens = 0;
        size_t index_entries = 0;  // bigram positions held (at most `tokens`: an evicted document takes its own)
    };
    Stats stats() const;

    // Optional persistence (tandem generate --spec-suffix-file): a little-endian file of documents. load()
    // returns false when the file does not exist; a malformed file throws tandem::Error naming it.
    bool load(const std::string& path);
    void save(const std::string& path) const;

    static constexpr int kMaxMatch = 32;
    static constexpr size_t kMaxPerKey = 64;

private:
    struct Doc {
        std::vector<int32_t> toks;
        std::list<uint64_t>::iterator lru;
    };
    static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
    static uint64_t pos(uint64_t doc, size_t i) { return (doc << 24) | uint64_t(i); }
    void add_locked(const std::vector<int32_t>& tokens);
    void evict_locked();

    SuffixCacheParams p_;
    mutable std::mutex mu_;
    uint64_t next_doc_ = 1;
    std::unordered_map<uint64_t, Doc> docs_;
    std::list<uint64_t> lru_;  // front: most recently used
    std::unordered_map<uint64_t, std::vector<uint64_t>>
        index_;  // bigram -> positions (doc << 24 | index of the 2nd token)
    Stats stats_;
};

}  // namespace tandem
