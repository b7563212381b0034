// The server's inference engine: N slots (each with its own target and draft KV caches), a bounded queue of
// jobs, and one inference thread that owns every model and session. HTTP threads never touch the model: they
// submit a Job and read its results (tokens, then completion) from the Job under its mutex.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tandem/latency.h"
#include "serve/text_pipeline.h"
#include "tandem/embedding.h"
#include "tandem/model.h"
#include "tandem/sampling.h"
#include "tandem/server.h"
#include "tandem/session.h"
#include "tandem/speculative.h"
#include "tandem/thread_pool.h"
#include "tandem/tokenizer.h"

namespace tandem::server {

struct JobRequest {
    std::vector<int32_t> prompt;
    SamplerParams sampling;
    SpecParams spec;
    int max_tokens = 128;
    bool ignore_eos = false;
    bool return_progress = false;  // llama-server's: prompt-processing progress events (Job::prompt_progress)
    int n_top_logprobs = -1;  // -1: no logprobs
    std::vector<std::string> stop;  // the generation ends at the first of these (it is not part of the text)
    std::vector<int32_t> shown_special;  // control tokens whose text is part of the answer (tool-call markers)
    // Embedding instead of generation: the prompt's final hidden states, pooled and normalized (embd_normalize
    // as llama.cpp: -1 none, 0 int16 range, 1 taxicab, 2 Euclidean, p > 2 p-norm; rows of NONE are never
    // normalized, as in llama-server).
    bool embed = false;
    Pooling pooling = Pooling::LAST;
    int embd_normalize = 2;
    std::shared_ptr<const OutputConstraint> constraint;  // structured output (a grammar), or null
    int id_slot = -1;  // run in this slot (llama-server's id_slot; its cache is what the request wants); -1: any
    // llama-server's slot actions instead of generation (id_slot required): save the slot's cache to state_path,
    // restore it from there (Session::save_state/load_state), or erase it.
    enum class SlotAction { NONE, SAVE, RESTORE, ERASE } action = SlotAction::NONE;
    std::string state_path;
};

// What a job produced since the last wait: its text (stop strings never included, UTF-8 complete) and the tokens
// and log-probabilities behind it (the tokens of a text piece may come before the piece itself, while their text
// is held back).
// llama-server's prompt_progress: the prompt's tokens, those the cache held, those in the cache now (held and
// processed), and the time since the job was admitted.
struct PromptProgress {
    int total = 0, cache = 0, processed = 0;
    int64_t time_ms = 0;
};

struct JobOutput {
    std::vector<PromptProgress> progress;  // prompt processing so far (return_progress), before any token
    std::string text;
    std::vector<int32_t> toks;
    std::vector<TokenLogprob> lps;
    std::vector<size_t> text_end;  // per token: the length of `text` once that token's text was released
    std::vector<TokenSource> src;  // per token: where it came from (Generator::round_sources)
};

// Where a running job is, for timings_per_token.
struct JobProgress {
    int n_prompt = 0, n_generated = 0, n_drafted = 0, n_accepted = 0;  // n_drafted, n_accepted: SpecStats'
    double prompt_ms = 0, gen_ms = 0;
    int n_cached = 0;  // of n_prompt, the tokens the slot's cache already held
};

// Results of one generation, filled by the inference thread, read by an HTTP thread.
class Job {
public:
    explicit Job(JobRequest r) : req(std::move(r)) {}
    const JobRequest req;

    // HTTP side: wait until new tokens arrive or the job ends; moves the new tokens into `out`.
    // Returns false once the job is finished and everything was taken. timeout_ms bounds one wait.
    bool wait(JobOutput& out, int timeout_ms);
    void cancel() { cancelled.store(true); }
    bool is_cancelled() const { return cancelled.load(); }

    // Inference side.
    // text_end: per token, the length of `text` after it (empty for text that no token released: the tail).
    // src: per token, its origin (may be empty: tokens of unknown origin).
    void push(const std::string& text, const std::vector<int32_t>& toks, const std::vector<TokenLogprob>& lp,
              const std::vector<size_t>& text_end, const std::vector<TokenSource>& src = {});
    // reason: "stop" (an end-of-generation token or a stop string: then stop_word says which), "length" (max_tokens, the context, or cut by shutdown), "cancelled",
    // "error" (then `error` says why and `error_status` is the HTTP status to answer with).
    void finish(const std::string& reason, const std::string& error = "", int error_status = 500);

    JobProgress progress() const;
    void set_progress(const JobProgress& p);
    // Inference side: the prompt processing got this far (delivered through wait() as JobOutput::progress).
    void prompt_progress(const PromptProgress& p);

    std::atomic<int> slot{-1};  // the slot generating it, once admitted

