#include "serve/engine.h"

#include "tandem/suffix_cache.h"

#include <chrono>

#include "grammar/grammar.h"
#include "tandem/error.h"
#include "tandem/split.h"
#include "tandem/gguf.h"

namespace tandem::server {

namespace {
double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

bool Job::wait(JobOutput& out, int timeout_ms) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] {
        return done_ || !pending_.toks.empty() || !pending_.text.empty() || !pending_.progress.empty();
    });
    out.progress.insert(out.progress.end(), pending_.progress.begin(), pending_.progress.end());
    for (size_t e : pending_.text_end) out.text_end.push_back(out.text.size() + e);
    out.text += pending_.text;
    out.toks.insert(out.toks.end(), pending_.toks.begin(), pending_.toks.end());
    out.lps.insert(out.lps.end(), pending_.lps.begin(), pending_.lps.end());
    out.src.insert(out.src.end(), pending_.src.begin(), pending_.src.end());
    pending_ = {};
    return !done_;
}

JobProgress Job::progress() const {
    std::lock_guard<std::mutex> lk(mu_);
    return progress_;
}

void Job::set_progress(const JobProgress& p) {
    std::lock_guard<std::mutex> lk(mu_);
    progress_ = p;
}

void Job::prompt_progress(const PromptProgress& p) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        pending_.progress.push_back(p);
    }
    cv_.notify_all();
}

void Job::push(const std::string& text, const std::vector<int32_t>& toks, const std::vector<TokenLogprob>& lp,
               const std::vector<size_t>& text_end, const std::vector<TokenSource>& src) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        for (size_t e : text_end) pending_.text_end.push_back(pending_.text.size() + e);
        pending_.text += text;
        pending_.toks.insert(pending_.toks.end(), toks.begin(), toks.end());
        pending_.lps.insert(pending_.lps.end(), lp.begin(), lp.end());
        pending_.src.insert(pending_.src.end(), src.begin(), src.end());
        pending_.src.resize(pending_.toks.size());  // tokens of unknown origin count as the target's
    }
    cv_.notify_all();
}

void Job::finish(const std::string& reason, const std::string& err, int status) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        finish_reason = reason;
        error = err;
        error_status = status;
        done_ = true;
    }
    cv_.notify_all();
}

Engine::Engine(std::shared_ptr<const Model> target, std::shared_ptr<const Model> draft, const EngineParams& p)
    : target_(std::move(target)), draft_(std::move(draft)), p_(p), pool_(p.n_threads) {
    tok_ = Tokenizer::from_gguf(target_->gguf());
    slots_.resize(size_t(std::max(1, p_.n_slots)));
    int total = p_.n_ctx;
    if (total <= 0) {  // the model's training context, bounded by memory (every slot's target and draft caches)
        const int n_seq = p_.kv_unified ? int(slots_.size()) : 1;
        const size_t draft_pp =
            draft_ ? draft_bytes_per_position(*draft_, p_.type_k_draft, p_.type_v_draft) * size_t(n_seq) : 0;
        const ContextChoice c = choose_context(*target_, target_params(0), p_.memory_budget, n_seq, draft_pp);
        total = c.n_ctx;
        context_note_ =
            c.note + (p_.kv_unified || slots_.size() == 1 ? "" : strprintf(", shared by %zu slots", slots_.size()));
    }
    const int per_slot = std::max(8, p_.kv_unified ? total : total / int(slots_.size()));
    {  // the GPU (-ngl), with every slot's caches (and the draft model, -ngld, with its own)
        const size_t target_cache = kv_cache_bytes(*target_, target_params(per_slot), per_slot) * slots_.size();
        const GpuChoice t = choose_gpu(target_, p_.gpu, false, target_cache);
        gpu_ = t.gpu;
        gpu_note_ = t.log;
        if (draft_ && draft_ != target_) {
            const int dctx = p_.n_ctx_draft > 0 ? p_.n_ctx_draft : per_slot;
            const GpuChoice d = choose_gpu(
                draft_, p_.gpu, true,
                kv_cache_bytes(*draft_, session_params(dctx, p_.type_k_draft, p_.type_v_draft), dctx) * slots_.size(),
                gpu_, target_cache);
            draft_gpu_ = d.gpu;
            if (!d.log.empty()) gpu_note_ += (gpu_note_.empty() ? "" : "\n") + d.log;
        }
    }
    for (auto& s : slots_) {
        s.target = std::make_unique<Session>(target_, target_params(per_slot), pool_);
        SessionParams dp = session_params(p_.n_ctx_draft, p_.type_k_draft, p_.type_v_draft);
        dp.gpu = draft_gpu_;  // the draft model's; the target's own layers take the target's (make_draft)
        s.drafters = std::make_unique<DrafterSet>(DrafterSet::Config{target_, draft_, dp, p_.self_draft_layers}, pool_,
                                                  *s.target);
        // the draft caches are allocated up front, like the target's (an EAGLE-3 head's reads this target)
        if (draft_ && draft_->eagle3()) s.drafters->get(SpecType::EAGLE3);
        else if (draft_ && !draft_->assistant()) s.drafters->get(SpecType::DRAFT);
    }
    n_ctx_ = slots_[0].target->n_ctx();
    {
        const Session& t = *slots_[0].target;
        size_t bytes = 0;
        for (const auto& s : slots_) bytes += s.target->kv_bytes() + s.drafters->kv_bytes();
        kv_summary_ = strprintf("KV cache: %zu slot(s) x %d positions, K %s + V %s", slots_.size(), t.n_ctx(),
                                type_name(t.kv_type_k()), type_name(t.kv_type_v()));
        if (const Session* d = slots_[0].drafters->model_draft())
            kv_summary_ += strprintf("; draft %d positions, K %s + V %s", d->n_ctx(), type_name(d->kv_type_k()),
                                     type_name(d->kv_type_v()));
        kv_summary_ += strprintf(" = %.1f MiB", double(bytes) / (1024.0 * 1024.0));
    }
    m_.n_slots = int(slots_.size());
    for (auto& s : slots_) m_.slots.push_back({int(&s - slots_.data()), s.target->n_ctx(), 0, false, 0, 0});
    m_.spec.accepted_at.assign(size_t(std::max(1, p_.spec.n_max)), 0);
    thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    for (auto& j : queue_) j->finish("error", "the server is shutting down", 503);
}

