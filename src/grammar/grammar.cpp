#include "grammar/grammar.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include "tandem/error.h"

namespace tandem::grammar {

bool CharSet::contains(uint32_t cp) const {
    bool in = false;
    for (const auto& [a, b] : ranges) in = in || (cp >= a && cp <= b);
    return in != negated;
}

bool CharSet::intersects(uint32_t lo, uint32_t hi) const {
    if (negated) {  // some code point of [lo, hi] outside every range
        std::vector<std::pair<uint32_t, uint32_t>> r = ranges;
        std::sort(r.begin(), r.end());
        uint32_t next = lo;
        for (const auto& [a, b] : r) {
            if (b < next) continue;
            if (a > next) return true;
            if (b >= hi) return false;
            next = b + 1;
        }
        return next <= hi;
    }
    for (const auto& [a, b] : ranges)
        if (a <= hi && b >= lo) return true;
    return false;
}

namespace {

class GbnfParser {
public:
    GbnfParser(const std::string& t, Grammar& g) : s_(t), g_(g) {}

    void run(const std::string& root) {
        skip(true);
        while (i_ < s_.size()) {
            const int ln = line_;
            const std::string name = ident();
            if (name.empty()) fail("expected a rule name");
            skip(false);
            if (s_.compare(i_, 3, "::=") != 0) fail("expected '::=' after '" + name + "'");
            i_ += 3;
            const int r = rule_index(name);
            if (defined_.count(name)) fail("rule '" + name + "' is defined twice");
            defined_[name] = ln;
            alternatives(r, 0);
            skip(true);
        }
        for (const auto& [name, ln] : used_)
            if (!defined_.count(name))
                throw Error(strprintf("grammar line %d: rule '%s' is not defined", ln, name.c_str()));
        auto it = defined_.find(root);
        if (it == defined_.end()) throw Error("grammar: no '" + root + "' rule");
        g_.root = rule_index(root);
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw Error(strprintf("grammar line %d: %s", line_, what.c_str()));
    }

    // Spaces, tabs and comments; newlines too when `newlines` (inside parentheses, between rules).
    void skip(bool newlines) {
        while (i_ < s_.size()) {
            const char c = s_[i_];
            if (c == ' ' || c == '\t' || c == '\r') i_++;
            else if (c == '#')
                while (i_ < s_.size() && s_[i_] != '\n') i_++;
            else if (c == '\n' && newlines) i_++, line_++;
            else break;
        }
    }

    std::string ident() {
        std::string n;
        while (i_ < s_.size() && (std::isalnum(uint8_t(s_[i_])) || s_[i_] == '-' || s_[i_] == '_')) n += s_[i_++];
        return n;
    }

    int rule_index(const std::string& name) {
        auto it = index_.find(name);
        if (it != index_.end()) return it->second;
        g_.rules.push_back({name, {}});
        return index_[name] = int(g_.rules.size() - 1);
    }

    int anon(const std::string& base) {
        const std::string name = base + "_" + std::to_string(counter_++);
        g_.rules.push_back({name, {}});
        index_[name] = int(g_.rules.size() - 1);
        return int(g_.rules.size() - 1);
    }

    uint32_t utf8_char() {
        const unsigned char c = uint8_t(s_[i_]);
        int len = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
        i_++;
        for (int k = 1; k < len; k++) {
            if (i_ >= s_.size()) fail("truncated UTF-8");
            cp = (cp << 6) | (uint8_t(s_[i_++]) & 0x3f);
        }
        return cp;
    }

