// Bigram merging, the loop both tokenizer families run on each piece of text (internal; as llama.cpp's SPM and BPE
// tokenizer sessions run it):
//   1. the text is split into symbols, one per UTF-8 character (utf8_len; a sequence cut short by the end of the
//      text keeps the bytes that are there);
//   2. every adjacent pair that the tokenizer gives a priority is queued;
//   3. the queued pair of highest priority is merged (ties: the leftmost pair): the left symbol takes the right
//      one's bytes, and its pairs with its new neighbours are queued. A queued pair one of whose symbols has
//      changed since is dropped. This repeats until the queue is empty.
// The tokenizer decides what a pair is worth: SentencePiece the score of the merged token, BPE its merge rank
// (negated: the lowest rank merges first). The cost is O(n log n) heap operations and one priority() call per
// queued pair, for a text of n symbols; nothing is allocated per merge beyond the queue's growth.
#pragma once
#include <algorithm>
#include <optional>
#include <queue>
#include <string>
#include <type_traits>
#include <vector>

#include "tokenizer/tokenizer_impl.h"

namespace tandem {

struct MergeSymbol {
    int prev, next;  // the neighbouring symbols still in the list (-1: none)
    size_t off, n;  // the symbol's bytes text[off, off + n); n == 0 once merged into its left neighbour
};

// Runs the merge over text; syms receives the symbols (it is cleared first). The result is the list that starts at
// syms[0] (when text is not empty) and follows next.
// priority(const MergeSymbol& left, const MergeSymbol& right) -> std::optional<P>: the worth of merging the two
// adjacent symbols (greater merges first), or std::nullopt when they must not merge. P is ordered by < and ==.
template <class Priority>
void merge_bigrams(const std::string& text, std::vector<MergeSymbol>& syms, Priority&& priority) {
    using P = typename std::invoke_result_t<Priority&, const MergeSymbol&, const MergeSymbol&>::value_type;
    struct Bigram {
        int left, right;
        P priority;
        size_t size;  // bytes of the merged symbol: a symbol that has changed since no longer adds up to it
        bool operator<(const Bigram& o) const {  // the queue's top: highest priority, then the leftmost
            return priority < o.priority || (priority == o.priority && left > o.left);
        }
    };
    syms.clear();
    for (size_t off = 0; off < text.size();) {
        const size_t len = std::min(utf8_len(static_cast<unsigned char>(text[off])), text.size() - off);
        const int idx = int(syms.size());
        syms.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, off, len});
        off += len;
    }
    std::priority_queue<Bigram> queue;
    auto add = [&](int l, int r) {
        if (l < 0 || r < 0) return;
        const MergeSymbol& ls = syms[size_t(l)];
        const MergeSymbol& rs = syms[size_t(r)];
        if (std::optional<P> p = priority(ls, rs)) queue.push(Bigram{l, r, *p, ls.n + rs.n});
    };
    for (int i = 1; i < int(syms.size()); i++) add(i - 1, i);
    while (!queue.empty()) {
        const Bigram b = queue.top();
        queue.pop();
        MergeSymbol& l = syms[size_t(b.left)];
        MergeSymbol& r = syms[size_t(b.right)];
        if (l.n == 0 || r.n == 0 || l.next != b.right || l.n + r.n != b.size) continue;  // stale
        l.n += r.n;
        r.n = 0;
        l.next = r.next;
        if (r.next >= 0) syms[size_t(r.next)].prev = b.left;
        add(l.prev, b.left);
        add(b.left, l.next);
    }
}

}  // namespace tandem
