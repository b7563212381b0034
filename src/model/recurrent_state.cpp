#include "model/recurrent_state.h"

#include <algorithm>

#include "tandem/error.h"

namespace tandem {

RecurrentState::RecurrentState(backend::Backend& be, size_t floats_per_state, int keep, int checkpoints)
    : be_(be), n_(floats_per_state), keep_(std::max(1, keep)), max_checkpoints_(std::max(0, checkpoints)) {
    reset();
}

RecurrentState::Buf RecurrentState::take() {
    if (free_.empty()) return be_.alloc(n_ * sizeof(float));
    Buf v = std::move(free_.back());
    free_.pop_back();
    return v;
}

void RecurrentState::reset() {
    for (auto& s : hist_) free_.push_back(std::move(s.v));
    for (auto& t : tree_) free_.push_back(std::move(t));
    for (auto& c : ckpt_) free_.push_back(std::move(c.v));
    hist_.clear();
    tree_.clear();
    ckpt_.clear();
    tree_base_ = -1;
    Buf z = take();
    be_.write(tensor(z), std::vector<float>(n_, 0.0f).data());
    hist_.push_back({0, std::move(z)});
}

void RecurrentState::assign(int n, const float* state) {
    reset();
    hist_.back().pos = n;
    be_.write(tensor(hist_.back().v), state);
}

void RecurrentState::add_checkpoint(Snap s) {
    TD_ASSERT(ckpt_.empty() || ckpt_.back().pos < s.pos);
    ckpt_.push_back(std::move(s));
    if (ckpt_.size() <= size_t(max_checkpoints_)) return;
    // Drop the one (not the newest) whose neighbours are closest together: the held ones stay spread out.
    size_t drop = 0;
    int best = -1;
    for (size_t i = 0; i + 1 < ckpt_.size(); i++) {
        const int gap = ckpt_[i + 1].pos - (i > 0 ? ckpt_[i - 1].pos : 0);
        if (best < 0 || gap <= best) best = gap, drop = i;  // ties: the later goes (older prefixes are shared more)
    }
    free_.push_back(std::move(ckpt_[drop].v));
    ckpt_.erase(ckpt_.begin() + std::ptrdiff_t(drop));
}

std::vector<int> RecurrentState::checkpoint_positions() const {
    std::vector<int> p;
    for (const auto& c : ckpt_) p.push_back(c.pos);
    return p;
}

void RecurrentState::trim() {
    while (hist_.size() > size_t(keep_) + 1) {
        if (hist_.front().checkpoint && max_checkpoints_ > 0) add_checkpoint(std::move(hist_.front()));
        else free_.push_back(std::move(hist_.front().v));
        hist_.pop_front();
    }
    // spare buffers for the next pass: as many as the largest one took (a verification pass or tree of more rows
    // than `keep` would otherwise allocate and free whole states every round)
    const size_t spare = size_t(std::max(keep_, max_pass_rows_)) + 2;
    if (free_.size() > spare) free_.resize(spare);
}

void RecurrentState::settle_tree() {
    if (tree_base_ < 0) return;
    std::vector<int32_t> chain(tree_.size());
    for (size_t t = 0; t < chain.size(); t++) {
        TD_ASSERT(t == 0 || tree_parents_[t] == int32_t(t) - 1);  // a branching tree needs keep_path() or rewind()
        chain[t] = int32_t(t);
    }
    keep_path(tree_base_, chain);
}

void RecurrentState::begin_pass(int n, const int32_t* parents, bool keep_all, std::vector<backend::Tensor>& in,
                                std::vector<backend::Tensor>& out) {
    TD_ASSERT(n >= 1);
    settle_tree();
    trim();
    in.resize(size_t(n));
    out.resize(size_t(n));
    if (parents || keep_all) max_pass_rows_ = std::max(max_pass_rows_, std::min(n, kKeepAllRows));
    if (parents) {
        tree_base_ = pos();
        tree_parents_.assign(parents, parents + n);
        tree_.resize(size_t(n));
        for (int t = 0; t < n; t++) {
            tree_[size_t(t)] = take();
            in[size_t(t)] = t == 0 ? current() : tensor(tree_[size_t(parents[t])]);
            out[size_t(t)] = tensor(tree_[size_t(t)]);
        }
        return;
    }
    last_pass_pos0_ = pos();
    const int pos0 = pos(), first_kept = keep_all && n <= kKeepAllRows ? 0 : std::max(0, n - keep_);
    if (first_kept > 0 && !work_) work_ = be_.alloc(n_ * sizeof(float));
    backend::Tensor prev = current();
    for (int t = 0; t < n; t++) {
        backend::Tensor o;
        if (t < first_kept) {
            o = tensor(work_);
        } else {
            hist_.push_back({pos0 + t + 1, take()});
            o = tensor(hist_.back().v);
        }
        in[size_t(t)] = prev;
        out[size_t(t)] = o;
        prev = o;
    }
    if (n >= 2 && !keep_all) hist_.back().checkpoint = true;  // a prompt pass's end
}

bool RecurrentState::can_rewind(int n) const {
    if (n == 0) return true;
    if (tree_base_ >= 0 && n > tree_base_) {
        if (n - tree_base_ > int(tree_.size())) return false;
        for (int t = 1; t < n - tree_base_; t++)
            if (tree_parents_[size_t(t)] != t - 1) return false;
        return true;
    }
    if (n > pos()) return false;
    for (const auto& c : ckpt_)
        if (c.pos == n) return true;
    if (max_checkpoints_ > 0)  // a prompt end not yet moved among the checkpoints (trim() moves it) is one too
        for (const auto& s : hist_)
            if (s.pos == n && s.checkpoint) return true;
    if (n < std::min(pos() - keep_, last_pass_pos0_)) return false;  // the contract, whatever else is still held
    for (const auto& s : hist_)
        if (s.pos == n) return true;
    return false;
}

int RecurrentState::latest_at_most(int n) const {
    int best = 0;
    auto consider = [&](int m) {
        if (m > best && m <= n && can_rewind(m)) best = m;
    };
    for (const auto& c : ckpt_) consider(c.pos);
    for (const auto& s : hist_) consider(s.pos);
    if (tree_base_ >= 0)
        for (int t = 1; t <= int(tree_.size()); t++) consider(tree_base_ + t);
    return best;
}

void RecurrentState::rewind(int n) {
    TD_ASSERT(can_rewind(n));
    if (tree_base_ >= 0) {
        const int m = std::max(0, n - tree_base_);
        std::vector<int32_t> chain(static_cast<size_t>(m));
        for (int t = 0; t < m; t++) chain[size_t(t)] = int32_t(t);
        if (m > 0) {
            keep_path(tree_base_, chain);
        } else {
            for (auto& t : tree_) free_.push_back(std::move(t));
            tree_.clear();
            tree_base_ = -1;
        }
    }
    while (!ckpt_.empty() && ckpt_.back().pos > n) {  // another continuation's
        free_.push_back(std::move(ckpt_.back().v));
        ckpt_.pop_back();
    }
    while (hist_.size() > 1 && hist_.back().pos > n) {
        free_.push_back(std::move(hist_.back().v));
        hist_.pop_back();
    }
    if (hist_.back().pos == n) return;
    if (!ckpt_.empty() && ckpt_.back().pos == n) {  // back to a checkpoint: it becomes the current state
        for (auto& s : hist_) free_.push_back(std::move(s.v));  // all after it (checkpoints precede hist_)
        hist_.clear();
        hist_.push_back(std::move(ckpt_.back()));
        ckpt_.pop_back();
        last_pass_pos0_ = n;
        return;
    }
    TD_ASSERT(n == 0);
    reset();
}

void RecurrentState::keep_path(int base, const std::vector<int32_t>& path) {
    if (tree_base_ < 0) {  // after a chain: rows are positions already (the caller's rewind keeps the prefix)
        for (size_t j = 0; j < path.size(); j++) TD_ASSERT(path[j] == int32_t(j));
        return;
    }
    TD_ASSERT(tree_base_ == base && base == pos() && path.size() <= tree_.size());
    for (size_t j = 0; j < path.size(); j++) {
        TD_ASSERT(path[j] >= 0 && size_t(path[j]) < tree_.size() && tree_[size_t(path[j])]);
        hist_.push_back({base + int(j) + 1, std::move(tree_[size_t(path[j])])});
    }
    for (auto& t : tree_)
        if (t) free_.push_back(std::move(t));
    tree_.clear();
    tree_base_ = -1;
}

void RecurrentStates::add(backend::Backend& be, size_t floats_per_state, int keep, int checkpoints) {
    parts_.push_back({&be, std::make_unique<RecurrentState>(be, floats_per_state, keep, checkpoints)});
}

size_t RecurrentStates::floats() const {
    size_t n = 0;
    for (const Part& p : parts_) n += p.state->floats();
    return n;
}

void RecurrentStates::rewind(int n) {
    for (Part& p : parts_) p.state->rewind(n);
}

void RecurrentStates::keep_path(int base, const std::vector<int32_t>& path) {
    for (Part& p : parts_) p.state->keep_path(base, path);
}

void RecurrentStates::reset() {
    for (Part& p : parts_) p.state->reset();
}

void RecurrentStates::read(float* dst) const {
    for (const Part& p : parts_) {
        p.be->read(p.state->current(), dst);
        dst += p.state->floats();
    }
}

void RecurrentStates::assign(int n, const float* state) {
    for (Part& p : parts_) {
        p.state->assign(n, state);
        state += p.state->floats();
    }
}

}  // namespace tandem