    uint32_t char_or_escape() {
        if (i_ >= s_.size()) fail("unexpected end of the grammar");
        if (s_[i_] != '\\') {
            if (s_[i_] == '\n') fail("a literal or class runs past the end of the line");
            return utf8_char();
        }
        if (++i_ >= s_.size()) fail("unexpected end after '\\'");
        const char e = s_[i_++];
        auto hex = [&](int n) {
            uint32_t v = 0;
            for (int k = 0; k < n; k++) {
                if (i_ >= s_.size() || !std::isxdigit(uint8_t(s_[i_]))) fail("bad hexadecimal escape");
                const char h = s_[i_++];
                v = v * 16 + uint32_t(std::isdigit(uint8_t(h)) ? h - '0' : std::tolower(uint8_t(h)) - 'a' + 10);
            }
            return v;
        };
        switch (e) {
            case 'n': return '\n';
            case 'r': return '\r';
            case 't': return '\t';
            case 'x': return hex(2);
            case 'u': return hex(4);
            case 'U': return hex(8);
            case '\\':
            case '"':
            case '[':
            case ']':
            case '-':
            case '\'':
            case '^': return uint32_t(e);
            default: fail(std::string("unknown escape '\\") + e + "'");
        }
    }

    int add_set(CharSet s) {
        g_.sets.push_back(std::move(s));
        return int(g_.sets.size() - 1);
    }

    // alternatives of rule r; depth > 0 inside parentheses (newlines allowed)
    void alternatives(int r, int depth) {
        if (depth > 50) fail("parentheses nested more than 50 deep");
        for (;;) {
            std::vector<Symbol> seq = sequence(r, depth);
            g_.rules[size_t(r)].alts.push_back(std::move(seq));
            skip(depth > 0);
            if (i_ < s_.size() && s_[i_] == '|') {
                i_++;
                skip(true);
                continue;
            }
            // a continuation line that starts with '|' (a common layout)
            size_t j = i_;
            int lines = 0;
            while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t' || s_[j] == '\r' || s_[j] == '\n'))
                lines += s_[j++] == '\n';
            if (depth == 0 && j < s_.size() && s_[j] == '|') {
                i_ = j + 1;
                line_ += lines;
                skip(true);
                continue;
            }
            return;
        }
    }

    std::vector<Symbol> sequence(int r, int depth) {
        std::vector<Symbol> seq;
        const std::string base = g_.rules[size_t(r)].name;  // a copy: anon() grows the rules
        for (;;) {
            skip(depth > 0);
            if (i_ >= s_.size()) break;
            const char c = s_[i_];
            size_t start = seq.size();  // the last item's symbols, for a repetition that follows
            if (c == '"') {
                i_++;
                while (i_ < s_.size() && s_[i_] != '"') {
                    const uint32_t cp = char_or_escape();
                    seq.push_back({false, add_set({{{cp, cp}}, false})});
                }
                if (i_ >= s_.size()) fail("a literal is not closed");
                i_++;
                if (seq.size() == start) {  // "" matches the empty string: nothing to add, but may be repeated
                    postfix(seq, start, base);
                    continue;
                }
            } else if (c == '[') {
                i_++;
                CharSet set;
                if (i_ < s_.size() && s_[i_] == '^') set.negated = true, i_++;
                while (i_ < s_.size() && s_[i_] != ']') {
                    const uint32_t a = char_or_escape();
                    uint32_t b = a;
                    if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
                        i_++;
                        b = char_or_escape();
                        if (b < a) fail("a character range runs backwards");
                    }
                    set.ranges.push_back({a, b});
                }
                if (i_ >= s_.size()) fail("a character class is not closed");
                i_++;
                seq.push_back({false, add_set(std::move(set))});
            } else if (c == '.') {
                i_++;
                seq.push_back({false, add_set({{}, true})});
            } else if (c == '(') {
                i_++;
                skip(true);
                const int sub = anon(base);
                alternatives(sub, depth + 1);
                skip(true);
                if (i_ >= s_.size() || s_[i_] != ')') fail("expected ')'");
                i_++;
                seq.push_back({true, sub});
            } else if (std::isalnum(uint8_t(c)) || c == '-' || c == '_') {
                const size_t save = i_;
                const int save_line = line_;
                const std::string name = ident();
                // the next rule's "name ::=" ends this sequence (rules are separated by newlines)
                size_t j = i_;
                while (j < s_.size() && (s_[j] == ' ' || s_[j] == '\t')) j++;
                if (s_.compare(j, 3, "::=") == 0) {
                    i_ = save;
                    line_ = save_line;
                    break;
                }
                used_.emplace(name, line_);
                seq.push_back({true, rule_index(name)});
            } else {
                break;
            }
            postfix(seq, start, base);
        }
        return seq;
    }

