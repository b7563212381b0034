// `tandem generate`: llama-cli / llama-speculative compatible text generation.
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "tandem/grammar.h"

#include "args.h"
#include "tandem/suffix_cache.h"
#include "commands.h"
#include "io.h"
#include "tandem/latency.h"
#include "tandem/cpu.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/sampling.h"
#include "tandem/session.h"
#include "tandem/speculative.h"
#include "tandem/thread_pool.h"
#include "tandem/tokenizer.h"

namespace tandem::cli {

namespace {

// llama.cpp processes escapes in prompts by default (\n, \t, \\, \", \', \r, \xHH).
std::string process_escapes(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
        if (s[i] != '\\' || i + 1 >= s.size()) {
            out += s[i];
            continue;
        }
        char c = s[++i];
        switch (c) {
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case '\\': out += '\\'; break;
            case '"': out += '"'; break;
            case '\'': out += '\''; break;
            case 'x':
                if (i + 2 < s.size() + 0 && isxdigit(static_cast<unsigned char>(s[i + 1])) &&
                    isxdigit(static_cast<unsigned char>(s[i + 2]))) {
                    out += char(std::stoi(s.substr(i + 1, 2), nullptr, 16));
                    i += 2;
                } else {
                    out += "\\x";
                }
                break;
            default: out += '\\'; out += c;
        }
    }
    return out;
}

struct Options {
    std::string model, prompt, file;
    bool have_prompt = false;
    int n_predict = -1, n_ctx = 0, n_ctx_draft = 0, n_threads = 2, n_threads_draft = 0, n_batch = 256;
    SamplerParams sp;
    SpecParams spec;
    SpecFlags sf{spec};  // -md, --draft-layers and whether --spec-type was given
    CacheFlags cache;  // -ctk, -ctv, -ctkd, -ctvd
    GpuFlags gpu;  // -ngl, -ngld, -dev, -devd, -mg
    SplitOptions split;  // -sm, -ts, --rank-timeout
    std::string suffix_static, suffix_dynamic;  // suffix cache files: read; read and updated
    bool ignore_eos = false, no_bos = false, escape = true, display_prompt = true, json = false;
    std::string grammar;  // GBNF (--grammar, --json-schema, ...): the output is constrained to it
    std::vector<std::string> notes;
};

void add_flags(ArgParser& ap, Options& o) {
    auto S = [](std::string v) { return v; };
    ap.add({"-m", "--model"}, "FNAME", "target model GGUF", [&](const std::string& v) { o.model = S(v); });
    ap.add({"-p", "--prompt"}, "TEXT", "prompt", [&](const std::string& v) {
        o.prompt = v;
        o.have_prompt = true;
    });
    ap.add({"-f", "--file"}, "FNAME", "read the prompt from a file", [&](const std::string& v) { o.file = v; });
    ap.add({"-n", "--n-predict", "--predict"}, "N", "tokens to generate (-1 = until end or context full)",
           [&](const std::string& v) { o.n_predict = to_int_in("-n", v, -2, INT32_MAX); });
    ap.add({"-c", "--ctx-size"}, "N", "context size (0 = the model's training context, bounded by memory)",
           [&](const std::string& v) { o.n_ctx = to_int_in("-c", v, 0, 1 << 24); });
    ap.add({"-b", "--batch-size", "-ub", "--ubatch-size"}, "N", "prompt tokens per forward chunk",
           [&](const std::string& v) { o.n_batch = to_int_in("-b", v, 1, 1 << 20); });
    ap.add({"-t", "--threads"}, "N", "threads",
           [&](const std::string& v) { o.n_threads = to_int_in("-t", v, 1, 1024); });
    add_sampling_flags(ap, o.sp, o.notes);
    add_grammar_flags(ap, o.grammar, "the output");
    ap.flag({"--ignore-eos"}, "keep generating past end-of-generation tokens", [&] { o.ignore_eos = true; });
    ap.flag({"--context-shift"}, "when the context is full, forget the older half after --keep tokens and go on",
            [&] { o.spec.context_shift = true; });
    ap.flag({"--no-context-shift"}, "stop when the context is full (default)", [&] { o.spec.context_shift = false; });
    ap.add({"--keep"}, "N", "tokens kept at the start on a context shift (0; -1: the whole prompt)",
           [&](const std::string& v) { o.spec.n_keep = to_int_in("--keep", v, -1, INT32_MAX); });
    ap.flag({"--no-bos"}, "do not add BOS to the prompt", [&] { o.no_bos = true; });
    ap.flag({"-e", "--escape"}, "process escapes in the prompt (default)", [&] { o.escape = true; });
    ap.flag({"--no-escape"}, "do not process escapes", [&] { o.escape = false; });
    ap.flag({"--no-display-prompt"}, "do not echo the prompt", [&] { o.display_prompt = false; });
    ap.flag({"--json"}, "print one JSON object at the end instead of streaming text", [&] { o.json = true; });
    // speculative decoding
    ap.add({"-cd", "--ctx-size-draft"}, "N", "draft context size (default: same as -c)",
           [&](const std::string& v) { o.n_ctx_draft = to_int_in("-cd", v, 0, 1 << 24); });
    ap.add({"-td", "--threads-draft"}, "N", "draft threads (default: same as -t)",
           [&](const std::string& v) { o.n_threads_draft = to_int_in("-td", v, 1, 1024); });
    ap.add({"--spec-suffix-file", "-lcd", "--lookup-cache-dynamic"}, "FNAME",
           "suffix cache file: proposals also come from it, and this generation is added to it",
           [&](const std::string& v) { o.suffix_dynamic = v; });
    ap.add({"-lcs", "--lookup-cache-static"}, "FNAME", "suffix cache file read but not updated",
           [&](const std::string& v) { o.suffix_static = v; });
    add_spec_flags(ap, o.sf);
    add_cache_flags(ap, o.cache);
    add_split_flags(ap, &o.split, o.gpu);
    add_gpu_flags(ap, o.gpu);
}

nlohmann::ordered_json spec_json(const SpecParams& sp, const SpecStats& st, int n_predict) {
    nlohmann::ordered_json by_pos = nlohmann::ordered_json::array();
    for (size_t i = 0; i < st.drafted_at.size() && st.drafted_at[i] > 0; i++)
        by_pos.push_back(double(st.accepted_at[i]) / double(st.drafted_at[i]));
    nlohmann::ordered_json by_proposer = nlohmann::ordered_json::array();
    for (const auto& b : st.by_proposer)
        by_proposer.push_back({{"type", spec_type_name(b.type)},
                               {"rule", b.rule},
                               {"rounds", b.rounds},
                               {"n_drafted", b.drafted},
                               {"n_accept", b.accepted}});
    return {{"type", spec_types_name(sp)},
            {"n_draft", sp.n_max},
            {"n_predict", n_predict},
            {"by_proposer", by_proposer},
            {"n_drafted", st.n_drafted},
            {"n_accept", st.n_accept},
            {"accept", st.accept_rate() * 100.0},
            {"mean_accepted_length", st.mean_accepted_length()},
            {"accept_by_position", by_pos},
            {"n_rounds", st.n_rounds},
            {"n_rounds_drafted", st.n_rounds_drafted},
            {"n_probe_rounds", st.n_probe_rounds},
            {"adaptive", sp.adaptive},
            {"t_draft_ms", st.t_draft_ms},
            {"t_target_ms", st.t_target_ms},
            {"tree",
             {{"enabled", sp.tree},
              {"rounds", st.n_tree_rounds},
              {"alternatives", st.n_tree_nodes},
              {"alternatives_accepted", st.n_tree_accept}}}};
}

}  // namespace

