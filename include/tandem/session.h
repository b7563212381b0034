// Session: the per-sequence state of one model — KV cache, token history and scratch — and the forward pass.
// Many Sessions can share one Model. A Session is not thread-safe; use one per sequence.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/gpu.h"
#include "tandem/model.h"

namespace tandem {

class ThreadPool;
class Session;
class Cluster;

// Prompt ends a recurrent model's session holds for prefix reuse by default (SessionParams::ctx_checkpoints). llama.cpp
// holds up to 32; each is one recurrent state (50 MiB on Qwen3.5-9B), and the held ones are kept spread over the
// history (model/recurrent_state.h), so 8 cover a conversation's turns at a quarter of the memory.
constexpr int kCtxCheckpoints = 8;
// Positions a model with recurrent (Gated DeltaNet) layers can roll back by default (SessionParams::recurrent_keep:
// its state is kept for each of them, and for every row of a verification pass or token tree up to 64 rows):
// truncating further back than that is possible only to a checkpoint (SessionParams::ctx_checkpoints) or 0, and
// reuse_prefix takes the latest of those (0: the prompt is re-read, as llama.cpp's recurrent memory without
// checkpoints). Context shifts are refused. A draft session needs its longest draft (it rolls back each round's
// drafted tokens, decoded one pass each): 16, the default --draft-max.
constexpr int kRecurrentKeep = 16;
// A target's (generate, serve): its verification passes keep every row on their own, so the window only serves a
// prompt whose shared prefix ends in the last few tokens (the sampled end-of-turn token a template renders
// otherwise); the checkpoints serve the rest. 12 states fewer than a draft's: 600 MiB per slot on Qwen3.5-9B.
constexpr int kRecurrentKeepTarget = 4;
// The most rows of one verification pass (a chain of drafts and the token before them, or a token tree) a recurrent
// model keeps every state of, so that any prefix of it can be kept: the generator drafts and builds trees no larger
// for such a target.
constexpr int kRecurrentPassRows = 64;

struct SessionParams {
    int n_ctx = 0;  // KV cache capacity in tokens; 0 = min(n_ctx_train, 4096)
    int n_layers = 0;  // run only the first n_layers blocks (self-speculation draft); 0 = all
    int n_batch = 256;  // tokens per internal forward chunk (bounds scratch memory for long prompts)
    // KV cache element types (llama.cpp's -ctk / -ctv): F32, F16, BF16, Q8_0, Q4_0, Q4_1, IQ4_NL, Q5_0, Q5_1.
    // A block type needs head_dim % 32 == 0; the constructor throws tandem::Error otherwise.
    TensorType type_k = TensorType::F16;
    TensorType type_v = TensorType::F16;
    // Sliding-window layers (HParams::n_swa) keep every position, as llama.cpp's --swa-full. false (the default,
    // as llama.cpp's): each keeps a ring of swa_cache_positions() rows, the window plus room for one pass and the
    // rollback of a rejected draft or token tree; a rollback or prompt-prefix reuse further back than that
    // re-reads the prompt (Session::can_truncate).
    bool swa_full = false;
    // A drafter that reads this target session's states (an MTP block, a Gemma 4 assistant, an EAGLE-3 head).
    // An MTP draft session (Model::mtp()) of this target session of the same model: it runs the model's
    // multi-token-prediction block instead of its layers, with a KV cache of that one layer. Its token at position
    // q reads the target's final normed hidden state at q - 1 while q - 1 is among the target's tokens (the
    // target keeps those rows for it from then on: Session::hidden_row), else its own output state of its
    // previous pass's last row at q - 1 (a chain of drafts, one token per pass beyond the target), else zeros.
    // Positions are the target's: an MTP session is never shifted or windowed apart from its target.
    // A session of a Gemma 4 assistant (Model::assistant()) takes its target here too: it keeps no cache, its
    // queries read the target's; its row at q >= the target's length reads the target's state at length - 1 (the
    // first) or its own previous output state, all at the position of the target's length, as llama.cpp runs it.
    Session* drafter_of = nullptr;
    // Recurrent (Gated DeltaNet) models: the positions before the current one whose state is held (the rollback
    // window: kRecurrentKeep, kRecurrentKeepTarget), >= 1. Sessions of other models ignore it.
    int recurrent_keep = kRecurrentKeep;
    // Recurrent models: prompt ends whose state is held beyond the rollback window (recurrent_keep), as
    // llama.cpp's --ctx-checkpoints: a later prompt whose shared prefix ends further back goes
    // on from the latest checkpoint before that end (reuse_prefix) instead of from the start. Each costs one
    // state_bytes(). 0: none. Sessions of other models ignore it.
    int ctx_checkpoints = kCtxCheckpoints;
    // The model's placement on a GPU (tandem/gpu.h place_on_gpu, of this session's model): the session's passes,
    // cache and scratch run there. Null: the CPU.
    std::shared_ptr<const GpuModel> gpu;
};

// Slack of a window-only cache beyond the window: the largest pass (and rollback) it takes, at least n_batch.
constexpr int kSwaSlack = 512;
// Rows a sliding-window layer keeps in a session of this context: n_ctx with swa_full or when a ring would not be
// smaller, else n_swa + max(n_batch, kSwaSlack). 0 for a model without sliding-window layers.
int swa_cache_positions(const HParams& hp, int n_ctx, const SessionParams& p);
// Bytes of the KV cache (every layer's K and V rows) of a session of `model` with these params and context.
size_t kv_cache_bytes(const Model& m, const SessionParams& p, int n_ctx);

// The KV cache type named `name` as llama.cpp spells it ("f16", "q8_0", "iq4_nl", ...); throws tandem::Error
// naming the supported ones for any other.
TensorType parse_kv_cache_type(const std::string& name, const char* flag);
// The context a command gives a model when -c is not given (issue 31): the model's training context, unless the
// KV caches would not fit in `budget_bytes` (n_seq caches of the model with the types, batch and window choice
// of `p` (kv_cache_bytes) and, for a recurrent model, the states each holds (recurrent_keep + 1 + ctx_checkpoints),
// plus extra_per_position bytes per position, a draft's cache); then the most that fits,
// in multiples of 256 (at least 256). `note` says which and why, for the start-up log. budget_bytes 0: unknown,
// the training context. The CPU's copies of the weights not made yet (Model::unplaced_cpu_bytes) count as taken.
struct ContextChoice {
    int n_ctx = 0;
    bool bounded = false;
    std::string note;
};
ContextChoice choose_context(const Model& m, const SessionParams& p, size_t budget_bytes, int n_seq,
                             size_t extra_per_position);
// KV cache bytes per position of a model's cache with these types (every layer's K and V row, window-only
// caches not counted as such: an upper bound).
size_t kv_bytes_per_position(const Model& m, TensorType tk, TensorType tv);
// Memory the process may still take: three quarters of MemAvailable (/proc/meminfo); 0 where unknown.
size_t memory_budget_bytes();

// Whether `t` can be a KV cache element type, and the names of those that can (for help and messages).
bool kv_cache_type_supported(TensorType t);
const char* kv_cache_type_names();

class Session {
public:
    // `pool` must outlive the session.
    Session(std::shared_ptr<const Model> model, const SessionParams& params, ThreadPool& pool);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    const Model& model() const { return *model_; }
    int n_ctx() const { return n_ctx_; }
    // The model's GPU placement this session runs on (SessionParams::gpu); null on the CPU.
    std::shared_ptr<const GpuModel> gpu() const;
    int n_past() const { return int(tokens_.size()); }
    int n_vocab() const { return model_->hparams().n_vocab; }
    const std::vector<int32_t>& tokens() const { return tokens_; }  // tokens held in the cache, in order

