#include "grammar/trigger.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "grammar/grammar.h"
#include "tandem/error.h"

namespace tandem::grammar {

struct TriggerPatterns::Code {
    pcre2_code* code = nullptr;
    bool whole = false;
    ~Code() { pcre2_code_free(code); }
};

TriggerPatterns::TriggerPatterns(const std::vector<std::string>& anywhere, const std::vector<std::string>& whole) {
    auto add = [&](const std::string& pattern, bool w) {
        // type 3 as llama.cpp: anchored at both ends (PCRE2_ANCHORED, and \z through PCRE2_ENDANCHORED)
        const uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (w ? PCRE2_ANCHORED | PCRE2_ENDANCHORED : 0);
        int err = 0;
        PCRE2_SIZE off = 0;
        pcre2_code* c =
            pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts, &err, &off, nullptr);
        if (!c) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            throw Error(strprintf("trigger pattern '%s': %s at offset %zu", pattern.c_str(),
                                  reinterpret_cast<const char*>(msg), size_t(off)));
        }
        auto code = std::make_unique<Code>();
        code->code = c;
        code->whole = w;
        codes_.push_back(std::move(code));
    };
    for (const auto& p : anywhere) add(p, false);
    for (const auto& p : whole) add(p, true);
}

TriggerPatterns::~TriggerPatterns() = default;

std::optional<TriggerPatterns::Match> TriggerPatterns::find(const std::string& text, size_t from, bool whole_ok) const {
    std::optional<Match> best;
    pcre2_match_context* mc = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(mc, 200000);  // backtracking steps: a pathological pattern fails, never stalls
    pcre2_set_depth_limit(mc, 10000);
    struct Free {
        pcre2_match_context* mc;
        ~Free() { pcre2_match_context_free(mc); }
    } free_mc{mc};
    for (const auto& c : codes_) {
        if (c->whole && (!whole_ok || from != 0)) continue;
        pcre2_match_data* md = pcre2_match_data_create_from_pattern(c->code, nullptr);
        const int rc = pcre2_match(c->code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), from, 0, md, mc);
        if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT) {
            pcre2_match_data_free(md);
            throw GrammarLimit(
                "grammar trigger pattern: PCRE2's match limit was reached (the pattern backtracks "
                "too much over the answer)");
        }
        if (rc > 0) {
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
            Match m{size_t(ov[0]), size_t(ov[0])};
            for (int g = 1; g < rc; g++)
                if (ov[2 * g] != PCRE2_UNSET && ov[2 * g + 1] > ov[2 * g]) {
                    m.start = size_t(ov[2 * g]);
                    break;
                }
            if (!best || m.match_start < best->match_start) best = m;
        }
        pcre2_match_data_free(md);
    }
    return best;
}

namespace {
bool ends_with(const std::string& s, const std::string& w) {
    return s.size() >= w.size() && s.compare(s.size() - w.size(), w.size(), w) == 0;
}
bool blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
}  // namespace

size_t TriggerSpec::longest() const {
    size_t n = std::max(think_open.size(), think_close.size());
    for (const auto& w : words) n = std::max(n, w.size());
    for (const auto& w : at_start) n = std::max(n, w.size());
    return n;
}

TriggerScan::TriggerScan(const TriggerSpec& spec) : phase_(spec.starts_thinking ? Phase::THINK : Phase::START) {}

std::string TriggerScan::key() const { return std::string(1, char('0' + int(phase_))) + tail_ + '\0' + head_; }

std::optional<TriggerScan::Fired> TriggerScan::feed(const TriggerSpec& spec, const std::string& bytes, bool patterns) {
    const size_t keep = std::max<size_t>(spec.longest(), 1) - 1;
    for (size_t i = 0; i < bytes.size(); i++) {
        const char b = bytes[i];
        tail_ += b;
        if (phase_ == Phase::THINK) {
            if (!spec.think_close.empty() && ends_with(tail_, spec.think_close)) {
                phase_ = Phase::START;  // the answer begins after the block
                tail_.clear();
                head_.clear();
                continue;
            }
        } else {
            for (const auto& w : spec.words)
                if (ends_with(tail_, w)) return Fired{w + bytes.substr(i + 1)};
            if (phase_ == Phase::START && !(head_.empty() && blank(b))) {
                head_ += b;
                for (const auto& w : spec.at_start)
                    if (head_ == w) return Fired{w + bytes.substr(i + 1)};
                if (!spec.think_open.empty() && head_ == spec.think_open) {
                    phase_ = Phase::THINK;
                    tail_.clear();
                    continue;
                }
                auto prefix_of = [&](const std::string& w) { return w.compare(0, head_.size(), head_) == 0; };
                const bool open = std::any_of(spec.at_start.begin(), spec.at_start.end(), prefix_of) ||
                                  (!spec.think_open.empty() && prefix_of(spec.think_open));
                if (!open) {
                    phase_ = Phase::TEXT;
                    head_.clear();
                }
            }
        }
        if (tail_.size() > keep) tail_.erase(0, tail_.size() - keep);
    }
    if (!spec.patterns || spec.patterns->empty()) return std::nullopt;
    text_ += bytes;
    if (text_.size() > kPatternText) {  // the oldest bytes go; whole-answer patterns no longer apply
        const size_t cut = text_.size() - kPatternText;
        text_.erase(0, cut);
        dropped_ += cut;
    }
    if (!patterns) return std::nullopt;
    const size_t from = search_from_ > dropped_ ? search_from_ - dropped_ : 0;
    if (from > text_.size()) return std::nullopt;
    const auto m = spec.patterns->find(text_, from, dropped_ == 0);
    if (!m) return std::nullopt;
    refused_at_ = dropped_ + m->match_start;
    return Fired{text_.substr(m->start), true};
}

}  // namespace tandem::grammar
