// RecurrentState: one session's state of its recurrent layers (Gated DeltaNet: each layer's convolution window
// and state matrices; model/delta_net.h), kept per position so that speculation rolls back exactly.
//
// A state is one buffer of floats_per_state values (every recurrent layer's, one after the other), the state after
// a given number of tokens, in the memory of the backend that runs those layers (the session's, or a split model's
// stage's: RecurrentStates below; its ops read and write it: conv1d, delta_rule;
// the host reads it only for state files). The store holds the state at the session's current position and those of the last
// `keep` positions before it: a verification pass writes each row's state into a buffer of its own (the same
// traffic as updating one in place, as every value of a DeltaNet state changes each token) instead of overwriting
// its input, so rolling back rejected draft tokens is taking an earlier buffer: no copy, nothing recomputed.
// A token tree's pass writes each node's state from its parent's; keep_path() keeps the accepted path's as
// positions and recycles the rest. Passes longer than `keep` rows (prompts) keep only their last `keep` states:
// the earlier rows run in place on a work buffer.
//
// Checkpoints (llama.cpp's --ctx-checkpoints): the state at the end of each prompt pass — a chain of 2 or more rows
// that is not a verification pass: a chunk of a prompt, a draft catching up with its target — stays held after it
// leaves the last `keep` positions, up to `checkpoints` of them, so that a later prompt sharing a prefix that ends
// further back (the next turn of a conversation whose earlier answer is rendered differently; another request
// with the same opening, where a chunk ended within it) goes on from the latest checkpoint at or before the
// prefix's end instead of from the start. A prompt end is one from its pass on, before it leaves the window. A state becomes a checkpoint by moving its
// buffer, not copying it. When more are held than allowed, the one whose removal leaves the smallest gap between
// its neighbours goes (never the newest), so the held ones stay spread over the history.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "tandem/session.h"  // kRecurrentPassRows

namespace tandem {

class RecurrentState {
public:
    // `keep`: the positions before the current one whose states are kept (the furthest rollback), >= 1.
    // `checkpoints`: prompt ends held beyond them (>= 0).
    RecurrentState(backend::Backend& be, size_t floats_per_state, int keep, int checkpoints = 0);

    // Position of the current state (the number of tokens it has seen), and the state: a (1, floats()) F32 row
    int pos() const { return hist_.back().pos; }
    backend::Tensor current() const { return tensor(hist_.back().v); }
    size_t floats() const { return n_; }
    int keep() const { return keep_; }

    // Buffers for a pass of n rows that starts at pos() (a chain: row t follows row t - 1; a tree: row t follows
    // parents[t], row 0 the current state). in[t] is the state row t starts from, out[t] where it writes its own;
    // they are equal for rows that run in place (the first rows of a pass longer than keep). After the pass the
    // current state is the last row's (a chain) or still pos()'s until keep_path() / rewind() (a tree).
    // keep_all (a verification pass, up to kKeepAllRows rows): every row's state is kept, so any prefix of the
    // pass can be rolled back to whatever `keep` is.
    static constexpr int kKeepAllRows = kRecurrentPassRows;
    void begin_pass(int n, const int32_t* parents, bool keep_all, std::vector<backend::Tensor>& in,
                    std::vector<backend::Tensor>& out);

    // Whether the state after n tokens is held: the current one, one of the last `keep` before it (or back to the
    // start of the last pass when it kept every row), a checkpoint, a pending tree's chain prefix (rows
    // 0..n-base-1 each the parent of the next), or n == 0 (the zero state).
    bool can_rewind(int n) const;
    // The largest m <= n with can_rewind(m) (0 when no other is held).
    int latest_at_most(int n) const;
    // Positions of the checkpoints held now, ascending (tests, logs).
    std::vector<int> checkpoint_positions() const;
    void rewind(int n);  // requires can_rewind(n)
    // After a tree pass at `base` (== pos() then): the root path path[0..m) (path[0] = 0) becomes positions
    // base + 1 .. base + m; the other nodes' buffers are recycled. After a chain: nothing (path must be 0..m-1).
    void keep_path(int base, const std::vector<int32_t>& path);
    // The zero state at position 0, everything else dropped.
    void reset();
    // Replaces everything with `state` (floats() values) as the state after n tokens (state files).
    void assign(int n, const float* state);

private:
    using Buf = std::unique_ptr<backend::Buffer>;
    backend::Tensor tensor(const Buf& b) const {
        return {b.get(), 0, TensorType::F32, 1, int64_t(n_), n_ * sizeof(float)};
    }
    struct Snap {
        int pos;
        Buf v;
        bool checkpoint = false;  // the end of a prompt pass: held as a checkpoint when it leaves hist_
    };
    Buf take();  // a buffer of n_ values (recycled when one is free; contents undefined)
    void settle_tree();  // a pending tree that no keep_path() resolved: its rows are a chain (positions in order)
    void trim();  // at most keep_ + 1 states
    void add_checkpoint(Snap s);
    backend::Backend& be_;
    size_t n_;
    int keep_;
    int max_checkpoints_;
    std::deque<Snap> hist_;  // ascending positions, the current state last
    std::vector<Snap> ckpt_;  // ascending positions, all before hist_'s
    std::vector<Buf> free_;
    // a tree pass not yet resolved: node t's state in tree_[t]; rows start at tree_base_ (-1: none)
    std::vector<Buf> tree_;
    std::vector<int32_t> tree_parents_;
    int tree_base_ = -1;
    int last_pass_pos0_ = 0;  // where the last chain pass started (a keep_all pass can roll back to it)
    int max_pass_rows_ = 0;  // the most rows of a verification pass or tree so far (spare buffers kept for them)
    Buf work_;
};

// A session's recurrent state over the stages of a split model (model/session_impl.h Stage: the CPU and GPUs): one
// RecurrentState per stage that runs recurrent layers, on that stage's backend, holding those layers' part of each
// state. They take every pass and every rollback together, so each holds the same positions, and a query is
// answered by any of them. One stage (a model not split): one part, the RecurrentState itself.
class RecurrentStates {
public:
    // The next part, in the stages' (and the layers') order: floats_per_state of its layers
    void add(backend::Backend& be, size_t floats_per_state, int keep, int checkpoints);
    size_t parts() const { return parts_.size(); }
    RecurrentState& part(size_t i) { return *parts_[i].state; }

    int pos() const { return first().pos(); }
    size_t floats() const;  // every part's, the whole state
    int keep() const { return first().keep(); }
    bool can_rewind(int n) const { return first().can_rewind(n); }
    int latest_at_most(int n) const { return first().latest_at_most(n); }
    std::vector<int> checkpoint_positions() const { return first().checkpoint_positions(); }
    void rewind(int n);
    void keep_path(int base, const std::vector<int32_t>& path);
    void reset();
    // The current state, every part's after the one before (state files: the layers' order), floats() values
    void read(float* dst) const;
    void assign(int n, const float* state);

private:
    const RecurrentState& first() const { return *parts_.front().state; }
    struct Part {
        backend::Backend* be;
        std::unique_ptr<RecurrentState> state;
    };
    std::vector<Part> parts_;
};

}  // namespace tandem