    // Runs tokens[0..n) at positions n_past()..n_past()+n-1 and appends them to the cache.
    // all_logits: keep logits for every position (verification); otherwise only for the last one.
    // Throws tandem::Error if a token id is out of range or the context would overflow (cache unchanged).
    void decode(const int32_t* tokens, int n, bool all_logits);
    void decode(const std::vector<int32_t>& tokens, bool all_logits) {
        decode(tokens.data(), int(tokens.size()), all_logits);
    }

    // Token tree (speculative verification of several candidates in one pass): runs the n nodes of a tree whose
    // root, node 0, follows the cached tokens; parents[0] = -1 and parents[i] in [0, i). Node i is written at cache
    // row base + i (base = n_past() before the call) with position base + depth(i), and attends to the cached
    // tokens and to its own ancestors only, so its logits are bit-identical to those of decoding its root path as
    // a chain. Logits are kept for every node (row i = node i). Until keep_path() the cache holds the nodes in
    // row order. Throws tandem::Error for a malformed tree (nothing run) or as decode() does.
    void decode_tree(const int32_t* tokens, const int32_t* parents, int n);
    // After decode_tree at `base`: keeps the root path nodes path[0..m) (path[0] = 0, each node the parent of the
    // next) at rows base..base+m-1 and forgets every other row >= base. Each kept node's position is its depth,
    // so its keys move as they are (no re-rotation).
    void keep_path(int base, const std::vector<int32_t>& path);