    // * + ? {m} {m,} {m,n} after the item seq[start..]
    void postfix(std::vector<Symbol>& seq, size_t start, const std::string& base) {
        if (i_ >= s_.size()) return;
        const char c = s_[i_];
        if (c != '*' && c != '+' && c != '?' && c != '{') return;
        std::vector<Symbol> item(seq.begin() + long(start), seq.end());
        seq.resize(start);
        int lo = 0, hi = -1;  // hi -1: unbounded
        i_++;
        if (c == '+') lo = 1;
        else if (c == '?') hi = 1;
        else if (c == '{') {
            auto num = [&] {
                std::string d;
                while (i_ < s_.size() && std::isdigit(uint8_t(s_[i_]))) d += s_[i_++];
                if (d.empty() || d.size() > 6) fail("expected a number in {m,n}");
                return std::stoi(d);
            };
            skip(false);
            lo = num();
            skip(false);
            hi = lo;
            if (i_ < s_.size() && s_[i_] == ',') {
                i_++;
                skip(false);
                hi = i_ < s_.size() && s_[i_] == '}' ? -1 : num();
                skip(false);
            }
            if (i_ >= s_.size() || s_[i_] != '}') fail("expected '}'");
            i_++;
            if (hi >= 0 && hi < lo) fail("{m,n} with n < m");
            if (lo > 1000 || hi > 1000) fail("a repetition count above 1000");
        }
        if (seq.size() + item.size() * size_t(lo) > 100000 || g_.rules.size() > 20000) fail("the grammar is too large");
        for (int k = 0; k < lo; k++) seq.insert(seq.end(), item.begin(), item.end());
        if (hi < 0) {  // item*: R ::= item R |
            const int r = anon(base);
            std::vector<Symbol> rec = item;
            rec.push_back({true, r});
            g_.rules[size_t(r)].alts = {rec, {}};
            seq.push_back({true, r});
        } else if (hi > lo) {  // up to hi - lo more, nested: R1 ::= item R2 | ; ... ; Rn ::= item |
            int next = -1;
            for (int k = hi - lo; k >= 1; k--) {
                const int r = anon(base);
                std::vector<Symbol> alt = item;
                if (next >= 0) alt.push_back({true, next});
                g_.rules[size_t(r)].alts = {alt, {}};
                next = r;
            }
            seq.push_back({true, next});
        }
    }

    const std::string& s_;
    Grammar& g_;
    size_t i_ = 0;
    int line_ = 1, counter_ = 1;
    std::map<std::string, int> index_, defined_;
    std::multimap<std::string, int> used_;
};

// Which rules match the empty string: a work list over the alternatives, linear in the grammar's size (a
// fixpoint that re-scans every rule per round is quadratic on a long chain of empty rules).
std::vector<char> nullable_rules(const Grammar& g) {
    const size_t n = g.rules.size();
    std::vector<char> nullable(n, 0);
    std::vector<std::pair<int, int>> alts;  // (rule, rule references not yet known nullable)
    std::vector<std::vector<int>> uses(n);  // rule -> the alternatives that refer to it, once per reference
    std::vector<int> ready;
    for (size_t r = 0; r < n; r++)
        for (const auto& alt : g.rules[r].alts) {
            if (std::any_of(alt.begin(), alt.end(), [](const Symbol& s) { return !s.is_rule; })) continue;
            const int id = int(alts.size());
            alts.push_back({int(r), int(alt.size())});
            for (const auto& s : alt) uses[size_t(s.index)].push_back(id);
            if (alt.empty() && !nullable[r]) nullable[r] = 1, ready.push_back(int(r));
        }
    while (!ready.empty()) {
        const int q = ready.back();
        ready.pop_back();
        for (int id : uses[size_t(q)]) {
            auto& [r, left] = alts[size_t(id)];
            if (--left == 0 && !nullable[size_t(r)]) nullable[size_t(r)] = 1, ready.push_back(r);
        }
    }
    return nullable;
}

void check_left_recursion(const Grammar& g) {
    const size_t n = g.rules.size();
    const std::vector<char> nullable = nullable_rules(g);
    // r -> rules that can start r
    std::vector<std::vector<int>> first(n);
    for (size_t r = 0; r < n; r++)
        for (const auto& alt : g.rules[r].alts)
            for (const auto& s : alt) {
                if (!s.is_rule) break;
                first[r].push_back(s.index);
                if (!nullable[size_t(s.index)]) break;
            }
    // a cycle in `first` is left recursion: depth-first with an explicit stack (rule chains can be long)
    std::vector<int> color(n, 0);
    std::vector<std::pair<int, size_t>> path;  // (rule, next edge)
    for (size_t root = 0; root < n; root++) {
        if (color[root] != 0) continue;
        color[root] = 1;
        path.push_back({int(root), 0});
        while (!path.empty()) {
            auto& [r, e] = path.back();
            if (e == first[size_t(r)].size()) {
                color[size_t(r)] = 2;
                path.pop_back();
                continue;
            }
            const int q = first[size_t(r)][e++];
            if (color[size_t(q)] == 1) throw Error("grammar: rule '" + g.rules[size_t(q)].name + "' is left-recursive");
            if (color[size_t(q)] == 0) {
                color[size_t(q)] = 1;
                path.push_back({q, 0});
            }
        }
    }
}

}  // namespace