void Engine::shutdown(int grace_ms) {
    std::deque<std::shared_ptr<Job>> dropped;
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (shutting_down_) return;
        shutting_down_ = true;
        deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(0, grace_ms));
        dropped.swap(queue_);
        m_.queue_depth = 0;
    }
    for (auto& j : dropped) j->finish("error", "the server is shutting down", 503);
    cv_.notify_all();
}

bool Engine::shutting_down() const {
    std::lock_guard<std::mutex> lk(mu_);
    return shutting_down_;
}

std::shared_ptr<Job> Engine::submit(JobRequest req) {
    auto job = std::make_shared<Job>(std::move(req));
    if (job->req.id_slot >= int(slots_.size())) {
        job->finish("error",
                    strprintf("id_slot %d: the server has %zu slots (0 to %zu)", job->req.id_slot, slots_.size(),
                              slots_.size() - 1),
                    400);
        return job;
    }
    {
        std::lock_guard<std::mutex> lk(mu_);
        if (shutting_down_ || int(queue_.size()) >= p_.queue_max) return nullptr;
        queue_.push_back(job);
        m_.requests++;
        m_.queue_depth = int(queue_.size());
    }
    cv_.notify_all();
    return job;
}

EngineMetrics Engine::metrics() const {
    std::lock_guard<std::mutex> lk(mu_);
    EngineMetrics m = m_;
    m.itl = itl_window_.summary();
    return m;
}

void Engine::embed(Slot& s, std::shared_ptr<Job> job) {
    const JobRequest& r = job->req;
    const double t0 = now_ms();
    job->slot.store(int(&s - slots_.data()));
    job->n_prompt = int(r.prompt.size());
    if (r.prompt.empty()) return job->finish("error", "the input is empty", 400);
    if (int(r.prompt.size()) > s.target->n_ctx())
        return job->finish(
            "error",
            strprintf("the input (%zu tokens) is too large to process: the context of a slot holds %d (raise -c)",
                      r.prompt.size(), s.target->n_ctx()),
            400);
    s.target->truncate(0);  // the slot's cache now holds this input (a later prompt may reuse its prefix)
    const int E = target_->hparams().n_embd;
    std::vector<float> h = s.target->embed(r.prompt.data(), int(r.prompt.size()));
    std::vector<float> v = pool_embeddings(h.data(), int(r.prompt.size()), E, r.pooling);
    for (size_t o = 0; o < v.size(); o += size_t(E)) {
        job->embedding.emplace_back(v.begin() + long(o), v.begin() + long(o + size_t(E)));
        if (r.pooling != Pooling::NONE) normalize_embedding(job->embedding.back().data(), E, r.embd_normalize);
    }
    job->prompt_ms = now_ms() - t0;
    {
        std::lock_guard<std::mutex> lk(mu_);
        m_.tokens_prompt += uint64_t(r.prompt.size());
        m_.seconds_prompt += job->prompt_ms / 1e3;
    }
    job->finish("stop");
}