    // Several sessions of the same model (and layer count, and thread pool) in one forward pass: the weights
    // are read once for all their tokens (continuous batching of server slots). Each request feeds `tokens` to
    // its session exactly as decode() would. Throws tandem::Error (before running anything) if any request
    // would overflow its context or holds an invalid id.
    struct DecodeRequest {
        Session* session;
        const int32_t* tokens;
        int n;
        bool all_logits;
        const int32_t* parents = nullptr;  // a token tree (as decode_tree; all_logits must be set), null: a chain
    };
    static void decode_batch(const std::vector<DecodeRequest>& reqs);

    // Embeddings: runs tokens[0..n) like decode() (appending them to the cache) and returns, instead of logits,
    // the final hidden state of every position after the output norm, the vector the logits are computed from.
    // Result: (n, n_embd), row-major.
    std::vector<float> embed(const int32_t* tokens, int n);

    // Logits of the last decode: row i (0..n_logits()-1) is the i-th kept position. Valid until the next decode.
    int n_logits() const { return n_logits_; }
    const float* logits(int i) const;
    const float* last_logits() const { return logits(n_logits_ - 1); }

    // Forget every position >= n (n <= n_past()). Rejected draft tokens are rolled back with this. Throws
    // tandem::Error, changing nothing, when !can_truncate(n).
    void truncate(int n);
    // Whether the cache can go on from n tokens: always with full caches; with window-only ones (SessionParams::
    // swa_full false), when the rows the next token's sliding window sees are still in their rings (a rollback of
    // up to swa_cache_positions() - n_swa + 1 tokens past the furthest position written), or n is 0 or n_past().
    bool can_truncate(int n) const;
    // A prompt's cached prefix: truncate(keep) when can_truncate(keep); else, for a recurrent model, to its latest
    // held state before keep (a checkpoint), else truncate(0). Returns what was kept.
    int reuse_prefix(int keep);
    // Recurrent models: the positions of the checkpoints held now (ascending; empty for other models).
    std::vector<int> checkpoint_positions() const;
    // Rows each sliding-window layer keeps (n_ctx() when every position); 0 without such layers.
    int swa_positions() const { return swa_cap_; }
    // Context shift: forget positions [n_keep, n_keep + n_discard) and move the later ones down by n_discard,
    // their keys re-rotated by -n_discard positions (RoPE rotations compose; as llama.cpp's context shift). The
    // result attends like a cache that saw only the kept tokens, up to the cache type's rounding (a quantized
    // cache's keys are dequantized, rotated and quantized again).
    void shift(int n_keep, int n_discard);

    // The final normed hidden state at position p (what the logits are computed from), kept from now on for
    // every row decoded, until truncate / keep_path / shift / release_hidden take it: null when not kept.
    // An MTP draft session turns this on for its target. With `layers` (an EAGLE-3 head's target): instead the
    // inputs of those layers (each n_embd, in that order: hidden_width() floats per row).
    void keep_hidden(bool on, std::vector<int> layers = {});
    const float* hidden_row(int p) const;
    int hidden_width() const;
    void release_hidden(int below);  // rows below position `below` are no longer needed
    bool is_drafter() const { return drafter_of_ != nullptr; }
    // A drafter session (MTP block, Gemma 4 assistant, EAGLE-3 head: SessionParams::drafter_of): its target; null for
    // any other session (a draft model's session is an ordinary one)
    Session* drafter_target() const { return drafter_of_; }
    // An MTP, assistant or EAGLE-3 draft session: its first rows made as well as the target's states allow (a row
    // at q whose q - 1 the target has not decoded read the drafter's own state: a drafted row); a proposer keeps
    // those across rounds and requests and makes the drafted ones again once the target has verified them.
    int target_rows() const { return target_rows_; }