std::shared_ptr<const Grammar> parse_gbnf(const std::string& text, const std::string& root) {
    auto g = std::make_shared<Grammar>();
    GbnfParser(text, *g).run(root);
    check_left_recursion(*g);
    return g;
}

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
    Work work;
    std::vector<Stack> todo;
    for (int a = int(g_->rules[size_t(g_->root)].alts.size()) - 1; a >= 0; a--) todo.push_back({{g_->root, a, 0}});
    expand(std::move(todo), stacks_, work);
    normalize(stacks_);
}

void Matcher::normalize(std::vector<Stack>& stacks) {
    std::sort(stacks.begin(), stacks.end());
    stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
    size_t positions = 0;
    for (const auto& s : stacks) positions += s.size();
    if (positions > kMaxStatePositions)
        throw GrammarLimit(
            strprintf("grammar: a parse state of %zu stacks holding %zu rule positions (the bound is "
                      "%zu: the grammar is too deep and ambiguous at once)",
                      stacks.size(), positions, kMaxStatePositions));
}

void Matcher::expand(std::vector<Stack> todo, std::vector<Stack>& out, Work& work) const {
    // An explicit work list, not recursion: rules that match the empty string may chain without bound of depth.
    while (!todo.empty()) {
        Stack s = std::move(todo.back());
        todo.pop_back();
        for (;;) {
            work.used += int64_t(s.size()) + 1;
            if (work.used > kStepWork)
                throw GrammarLimit(
                    strprintf("grammar: more than %lld rule positions visited for one character "
                              "(rules chained through empty matches)",
                              (long long)kStepWork));
            if (s.size() > kMaxStackDepth)
                throw GrammarLimit(
                    strprintf("grammar: rules nested more than %zu deep while matching", kMaxStackDepth));
            if (s.empty()) {
                out.push_back(std::move(s));
                break;
            }
            const Pos top = s.back();
            const auto& alt = g_->rules[size_t(top.rule)].alts[size_t(top.alt)];
            if (size_t(top.sym) == alt.size()) {  // this alternative is done: back to the rule that referred to it
                s.pop_back();
                continue;
            }
            const Symbol& sym = alt[size_t(top.sym)];
            if (!sym.is_rule) {
                out.push_back(std::move(s));
                break;
            }
            s.back().sym++;
            // a reference at the end of its alternative is a tail call: the caller has nothing left to match, so it
            // is not kept (right recursion such as x* runs in constant stack depth, as in llama.cpp)
            if (size_t(s.back().sym) == alt.size()) s.pop_back();
            const auto& alts = g_->rules[size_t(sym.index)].alts;
            for (int a = int(alts.size()) - 1; a >= 1; a--) {
                Stack t = s;
                t.push_back({sym.index, a, 0});
                todo.push_back(std::move(t));
            }
            s.push_back({sym.index, 0, 0});
        }
        if (out.size() > kMaxStacks)
            throw GrammarLimit(
                strprintf("grammar: more than %zu parse states at once (the grammar is too ambiguous)", kMaxStacks));
    }
}