void Engine::slot_action(Slot& s, std::shared_ptr<Job> job) {
    const JobRequest& r = job->req;
    const double t0 = now_ms();
    job->slot.store(int(&s - slots_.data()));
    try {
        switch (r.action) {
            case JobRequest::SlotAction::SAVE:
                job->n_slot_tokens = s.target->n_past();
                job->n_slot_bytes = s.target->save_state(r.state_path);
                break;
            case JobRequest::SlotAction::RESTORE:
                job->n_slot_bytes = s.target->load_state(r.state_path);  // the drafts catch up on the next prompt
                job->n_slot_tokens = s.target->n_past();
                break;
            case JobRequest::SlotAction::ERASE:
                job->n_slot_tokens = s.target->n_past();
                s.target->truncate(0);
                s.drafters->truncate(0);
                break;
            case JobRequest::SlotAction::NONE: break;
        }
    } catch (const Error& e) {  // a missing, foreign or corrupt file, a full disk: the request's problem
        job->prompt_ms = now_ms() - t0;
        return job->finish("error", e.what(), 400);
    }
    job->prompt_ms = now_ms() - t0;
    job->finish("stop");
}

void Engine::admit(Slot& s, std::shared_ptr<Job> job) {
    if (job->req.embed) return embed(s, std::move(job));
    if (job->req.action != JobRequest::SlotAction::NONE) return slot_action(s, std::move(job));
    s.job = std::move(job);
    s.generated = 0;
    s.t_start = now_ms();
    s.clock = DeliveryClock{};
    const JobRequest& r = s.job->req;
    SpecParams spec = r.spec;
    Session* draft = nullptr;
    if (uses_draft_session(spec.type)) {
        const DrafterSet::Drafter d = s.drafters->get(spec.type);
        draft = d.session;
        spec.draft_cost_prior = d.cost_prior;
    }
    s.job->slot.store(int(&s - slots_.data()));
    SamplerParams sampling = r.sampling;
    if (r.ignore_eos) sampling.banned_ends = tok_->eog_ids();
    s.gen = std::make_unique<Generator>(*s.target, draft, sampling, spec);
    s.gen->set_constraint(r.constraint);
    s.text = std::make_unique<TextPipeline>(*tok_, r.stop, r.shown_special);
    // keeps the cached common prefix of the previous request in this slot; the rest of the prompt is processed
    // here at once (prefill_chunk 0) or a piece per round alongside the other slots (step_all)
    if (p_.prefill_chunk > 0) s.gen->start_deferred(r.prompt);
    else s.gen->start(r.prompt);
    s.t_prompt_done = now_ms();
    report_prompt(s);
}

void Engine::report_prompt(Slot& s) {
    if (!s.job || !s.job->req.return_progress) return;
    // processed: the tokens in the cache; once no piece is left, the whole prompt (its last token rides in the
    // first step's pass, with the first drafts)
    const int total = int(s.job->req.prompt.size());
    s.job->prompt_progress({total, s.gen->n_cached(), s.gen->prefill_pending() ? s.target->n_past() : total,
                            int64_t(now_ms() - s.t_start)});
}

// The HTTP status of a job that failed while generating: the request's grammar outgrowing the matcher's bounds
// is the request's problem (400); anything else is the server's (500).
int Engine::error_status_of(const std::exception& e) {
    if (dynamic_cast<const RankFailure*>(&e)) return 503;  // a split target's ranks failed: the server is stopping
    if (const auto* g = dynamic_cast<const GpuFailure*>(&e)) {  // the GPU ran out of memory, or was lost: stopping
        if (g->lost && !gpu_lost_) {
            gpu_lost_ = true;
            std::fprintf(stderr, "%s: stopping\n", g->what());
            if (p_.on_gpu_lost) p_.on_gpu_lost(g->what());
        }
        return 503;
    }
    return dynamic_cast<const grammar::GrammarLimit*>(&e) ? 400 : 500;
}