    size_t kv_bytes() const;
    // Bytes of one recurrent state (every Gated DeltaNet layer's convolution window and state matrices; 0 without
    // such layers); up to recurrent_keep + 1 + ctx_checkpoints of them are held, more during a verification pass.
    size_t state_bytes() const;
    // Recurrent-state bytes a pass over n rows moves: each row reads the state it starts from and writes its own
    // (2 n state_bytes(); 0 without recurrent layers). Beside Model::bytes_per_pass, the cost shape of a pass.
    double state_bytes_per_pass(int n) const { return 2.0 * double(n) * double(state_bytes()); }
    // Bytes of K and V rows a token at position `pos` reads: every layer's rows up to it, a sliding-window layer's
    // the last n_swa of them.
    size_t kv_bytes_seen(int pos) const;
    TensorType kv_type_k() const;
    TensorType kv_type_v() const;
    int n_layers() const { return n_layers_; }  // layers this session runs (a self-draft: the first K)
    // Seconds this session's passes spent in attention so far (a pass over several sessions counts it for the
    // first); benchmarks take the difference around what they time.
    double attention_seconds() const;

    // State files (llama-server's slot save/restore): the cached tokens and their K/V rows, with a fingerprint of
    // the model and the layer count. save_state returns the bytes written. load_state replaces this session's
    // cache and returns the bytes read; it throws tandem::Error, leaving the cache empty, for a file of another
    // model or layout, a truncated or corrupt file, or more tokens than n_ctx.
    size_t save_state(const std::string& path) const;
    size_t load_state(const std::string& path);

private:
    struct Segment {
        Session* s;
        const int32_t* tokens;
        int n;
        int pos0;
        bool all_logits;
        float* logits_out;  // null: no logits
        float* hidden_out = nullptr;  // (n, n_embd): final normed hidden states of every row; null: none
        const int32_t* parents = nullptr;  // token tree (decode_tree); null: a chain
    };
    static void forward_segments(const std::vector<Segment>& segs);
    static void assistant_forward(const std::vector<Segment>& segs);  // model/assistant.cpp
    static void eagle3_forward(const std::vector<Segment>& segs);  // model/eagle3.cpp
    // Throws for an id out of range, a context overflow, or a forward pass of `pass` rows (at most n) larger than
    // the window-only caches take.
    void check_decode(const int32_t* tokens, int n, int pass) const;
    static void check_tree(const int32_t* parents, int n);

    std::shared_ptr<const Model> model_;
    ThreadPool& pool_;
    int n_ctx_ = 0;
    int n_layers_ = 0;
    int n_batch_ = 256;
    // Sliding-window layers (window-only caches): their row count (0: none), the lowest position they still hold
    // (every position in [swa_from_, n_past()) is in its ring), and the positions a context shift or a state file
    // lost (below swa_lost_: windows reaching there see less, as in llama.cpp; never above swa_from_).
    int swa_cap_ = 0;
    int swa_from_ = 0;
    int swa_lost_ = 0;
    std::vector<int32_t> tokens_;
    // keep_hidden: rows hidden_[(p - hidden_from_) * n_embd] for positions hidden_from_ <= p < n_past()
    bool keep_hidden_ = false;
    std::vector<int> hidden_layers_;  // keep_hidden's layers (empty: the final normed state)
    int hidden_from_ = 0;
    std::vector<float> hidden_;
    // MTP draft session: its target, the layer it runs (n_layer) and its previous pass's last output state
    Session* drafter_of_ = nullptr;
    int layer0_ = 0;
    int own_pos_ = -1;
    int target_rows_ = 0;  // target_rows()
    // After a pass over rows pos0..pos0+n-1 whose first drafted row is first_own (-1: none): target_rows_.
    void note_target_rows(int pos0, int n, int first_own);
    std::vector<float> own_hidden_;
    // A session of a split model (Model::cluster(); not an MTP draft's, which stays on rank 0): its cluster, and on
    // rank 0 its twins' id (-1 on the other ranks, where this is a twin).
    Cluster* split_ = nullptr;
    int split_id_ = -1;
    void check_truncate(int n) const;  // throws what truncate(n) would
    void truncate_here(int n);  // truncate(n) in this process only
    struct Impl;
    std::unique_ptr<Impl> impl_;
    std::vector<float> logits_;  // (n_logits, n_vocab)
    int n_logits_ = 0;
};

}  // namespace tandem