int cmd_generate(int argc, char** argv) {
    Options o;
    o.sp.seed = 0xFFFFFFFF;
    ArgParser ap(
        "usage: tandem generate -m MODEL (-p PROMPT | -f FILE) [-n N] [-md DRAFT | --spec-type ngram|self] [options]");
    add_flags(ap, o);
    auto pos = ap.parse(argc, argv, 2);
    if (!pos.empty()) throw Error("unexpected argument '" + pos[0] + "'");
    if (o.model.empty()) throw Error("-m MODEL is required");
    if (o.have_prompt && !o.file.empty()) throw Error("give -p or -f, not both");
    std::shared_ptr<Cluster> cluster;  // one of several MPI ranks: rank 0 runs the command, the others their layers
    if (int rc = 0; run_as_rank(o.split, o.model, o.n_threads, cluster, &rc)) return rc;
    std::string prompt = o.file.empty() ? o.prompt : read_file_bytes(o.file);
    if (o.escape && o.file.empty()) prompt = process_escapes(prompt);
    if (o.sp.seed == 0xFFFFFFFF || o.sp.seed == UINT64_MAX)
        o.sp.seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    resolve_spec_flags(o.sf);
    if (!uses_draft_model(o.spec.type) && !o.sf.draft_model.empty())
        throw Error(std::string("-md given with --spec-type ") + spec_type_name(o.spec.type));
    if (o.n_threads < 1 || o.n_threads > 512) throw Error("-t must be between 1 and 512");
    for (const auto& n : o.notes) std::fprintf(stderr, "note: %s\n", n.c_str());

    if (auto w = ThreadPool::oversubscription_warning(o.n_threads); !w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
    ThreadPool pool(o.n_threads);
    std::unique_ptr<ThreadPool> draft_pool;
    if (o.n_threads_draft > 0 && o.n_threads_draft != o.n_threads)
        draft_pool = std::make_unique<ThreadPool>(o.n_threads_draft);

    LoadOptions load;
    load.cluster = cluster;
    auto model = Model::load(o.model, load);
    if (cluster)
        std::fprintf(stderr, "split: %d ranks, %s (rank 0: the output head too)\n", cluster->size(),
                     split_plan_text(*cluster).c_str());
    auto tok = Tokenizer::from_gguf(model->gguf());
    SessionParams tp{o.n_ctx, 0, o.n_batch, o.cache.type_k, o.cache.type_v, o.cache.swa_full};
    tp.ctx_checkpoints = o.cache.ctx_checkpoints;
    SessionParams dp = tp;  // the draft's: its own context, cache types and rollback window
    dp.type_k = o.cache.type_k_draft;
    dp.type_v = o.cache.type_v_draft;
    tp.recurrent_keep = kRecurrentKeepTarget;
    const Speculation spec =
        build_speculation(model, o.spec, o.sf.draft_model, o.sf.type_given || !o.sf.draft_model.empty(),
                          o.spec.type == SpecType::SELF ? o.sf.draft_layers : 0);
    for (const std::string& line : spec.notes) std::fprintf(stderr, "%s\n", line.c_str());
    const std::shared_ptr<const Model>& draft_model = spec.draft_model;
    if (tp.n_ctx <= 0) {  // the model's training context, bounded by memory (with the draft's cache)
        const size_t draft_pp = draft_model && o.n_ctx_draft <= 0
                                    ? draft_bytes_per_position(*draft_model, o.cache.type_k_draft, o.cache.type_v_draft)
                                    : 0;
        const ContextChoice c = choose_context(*model, tp, memory_budget_bytes(), 1, draft_pp);
        tp.n_ctx = c.n_ctx;
        std::fprintf(stderr, "%s\n", c.note.c_str());
    }
    tp.gpu = place_by_flags(o.gpu, false, model, kv_cache_bytes(*model, tp, tp.n_ctx));
    Session target(model, tp, pool);
    std::fprintf(stderr, "%s\n", kv_cache_line("target", target).c_str());
    dp.n_ctx = o.spec.type == SpecType::DRAFT && o.n_ctx_draft > 0 ? o.n_ctx_draft : target.n_ctx();
    if (draft_model && draft_model != model)
        dp.gpu = place_by_flags(o.gpu, true, draft_model, kv_cache_bytes(*draft_model, dp, dp.n_ctx), tp.gpu,
                                kv_cache_bytes(*model, tp, tp.n_ctx));
    DraftSetup ds = make_draft(o.spec.type, model, draft_model, dp, o.sf.draft_layers,
                               o.spec.type == SpecType::DRAFT && draft_pool ? *draft_pool : pool, &target);
    std::unique_ptr<Session> draft = std::move(ds.session);
    if (draft) std::fprintf(stderr, "%s\n", kv_cache_line("draft", *draft).c_str());
    if (draft) o.spec.draft_cost_prior = ds.cost_prior;

    std::vector<int32_t> prompt_ids = tok->encode(prompt, !o.no_bos, false);
    if (prompt_ids.empty()) throw Error("the prompt is empty (and no BOS is added)");
    if (int(prompt_ids.size()) >= target.n_ctx())
        throw Error(strprintf("the prompt is %zu tokens, which does not fit the context size %d (use -c)",
                              prompt_ids.size(), target.n_ctx()));

    if (!o.suffix_static.empty() || !o.suffix_dynamic.empty()) {
        if (!o.sf.type_given && o.sf.draft_model.empty()) o.spec.type = SpecType::SUFFIX;
        o.spec.suffix = std::make_shared<SuffixCache>();
        if (!o.suffix_static.empty() && !o.spec.suffix->load(o.suffix_static))
            throw Error(o.suffix_static + ": no such file");
        if (!o.suffix_dynamic.empty()) o.spec.suffix->load(o.suffix_dynamic);  // created at the end if absent
    }
    if (o.ignore_eos) o.sp.banned_ends = tok->eog_ids();
    Generator gen(target, draft.get(), o.sp, o.spec);
    if (!o.grammar.empty()) gen.set_constraint(ConstraintVocab(*tok).constrain(grammar::parse_gbnf(o.grammar)));
    if (o.display_prompt && !o.json) {
        std::fputs(prompt.c_str(), stdout);
        std::fflush(stdout);
    }
    auto t_start = std::chrono::steady_clock::now();
    gen.start(prompt_ids);
    auto t_prompt = std::chrono::steady_clock::now();
    const Cluster::Traffic traffic0 = cluster ? cluster->traffic() : Cluster::Traffic{};  // the generation's, below

    TextStreamer streamer(*tok);
    std::vector<int32_t> generated, chunk;
    std::string text;
    std::string stop_reason = "length";
    const int limit = o.n_predict < 0 ? INT32_MAX : o.n_predict;
    bool done = limit == 0;
    if (done) stop_reason = "length";
    DeliveryClock clock;  // inter-token latency: one delivery per round
    auto ms_now = [] {
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
    };
    while (!done) {
        chunk.clear();
        if (!gen.step(chunk, limit - int(generated.size()))) {
            stop_reason = "context";
            break;
        }
        clock.deliver(ms_now());
        for (int32_t id : chunk) {
            if (tok->is_eog(id)) {  // under --ignore-eos only a finished grammar lets one through
                stop_reason = "eos";
                done = true;
                break;
            }
            generated.push_back(id);
            std::string piece = streamer.push(id);
            text += piece;
            if (!o.json) {
                std::fputs(piece.c_str(), stdout);
                std::fflush(stdout);
            }
            if (int(generated.size()) >= limit) {
                done = true;
                break;
            }
        }
    }
    std::string tail = streamer.flush();
    text += tail;
    auto t_end = std::chrono::steady_clock::now();
    if (o.spec.suffix && !o.suffix_dynamic.empty()) {
        o.spec.suffix->add(gen.history());
        o.spec.suffix->save(o.suffix_dynamic);
    }
    const double prompt_s = std::chrono::duration<double>(t_prompt - t_start).count();
    const double gen_s = std::chrono::duration<double>(t_end - t_prompt).count();
    const int n_prompt = int(prompt_ids.size());
    const int n_gen = int(generated.size());
    const SpecStats& st = gen.stats();
    const LatencySummary itl = summarize_latency(clock.gaps());

    if (o.json) {
        nlohmann::ordered_json j;
        j["prompt_ids"] = prompt_ids;
        j["tokens"] = generated;
        j["text"] = text;
        j["stop_reason"] = stop_reason;
        j["timings"] = {{"prompt_n", n_prompt},
                        {"prompt_ms", prompt_s * 1e3},
                        {"prompt_per_second", n_prompt / std::max(prompt_s, 1e-9)},
                        {"predicted_n", n_gen},
                        {"predicted_ms", gen_s * 1e3},
                        {"predicted_per_second", n_gen / std::max(gen_s, 1e-9)},
                        {"itl_p50_ms", itl.p50},
                        {"itl_p90_ms", itl.p90},
                        {"itl_p99_ms", itl.p99},
                        {"itl_max_ms", itl.max}};
        if (o.spec.type != SpecType::NONE) j["spec"] = spec_json(gen.spec(), st, n_gen);
        if (cluster) {
            const Cluster::Traffic t = cluster->traffic();
            j["split"] = {{"ranks", cluster->size()},
                          {"messages", t.messages - traffic0.messages},
                          {"bytes", t.bytes - traffic0.bytes}};
        }
        // generated text may end inside a UTF-8 sequence (byte tokens): invalid bytes become U+FFFD, never a crash
        std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
    } else {
        std::fputs(tail.c_str(), stdout);
        std::fputs("\n", stdout);
        std::fflush(stdout);
    }
    std::fprintf(stderr, "\n%s", cpu_info_line().c_str());
    std::fprintf(stderr, "\nencoded %4d tokens in %8.3f seconds, speed: %8.3f t/s\n", n_prompt, prompt_s,
                 n_prompt / std::max(prompt_s, 1e-9));
    std::fprintf(stderr, "decoded %4d tokens in %8.3f seconds, speed: %8.3f t/s\n", n_gen, gen_s,
                 n_gen / std::max(gen_s, 1e-9));
    if (cluster) {  // rank 0's messages and bytes, sent and received, while generating
        const Cluster::Traffic t = cluster->traffic();
        const double per = 1.0 / std::max(1, n_gen);
        std::fprintf(stderr, "split: %d ranks, rank 0 sent and received %.1f messages and %.0f bytes per token\n",
                     cluster->size(), double(t.messages - traffic0.messages) * per,
                     double(t.bytes - traffic0.bytes) * per);
    }
    if (o.spec.type != SpecType::NONE) {
        std::fprintf(stderr, "\nspec type = %s%s\n", spec_types_name(o.spec).c_str(),
                     o.spec.adaptive ? " (adaptive draft length)" : "");
        std::fprintf(stderr, "n_draft   = %d\n", gen.spec().n_max);
        std::fprintf(stderr, "n_predict = %d\n", n_gen);
        std::fprintf(stderr, "n_drafted = %lld\n", (long long)st.n_drafted);
        std::fprintf(stderr, "n_accept  = %lld\n", (long long)st.n_accept);
        std::fprintf(stderr, "accept    = %.3f%%\n", st.accept_rate() * 100.0);
        std::fprintf(stderr,
                     "mean accepted length per verification = %.3f tokens (%lld target passes, %lld with a draft, %lld "
                     "probes)\n",
                     st.mean_accepted_length(), (long long)st.n_rounds, (long long)st.n_rounds_drafted,
                     (long long)st.n_probe_rounds);
        std::string by_pos;
        for (size_t i = 0; i < st.drafted_at.size() && st.drafted_at[i] > 0; i++)
            by_pos += strprintf("%s%zu:%.0f%%", i ? " " : "", i + 1,
                                100.0 * double(st.accepted_at[i]) / double(st.drafted_at[i]));
        std::fprintf(stderr, "accept by draft position: %s\n", by_pos.empty() ? "(nothing drafted)" : by_pos.c_str());
        if (st.n_tree_rounds > 0)
            std::fprintf(stderr, "token trees: %lld rounds verified %lld alternatives, %lld taken\n",
                         (long long)st.n_tree_rounds, (long long)st.n_tree_nodes, (long long)st.n_tree_accept);
        if (st.by_proposer.size() > 1)
            for (const auto& b : st.by_proposer)
                std::fprintf(stderr, "proposer %-6s: %lld rounds, %lld drafted, %lld accepted\n",
                             spec_type_name(b.type), (long long)b.rounds, (long long)b.drafted, (long long)b.accepted);
        std::fprintf(stderr, "time: draft %.1f ms, target %.1f ms\n", st.t_draft_ms, st.t_target_ms);
    }
    return 0;
}

}  // namespace tandem::cli