void Engine::release(Slot& s, const std::string& reason, const std::string& error, int status) {
    Job& j = *s.job;
    const SpecStats& st = s.gen ? s.gen->stats() : SpecStats{};
    j.n_prompt = int(j.req.prompt.size());
    j.n_generated = s.generated;
    j.spec = st;
    j.itl = summarize_latency(s.clock.gaps());
    j.n_cached = s.gen ? s.gen->n_cached() : 0;
    if (s.gen && s.gen->stats().n_context_shifts > 0) j.truncated = true;
    if (j.n_prompt + s.generated >= s.target->n_ctx()) j.truncated = true;  // stopped by the full context
    j.prompt_ms = s.t_prompt_done - s.t_start;
    j.gen_ms = now_ms() - s.t_prompt_done;
    {
        std::lock_guard<std::mutex> lk(mu_);
        m_.tokens_prompt += uint64_t(j.n_prompt);
        m_.tokens_cached += uint64_t(j.n_cached);
        m_.tokens_generated += uint64_t(s.generated);
        m_.seconds_prompt += j.prompt_ms / 1e3;
        m_.seconds_generated += j.gen_ms / 1e3;
        m_.spec.add(st);
    }
    // The server-wide suffix cache learns every finished sequence (prompt and output), whatever the request's
    // proposer: later requests with --spec-type suffix draft from it.
    if (s.gen && j.req.spec.suffix && reason != "error") j.req.spec.suffix->add(s.gen->history());
    if (s.gen) s.gen->save_costs();  // the next requests start from this one's measured costs
    if (s.text) {  // the text held back (a possible stop string, an incomplete UTF-8 sequence) ends the output
        std::string rest = s.text->finish();
        if (!rest.empty()) j.push(rest, {}, {}, {});
    }
    s.job->finish(reason, error, status);
    s.job.reset();
    s.gen.reset();
    s.text.reset();
}

void Engine::deliver(Slot& s, std::vector<int32_t>& toks, std::vector<TokenLogprob>& lp) {
    Job& j = *s.job;
    // The generation ends at an end-of-generation token (not delivered) or at the token that completes a stop
    // string (delivered: it was generated; its text is not). Verified tokens after that are dropped uncounted.
    std::string reason, text;
    std::vector<size_t> ends;
    size_t keep = toks.size();
    for (size_t i = 0; i < toks.size(); i++) {
        if (tok_->is_eog(toks[i])) {  // under ignore_eos only a finished grammar lets one through (banned_ends)
            keep = i;
            reason = "stop";
            break;
        }
        text += s.text->push(toks[i]);
        ends.push_back(text.size());
        if (s.text->stopped()) {
            keep = i + 1;
            reason = "stop";
            j.stop_word = s.text->stop_word();
            break;
        }
    }
    toks.resize(keep);
    if (lp.size() > keep) lp.resize(keep);
    s.generated += int(keep);
    if (keep > 0) {
        const double gap = s.clock.deliver(now_ms());
        if (gap >= 0) {
            std::lock_guard<std::mutex> lk(mu_);
            itl_window_.add(gap);
        }
    }
    const SpecStats& st = s.gen->stats();
    j.set_progress({int(j.req.prompt.size()), s.generated, int(st.n_drafted), int(st.n_accept),
                    s.t_prompt_done - s.t_start, now_ms() - s.t_prompt_done, s.gen->n_cached()});
    std::vector<TokenSource> src = s.gen->round_sources();
    src.resize(keep);
    j.push(text, toks, lp, ends, src);
    if (!reason.empty()) release(s, reason);
    else if (s.generated >= j.req.max_tokens) release(s, "length");
}

