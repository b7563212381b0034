// llama-server's native /completion (and /infill) answers: one object per choice (a list for several), and a
// stream of chunks with the tokens behind each piece, a chunk per token when n_probs asks for probabilities
// (dialect.h). No [DONE] at the end, as llama-server.
#include "serve/answer_json.h"
#include "serve/dialect.h"
#include "tandem/tokenizer.h"

namespace tandem::server {

namespace {

class NativeDialect : public Dialect {
public:
    using Dialect::Dialect;

    json answer(const std::vector<JobOutput>& outs) override {
        if (g_.jobs.size() == 1) return final_object(0, outs[0], false);
        json all = json::array();
        for (size_t c = 0; c < g_.jobs.size(); c++) all.push_back(final_object(c, outs[c], false));
        return all;
    }

    bool per_token() const override { return g_.request.n_probs > 0; }

    void piece(size_t c, const std::string& text, Held& held, SseEvents& ev) override {
        const Job& job = *g_.jobs[c];
        json o = {{"index", c},
                  {"content", text},
                  {"tokens", held.toks},
                  {"stop", false},
                  {"id_slot", job.slot.load()},
                  {"tokens_predicted", held.n_received},
                  {"tokens_evaluated", job.req.prompt.size()}};
        if (g_.request.n_probs > 0) o["completion_probabilities"] = native_probs(ctx_.fe.tokenizer(), held.lps);
        if (g_.request.timings_per_token) o["timings"] = live_timings_json(job.progress());
        if (g_.request.token_origins) o["token_origins"] = origins_of(held);
        held.clear();
        ev.push_back({"", dump(o)});
    }

    void progress(size_t c, const PromptProgress& p, SseEvents& ev) override {
        const Job& job = *g_.jobs[c];
        ev.push_back({"", dump(json{{"index", c},
                                    {"content", ""},
                                    {"tokens", json::array()},
                                    {"stop", false},
                                    {"id_slot", job.slot.load()},
                                    {"tokens_predicted", 0},
                                    {"tokens_evaluated", job.req.prompt.size()},
                                    {"prompt_progress", prompt_progress_json(p)}})});
    }

    bool end_choice(size_t c, Held& held, SseEvents& ev) override {
        if (!held.toks.empty()) piece(c, "", held, ev);  // tokens whose text never came
        ev.push_back({"", dump(final_object(c, JobOutput{}, true))});
        return false;
    }

    void fail(const Job& job, SseEvents& ev) override {
        ev.push_back({"", dump(error_body(job.error, error_type(job.error_status), job.error_status))});
    }

private:
    json final_object(size_t c, const JobOutput& t, bool stream) const {
        const Tokenizer& tok = ctx_.fe.tokenizer();
        const ParsedRequest& pr = g_.request;
        const Job& j = *g_.jobs[c];
        const FrontEnd::Prompt& p = g_.prompts[g_.job_prompt[c]];
        json res = {{"index", c},
                    {"content", stream ? std::string() : t.text},
                    {"tokens", pr.return_tokens && !stream ? json(t.toks) : json::array()},
                    {"id_slot", j.slot.load()},
                    {"stop", true},
                    {"model", ctx_.model_id},
                    {"tokens_predicted", j.n_generated},
                    {"tokens_evaluated", j.n_prompt},
                    {"generation_settings", generation_settings(tok, j.req, pr)},
                    {"prompt", tok.decode(p.ids, false, true)},
                    {"has_new_line", t.text.find('\n') != std::string::npos},
                    {"truncated", p.truncated || j.truncated},
                    {"stop_type", stop_type(j)},
                    {"stopping_word", j.stop_word},
                    {"tokens_cached", j.n_prompt + j.n_generated},
                    {"timings", timings_json(j)}};
        if (!stream && pr.n_probs > 0) res["completion_probabilities"] = native_probs(tok, t.lps);
        if (!stream && pr.token_origins) res["token_origins"] = origins_of(t);
        if (pr.response_fields.empty()) return res;
        json picked = json::object();  // llama-server: each "a/b" path, flattened under its own name
        for (const auto& f : pr.response_fields) {
            try {
                json::json_pointer ptr("/" + f);
                if (res.contains(ptr)) picked[f] = res.at(ptr);
            } catch (const json::exception&) {  // not a usable path ("a~2"): left out, as a missing field
            }
        }
        return picked;
    }
};

}  // namespace

std::unique_ptr<Dialect> native_dialect(const AnswerContext& ctx, const Generation& g) {
    return std::make_unique<NativeDialect>(ctx, g);
}

}  // namespace tandem::server