std::vector<Matcher::Stack> Matcher::step(const std::vector<Stack>& from, uint32_t cp, Work* work) const {
    Work local;
    Work& w = work ? *work : local;
    const int64_t before = w.used;
    std::vector<Stack> out, todo;
    for (const Stack& s : from) {
        if (s.empty()) continue;
        const Pos& top = s.back();
        const Symbol& sym = g_->rules[size_t(top.rule)].alts[size_t(top.alt)][size_t(top.sym)];
        if (!g_->sets[size_t(sym.index)].contains(cp)) continue;
        Stack t = s;
        t.back().sym++;
        todo.push_back(std::move(t));
    }
    // the step's own bound counts from zero; a mask's bound (allowed) counts every step it takes
    Work mine;
    expand(std::move(todo), out, mine);
    w.used = before + mine.used;
    normalize(out);
    return out;
}

bool Matcher::accept(uint32_t cp) {
    if (!scalar_value(cp)) return false;
    auto next = step(stacks_, cp);
    if (next.empty()) return false;
    stacks_ = std::move(next);
    return true;
}

bool Matcher::partial_viable(const std::vector<Stack>& stacks, const Partial& p) const {
    const int unknown = 6 * p.need;
    // the code points the open sequence may still become: Unicode scalar values only (no surrogates, none past
    // U+10FFFF), so a grammar never lets through bytes that are not UTF-8
    const uint32_t lo = std::max(p.value << unknown, p.min);
    const uint32_t hi = std::min((p.value << unknown) | ((1u << unknown) - 1), kMaxCodePoint);
    const std::pair<uint32_t, uint32_t> parts[2] = {{lo, std::min(hi, 0xD7FFu)}, {std::max(lo, 0xE000u), hi}};
    for (const auto& st : stacks) {
        if (st.empty()) continue;
        const Pos& top = st.back();
        const Symbol& sym = g_->rules[size_t(top.rule)].alts[size_t(top.alt)][size_t(top.sym)];
        for (const auto& [a, b] : parts)
            if (a <= b && g_->sets[size_t(sym.index)].intersects(a, b)) return true;
    }
    return false;
}

bool Matcher::accept_bytes(const std::string& s) {
    std::vector<Stack> cur = stacks_;
    Partial p = partial_;
    for (unsigned char b : s) {
        if (p.need == 0) {
            if (b < 0x80) {
                cur = step(cur, b);
                if (cur.empty()) return false;
                continue;
            }
            if (b < 0xc2 || b > 0xf4) return false;  // a continuation byte without a lead, or never UTF-8
            p.need = b >= 0xf0 ? 3 : b >= 0xe0 ? 2 : 1;
            p.value = b >= 0xf0 ? (b & 0x07u) : b >= 0xe0 ? (b & 0x0fu) : (b & 0x1fu);
            p.min = b >= 0xf0 ? 0x10000 : b >= 0xe0 ? 0x800 : 0x80;
            continue;
        }
        if ((b & 0xc0) != 0x80) return false;
        p.value = (p.value << 6) | (b & 0x3fu);
        if (--p.need == 0) {
            if (!scalar_value(p.value)) return false;
            cur = step(cur, p.value);
            if (cur.empty()) return false;
            p = Partial{};
        }
    }
    if (p.need > 0 && !partial_viable(cur, p)) return false;
    stacks_ = std::move(cur);
    partial_ = p;
    return true;
}

bool Matcher::can_end() const {
    if (partial_.need > 0) return false;
    for (const auto& s : stacks_)
        if (s.empty()) return true;
    return false;
}

VocabTrie::VocabTrie(const std::vector<std::string>& pieces) : nodes_(1), n_tokens_(int(pieces.size())) {
    for (int32_t id = 0; id < int32_t(pieces.size()); id++) {
        const std::string& p = pieces[size_t(id)];
        if (p.empty()) continue;
        int n = 0;
        for (unsigned char b : p) {
            int child = -1;
            for (const auto& [byte, idx] : nodes_[size_t(n)].next)
                if (byte == b) child = idx;
            if (child < 0) {
                child = int(nodes_.size());
                nodes_[size_t(n)].next.push_back({b, child});
                nodes_.push_back({});
            }
            n = child;
        }
        nodes_[size_t(n)].tokens.push_back(id);
    }
}