void Engine::step_all() {
    // Phase 1: every busy slot proposes (drafting runs per slot) and says what its target must run.
    std::vector<Slot*> active;
    std::vector<std::vector<int32_t>> batches;
    struct Prefill {
        Slot* s;
        const int32_t* tokens;
        int n;
    };
    std::vector<Prefill> prefilling;
    for (auto& s : slots_) {
        if (!s.job) continue;
        Job& j = *s.job;
        if (j.is_cancelled()) {
            release(s, "cancelled");
            continue;
        }
        if (s.gen->prefill_pending()) {  // chunked prefill: a piece of the prompt rides along with the others' tokens
            int n = 0;
            const int32_t* chunk = s.gen->prefill_chunk(std::min(p_.prefill_chunk, p_.n_batch), &n);
            prefilling.push_back({&s, chunk, n});
            continue;
        }
        const int remaining = j.req.max_tokens - s.generated;
        if (remaining <= 0) {
            release(s, "length");
            continue;
        }
        std::vector<int32_t> batch;
        try {
            if (!s.gen->begin_step(remaining, batch)) {  // context full
                j.truncated = true;
                release(s, "length");
                continue;
            }
        } catch (const std::exception& e) {
            release(s, "error", e.what(), error_status_of(e));
            continue;
        }
        active.push_back(&s);
        batches.push_back(std::move(batch));
    }
    if (active.empty() && prefilling.empty()) return;
    // Phase 2: one forward pass of the target over all slots' tokens (weights read once for all of them),
    // prompt pieces of slots still in prefill included (no logits kept for those).
    std::vector<Session::DecodeRequest> reqs;
    for (size_t i = 0; i < active.size(); i++)
        reqs.push_back({active[i]->target.get(), batches[i].data(), int(batches[i].size()), true,
                        active[i]->gen->batch_parents()});
    for (const Prefill& pf : prefilling) reqs.push_back({pf.s->target.get(), pf.tokens, pf.n, false});
    const double t0 = now_ms();
    try {
        Session::decode_batch(reqs);
    } catch (const std::exception& e) {
        for (Slot* s : active) release(*s, "error", e.what(), error_status_of(e));
        for (const Prefill& pf : prefilling) release(*pf.s, "error", e.what(), error_status_of(e));
        return;
    }
    const double t_target = now_ms() - t0;
    for (const Prefill& pf : prefilling) {
        pf.s->gen->prefill_advance(pf.n);
        if (!pf.s->gen->prefill_pending()) pf.s->t_prompt_done = now_ms();
        report_prompt(*pf.s);
    }
    {
        std::lock_guard<std::mutex> lk(mu_);
        m_.n_decode++;
    }
    // Phase 3: each slot verifies its drafts against its own logits and delivers its tokens.
    for (Slot* s : active) {
        std::vector<int32_t> toks;
        std::vector<TokenLogprob> lp;
        const int n_top = s->job->req.n_top_logprobs;
        try {
            s->gen->end_step(toks, t_target, n_top >= 0 ? &lp : nullptr, std::max(0, n_top));
        } catch (const std::exception& e) {  // one request's failure never reaches the other slots
            release(*s, "error", e.what(), error_status_of(e));
            continue;
        }
        deliver(*s, toks, lp);
    }
}

void Engine::loop() {
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(mu_);
            auto busy = [&] {
                for (auto& s : slots_)
                    if (s.job) return true;
                return false;
            };
            cv_.wait(lk, [&] { return stop_ || !queue_.empty() || busy(); });
            if (stop_) {
                for (auto& s : slots_)
                    if (s.job) s.job->finish("error", "server shutting down");
                return;
            }
        }
        // Admit queued jobs into free slots (a cancelled job is dropped before it costs anything).
        for (auto& s : slots_) {
            if (s.job) continue;
            std::shared_ptr<Job> job;
            {
                std::lock_guard<std::mutex> lk(mu_);
                // the first queued job this slot may run (a job asking for another slot waits for that one)
                const int sid = int(&s - slots_.data());
                for (auto it = queue_.begin(); it != queue_.end() && !job;) {
                    if ((*it)->is_cancelled()) {
                        (*it)->finish("cancelled");
                        it = queue_.erase(it);
                    } else if ((*it)->req.id_slot < 0 || (*it)->req.id_slot == sid) {
                        job = *it;
                        queue_.erase(it);
                    } else {
                        ++it;
                    }
                }
                m_.queue_depth = int(queue_.size());
            }
            if (!job) continue;  // nothing this slot may run (the rest may wait for another slot)
            try {
                admit(s, job);
            } catch (const std::exception& e) {
                s.job = job;
                release(s, "error", e.what(), error_status_of(e));
            }
        }
        // Shutdown grace period over: running jobs end now with what they have.
        bool cut = false;
        {
            std::lock_guard<std::mutex> lk(mu_);
            cut = shutting_down_ && std::chrono::steady_clock::now() >= deadline_;
        }
        if (cut)
            for (auto& s : slots_)
                if (s.job) release(s, "length");
        // One round for every busy slot.
        step_all();
        int busy = 0;
        size_t kv_used = 0, kv_total = 0;
        std::vector<SlotInfo> info;
        for (auto& s : slots_) {
            busy += s.job ? 1 : 0;
            kv_used += size_t(s.target->n_past());
            kv_total += size_t(s.target->n_ctx());
            info.push_back({int(&s - slots_.data()), s.target->n_ctx(), s.target->n_past(), s.job != nullptr,
                            s.job ? int(s.job->req.prompt.size()) : 0, s.generated});
        }
        std::lock_guard<std::mutex> lk(mu_);
        m_.slots = std::move(info);
        m_.busy_slots = busy;
        m_.kv_used_fraction = kv_total ? double(kv_used) / double(kv_total) : 0.0;
    }
}

}  // namespace tandem::server