    // Valid after the job finished.
    std::string finish_reason, error, stop_word;
    int error_status = 500;
    int n_prompt = 0, n_generated = 0, n_cached = 0;
    SpecStats spec;  // the generator's statistics (drafted, accepted, tree alternatives, per proposer)
    LatencySummary itl;  // gaps between this request's token deliveries (tandem/latency.h)
    double prompt_ms = 0, gen_ms = 0;
    int n_slot_tokens = 0;  // slot actions: tokens saved, restored or erased
    size_t n_slot_bytes = 0;  // slot actions: bytes written or read
    std::vector<std::vector<float>> embedding;  // embed jobs: one vector, or one per token for Pooling::NONE
    bool truncated = false;  // the context filled up: the generation stopped there, or tokens were shifted out

private:
    mutable std::mutex mu_;
    std::condition_variable cv_;
    JobProgress progress_;
    JobOutput pending_;
    bool done_ = false;
    std::atomic<bool> cancelled{false};
};

struct SlotInfo {
    int id = 0, n_ctx = 0, n_past = 0;
    bool is_processing = false;
    int n_prompt = 0, n_generated = 0;
};

struct EngineMetrics {
    uint64_t requests = 0, tokens_prompt = 0, tokens_generated = 0, tokens_cached = 0;
    uint64_t n_decode = 0;  // batched target forward passes
    double seconds_prompt = 0, seconds_generated = 0;
    SpecStats spec;  // every finished request's statistics added up (SpecStats::add)
    LatencySummary itl;  // the last 4096 gaps between token deliveries, all requests
    std::vector<SlotInfo> slots;
    int queue_depth = 0, busy_slots = 0, n_slots = 0;
    double kv_used_fraction = 0;
};

class Engine {
public:
    Engine(std::shared_ptr<const Model> target, std::shared_ptr<const Model> draft, const EngineParams& p);
    ~Engine();

    // Queues a job; returns null when the queue is full or the engine is shutting down (the caller answers 503).
    std::shared_ptr<Job> submit(JobRequest req);
    // Graceful stop: no new jobs; queued jobs finish now with error_status 503; running ones keep generating
    // for at most grace_ms, then end with finish_reason "length" (what they generated so far is delivered).
    void shutdown(int grace_ms);
    bool shutting_down() const;
    EngineMetrics metrics() const;
    int n_ctx() const { return n_ctx_; }
    bool has_draft() const { return draft_ != nullptr; }
    // the model has a multi-token-prediction block (and no EAGLE-3 head drafts: the slots' sessions that read the
    // target's states are one per slot)
    bool has_mtp() const { return target_->mtp() != nullptr && !has_eagle3(); }
    bool has_eagle3() const { return draft_ && draft_->eagle3(); }  // -md is an EAGLE-3 head

    // What the KV caches take, for the start-up log: slots, positions, types, MiB (target and draft).
    const std::string& kv_summary() const { return kv_summary_; }
    const std::string& context_note() const { return context_note_; }  // empty when -c was given
    const std::string& gpu_note() const { return gpu_note_; }  // where the models run (empty without -ngl)

private:
    struct Slot {
        std::unique_ptr<Session> target;
        std::unique_ptr<DrafterSet> drafters;  // made on first use; declared after the target, destroyed first
        std::unique_ptr<Generator> gen;
        std::unique_ptr<TextPipeline> text;
        std::shared_ptr<Job> job;
        int generated = 0;
        double t_start = 0, t_prompt_done = 0;
        DeliveryClock clock;  // inter-token latency of this request (tandem/latency.h)
    };
    void loop();
    void admit(Slot& s, std::shared_ptr<Job> job);
    SessionParams target_params(int n_ctx) const {  // a slot's target session
        SessionParams sp = session_params(n_ctx, p_.type_k, p_.type_v);
        sp.recurrent_keep = kRecurrentKeepTarget;
        return sp;
    }
    SessionParams session_params(int n_ctx, TensorType type_k, TensorType type_v) const {  // the slot's sessions'
        SessionParams sp{n_ctx, 0, p_.n_batch, type_k, type_v, p_.swa_full};
        sp.ctx_checkpoints = p_.ctx_checkpoints;
        sp.gpu = gpu_;
        return sp;
    }
    void report_prompt(Slot& s);  // the job's prompt_progress, when it asked (return_progress)
    void embed(Slot& s, std::shared_ptr<Job> job);  // runs an embedding job to the end at once
    void slot_action(Slot& s, std::shared_ptr<Job> job);  // save, restore or erase the slot's cache
    void step_all();  // one round of every busy slot, their target passes merged into one forward pass
    void deliver(Slot& s, std::vector<int32_t>& toks, std::vector<TokenLogprob>& lp);
    void release(Slot& s, const std::string& reason, const std::string& error = "", int status = 500);
    int error_status_of(const std::exception& e);  // an error's HTTP status (503: a failed split or GPU)
    bool gpu_lost_ = false;

    std::shared_ptr<const Model> target_, draft_;
    std::shared_ptr<const GpuModel> gpu_, draft_gpu_;  // the target's and the draft model's placements (null: CPU)
    std::string gpu_note_;
    EngineParams p_;
    int n_ctx_ = 0;
    std::string kv_summary_, context_note_;
    std::unique_ptr<Tokenizer> tok_;
    ThreadPool pool_;
    std::vector<Slot> slots_;
    mutable std::mutex mu_;
    LatencyWindow itl_window_{4096};  // guarded by mu_
    std::condition_variable cv_;
    std::deque<std::shared_ptr<Job>> queue_;
    bool stop_ = false;
    bool shutting_down_ = false;
    std::chrono::steady_clock::time_point deadline_{};
    EngineMetrics m_;
    std::thread thread_;
};

}  // namespace tandem::server