int MaskMemo::intern(std::vector<Matcher::Stack> s) {
    auto it = ids.find(s);
    if (it != ids.end()) return it->second;
    const int id = int(states.size());
    for (const auto& st : s) bytes += 2 * (sizeof(Matcher::Stack) + st.size() * sizeof(Matcher::Pos));  // key + copy
    ids.emplace(s, id);
    states.push_back(std::move(s));
    return id;
}

void VocabTrie::allowed(const Matcher& m, const std::vector<int32_t>& eog, std::vector<uint8_t>& out,
                        MaskMemo* memo) const {
    MaskMemo local;
    MaskMemo& mm = memo ? *memo : local;
    if (mm.bytes > MaskMemo::kMaxBytes) mm = MaskMemo{};  // bounded memory over a very long generation
    using Partial = Matcher::Partial;
    const int start = mm.intern(m.stacks());
    const Partial p0 = m.partial();
    const auto key = std::make_tuple(start, p0.value, p0.need, p0.min);
    if (auto it = mm.masks.find(key); it != mm.masks.end()) {
        out = it->second;
    } else {
        out.assign(size_t(n_tokens_), 0);
        Matcher::Work work;
        auto step = [&](int state, uint32_t cp) {
            const uint64_t k = uint64_t(state) << 21 | cp;
            auto f = mm.next.find(k);
            if (f != mm.next.end()) return f->second;
            auto next = m.step(mm.states[size_t(state)], cp, &work);
            if (work.used > kMaskWork)
                throw GrammarLimit(
                    strprintf("grammar: finding the allowed tokens took more than %lld rule-position "
                              "steps (the grammar is too ambiguous for this vocabulary)",
                              (long long)kMaskWork));
            const int id = next.empty() ? -1 : mm.intern(std::move(next));
            mm.next.emplace(k, id);
            return id;
        };
        std::function<void(int, int, Partial)> walk = [&](int n, int state, Partial p) {
            const Node& node = nodes_[size_t(n)];
            if (n != 0)  // reached with live stacks (and a viable open sequence, if any): these tokens fit
                for (int32_t id : node.tokens) out[size_t(id)] = 1;
            for (const auto& [b, child] : node.next) {
                Partial q = p;
                if (q.need == 0) {
                    if (b < 0x80) {
                        const int next = step(state, b);
                        if (next >= 0) walk(child, next, Partial{});
                        continue;
                    }
                    if (b < 0xc2 || b > 0xf4) continue;  // never valid text here
                    q.need = b >= 0xf0 ? 3 : b >= 0xe0 ? 2 : 1;
                    q.value = b >= 0xf0 ? (b & 0x07u) : b >= 0xe0 ? (b & 0x0fu) : (b & 0x1fu);
                    q.min = b >= 0xf0 ? 0x10000 : b >= 0xe0 ? 0x800 : 0x80;
                    if (m.partial_viable(mm.states[size_t(state)], q)) walk(child, state, q);
                    continue;
                }
                if ((b & 0xc0) != 0x80) continue;
                q.value = (q.value << 6) | (b & 0x3fu);
                if (--q.need == 0) {
                    const int next = scalar_value(q.value) ? step(state, q.value) : -1;
                    if (next >= 0) walk(child, next, Partial{});
                } else if (m.partial_viable(mm.states[size_t(state)], q)) {
                    walk(child, state, q);
                }
            }
        };
        walk(0, start, p0);
        if (mm.masks.size() >= 64) mm.masks.clear();
        mm.bytes += out.size();
        mm.masks.emplace(key, out);
    }
    const bool end = m.can_end();
    for (int32_t id : eog)
        if (id >= 0 && id < n_tokens_) out[size_t(id)] = end ? 1 : 0;
}

}  // namespace tandem::grammar
