// The server's library parts without HTTP: access rules (Host, CORS, key), request validation that must stop
// a request before it reaches the engine, and the engine's isolation of one failing job and its shutdown.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>

#include "serve/access.h"
#include "serve/anthropic.h"
#include "serve/chat_answer.h"
#include "serve/engine.h"
#include "serve/front_end.h"
#include "tandem/suffix_cache.h"
#include "serve/infill.h"
#include "serve/metrics.h"
#include "serve/openai.h"
#include "serve/reasoning.h"
#include "serve/responses.h"
#include "serve/text_pipeline.h"
#include "serve/tool_calls.h"
#include "grammar/grammar.h"
#include "grammar/trigger.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "test_util.h"

using namespace tandem;
using namespace tandem::server;
using json = nlohmann::ordered_json;

namespace {

AccessDecision check(const AccessPolicy& p, std::string method, std::string path, std::string host,
                     std::string origin = "", std::string auth = "") {
    return check_access(p,
                        {std::move(method), std::move(path), std::move(host), std::move(origin), std::move(auth), ""});
}

bool has_header(const AccessDecision& d, const std::string& k, const std::string& v) {
    for (const auto& [a, b] : d.headers)
        if (a == k && b == v) return true;
    return false;
}

}  // namespace

TEST(Access, HostHeaderMustBeLoopbackWhenBoundToLoopback) {
    AccessPolicy p;
    for (const char* h : {"localhost", "localhost:8080", "127.0.0.1:8080", "127.1.2.3", "[::1]:80", "LOCALHOST:1", ""})
        EXPECT_EQ(check(p, "GET", "/health", h).status, 0) << h;
    for (const char* h :
         {"evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.evil.example", "10.0.0.1", "[::2]"})
        EXPECT_EQ(check(p, "GET", "/health", h).status, 403) << h;
    p.allowed_hosts = {"my.box"};
    EXPECT_EQ(check(p, "GET", "/health", "my.box:8080").status, 0);
    p.allowed_hosts = {"*"};
    EXPECT_EQ(check(p, "GET", "/health", "evil.example").status, 0);
    AccessPolicy open;
    open.loopback_bind = false;  // --host 0.0.0.0: names are the operator's business
    EXPECT_EQ(check(open, "GET", "/health", "anything.example").status, 0);
}

TEST(Access, ForeignOriginsAreRefusedWithoutAKey) {
    AccessPolicy p;
    // a web page elsewhere posting text/plain to a keyless local server (no preflight in the browser)
    EXPECT_EQ(check(p, "POST", "/v1/completions", "localhost:8080", "https://evil.example").status, 403);
    EXPECT_EQ(check(p, "POST", "/v1/completions", "localhost:8080", "null").status, 403);
    // same origin, loopback origins
    auto d = check(p, "POST", "/v1/completions", "localhost:8080", "http://localhost:8080");
    EXPECT_EQ(d.status, 0);
    EXPECT_TRUE(has_header(d, "Access-Control-Allow-Origin", "http://localhost:8080"));
    EXPECT_EQ(check(p, "POST", "/v1/completions", "localhost:8080", "http://127.0.0.1:3000").status, 0);
    // allow-listed
    p.cors_origins = {"https://app.example"};
    EXPECT_EQ(check(p, "POST", "/v1/completions", "localhost:8080", "https://app.example").status, 0);
    EXPECT_EQ(check(p, "POST", "/v1/completions", "localhost:8080", "https://app.example.evil").status, 403);
    p.cors_origins = {"*"};
    EXPECT_EQ(check(p, "POST", "/v1/completions", "localhost:8080", "https://evil.example").status, 0);
}

TEST(Access, PreflightPassesWithoutTheKeyAndTheKeyGuardsTheRest) {
    AccessPolicy p;
    p.api_key = "sk-test";
    auto pre = check(p, "OPTIONS", "/v1/chat/completions", "localhost", "https://web.example");
    EXPECT_EQ(pre.status, 200);
    EXPECT_TRUE(has_header(pre, "Access-Control-Allow-Origin", "https://web.example"));
    EXPECT_TRUE(has_header(pre, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"));
    EXPECT_EQ(check(p, "POST", "/v1/chat/completions", "localhost", "https://web.example").status, 401);
    EXPECT_EQ(check(p, "POST", "/v1/chat/completions", "localhost", "", "Bearer sk-tesT").status, 401);
    EXPECT_EQ(check(p, "POST", "/v1/chat/completions", "localhost", "", "Bearer sk-test").status, 0);
    EXPECT_EQ(check(p, "GET", "/health", "localhost").status, 0);
    EXPECT_EQ(check(p, "GET", "/metrics", "localhost").status, 401);
}

// The server's flags bound a request's speculation: a client asks for less, never more (issue 49: n_max 256 with
// the adaptive controller off drafted 90,670 tokens for 21 and slowed the other slot 100-fold).
TEST(Requests, SpeculationIsBoundedByTheServersFlags) {
    ServerLimits lim;
    lim.n_vocab = 50;
    lim.has_draft = true;
    lim.spec_defaults.type = SpecType::DRAFT;
    lim.spec_defaults.n_max = 4;
    lim.spec_defaults.n_min = 0;
    lim.spec_defaults.tree_width = 2;
    lim.spec_defaults.tree_nodes = 16;
    auto spec_of = [&](const char* body) { return parse_request(json::parse(body), false, lim).job.spec; };
    const SpecParams big = spec_of(
        R"({"prompt": "hi", "speculative": {"n_max": 256, "n_min": 200, "adaptive": false, "p_min": 0, "tree_width": 64, "tree_nodes": 1024}})");
    EXPECT_EQ(big.n_max, 4);
    EXPECT_EQ(big.n_min, 4);
    EXPECT_EQ(big.tree_width, 2);
    EXPECT_EQ(big.tree_nodes, 16);
    EXPECT_FALSE(big.adaptive);  // what a request may choose within the bounds it keeps
    EXPECT_EQ(spec_of(R"({"prompt": "hi", "speculative.n_max": 100})").n_max, 4);
    const SpecParams small =
        spec_of(R"({"prompt": "hi", "speculative": {"n_max": 2, "tree_width": 1, "tree_nodes": 4}})");
    EXPECT_EQ(small.n_max, 2);
    EXPECT_EQ(small.tree_width, 1);
    EXPECT_EQ(small.tree_nodes, 4);
}

// One rule for "draft" with a drafting head as -md: the server drafts with the EAGLE-3 head as eagle3, as
// `tandem generate -md HEAD --spec-type draft` does (pick_draft_head), where it answered 400 (issue 49).
TEST(Requests, DraftWithAnEagle3HeadIsEagle3AsInGenerate) {
    ServerLimits lim;
    lim.n_vocab = 50;
    lim.has_draft = lim.has_eagle3 = true;
    lim.draft_model = Model::load(test::synth_file("tiny-ref-eagle3", "F16"));
    for (const char* body : {R"({"prompt": "hi", "speculative": {"type": "draft"}})",
                             R"({"prompt": "hi", "speculative": {"type": "eagle3"}})"})
        EXPECT_EQ(parse_request(json::parse(body), false, lim).job.spec.type, SpecType::EAGLE3) << body;
    lim.draft_model.reset();  // a draft model that is no head: eagle3 refused
    lim.has_eagle3 = false;
    EXPECT_THROW(parse_request(json::parse(R"({"prompt": "hi", "speculative": {"type": "eagle3"}})"), false, lim),
                 BadRequest);
}

// parallel_tool_calls: the request's value, else the server's default (the template's capability)
TEST(Requests, ParallelToolCallsDefaultToTheTemplatesCapability) {
    for (bool def : {false, true}) {
        ServerLimits lim;
        lim.n_vocab = 50;
        lim.parallel_tool_calls = def;
        const json msgs = json::parse(R"([{"role": "user", "content": "hi"}])");
        EXPECT_EQ(parse_request(json{{"messages", msgs}}, true, lim).parallel_tool_calls, def);
        for (bool asked : {false, true})
            EXPECT_EQ(
                parse_request(json{{"messages", msgs}, {"parallel_tool_calls", asked}}, true, lim).parallel_tool_calls,
                asked);
    }
}

TEST(Requests, LogitBiasThatBansEveryTokenIsRefusedBeforeGeneration) {
    ServerLimits lim;
    lim.n_vocab = 50;
    json all = json::object(), all_false = json::object();
    for (int i = 0; i < 50; i++) {
        all[std::to_string(i)] = -100;
        all_false[std::to_string(i)] = false;
    }
    for (const json& bias : {all, all_false}) {
        for (bool chat : {false, true}) {
            json body = chat ? json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}} : json{{"prompt", "hi"}};
            body["logit_bias"] = bias;
            try {
                parse_request(body, chat, lim);
                FAIL() << "accepted a logit_bias that bans every token";
            } catch (const BadRequest& e) {
                EXPECT_NE(std::string(e.what()).find("bans all 50 tokens"), std::string::npos) << e.what();
            }
        }
    }
    all.erase("7");  // one token left: fine
    EXPECT_NO_THROW(parse_request(json{{"prompt", "hi"}, {"logit_bias", all}}, false, lim));
}

TEST(Requests, ModelIdsAreMadeValidUtf8) {
    EXPECT_EQ(valid_utf8("model.gguf"), "model.gguf");
    EXPECT_EQ(valid_utf8("caf\xc3\xa9"), "caf\xc3\xa9");
    EXPECT_EQ(valid_utf8("bad\xff.gguf"), "bad\xef\xbf\xbd.gguf");
    EXPECT_NO_THROW(json(valid_utf8("\xc3\x28\xa0\xa1")).dump());
}

TEST(Requests, DerivedSeedsAreIndependentStreams) {
    // stream 1 of seed S must not be stream 0 of seed S+1 (the old seed + i scheme)
    for (uint64_t s : {0ull, 1ull, 42ull, 0xffffffffffffffffull}) {
        EXPECT_EQ(derive_seed(s, 0), s);
        EXPECT_NE(derive_seed(s, 1), s + 1);
        EXPECT_NE(derive_seed(s, 1), derive_seed(s + 1, 0));
        EXPECT_NE(derive_seed(s, 1), derive_seed(s + 1, 1));
        EXPECT_NE(derive_seed(s, 1), derive_seed(s, 2));
    }
}

namespace {

std::shared_ptr<const Model> stories() {
    static auto m = Model::load(test::shared_file("models/stories260K.gguf"));
    return m;
}

// Waits for the job to finish; returns everything it delivered.
JobOutput drain_all(Job& j) {
    JobOutput out;
    while (j.wait(out, 1000)) {}
    return out;
}
std::vector<int32_t> drain(Job& j) { return drain_all(j).toks; }

JobRequest request(int max_tokens) {
    JobRequest r;
    r.prompt = {1, 403, 407, 261};
    r.sampling.temp = 0;
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    return r;
}

}  // namespace

// Regression (issue 12, defect 1): a job whose sampling fails (here every token banned, which the HTTP layer
// refuses earlier) ends with an error; the engine thread survives and serves the next job.
TEST(Engine, AFailingJobDoesNotStopTheEngine) {
    EngineParams ep;
    ep.n_slots = 2;
    Engine e(stories(), nullptr, ep);
    JobRequest bad = request(8);
    for (int i = 0; i < 512; i++) bad.sampling.logit_bias.emplace_back(i, -INFINITY);
    bad.sampling.temp = 0.8f;
    auto j1 = e.submit(bad);
    auto j2 = e.submit(request(8));
    ASSERT_TRUE(j1 && j2);
    drain(*j1);
    EXPECT_EQ(j1->finish_reason, "error");
    EXPECT_NE(j1->error.find("no token is left"), std::string::npos) << j1->error;
    EXPECT_EQ(drain(*j2).size(), 8u);
    EXPECT_EQ(j2->finish_reason, "length");
    auto j3 = e.submit(request(4));
    EXPECT_EQ(drain(*j3).size(), 4u);
}

// Regression (issue 12, defect 12): shutdown answers queued jobs with 503 at once, ends running ones with
// "length" after the grace period, and refuses new jobs.
TEST(Engine, ShutdownDropsTheQueueAndCutsRunningJobs) {
    EngineParams ep;
    ep.n_slots = 1;
    Engine e(stories(), nullptr, ep);
    auto running = e.submit(request(1 << 20));
    ASSERT_TRUE(running);
    JobOutput first;
    while (first.toks.empty() && running->wait(first, 1000)) {}  // it is in the slot now
    auto queued = e.submit(request(8));
    ASSERT_TRUE(queued);
    e.shutdown(0);
    drain(*queued);
    EXPECT_EQ(queued->finish_reason, "error");
    EXPECT_EQ(queued->error_status, 503);
    drain(*running);
    EXPECT_EQ(running->finish_reason, "length") << running->error;
    EXPECT_TRUE(running->error.empty());
    EXPECT_TRUE(e.shutting_down());
    EXPECT_EQ(e.submit(request(4)), nullptr);
}

// Chunked prefill (issue 11): a long prompt processed a piece per round, alongside a slot that is decoding,
// must give exactly the tokens of a prompt processed at once.
TEST(Engine, ChunkedPrefillGivesTheSameTokens) {
    std::vector<int32_t> long_prompt = {1};
    for (int i = 0; i < 150; i++) long_prompt.push_back(int32_t(300 + (i * 37) % 200));
    auto run = [&](int chunk) {
        EngineParams ep;
        ep.n_slots = 2;
        ep.prefill_chunk = chunk;
        Engine e(stories(), nullptr, ep);
        auto busy = e.submit(request(64));  // decoding while the long prompt is prefilled
        JobRequest r = request(16);
        r.prompt = long_prompt;
        auto j = e.submit(r);
        auto toks = drain(*j);
        drain(*busy);
        EXPECT_EQ(j->finish_reason, "length") << j->error;
        return toks;
    };
    auto whole = run(0);
    auto chunked = run(8);
    ASSERT_EQ(whole.size(), 16u);
    EXPECT_EQ(chunked, whole);
}

// The server-wide suffix cache (--spec-type suffix): every finished request feeds it, so a repeated request is
// drafted from the first one's output (nearly all accepted) and still gives the plain tokens; a request without
// speculation feeds it too.
TEST(Engine, SuffixCacheLearnsFromFinishedRequests) {
    EngineParams ep;
    ep.n_slots = 2;
    ep.spec.suffix = std::make_shared<SuffixCache>();
    Engine e(stories(), nullptr, ep);
    JobRequest plain = request(96);
    plain.spec = ep.spec;  // the Service copies the server's defaults (with the cache) into every request
    auto j1 = e.submit(plain);
    const auto first = drain(*j1);
    ASSERT_EQ(first.size(), 96u);
    EXPECT_EQ(ep.spec.suffix->stats().documents, 1u);
    EXPECT_EQ(ep.spec.suffix->stats().tokens, plain.prompt.size() + 96u);
    JobRequest again = plain;
    again.spec.type = SpecType::SUFFIX;
    again.spec.adaptive = false;
    again.spec.n_max = 8;
    auto j2 = e.submit(again);
    EXPECT_EQ(drain(*j2), first);
    std::printf("[ suffix cache, repeated request ] %lld of %lld drafted tokens accepted\n",
                (long long)j2->spec.n_accept, (long long)j2->spec.n_drafted);
    EXPECT_GT(j2->spec.n_drafted, 80);
    EXPECT_EQ(j2->spec.n_accept, j2->spec.n_drafted);
    EXPECT_EQ(ep.spec.suffix->stats().documents, 2u);
}

// The text pipeline never lets out any part of a stop string, nor an incomplete UTF-8 sequence.
TEST(TextPipeline, HoldsBackPossibleStopStringsAndStopsAtTheFirst) {
    auto tok = Tokenizer::from_gguf(stories()->gguf());
    auto ids = tok->encode("Once upon a time there was a dog", false, false);
    ASSERT_GT(ids.size(), 5u);
    TextPipeline none(*tok, {});
    std::string all;
    for (int32_t id : ids) all += none.push(id);
    all += none.finish();
    TextPipeline p(*tok, {"a dog", "time th"});
    std::string got;
    for (int32_t id : ids) {
        got += p.push(id);
        EXPECT_EQ(got.find("time"), std::string::npos) << "released part of a possible stop string: " << got;
        if (p.stopped()) break;
    }
    EXPECT_TRUE(p.stopped());
    EXPECT_EQ(p.stop_word(), "time th");
    EXPECT_EQ(got + "time th", all.substr(0, all.find("time th") + 7));
    EXPECT_EQ(p.finish(), "");
}

// End of generation is decided in the engine (issue 11): a stop string ends the job at the token that
// completes it, the text stops before it, and the token count is exact even when speculation verified more
// tokens in the same round.
TEST(Engine, StopStringsEndTheJobAtTheTokenThatCompletesThem) {
    EngineParams ep;
    ep.self_draft_layers = 2;
    Engine e(stories(), nullptr, ep);
    auto tok = Tokenizer::from_gguf(stories()->gguf());
    JobRequest r = request(48);
    r.spec.type = SpecType::SELF;
    r.spec.n_max = 8;
    r.spec.p_min = 0;
    r.spec.adaptive = false;
    auto free_run = e.submit(r);
    JobOutput all = drain_all(*free_run);
    ASSERT_EQ(all.toks.size(), 48u);
    ASSERT_EQ(all.text_end.size(), 48u);
    // stop strings that end inside the text of token k, for many k (some end a speculative round, most do not)
    int tried = 0;
    for (size_t k = 8; k < 44; k++) {
        if (all.text_end[k] <= all.text_end[k - 1] || all.text_end[k - 1] < 3) continue;  // no text of its own
        const std::string stop = all.text.substr(all.text_end[k - 1] - 3, 4);
        const size_t at = all.text.find(stop);
        if (at != all.text_end[k - 1] - 3) continue;  // occurs earlier
        tried++;
        r.stop = {stop};
        auto stopped = e.submit(r);
        JobOutput got = drain_all(*stopped);
        EXPECT_EQ(stopped->finish_reason, "stop");
        EXPECT_EQ(stopped->stop_word, stop);
        EXPECT_EQ(got.text, all.text.substr(0, at));
        EXPECT_EQ(got.toks, std::vector<int32_t>(all.toks.begin(), all.toks.begin() + long(k) + 1)) << "k=" << k;
        EXPECT_EQ(stopped->n_generated, int(k + 1));
        EXPECT_GT(stopped->spec.n_drafted, 0);
    }
    EXPECT_GE(tried, 10);
}

// An EAGLE-3 head as the server's -md: every slot has its own head session reading that slot's target, made up
// front (the engine first made a plain draft session of it there, which a head refuses: the server did not start).
// Two jobs with different prompts at once, drafting every round, give their plain greedy tokens and draft exactly
// what each drafts alone in a one-slot server (a head reading the other slot's target states would not); and the
// same job again on a slot that holds its prefix drafts as it did the first time (the head keeps its rows).
TEST(Engine, Eagle3HeadDraftsForEverySlot) {
    auto target = Model::load(test::synth_file("tiny-ref-llama", "Q8_0"));
    auto head = Model::load(test::synth_file("tiny-ref-eagle3", "Q8_0"));
    JobRequest r[2] = {request(32), request(32)};
    r[1].prompt = {1, 517, 640, 12, 99, 7};
    for (auto& x : r) {
        x.spec.type = SpecType::EAGLE3;
        x.spec.n_max = 4;
        x.spec.p_min = 0;
        x.spec.adaptive = false;
    }
    std::vector<int32_t> want[2];
    int64_t accepted_alone[2];
    for (int i = 0; i < 2; i++) {
        Engine plain(target, nullptr, EngineParams{});
        JobRequest p = r[i];
        p.spec = SpecParams{};
        want[i] = drain(*plain.submit(p));
        Engine alone(target, head, EngineParams{});
        auto j = alone.submit(r[i]);
        EXPECT_EQ(drain(*j), want[i]);
        accepted_alone[i] = j->spec.n_accept;
        auto again = alone.submit(r[i]);  // the slot holds this prompt and the head its rows
        EXPECT_EQ(drain(*again), want[i]);
        EXPECT_EQ(again->spec.n_accept, accepted_alone[i]) << "the head's rows of the reused prefix";
    }
    EngineParams ep;
    ep.n_slots = 2;
    Engine e(target, head, ep);
    EXPECT_TRUE(e.has_eagle3());
    EXPECT_FALSE(e.has_mtp());
    auto a = e.submit(r[0]), b = e.submit(r[1]);
    ASSERT_TRUE(a && b);
    EXPECT_EQ(drain(*a), want[0]);
    EXPECT_EQ(drain(*b), want[1]);
    EXPECT_GT(a->spec.n_drafted, 0);
    EXPECT_EQ(a->spec.n_accept, accepted_alone[0]);
    EXPECT_EQ(b->spec.n_accept, accepted_alone[1]);
}

// id_slot pins a job to a slot, even while the other slots are free (a planted 'stop at the first free slot'
// left such a job queued for ever); an id beyond the slots is a 400.
TEST(Engine, IdSlotRunsTheJobInThatSlot) {
    EngineParams ep;
    ep.n_slots = 3;
    Engine e(stories(), nullptr, ep);
    for (int id : {2, 0, 1}) {
        JobRequest r = request(3);
        r.id_slot = id;
        auto j = e.submit(r);
        ASSERT_TRUE(j);
        JobOutput out;
        for (int i = 0; i < 100 && j->wait(out, 100); i++) {}
        ASSERT_EQ(j->finish_reason, "length") << "slot " << id << " never ran the job";
        EXPECT_EQ(j->slot.load(), id);
    }
    JobRequest r = request(3);
    r.id_slot = 3;
    auto bad = e.submit(r);
    drain(*bad);
    EXPECT_EQ(bad->error_status, 400);
}

TEST(Requests, SlotActionsTakePlainFileNamesOnly) {
    auto a = parse_slot_action("1", "action=save", R"({"filename":"slot1.bin"})", "/tmp/slots");
    EXPECT_EQ(a.id, 1);
    EXPECT_EQ(a.action, JobRequest::SlotAction::SAVE);
    EXPECT_EQ(a.path, "/tmp/slots/slot1.bin");
    EXPECT_EQ(parse_slot_action("0", "x=1&action=erase", "", "").action, JobRequest::SlotAction::ERASE);
    for (const char* name : {"../x", "a/b", ".hidden", "", "a\\\\b", "a\nb"}) {
        json body = {{"filename", name}};
        EXPECT_THROW(parse_slot_action("0", "action=restore", body.dump(), "/tmp/slots"), BadRequest) << name;
    }
    EXPECT_THROW(parse_slot_action("0", "action=save", R"({"filename":"a.bin"})", ""),
                 BadRequest);  // no --slot-save-path
    EXPECT_THROW(parse_slot_action("x", "action=erase", "", ""), BadRequest);
    EXPECT_THROW(parse_slot_action("0", "action=load", "", "/tmp"), BadRequest);
}

// /infill builds llama-server's fill-in-the-middle prompt from the vocabulary's FIM tokens (StarCoder's:
// prefix, suffix, middle and pad; no repository or file-separator token llama.cpp recognises, so the extra
// context is joined with its snippet separator).
TEST(Infill, PromptHasLlamaServersLayout) {
    auto f = GgufFile::open(test::shared_file("tokenizer-tests/ggml-vocab-starcoder.gguf"));
    auto tok = Tokenizer::from_gguf(*f);
    const Tokenizer::Fim& fim = tok->fim();
    ASSERT_GE(fim.pre, 0);
    ASSERT_EQ(fim.pre, tok->find_token("<fim_prefix>"));
    ASSERT_EQ(fim.suf, tok->find_token("<fim_suffix>"));
    ASSERT_EQ(fim.mid, tok->find_token("<fim_middle>"));
    ASSERT_EQ(fim.pad, tok->find_token("<fim_pad>"));
    EXPECT_EQ(fim.rep, -1);
    EXPECT_EQ(fim.sep, -1);
    EXPECT_TRUE(tok->is_eog(fim.pad));
    auto enc = [&](const std::string& s) { return tok->encode(s, false, false); };
    InfillInput in;
    in.prefix = "def add(a, b):\n    ";
    in.suffix = "\n\nprint(add(1, 2))\n";
    in.extra = {{"util.py", "X = 1\n"}};
    in.prompt = enc("return");
    std::vector<int32_t> want;
    auto cat = [&](const std::vector<int32_t>& v) { want.insert(want.end(), v.begin(), v.end()); };
    cat(enc("\n\n--- snippet ---\n\n"));
    cat(enc("X = 1\n"));
    if (tok->add_bos() && tok->bos() >= 0) want.push_back(tok->bos());
    want.push_back(fim.pre);
    cat(enc(in.prefix));
    cat(in.prompt);
    want.push_back(fim.suf);
    cat(enc(in.suffix));
    want.push_back(fim.mid);
    EXPECT_EQ(format_infill(*tok, in, 2048, 4096, 64), want);
    // small budgets: the prefix keeps its end, the suffix its start, the extra context its end
    auto small = format_infill(*tok, in, 16, 16, 64);  // prefix 12, suffix 16/4 - 2 - 1 = 1, no extra
    auto prefix = enc(in.prefix);
    auto suffix = enc(in.suffix);
    std::vector<int32_t> expect;
    if (tok->add_bos() && tok->bos() >= 0) expect.push_back(tok->bos());
    expect.push_back(fim.pre);
    expect.insert(expect.end(), prefix.end() - std::min<long>(12, long(prefix.size())), prefix.end());
    expect.insert(expect.end(), in.prompt.begin(), in.prompt.end());
    expect.push_back(fim.suf);
    expect.push_back(suffix[0]);
    expect.push_back(fim.mid);
    EXPECT_EQ(small, expect);
    // a vocabulary without FIM tokens
    EXPECT_THROW(format_infill(*Tokenizer::from_gguf(stories()->gguf()), in, 2048, 4096, 64), Error);
}

// Anthropic Messages requests become OpenAI chat requests (the same pipeline); answers come back in its shape.
TEST(Anthropic, RequestsBecomeChatRequests) {
    json a = json::parse(R"({"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "Be brief."}],
        "stop_sequences": ["END"], "temperature": 0.2, "top_k": 5, "metadata": {"user_id": "u"},
        "thinking": {"type": "enabled", "budget_tokens": 10},
        "messages": [{"role": "user", "content": "Hi"},
                     {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm"}, {"type": "text", "text": "Hello"}]},
                     {"role": "user", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]}]})");
    json o = anthropic_to_openai(a, false);
    EXPECT_EQ(o["max_tokens"], 9);
    EXPECT_EQ(o["stop"], json({"END"}));
    EXPECT_EQ(o["top_k"], 5);
    ASSERT_EQ(o["messages"].size(), 4u);
    EXPECT_EQ(o["messages"][0]["role"], "system");
    ServerLimits lim{};
    lim.n_vocab = 512;
    ParsedRequest pr = parse_request(o, true, lim);
    ASSERT_EQ(pr.chat_messages.size(), 4u);
    EXPECT_EQ(pr.chat_messages[0]["content"], "Be brief.");
    EXPECT_EQ(pr.chat_messages[2]["content"], "Hello");
    EXPECT_EQ(pr.chat_messages[2]["reasoning_content"], "hmm");  // the thinking block, for templates that show it
    EXPECT_EQ(o["chat_template_kwargs"]["enable_thinking"], true);
    EXPECT_EQ(
        anthropic_to_openai(
            json::parse(
                R"({"max_tokens": 5, "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "x"}]})"),
            false)["chat_template_kwargs"]["enable_thinking"],
        false);
    EXPECT_THROW(
        anthropic_to_openai(
            json::parse(R"({"max_tokens": 5, "thinking": true, "messages": [{"role": "user", "content": "x"}]})"),
            false),
        BadRequest);
    EXPECT_EQ(pr.chat_messages[3]["content"], "A\nB");
    EXPECT_EQ(pr.job.stop, std::vector<std::string>{"END"});
    EXPECT_FLOAT_EQ(pr.job.sampling.temp, 0.2f);
    // refused: no messages, no max_tokens (except when counting), images, tool blocks in the wrong role
    EXPECT_THROW(anthropic_to_openai(json::parse(R"({"max_tokens": 5, "messages": []})"), false), BadRequest);
    EXPECT_THROW(anthropic_to_openai(json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), false),
                 BadRequest);
    EXPECT_NO_THROW(anthropic_to_openai(json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"), true));
    EXPECT_THROW(
        anthropic_to_openai(
            json::parse(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]})"), false),
        BadRequest);
    EXPECT_THROW(
        anthropic_to_openai(
            json::parse(
                R"({"max_tokens": 5, "messages": [{"role": "assistant", "content": [{"type": "tool_result"}]}]})"),
            false),
        BadRequest);
    EXPECT_THROW(
        anthropic_to_openai(
            json::parse(
                R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_use", "name": "f"}]}]})"),
            false),
        BadRequest);
    // tools: definitions, tool_choice, a tool_use turn and its tool_result
    json t = anthropic_to_openai(
        json::parse(R"({"max_tokens": 5, "tools": [{"name": "f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": true},
        "messages": [{"role": "user", "content": "x"},
                     {"role": "assistant", "content": [{"type": "text", "text": "Calling."}, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}}]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "42"}]},
                                                  {"type": "text", "text": "Thanks"}]}]})"),
        false);
    ParsedRequest tp = parse_request(t, true, lim);
    EXPECT_EQ(tp.tool_choice, ParsedRequest::ToolChoice::NAMED);
    EXPECT_FALSE(tp.parallel_tool_calls);
    ASSERT_EQ(tp.chat_messages.size(), 4u);
    EXPECT_EQ(tp.chat_messages[1]["tool_calls"][0]["function"]["arguments"]["a"], 1);  // as an object, for the template
    EXPECT_EQ(tp.chat_messages[1]["content"], "Calling.");
    EXPECT_EQ(tp.chat_messages[2]["role"], "tool");
    EXPECT_EQ(tp.chat_messages[2]["tool_call_id"], "toolu_1");
    EXPECT_EQ(tp.chat_messages[2]["content"], "42");
    EXPECT_EQ(tp.chat_messages[3]["content"], "Thanks");
    json tu = anthropic_message("msg_2", "m", ChatDelta{"", "", {{"f", R"({"a":1})", "toolu_9"}}}, "tool_calls", "", 10,
                                3, 0);
    ASSERT_EQ(tu["content"].size(), 1u);
    EXPECT_EQ(tu["content"][0]["type"], "tool_use");
    EXPECT_EQ(tu["content"][0]["input"]["a"], 1);
    EXPECT_EQ(tu["stop_reason"], "tool_use");
    // answers
    json m = anthropic_message("msg_1", "m", ChatDelta{"", "hi", {}}, "stop", "END", 10, 3, 4);
    EXPECT_EQ(m["stop_reason"], "stop_sequence");
    EXPECT_EQ(m["stop_sequence"], "END");
    EXPECT_EQ(m["usage"]["input_tokens"], 6);
    EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 4);
    EXPECT_EQ(anthropic_stop_reason("length", ""), "max_tokens");
    EXPECT_EQ(anthropic_stop_reason("stop", ""), "end_turn");
    EXPECT_EQ(anthropic_error(503, "x")["error"]["type"], "overloaded_error");
    // thinking: a thinking block first (empty signature)
    json th = anthropic_message("msg_3", "m", ChatDelta{"Let me see.", "Yes.", {}}, "stop", "", 1, 1, 0);
    ASSERT_EQ(th["content"].size(), 2u);
    EXPECT_EQ(th["content"][0], json::parse(R"({"type": "thinking", "thinking": "Let me see.", "signature": ""})"));
    EXPECT_EQ(th["content"][1]["text"], "Yes.");
}

// A streamed Anthropic message: thinking, text and tool_use blocks open in turn with increasing indices, a
// thinking block ends with its signature_delta, and the blocks add up to the blocking message's content.
TEST(Anthropic, StreamBlocksAddUpToTheMessage) {
    AnthropicStream st;
    std::vector<AnthropicStream::Event> ev;
    auto add = [&](std::vector<AnthropicStream::Event> e) {
        for (auto& x : e) ev.push_back(std::move(x));
    };
    const ChatDelta parts[] = {{"Let me ", "", {}},
                               {"see.", "", {}},
                               {"", "Calling", {}},
                               {"", " now.", {}},
                               {"", "", {{"f", R"({"a":1})", "toolu_1"}, {"g", "{}", "toolu_2"}}}};
    ChatDelta whole;
    for (const auto& p : parts) {
        add(st.push(p));
        whole.append(ChatDelta(p));
    }
    add(st.finish());
    EXPECT_EQ(st.n_calls(), 2u);
    // rebuild the content the way a client does
    json content = json::array();
    int open = -1;
    for (const auto& [type, body] : ev) {
        if (type == "content_block_start") {
            EXPECT_EQ(body["index"], int(content.size()));
            EXPECT_EQ(open, -1) << "a block opened before the last one closed";
            content.push_back(body["content_block"]);
            open = body["index"];
        } else if (type == "content_block_delta") {
            ASSERT_EQ(body["index"], open);
            json& b = content[size_t(open)];
            const json& d = body["delta"];
            if (d["type"] == "thinking_delta")
                b["thinking"] = b["thinking"].get<std::string>() + d["thinking"].get<std::string>();
            else if (d["type"] == "text_delta") b["text"] = b["text"].get<std::string>() + d["text"].get<std::string>();
            else if (d["type"] == "input_json_delta") b["input"] = json::parse(d["partial_json"].get<std::string>());
            else if (d["type"] == "signature_delta") b["signature"] = d["signature"];
        } else if (type == "content_block_stop") {
            EXPECT_EQ(body["index"], open);
            open = -1;
        }
    }
    EXPECT_EQ(open, -1);
    EXPECT_EQ(content, anthropic_message("m", "m", whole, "tool_calls", "", 1, 1, 0)["content"]);
    AnthropicStream empty;
    auto e = empty.finish();
    ASSERT_EQ(e.size(), 2u);
    EXPECT_EQ(e[0].second["content_block"]["type"], "text");
}

// OpenAI Responses requests become chat requests; refused fields are named.
TEST(Responses, RequestsBecomeChatRequests) {
    json c = responses_to_chat(json::parse(R"({"instructions": "Be brief.", "max_output_tokens": 7, "temperature": 0.1,
        "input": [{"role": "developer", "content": "Rules."}, {"type": "message", "role": "user",
                   "content": [{"type": "input_text", "text": "A"}, {"type": "input_text", "text": "B"}]}]})"));
    EXPECT_EQ(c["max_tokens"], 7);
    ServerLimits lim{};
    lim.n_vocab = 512;
    ParsedRequest pr = parse_request(c, true, lim);
    ASSERT_EQ(pr.chat_messages.size(), 3u);
    EXPECT_EQ(pr.chat_messages[0]["role"], "system");
    EXPECT_EQ(pr.chat_messages[0]["content"], "Be brief.");
    EXPECT_EQ(pr.chat_messages[1]["role"], "system");
    EXPECT_EQ(pr.chat_messages[2]["content"], "A\nB");
    EXPECT_EQ(responses_to_chat(json::parse(R"({"input": "hi"})"))["messages"][0]["role"], "user");
    for (const char* bad :
         {R"({"input": "x", "previous_response_id": "resp_1"})",
          R"({"input": "x", "text": {"format": {"type": "xml"}}})", R"({"input": [{"type": "function_call"}]})",
          R"({"input": [{"type": "computer_call_output", "call_id": "c"}]})",
          R"({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})", R"({"max_output_tokens": 3})"})
        EXPECT_THROW(responses_to_chat(json::parse(bad)), BadRequest) << bad;
    // tools: function tools become chat tools (hosted ones are left out); past calls, their outputs and reasoning
    // become the chat turns
    json t = responses_to_chat(json::parse(R"({"input": [{"role": "user", "content": "Weather?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need a tool."}]},
        {"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call", "call_id": "call_b", "name": "ping", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_a", "output": "{\"temp\": 21}"},
        {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "pong"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "21 degrees."}]}],
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}, {"type": "web_search"}],
        "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": false,
        "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}, "strict": true}}})"));
    ASSERT_EQ(t["messages"].size(), 5u) << t.dump();
    EXPECT_EQ(t["messages"][1]["role"], "assistant");
    EXPECT_EQ(t["messages"][1]["reasoning_content"], "Need a tool.");
    ASSERT_EQ(t["messages"][1]["tool_calls"].size(), 2u);
    EXPECT_EQ(t["messages"][1]["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"}");
    EXPECT_EQ(t["messages"][2]["role"], "tool");
    EXPECT_EQ(t["messages"][2]["tool_call_id"], "call_a");
    EXPECT_EQ(t["messages"][3]["content"], "pong");
    EXPECT_EQ(t["messages"][4]["content"][0]["text"], "21 degrees.");
    ASSERT_EQ(t["tools"].size(), 1u);
    EXPECT_EQ(t["tools"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(t["tool_choice"]["function"]["name"], "get_weather");
    EXPECT_EQ(t["parallel_tool_calls"], false);
    EXPECT_EQ(t["response_format"]["json_schema"]["schema"], json::parse(R"({"type": "object"})"));
    ParsedRequest tp = parse_request(t, true, lim);
    EXPECT_TRUE(tp.uses_tools());
    EXPECT_TRUE(tp.grammar);  // the json_schema
    // output items: reasoning, message, function calls, in that order
    ChatDelta a;
    a.reasoning = "Need a tool.";
    a.content = "Checking.";
    a.calls = {{"get_weather", R"({"city":"Paris"})", "call_x1"}};
    json items = response_items("resp_1", a);
    ASSERT_EQ(items.size(), 3u);
    EXPECT_EQ(items[0]["type"], "reasoning");
    EXPECT_EQ(items[0]["content"][0]["text"], "Need a tool.");
    EXPECT_EQ(items[1]["id"], "msg_1");
    EXPECT_EQ(items[2]["type"], "function_call");
    EXPECT_EQ(items[2]["id"], "fc_x1");
    EXPECT_EQ(items[2]["call_id"], "call_x1");
    EXPECT_EQ(items[2]["arguments"], R"({"city":"Paris"})");
    ChatDelta only_call;
    only_call.calls = a.calls;
    EXPECT_EQ(response_items("resp_1", only_call).size(), 1u);  // no empty message beside a call
    json r = response_object("resp_1", "m", 5, "incomplete", response_items("resp_1", ChatDelta{"", "hello", {}}),
                             {10, 3, 2});
    EXPECT_EQ(r["output"][0]["content"][0]["text"], "hello");
    EXPECT_EQ(r["output_text"], "hello");
    EXPECT_EQ(r["incomplete_details"]["reason"], "max_output_tokens");
    EXPECT_EQ(r["usage"]["total_tokens"], 13);
}

// A streamed response: items open as their kind first appears and close before the next one, with consistent
// ids and indices, and the final Response is the one a blocking request gets.
TEST(Responses, StreamEventsBuildTheSameResponse) {
    ResponseStream rs("resp_9", "m", 5);
    std::vector<ResponseStream::Event> ev = rs.start();
    auto add = [&](std::vector<ResponseStream::Event> e) {
        for (auto& x : e) ev.push_back(std::move(x));
    };
    add(rs.push(ChatDelta{"Let me ", "", {}}));
    add(rs.push(ChatDelta{"think.", "", {}}));
    add(rs.push(ChatDelta{"", "Checking", {}}));
    add(rs.push(ChatDelta{"", " now.", {}}));
    add(rs.push(ChatDelta{"", "", {{"get_weather", R"({"city":"Paris"})", "call_x1"}, {"ping", "{}", "call_x2"}}}));
    add(rs.finish("completed", {4, 9, 0}));
    std::vector<std::string> types;
    for (const auto& [type, body] : ev) types.push_back(type);
    const std::vector<std::string> want = {"response.created",
                                           "response.in_progress",
                                           "response.output_item.added",
                                           "response.reasoning_text.delta",
                                           "response.reasoning_text.delta",
                                           "response.reasoning_text.done",
                                           "response.output_item.done",
                                           "response.output_item.added",
                                           "response.content_part.added",
                                           "response.output_text.delta",
                                           "response.output_text.delta",
                                           "response.output_text.done",
                                           "response.content_part.done",
                                           "response.output_item.done",
                                           "response.output_item.added",
                                           "response.function_call_arguments.delta",
                                           "response.function_call_arguments.done",
                                           "response.output_item.done",
                                           "response.output_item.added",
                                           "response.function_call_arguments.delta",
                                           "response.function_call_arguments.done",
                                           "response.output_item.done",
                                           "response.completed"};
    EXPECT_EQ(types, want);
    // every event of an item names its id and index; added/done pairs agree
    std::map<int, std::string> ids;
    for (const auto& [type, body] : ev) {
        if (type == "response.output_item.added") {
            ids[body["output_index"]] = body["item"]["id"];
        } else if (body.contains("item_id")) {
            EXPECT_EQ(ids[body["output_index"]], body["item_id"]) << type;
        }
    }
    EXPECT_EQ(ids.size(), 4u);
    const json final = ev.back().second["response"];
    ChatDelta whole{"Let me think.",
                    "Checking now.",
                    {{"get_weather", R"({"city":"Paris"})", "call_x1"}, {"ping", "{}", "call_x2"}}};
    EXPECT_EQ(final["output"], response_items("resp_9", whole));
    EXPECT_EQ(final["output_text"], "Checking now.");
    // nothing at all: one empty message, as a blocking request has
    ResponseStream empty("resp_8", "m", 5);
    auto e = empty.finish("completed", {});
    EXPECT_EQ(e.back().second["response"]["output"], response_items("resp_8", ChatDelta{}));
}

// Reasoning split out of an answer, the same whichever way the text is cut into stream pieces.
TEST(Reasoning, SplitsThinkingFromTheAnswerAcrossAnyPieces) {
    struct Case {
        ReasoningFormat f;
        bool inside;
        std::string text, reasoning, content;
        ThinkTags tags = {};
    };
    const ThinkTags mistral{"[THINK]", "[/THINK]"};
    const Case cases[] = {
        {ReasoningFormat::DEEPSEEK, false, "[THINK]plan[/THINK]Answer", "plan", "Answer", mistral},  // Magistral
        {ReasoningFormat::DEEPSEEK, false, "<think>x</think>[THINK]y", "x", "[THINK]y", ThinkTags{}},
        {ReasoningFormat::DEEPSEEK, false, "<think>x</think>y", "", "<think>x</think>y", mistral},  // not its tags
        {ReasoningFormat::DEEPSEEK, false, "<think>a b</think>\n\nAnswer </think>", "a b", "Answer </think>"},
        {ReasoningFormat::DEEPSEEK, false, "\n <think>x</think>y", "x", "y"},
        {ReasoningFormat::DEEPSEEK, true, "reason <th</think>\nAns", "reason <th", "Ans"},
        {ReasoningFormat::DEEPSEEK, false, "Hello <think> x", "", "Hello <think> x"},
        {ReasoningFormat::DEEPSEEK, false, "<think>cut off", "cut off", ""},
        {ReasoningFormat::DEEPSEEK, false, "<thin", "", "<thin"},
        {ReasoningFormat::NONE, false, "<think>a</think>b", "", "<think>a</think>b"},
        {ReasoningFormat::DEEPSEEK_LEGACY, false, "<think>a</think>\nb", "a", "<think>a</think>b"},
    };
    for (const auto& c : cases) {
        for (size_t piece : {size_t(1), size_t(2), size_t(3), size_t(7), size_t(1000)}) {
            ReasoningSplitter sp(c.f, c.inside, c.tags);
            std::string r, t;
            for (size_t i = 0; i < c.text.size(); i += piece) {
                auto d = sp.push(c.text.substr(i, piece));
                r += d.reasoning;
                t += d.content;
            }
            auto d = sp.finish();
            r += d.reasoning;
            t += d.content;
            EXPECT_EQ(r, c.reasoning) << c.text << " in pieces of " << piece;
            EXPECT_EQ(t, c.content) << c.text << " in pieces of " << piece;
        }
    }
    EXPECT_TRUE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n"));
    EXPECT_TRUE(prompt_opens_thinking("[INST]x[/INST][THINK]", mistral));
    EXPECT_FALSE(prompt_opens_thinking("[INST]x[/INST][THINK]"));
    EXPECT_FALSE(prompt_opens_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    EXPECT_THROW(reasoning_format_from_name("thoughts"), Error);
    // thinking off: an opened block is closed empty; a template that closes it itself is left alone
    EXPECT_EQ(close_thinking("<｜Assistant｜><think>\n", ""), "<｜Assistant｜><think>\n</think>");
    EXPECT_EQ(close_thinking("<|im_start|>assistant\n<think>\n\n</think>\n\n", ""),
              "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    EXPECT_EQ(close_thinking("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "{{ '<|START_THINKING|>' }}"),
              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>");
    EXPECT_EQ(close_thinking("<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>", "no thinking here"),
              "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>");
}

// Tool calls in answers, in the formats the templates teach; text that only looks like a call stays text.
TEST(ToolCalls, ParsesTheFormatsOfTheCommonTemplates) {
    auto one = [](ToolFormat f, const std::string& text) { return parse_tool_calls(f, text); };
    auto h = one(
        ToolFormat::HERMES,
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
        "<tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}</tool_call>");
    ASSERT_EQ(h.calls.size(), 2u);
    EXPECT_EQ(h.calls[0].name, "get_weather");
    EXPECT_EQ(h.calls[0].arguments, R"({"city":"Paris"})");
    EXPECT_EQ(h.calls[1].name, "search");
    EXPECT_EQ(h.content, "Let me check.");
    auto cut =
        one(ToolFormat::HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {}}");  // cut off before the closing tag
    ASSERT_EQ(cut.calls.size(), 1u);
    auto cut2 = one(ToolFormat::HERMES,
                    "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n<tool_call>{\"name\": \"f\", \"argu");
    ASSERT_EQ(cut2.calls.size(), 1u);  // the whole call stands, the one cut off by the length limit is dropped
    EXPECT_EQ(cut2.content, "");
    EXPECT_EQ(cut2.cut, "<tool_call>{\"name\": \"f\", \"argu");
    auto fake = one(ToolFormat::HERMES, "I would write <tool_call>not json</tool_call> here.");
    EXPECT_TRUE(fake.calls.empty());
    EXPECT_EQ(fake.content, "I would write <tool_call>not json</tool_call> here.");
    auto l =
        one(ToolFormat::LLAMA3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}");
    ASSERT_EQ(l.calls.size(), 1u);
    EXPECT_EQ(l.calls[0].arguments, R"({"city":"Paris"})");
    auto l2 = one(ToolFormat::LLAMA3, R"({"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": 1}})");
    ASSERT_EQ(l2.calls.size(), 2u);
    EXPECT_EQ(l2.calls[1].name, "b");
    EXPECT_TRUE(one(ToolFormat::LLAMA3, "The answer is {1, 2}.").calls.empty());
    auto m = one(ToolFormat::MISTRAL, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}]");
    ASSERT_EQ(m.calls.size(), 1u);
    EXPECT_EQ(m.calls[0].arguments, R"({"a":1})");  // arguments given as JSON text
    auto g = one(ToolFormat::GENERIC, R"({"tool_calls": [{"name": "f", "arguments": {"k": [1]}}], "content": "ok"})");
    ASSERT_EQ(g.calls.size(), 1u);
    EXPECT_EQ(g.content, "ok");
    EXPECT_TRUE(one(ToolFormat::GENERIC, "plain text").calls.empty());
    EXPECT_TRUE(one(ToolFormat::NONE, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>").calls.empty());
    EXPECT_EQ(tool_format_for_template("{{ '<tool_call>' }}"), ToolFormat::HERMES);
    EXPECT_EQ(tool_format_for_template("[TOOL_CALLS]"), ToolFormat::MISTRAL);
    EXPECT_EQ(tool_format_for_template("<|start_header_id|>{% if tools %}"), ToolFormat::LLAMA3);
    EXPECT_EQ(tool_format_for_template("{{ messages }}"), ToolFormat::NONE);
    EXPECT_EQ(tool_format_for_template("'[TOOL_CALLS]' + name + '[ARGS]'"), ToolFormat::MISTRAL_ARGS);
    EXPECT_EQ(tool_format_for_template("<tool_call>\n<function=x>\n<parameter=y>"), ToolFormat::XML);
    // Mistral's newer form, with and without a call id, several calls
    auto ma = one(ToolFormat::MISTRAL_ARGS,
                  "Sure.[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]ping[ARGS]{}");
    ASSERT_EQ(ma.calls.size(), 2u);
    EXPECT_EQ(ma.calls[0].name, "get_weather");
    EXPECT_EQ(ma.calls[0].arguments, R"({"city":"Paris"})");
    EXPECT_EQ(ma.calls[1].name, "ping");
    EXPECT_EQ(ma.content, "Sure.");
    EXPECT_EQ(one(ToolFormat::MISTRAL, "[TOOL_CALLS]f[ARGS]{\"a\": 1}").calls.size(),
              1u);  // either form, either format
    EXPECT_TRUE(one(ToolFormat::MISTRAL_ARGS, "[TOOL_CALLS]f[ARGS]{not json").calls.empty());
    // XML (Qwen3-Coder): raw text for string parameters (by the tool's schema), JSON for the others
    const json xtools =
        json::parse(R"([{"type": "function", "function": {"name": "write", "parameters": {"type": "object",
        "properties": {"path": {"type": "string"}, "code": {"type": "string"}, "lines": {"type": "integer"}, "opts": {"type": "object"}}}}}])");
    const std::string xml =
        "I will write it.\n<tool_call>\n<function=write>\n<parameter=path>\n42\n</parameter>\n"
        "<parameter=code>\n<div>\n  a < b\n</div>\n</parameter>\n<parameter=lines>\n3\n</parameter>\n"
        "<parameter=opts>\n{\"x\": true}\n</parameter>\n</function>\n</tool_call>";
    auto x = parse_tool_calls(ToolFormat::XML, xml, xtools);
    ASSERT_EQ(x.calls.size(), 1u);
    EXPECT_EQ(x.calls[0].name, "write");
    EXPECT_EQ(json::parse(x.calls[0].arguments),
              json::parse(R"({"path": "42", "code": "<div>\n  a < b\n</div>", "lines": 3, "opts": {"x": true}})"));
    EXPECT_EQ(x.content, "I will write it.");
    EXPECT_EQ(json::parse(parse_tool_calls(ToolFormat::XML, xml).calls[0].arguments)["path"],
              42);  // no schema: JSON when it reads
    auto xcut =
        parse_tool_calls(ToolFormat::XML,
                         "<tool_call>\n<function=write>\n<parameter=path>\na\n</parameter>\n</function>\n</tool_call>\n"
                         "<tool_call>\n<function=write>\n<parameter=pa",
                         xtools);
    ASSERT_EQ(xcut.calls.size(), 1u);  // the one cut off by the length limit is dropped
    EXPECT_EQ(xcut.content, "");
    EXPECT_EQ(xcut.cut, "<tool_call>\n<function=write>\n<parameter=pa");
    EXPECT_TRUE(parse_tool_calls(ToolFormat::XML, "<tool_call>\n<function=f>\n<parameter=a>\nx", xtools).calls.empty());
    // a value holding the format's own closing tags (code), as the grammar allows: only "\n</parameter>" ends it
    const std::string code = "x</parameter>y\n</function>\n</tool_call>\nz";
    auto xcode = parse_tool_calls(
        ToolFormat::XML,
        "<tool_call>\n<function=write>\n<parameter=code>\n" + code + "\n</parameter>\n</function>\n</tool_call>",
        xtools);
    ASSERT_EQ(xcode.calls.size(), 1u);
    EXPECT_EQ(json::parse(xcode.calls[0].arguments)["code"], code);
    // no newline before the closing tag: still read
    auto tight = parse_tool_calls(
        ToolFormat::XML, "<tool_call><function=write><parameter=path>a.txt</parameter></function></tool_call>", xtools);
    ASSERT_EQ(tight.calls.size(), 1u);
    EXPECT_EQ(json::parse(tight.calls[0].arguments)["path"], "a.txt");
    // invalid UTF-8 in a value: replaced, not an exception
    EXPECT_EQ(
        parse_tool_calls(
            ToolFormat::XML,
            "<tool_call>\n<function=write>\n<parameter=path>\na\xff\n</parameter>\n</function>\n</tool_call>", xtools)
            .calls.size(),
        1u);
}

// The tool-call format of the real templates of llama.cpp's models/templates (fetched by
// scripts/fetch-chat-templates.sh, as for the Jinja conformance test): each family gets its format.
TEST(ToolCalls, RealTemplatesGetTheirFamilysFormat) {
    const char* env = std::getenv("TANDEM_CHAT_TEMPLATES");
    const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "/root";
    const std::string dir = env && *env ? env : home + "/.cache/tandem/chat-templates";
    const std::vector<std::pair<const char*, ToolFormat>> want = {
        {"Qwen3-Coder", ToolFormat::XML},
        {"Qwen3.5-4B", ToolFormat::XML},
        {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", ToolFormat::XML},
        {"StepFun3.5-Flash", ToolFormat::XML},
        {"Qwen-Qwen2.5-7B-Instruct", ToolFormat::HERMES},
        {"Qwen-Qwen3-0.6B", ToolFormat::HERMES},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", ToolFormat::HERMES},
        {"Mistral-Small-3.2-24B-Instruct-2506", ToolFormat::MISTRAL_ARGS},
        {"unsloth-mistral-Devstral-Small-2507", ToolFormat::MISTRAL_ARGS},
        {"mistralai-Ministral-3-14B-Reasoning-2512", ToolFormat::MISTRAL_ARGS},
        {"mistralai-Mistral-Nemo-Instruct-2407", ToolFormat::MISTRAL},
        {"meta-llama-Llama-3.1-8B-Instruct", ToolFormat::LLAMA3},
        {"meta-llama-Llama-3.3-70B-Instruct", ToolFormat::LLAMA3},
        {"deepseek-ai-DeepSeek-V3.1", ToolFormat::DEEPSEEK_V31},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", ToolFormat::DEEPSEEK},
        {"openai-gpt-oss-120b", ToolFormat::HARMONY},
    };
    for (const auto& [name, f] : want) {
        const std::string path = dir + "/" + name + ".jinja";
        ASSERT_TRUE(std::ifstream(path).good())
            << path << ": run scripts/fetch-chat-templates.sh (or set TANDEM_CHAT_TEMPLATES)";
        EXPECT_EQ(int(tool_format_for_template(test::read_file(path))), int(f)) << name;
    }
    // and their thinking tags
    const std::vector<std::pair<const char*, std::string>> tags = {
        {"mistralai-Ministral-3-14B-Reasoning-2512", "[THINK]"},
        {"CohereForAI-c4ai-command-r7b-12-2024-tool_use", "<|START_THINKING|>"},
        {"ByteDance-Seed-OSS", "<seed:think>"},
        {"Qwen-Qwen3-0.6B", "<think>"},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "<think>"}};
    for (const auto& [name, open] : tags)
        EXPECT_EQ(think_tags_for_template(test::read_file(dir + "/" + name + ".jinja")).open, open) << name;
}

namespace {

// Feeds an answer to a ChatAnswerParser in pieces of `piece` bytes and gathers what comes out.
ChatDelta parse_in_pieces(const std::string& text, size_t piece, ToolFormat f, bool tools, bool starts_inside = false,
                          ReasoningFormat rf = ReasoningFormat::DEEPSEEK) {
    ChatAnswerParser p(rf, starts_inside, f, tools);
    ChatDelta all;
    for (size_t at = 0; at < text.size(); at += piece) all.append(p.push(text.substr(at, piece)));
    all.append(p.finish());
    return all;
}

const json kWeatherTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
     "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}}}])");

bool grammar_accepts(const std::string& gbnf, const std::string& text) {
    grammar::Matcher m(grammar::parse_gbnf(gbnf));
    return m.accept_bytes(text) && m.can_end();
}

}  // namespace

// Streamed answers: reasoning, content and calls come out the same whatever the piece boundaries; text before a
// call streams, the call is sent whole, and text that only looks like a call is content in the end.
TEST(ChatAnswer, SplitsReasoningContentAndCallsAtAnyPieceBoundary) {
    struct Case {
        ToolFormat f;
        bool tools;
        std::string text, reasoning, content;
        std::vector<std::pair<std::string, std::string>> calls;
    };
    const std::vector<Case> cases = {
        {ToolFormat::HERMES,
         true,
         "<think>weather?</think>\n\nLet me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
         "\"Paris\"}}\n</tool_call>",
         "weather?",
         "Let me look.\n",
         {{"get_weather", R"({"city":"Paris"})"}}},
        {ToolFormat::HERMES,
         true,
         "No call: <tool_call>broken</tool_call> ok",
         "",
         "No call: <tool_call>broken</tool_call> ok",
         {}},
        {ToolFormat::HERMES,
         false,
         "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
         "",
         "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>",
         {}},  // no tools in the request: never a call
        {ToolFormat::LLAMA3, true, " {\"name\": \"ping\", \"parameters\": {}}", "", "", {{"ping", "{}"}}},
        {ToolFormat::LLAMA3, true, "It is {warm}.", "", "It is {warm}.", {}},
        {ToolFormat::MISTRAL,
         true,
         "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": "
         "\"Oslo\"}}]",
         "",
         "",
         {{"ping", "{}"}, {"get_weather", R"({"city":"Oslo"})"}}},
        {ToolFormat::DEEPSEEK,
         true,
         "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": "
         "\"Rome\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "",
         "Checking.",
         {{"get_weather", R"({"city":"Rome"})"}}},
        {ToolFormat::DEEPSEEK,
         true,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>ping<｜tool▁sep｜>{}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
         "",
         "",
         {{"ping", "{}"}}},
        {ToolFormat::GENERIC,
         true,
         "{\"tool_calls\": [{\"name\": \"ping\", \"arguments\": {}}]}",
         "",
         "",
         {{"ping", "{}"}}},
        {ToolFormat::HARMONY,
         true,
         "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
         "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}",
         "Need weather.",
         "",
         {{"get_weather", R"({"city":"Paris"})"}}},
        {ToolFormat::HARMONY,
         false,
         "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello there.",
         "Think.",
         "Hello there.",
         {}},
        {ToolFormat::HARMONY, false, "Plain answer, no channels.", "", "Plain answer, no channels.", {}},
        {ToolFormat::MISTRAL_ARGS,
         true,
         "Ok.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Oslo\", \"days\": [1, 2]}[TOOL_CALLS]ping[ARGS]{}",
         "",
         "Ok.",
         {{"get_weather", R"({"city":"Oslo","days":[1,2]})"}, {"ping", "{}"}}},
        {ToolFormat::XML,
         true,
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>",
         "",
         "",
         {{"get_weather", R"({"city":"Oslo"})"}}},
        {ToolFormat::HERMES,
         true,
         "<tool_call>\n{\"name\": \"say\", \"arguments\": {\"text\": \"a \\\"quoted text {x\\\" end\", \"n\": "
         "1e2}}\n</tool_call>",
         "",
         "",
         {{"say", R"({"text":"a \"quoted text {x\" end","n":1e2})"}}},  // the model's own number text, escapes kept
    };
    for (const auto& c : cases) {
        for (size_t piece : {size_t(1), size_t(2), size_t(3), size_t(7), c.text.size()}) {
            ChatDelta d = parse_in_pieces(c.text, piece, c.f, c.tools);
            EXPECT_EQ(d.reasoning, c.reasoning) << c.text << " / " << piece;
            EXPECT_EQ(d.content, c.content) << c.text << " / " << piece;
            ASSERT_EQ(d.calls.size(), c.calls.size()) << c.text << " / " << piece;
            for (size_t k = 0; k < c.calls.size(); k++) {
                EXPECT_EQ(d.calls[k].name, c.calls[k].first);
                EXPECT_EQ(d.calls[k].arguments, c.calls[k].second);
            }
            // streamed arguments (OpenAI's way): the parts add up to the same calls, the text is the same
            ChatAnswerParser sp(ReasoningFormat::DEEPSEEK, false, c.f, c.tools);
            sp.stream_arguments(true);
            ChatDelta s;
            for (size_t at = 0; at < c.text.size(); at += piece) s.append(sp.push(c.text.substr(at, piece)));
            s.append(sp.finish());
            EXPECT_TRUE(s.calls.empty());
            EXPECT_EQ(s.reasoning, c.reasoning) << c.text << " / " << piece;
            EXPECT_EQ(s.content, c.content) << c.text << " / " << piece;
            std::vector<std::pair<std::string, std::string>> got;
            for (const auto& part : s.parts) {
                if (!part.name.empty()) {
                    ASSERT_EQ(part.index, got.size()) << c.text << ": a call's first part names it, in order";
                    got.push_back({part.name, ""});
                }
                ASSERT_LT(part.index, got.size()) << c.text << ": a part before its call's name";
                got[part.index].second += part.arguments;
            }
            EXPECT_EQ(got, c.calls) << c.text << " / " << piece;
        }
    }
    // arguments stream as they come: the name first, then more of the arguments with each piece
    {
        ChatAnswerParser sp(ReasoningFormat::DEEPSEEK, false, ToolFormat::HERMES, true);
        sp.stream_arguments(true);
        const std::string text = "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"text\": \"" +
                                 std::string(60, 'x') + "\"}}\n</tool_call>";
        size_t n_parts = 0, first_at = 0;
        for (size_t at = 0; at < text.size(); at += 4) {
            ChatDelta d = sp.push(text.substr(at, 4));
            if (!d.parts.empty() && n_parts == 0) first_at = at;
            n_parts += d.parts.size();
        }
        EXPECT_GE(n_parts, 15u);
        EXPECT_LT(first_at, 45u) << "the call's name went out late";
    }
    // a streamed call cut off by the length limit stays a partial call: its text is not repeated as content
    {
        ChatAnswerParser sp(ReasoningFormat::DEEPSEEK, false, ToolFormat::HERMES, true);
        sp.stream_arguments(true);
        ChatDelta d = sp.push("Ok. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par");
        d.append(sp.finish());
        EXPECT_EQ(d.content, "Ok. ");
        ASSERT_EQ(d.parts.size(), 1u);
        EXPECT_EQ(d.parts[0].arguments, "{\"city\":\"Par");
    }
    // call_prefixes on arbitrary text: no exception, and what it reports for a prefix of the text only grows
    std::mt19937 rng(7);
    const std::vector<std::string> atoms = {
        "{",      "}", "[", "]", "\"", ":", ",", " ", "\\", "\"name\"", "\"arguments\"", "\"f\"", "[TOOL_CALLS]",
        "[ARGS]", "x", "1"};
    // most texts begin with a call's header (random atoms rarely make one), some with two
    const std::vector<std::string> heads = {"", "{\"name\": \"f\", \"arguments\": ", "[TOOL_CALLS]f[ARGS]",
                                            "{\"name\": \"f\", \"arguments\": {}} {\"name\": \"g\", \"parameters\": "};
    int n_calls_seen = 0;
    for (int n = 0; n < 3000; n++) {
        std::string t = heads[rng() % heads.size()];
        const int len = int(rng() % 24);
        for (int k = 0; k < len; k++) t += atoms[rng() % atoms.size()];
        n_calls_seen +=
            int(call_prefixes(ToolFormat::HERMES, t).size() + call_prefixes(ToolFormat::MISTRAL_ARGS, t).size());
        for (ToolFormat f : {ToolFormat::HERMES, ToolFormat::MISTRAL_ARGS}) {
            std::vector<CallPrefix> before;
            CallScanner incremental(f);  // fed the growing text: the same as reading each prefix whole
            for (size_t cut = 0; cut <= t.size(); cut++) {
                const auto now = call_prefixes(f, t.substr(0, cut));
                const auto& inc = incremental.update(t.substr(0, cut));
                ASSERT_EQ(inc.size(), now.size()) << t.substr(0, cut);
                for (size_t i = 0; i < now.size(); i++) {
                    EXPECT_EQ(inc[i].name, now[i].name);
                    EXPECT_EQ(inc[i].arguments, now[i].arguments) << t.substr(0, cut);
                    EXPECT_EQ(inc[i].complete, now[i].complete);
                }
                for (size_t i = 0; i < std::min(before.size(), now.size()); i++) {
                    EXPECT_EQ(now[i].name, before[i].name) << t;
                    EXPECT_EQ(now[i].arguments.compare(0, before[i].arguments.size(), before[i].arguments), 0) << t;
                }
                before = now;
            }
        }
    }
    EXPECT_GT(n_calls_seen, 500) << "the random texts hold too few calls to test anything";
    // text before a marker is sent as it comes, not held until the end
    ChatAnswerParser p(ReasoningFormat::DEEPSEEK, false, ToolFormat::HERMES, true);
    EXPECT_EQ(p.push("Sure, <tool").content, "Sure, ");
    EXPECT_EQ(p.push("_call>{\"name\": \"ping\", \"arguments\": {}}").content, "");
    EXPECT_EQ(p.finish().calls.size(), 1u);
    EXPECT_EQ(tool_format_for_template("<|start|>assistant<|channel|>"), ToolFormat::HARMONY);
    EXPECT_EQ(tool_format_for_template("<｜tool▁call▁begin｜>' + name"), ToolFormat::DEEPSEEK_V31);
    EXPECT_EQ(tool_format_for_template("<｜tool▁call▁begin｜>' + type + '```json"), ToolFormat::DEEPSEEK);
}

// tool_choice "required" / named: the grammar accepts exactly calls of the tools with valid arguments, in the
// template's format, and what it accepts parses back into the same calls.
TEST(ToolCalls, RequiredCallGrammarAcceptsOnlyValidCalls) {
    const std::string hermes = tool_call_gbnf(ToolFormat::HERMES, kWeatherTools, "", false);
    const std::string call =
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>";
    EXPECT_TRUE(grammar_accepts(hermes, call));
    EXPECT_TRUE(grammar_accepts(hermes, "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"));
    EXPECT_FALSE(grammar_accepts(
        hermes,
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 3}}\n</tool_call>"));  // city required
    EXPECT_FALSE(grammar_accepts(
        hermes, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>"));  // no such tool
    EXPECT_FALSE(grammar_accepts(
        hermes, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}\n</tool_call>"));
    EXPECT_FALSE(grammar_accepts(hermes, "Sure! " + call));
    EXPECT_FALSE(grammar_accepts(hermes, call + "\n" + call));  // one call unless parallel
    EXPECT_TRUE(grammar_accepts(tool_call_gbnf(ToolFormat::HERMES, kWeatherTools, "", true), call + "\n" + call));
    const std::string named = tool_call_gbnf(ToolFormat::HERMES, kWeatherTools, "ping", false);
    EXPECT_FALSE(grammar_accepts(named, call));
    EXPECT_THROW(tool_call_gbnf(ToolFormat::HERMES, kWeatherTools, "nope", false), Error);
    EXPECT_THROW(tool_call_gbnf(ToolFormat::NONE, kWeatherTools, "", false), Error);
    // every format: a sentence of the grammar parses back into the call
    const std::vector<std::pair<ToolFormat, std::string>> sentences = {
        {ToolFormat::HERMES, call},
        {ToolFormat::LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"},
        {ToolFormat::MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]"},
        {ToolFormat::DEEPSEEK,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": "
         "\"Paris\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
        {ToolFormat::GENERIC, "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]}"},
        {ToolFormat::HARMONY,
         "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}"},
        {ToolFormat::MISTRAL_ARGS, "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}"},
        {ToolFormat::DEEPSEEK_V31,
         "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": "
         "\"Paris\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
        {ToolFormat::XML,
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"},
    };
    for (const auto& [f, text] : sentences) {
        EXPECT_TRUE(grammar_accepts(tool_call_gbnf(f, kWeatherTools, "", false), text)) << text;
        ChatDelta d = parse_in_pieces(text, 5, f, true);
        ASSERT_EQ(d.calls.size(), 1u) << text;
        EXPECT_EQ(d.calls[0].name, "get_weather");
        EXPECT_EQ(json::parse(d.calls[0].arguments)["city"], "Paris");
    }
    // tool_choice "auto": the answer written before a call is free; the format's trigger starts the call grammar
    // at its first byte, so the text from there on must be a valid call
    const std::vector<std::pair<ToolFormat, std::string>> lead_ins = {
        {ToolFormat::HERMES, "<think>I could write <tool_call> here.</think>\nLet me check. "},
        {ToolFormat::LLAMA3, "  "},
        {ToolFormat::MISTRAL, "Checking. "},
        {ToolFormat::DEEPSEEK, "<think>hm</think>"},
        {ToolFormat::GENERIC, "\n"},
        {ToolFormat::HARMONY, "<|channel|>analysis<|message|>The user wants weather.<|end|><|start|>assistant"},
        {ToolFormat::MISTRAL_ARGS, "One moment. "},
        {ToolFormat::DEEPSEEK_V31, "<think>hm</think>Checking. "},
        {ToolFormat::XML, "<think>\n<tool_call> is how I call.\n</think>\n\n"},
    };
    for (size_t i = 0; i < sentences.size(); i++) {
        const auto& [f, text] = sentences[i];
        const grammar::TriggerSpec spec = tool_call_triggers(f);
        grammar::TriggerScan scan(spec);
        const std::string lead = lead_ins[i].second;
        ASSERT_FALSE(scan.feed(spec, lead)) << "triggered inside the lead-in '" << lead << "'";
        std::optional<std::string> from;
        for (size_t at = 0; at < text.size() && !from; at += 3)
            if (auto fired = scan.feed(spec, text.substr(at, 3))) from = fired->text;
        ASSERT_TRUE(from) << "no trigger in " << text;
        const std::string rest = text.substr(text.size() - std::min(text.size(), from->size()));
        EXPECT_TRUE(grammar_accepts(tool_call_gbnf(f, kWeatherTools, "", false), text)) << text;
        grammar::Matcher m(grammar::parse_gbnf(tool_call_gbnf(f, kWeatherTools, "", false)));
        EXPECT_TRUE(m.accept_bytes(*from)) << "the grammar refuses the text from the trigger on: " << *from;
        EXPECT_EQ(text.compare(0, from->size(), *from), 0)
            << "the trigger did not start at the call's first byte: " << *from;
    }
    EXPECT_TRUE(grammar_accepts(tool_call_gbnf(ToolFormat::LLAMA3, kWeatherTools, "", false),
                                "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"));
    EXPECT_TRUE(tool_call_triggers(ToolFormat::NONE).words.empty());
    // XML grammar details: string values are any text without "\n</parameter>" (code with closing tags too),
    // other values are JSON of their schema, required parameters must be there, enums are their values
    const json xtools =
        json::parse(R"([{"type": "function", "function": {"name": "write", "parameters": {"type": "object",
        "properties": {"code": {"type": "string"}, "n": {"type": "integer"}, "mode": {"type": "string", "enum": ["a", "w"]}},
        "required": ["code"]}}}])");
    const std::string xg = tool_call_gbnf(ToolFormat::XML, xtools, "", false);
    auto xcall = [](const std::string& params) {
        return "<tool_call>\n<function=write>\n" + params + "</function>\n</tool_call>";
    };
    auto xparam = [](const std::string& n, const std::string& v) {
        return "<parameter=" + n + ">\n" + v + "\n</parameter>\n";
    };
    EXPECT_TRUE(grammar_accepts(xg, xcall(xparam("code", "<div>\n</div>\n</param> x"))));
    EXPECT_TRUE(grammar_accepts(
        xg, xcall(xparam("code", "x</parameter>y\n</function>\n</tool_call>\nz"))));  // parsed back: ParsesThe...
    EXPECT_TRUE(grammar_accepts(xg, xcall(xparam("code", "") + xparam("n", "12") + xparam("mode", "w"))));
    EXPECT_FALSE(grammar_accepts(xg, xcall(xparam("n", "12"))));  // code is required
    EXPECT_FALSE(grammar_accepts(xg, xcall(xparam("code", "x") + xparam("n", "1.5"))));  // not an integer
    EXPECT_FALSE(grammar_accepts(xg, xcall(xparam("code", "x") + xparam("mode", "r"))));  // not in the enum
    EXPECT_FALSE(grammar_accepts(xg, xcall(xparam("code", "a\n</parameter>\n"))));  // the closing tag ends the value
    EXPECT_FALSE(grammar_accepts(xg, xcall(xparam("code", "a\n\n</parameter>\nb"))));  // after a newline too
    std::string long_value(5000, 'x');  // right recursion: constant stack depth
    EXPECT_TRUE(grammar_accepts(xg, xcall(xparam("code", long_value))));
    EXPECT_TRUE(grammar_accepts(tool_call_gbnf(ToolFormat::MISTRAL_ARGS, kWeatherTools, "", true),
                                "[TOOL_CALLS]ping[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Rome\"}"));
}

// tool_choice "required" with parallel calls, cut by max_tokens (at every byte) after one whole call: the whole
// calls stand and nothing of the cut one is content, as OpenAI's clients expect (tool_calls, content null,
// finish_reason "length"); cut inside the first call, no call is claimed and the text stays content. Blocking and
// streamed (the partial call's streamed arguments are never a whole call's), in every format with parallel calls.
TEST(ToolCalls, ParallelCallsCutByTheLengthLimitKeepTheWholeOnes) {
    const std::vector<std::string> args = {R"({"city": "Paris", "days": 3})", R"({"city": "Oslo"})"};
    const std::vector<std::string> want = {R"({"city":"Paris","days":3})", R"({"city":"Oslo"})"};
    const std::vector<std::string> xml_params = {
        "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n",
        "<parameter=city>\nOslo\n</parameter>\n"};
    const std::string ds_begin = "<｜tool▁calls▁begin｜>", ds_call = "<｜tool▁call▁begin｜>", ds_sep = "<｜tool▁sep｜>",
                      ds_end = "<｜tool▁call▁end｜>", ds_all_end = "<｜tool▁calls▁end｜>";
    struct Case {
        ToolFormat f;
        std::string head, sep, tail;
        std::function<std::string(size_t)> call;  // the i-th call's text
    };
    auto named = [&](const char* key) {
        return
            [&, key](size_t i) { return "{\"name\": \"get_weather\", \"" + std::string(key) + "\": " + args[i] + "}"; };
    };
    const std::vector<Case> cases = {
        {ToolFormat::HERMES, "", "\n", "",
         [&](size_t i) { return "<tool_call>\n" + named("arguments")(i) + "\n</tool_call>"; }},
        {ToolFormat::XML, "", "\n", "",
         [&](size_t i) {
             return "<tool_call>\n<function=get_weather>\n" + xml_params[i] + "</function>\n</tool_call>";
         }},
        {ToolFormat::MISTRAL, "[TOOL_CALLS][", ", ", "]", named("arguments")},
        {ToolFormat::MISTRAL_ARGS, "", "", "", [&](size_t i) { return "[TOOL_CALLS]get_weather[ARGS]" + args[i]; }},
        {ToolFormat::LLAMA3, "<|python_tag|>", "; ", "", named("parameters")},
        {ToolFormat::GENERIC, "{\"tool_calls\": [", ", ", "]}", named("arguments")},
        {ToolFormat::DEEPSEEK_V31, ds_begin, "", ds_all_end,
         [&](size_t i) { return ds_call + "get_weather" + ds_sep + args[i] + ds_end; }},
        {ToolFormat::DEEPSEEK, ds_begin, "", ds_all_end,
         [&](size_t i) {
             return ds_call + "function" + ds_sep + "get_weather\n```json\n" + args[i] + "\n```" + ds_end;
         }},
    };
    for (const auto& c : cases) {
        const std::string text = c.head + c.call(0) + c.sep + c.call(1) + c.tail;
        ASSERT_TRUE(grammar_accepts(tool_call_gbnf(c.f, kWeatherTools, "", true), text)) << text;
        const size_t first_end = c.head.size() + c.call(0).size();  // the first call's text is all there
        for (size_t n = 0; n <= text.size(); n++) {
            const std::string cut = text.substr(0, n);
            ChatAnswerParser p(ReasoningFormat::DEEPSEEK, false, c.f, true, kWeatherTools);
            ChatDelta d = p.push(cut);
            d.append(p.finish());
            ASSERT_LE(d.calls.size(), 2u) << cut;
            for (size_t i = 0; i < d.calls.size(); i++) {  // only whole calls, each as it was written
                EXPECT_EQ(d.calls[i].name, "get_weather") << cut;
                EXPECT_EQ(d.calls[i].arguments, want[i]) << cut;
            }
            if (n >= first_end) EXPECT_GE(d.calls.size(), 1u) << "the whole first call is lost: " << cut;
            if (n == text.size()) EXPECT_EQ(d.calls.size(), 2u) << cut;
            if (d.calls.empty()) EXPECT_EQ(d.content, cut) << "no call: the text is content, nothing lost";
            else EXPECT_EQ(d.content, "") << "a cut call's text is not content: " << cut;
            // streamed: the whole calls' arguments add up to the same; the text of a call is never content
            for (size_t piece : {size_t(1), size_t(4)}) {
                ChatAnswerParser sp(ReasoningFormat::DEEPSEEK, false, c.f, true, kWeatherTools);
                sp.stream_arguments(true);
                ChatDelta s;
                for (size_t at = 0; at < cut.size(); at += piece) s.append(sp.push(cut.substr(at, piece)));
                s.append(sp.finish());
                std::vector<std::string> streamed;
                for (const auto& part : s.parts) {
                    if (!part.name.empty()) streamed.push_back("");
                    ASSERT_LT(part.index, streamed.size()) << cut;
                    streamed[part.index] += part.arguments;
                }
                ASSERT_GE(streamed.size(), d.calls.size()) << cut;
                ASSERT_LE(streamed.size(), 2u) << cut;
                for (size_t i = 0; i < d.calls.size(); i++) EXPECT_EQ(streamed[i], want[i]) << cut << " / " << piece;
                if (streamed.empty()) EXPECT_EQ(s.content, cut) << piece;
                else EXPECT_EQ(s.content, "") << cut << " / " << piece;
            }
        }
    }
}

// tools / tool_choice / parallel_tool_calls in a chat request, and the grammar a required call gets.
TEST(OpenAI, ParsesToolsAndToolChoice) {
    ServerLimits lim;
    lim.n_vocab = 100;
    auto req = [&](const std::string& extra) {
        json b = json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})");
        b.update(json::parse(extra));
        return parse_request(b, true, lim);
    };
    json tools = kWeatherTools;
    ParsedRequest r =
        req(R"({"tools": )" + tools.dump() + R"(, "tool_choice": "required", "parallel_tool_calls": false})");
    EXPECT_TRUE(r.uses_tools());
    EXPECT_EQ(r.tool_choice, ParsedRequest::ToolChoice::REQUIRED);
    EXPECT_FALSE(r.parallel_tool_calls);
    EXPECT_FALSE(r.grammar);
    apply_tool_choice(r, ToolFormat::HERMES);
    ASSERT_TRUE(r.grammar);
    r = req(R"({"tools": )" + tools.dump() + R"(, "tool_choice": {"type": "function", "function": {"name": "ping"}}})");
    EXPECT_EQ(r.tool_name, "ping");
    r = req(R"({"tools": )" + tools.dump() + R"(, "tool_choice": "none"})");
    EXPECT_FALSE(r.uses_tools());
    apply_tool_choice(r, ToolFormat::HERMES);
    EXPECT_FALSE(r.grammar);
    EXPECT_FALSE(req(R"({"tools": []})").uses_tools());
    for (
        const char* bad :
        {R"({"tools": {}})", R"({"tools": [{"type": "function"}]})",
         R"({"tools": [{"type": "function", "function": {"name": ""}}]})", R"({"tool_choice": "required"})",
         R"({"tool_choice": "sometimes", "tools": [{"type": "function", "function": {"name": "f"}}]})",
         R"({"tool_choice": {"type": "function", "function": {"name": "g"}}, "tools": [{"type": "function", "function": {"name": "f"}}]})"})
        EXPECT_THROW(req(bad), BadRequest) << bad;
    ParsedRequest both = req(R"({"tools": )" + tools.dump() +
                             R"(, "tool_choice": "required", "response_format": {"type": "json_object"}})");
    EXPECT_THROW(apply_tool_choice(both, ToolFormat::HERMES), BadRequest);
    ParsedRequest none_fmt = req(R"({"tools": )" + tools.dump() + R"(, "tool_choice": "required"})");
    EXPECT_THROW(apply_tool_choice(none_fmt, ToolFormat::NONE), BadRequest);
    // auto: a lazy call grammar triggered by the format's markers, unless the request brings its own grammar
    ParsedRequest autoc = req(R"({"tools": )" + tools.dump() + "}");
    apply_tool_choice(autoc, ToolFormat::HERMES);
    ASSERT_TRUE(autoc.grammar && autoc.lazy);
    EXPECT_EQ(autoc.lazy->words, std::vector<std::string>{"<tool_call>"});
    ParsedRequest own = req(R"({"tools": )" + tools.dump() + R"(, "response_format": {"type": "json_object"}})");
    apply_tool_choice(own, ToolFormat::HERMES);
    EXPECT_FALSE(own.lazy);
    ParsedRequest no_fmt = req(R"({"tools": )" + tools.dump() + "}");
    apply_tool_choice(no_fmt, ToolFormat::NONE);
    EXPECT_FALSE(no_fmt.grammar);
    // a schema the converter refuses: parsed, not constrained, in auto; a 400 when a call is required
    const std::string odd =
        R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "patternProperties": {"^x": {}}}}}])";
    ParsedRequest odd_auto = req(R"({"tools": )" + odd + "}");
    apply_tool_choice(odd_auto, ToolFormat::HERMES);
    EXPECT_FALSE(odd_auto.grammar);
    ParsedRequest odd_req = req(R"({"tool_choice": "required", "tools": )" + odd + "}");
    EXPECT_THROW(apply_tool_choice(odd_req, ToolFormat::HERMES), BadRequest);
    ParsedRequest typed =
        req(R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
        "properties": {"a": {"type": "string", "minLength": "1"}}, "required": [1]}}}]})");
    EXPECT_NO_THROW(apply_tool_choice(typed, ToolFormat::HERMES));  // wrong JSON types in a schema: not constrained
    EXPECT_FALSE(typed.grammar);
    EXPECT_TRUE(req(R"({"verbose": true})").verbose);  // llama-server's per-request __verbose
    EXPECT_FALSE(req("{}").verbose);
    EXPECT_THROW(req(R"({"verbose": 1})"), BadRequest);
    // llama-server's grammar_lazy / grammar_triggers
    ParsedRequest lazy = req(
        R"({"grammar": "root ::= \"x\"", "grammar_lazy": true, "grammar_triggers": [{"type": 1, "value": "Lily"}, {"type": 0, "value": "<tool_call>", "token": 5}]})");
    ASSERT_TRUE(lazy.lazy);
    EXPECT_EQ(lazy.lazy->words, (std::vector<std::string>{"Lily", "<tool_call>"}));
    EXPECT_FALSE(
        req(R"({"grammar": "root ::= \"x\"", "grammar_lazy": false, "grammar_triggers": [{"type": 1, "value": "a"}]})")
            .lazy);
    for (
        const std::string& bad : std::vector<std::string>{
            std::string(R"({"grammar_lazy": true, "grammar_triggers": [{"type": 1, "value": "a"}]})"),
            R"({"grammar": "root ::= \"x\"", "grammar_lazy": true})",
            R"({"grammar": "root ::= \"x\"", "grammar_lazy": true, "grammar_triggers": [{"type": 2, "value": "a(*"}]})",
            R"({"grammar": "root ::= \"x\"", "grammar_lazy": true, "grammar_triggers": [{"type": 4, "value": "a"}]})",
            R"({"grammar": "root ::= \"x\"", "grammar_lazy": true, "grammar_triggers": [{"type": 1, "value": ""}]})",
            R"({"grammar": "root ::= \"x\"", "grammar_lazy": true, "grammar_triggers": [{"type": 1, "value": ")" +
                std::string(300, 'a') + R"("}]})",
            R"({"grammar": "root ::= \"x\"", "grammar_lazy": true, "grammar_triggers": "a"})",
            // a type beyond 32 bits is no small one (it once acted as 2 and as 0)
            R"({"grammar": "root ::= \"x\"", "grammar_lazy": true, "grammar_triggers": [{"type": 4294967298, "value": "a"}]})",
            R"({"grammar": "root ::= \"x\"", "grammar_lazy": true, "grammar_triggers": [{"type": 4294967296, "value": "a"}]})",
            R"({"grammar": "root ::= \"x\"", "grammar_lazy": true, "grammar_triggers": [{"type": -4294967294, "value": "a"}]})",
            R"({"grammar": "root ::= \"x\"", "grammar_lazy": true, "grammar_triggers": [{"type": 18446744073709551615, "value": "a"}]})"})
        EXPECT_THROW(req(bad), BadRequest) << bad;
    json with_prompt = messages_with_tool_prompt(json::parse(R"([{"role": "user", "content": "hi"}])"), tools);
    ASSERT_EQ(with_prompt.size(), 2u);
    EXPECT_EQ(with_prompt[0]["role"], "system");
    EXPECT_NE(with_prompt[0]["content"].get<std::string>().find("get_weather"), std::string::npos);
}

// /metrics (serve/metrics.h) as a pure function: every sample belongs to a family announced by # HELP and # TYPE
// (Prometheus rejects a page otherwise), the values are the engine's, llama-server's names are there too.
TEST(Metrics, PrometheusTextCarriesTheEngineCountersInValidFamilies) {
    server::EngineMetrics m;
    m.requests = 7;
    m.tokens_prompt = 120;
    m.tokens_cached = 20;
    m.tokens_generated = 300;
    m.seconds_generated = 1.5;
    m.spec.n_rounds_drafted = 40;
    m.spec.n_drafted = 160;
    m.spec.n_accept = 90;
    m.spec.accepted_at = {40, 30, 20};
    m.spec.by_proposer = {{SpecType::NGRAM, 25, 100, 50}};
    m.busy_slots = 2;
    m.n_slots = 4;
    m.itl.n = 3;
    m.itl.p50 = 12.5;
    const std::string text = server::prometheus_text(m, 11);
    std::map<std::string, std::string> value;  // sample (name with labels) -> value
    std::set<std::string> help, type;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
        ASSERT_FALSE(line.empty()) << "blank line in the page";
        if (line.rfind("# HELP ", 0) == 0) {
            help.insert(line.substr(7, line.find(' ', 7) - 7));
            continue;
        }
        if (line.rfind("# TYPE ", 0) == 0) {
            const std::string name = line.substr(7, line.find(' ', 7) - 7);
            const std::string t = line.substr(line.find(' ', 7) + 1);
            EXPECT_TRUE(t == "counter" || t == "gauge" || t == "summary") << line;
            type.insert(name);
            continue;
        }
        const size_t sp = line.rfind(' ');
        ASSERT_NE(sp, std::string::npos) << line;
        const std::string sample = line.substr(0, sp);
        const std::string family = sample.substr(0, sample.find_first_of("{"));
        const std::string base =
            family.size() > 6 && family.ends_with("_count") ? family.substr(0, family.size() - 6) : family;
        EXPECT_TRUE(help.count(base) && type.count(base)) << "sample without # HELP / # TYPE: " << line;
        char* end = nullptr;
        std::strtod(line.c_str() + sp + 1, &end);
        EXPECT_EQ(*end, '\0') << "not a number: " << line;
        value[sample] = line.substr(sp + 1);
    }
    EXPECT_EQ(value["tandem_requests_total"], "7");
    EXPECT_EQ(value["tandem_http_requests_total"], "11");
    EXPECT_EQ(value["tandem_spec_decode_num_accepted_tokens"], "90");
    EXPECT_EQ(value["tandem_slots_busy"], "2");
    EXPECT_EQ(value["llamacpp:prompt_tokens_total"], "100") << "llama-server counts prompt tokens not from the cache";
    EXPECT_EQ(value["llamacpp:predicted_tokens_seconds"], "200");
    EXPECT_EQ(value["tandem_spec_decode_proposer_rounds{proposer=\"ngram\"}"], "25");
    EXPECT_EQ(value["tandem_spec_decode_num_accepted_tokens_per_pos{position=\"1\"}"], "30");
    EXPECT_EQ(value["tandem_inter_token_latency_ms{quantile=\"0.5\"}"], "12.5");
    EXPECT_EQ(value["tandem_inter_token_latency_ms_count"], "3");
}

// The request front end (serve/front_end.h) without a socket: BOS rules, prompts of ids, context fitting and its
// error, truncation, chat templates, the Anthropic shape, and infill on a model that cannot fill in the middle.
TEST(FrontEnd, PreparesPromptsAndFitsThemInTheContext) {
    server::FrontEnd fe(*stories(), server::FrontEndOptions{});
    const Tokenizer& tok = fe.tokenizer();
    server::ServerLimits lim;
    lim.n_vocab = tok.n_vocab();
    lim.tokenize = [&](const std::string& t) { return tok.encode(t, false, true); };
    using server::Api;
    // text: BOS first (the vocabulary adds one); ids: as given; a mix: BOS before the leading text part only
    auto p = fe.prepare(R"({"prompt": "Once upon a time", "max_tokens": 4})", Api::Oai, false, lim, 256);
    ASSERT_EQ(p.prompts.size(), 1u);
    EXPECT_EQ(p.prompts[0].ids, tok.encode("Once upon a time", true, true));
    ASSERT_GE(tok.bos(), 0);
    EXPECT_EQ(p.prompts[0].ids[0], tok.bos());
    p = fe.prepare(R"({"prompt": [5, 6, 7]})", Api::Oai, false, lim, 256);
    EXPECT_EQ(p.prompts[0].ids, (std::vector<int32_t>{5, 6, 7}));
    p = fe.prepare(R"({"prompt": [[9, 10], "Tom"]})", Api::Oai, false, lim, 256);
    ASSERT_EQ(p.prompts.size(), 2u) << "an array of prompts is one job each";
    EXPECT_EQ(p.prompts[1].ids, tok.encode("Tom", true, true));
    p = fe.prepare(R"({"prompt": [5, " Tom", 6]})", Api::Oai, false, lim, 256);  // one prompt mixing ids and text
    std::vector<int32_t> mixed = {5};
    for (int32_t id : tok.encode(" Tom", false, true)) mixed.push_back(id);
    mixed.push_back(6);
    EXPECT_EQ(p.prompts[0].ids, mixed) << "no BOS before a text part that does not lead";
    // too long: the error carries the numbers; truncate_prompt_tokens keeps the last K
    std::string ids = "[";
    for (int i = 0; i < 40; i++) ids += std::to_string(5 + i) + (i + 1 < 40 ? "," : "]");
    try {
        fe.prepare(R"({"prompt": )" + ids + "}", Api::Oai, false, lim, 32);
        FAIL() << "a 40-token prompt fitted a 32-token context";
    } catch (const server::ContextExceeded& e) {
        EXPECT_EQ(e.n_prompt, 40u);
        EXPECT_EQ(e.n_ctx, 32);
        EXPECT_NE(std::string(e.what()).find("truncate_prompt_tokens"), std::string::npos) << e.what();
    }
    p = fe.prepare(R"({"prompt": )" + ids + R"(, "truncate_prompt_tokens": 10})", Api::Oai, false, lim, 32);
    EXPECT_TRUE(p.prompts[0].truncated);
    ASSERT_EQ(p.prompts[0].ids.size(), 10u);
    EXPECT_EQ(p.prompts[0].ids.front(), 35) << "the start is cut, the end kept";
    EXPECT_THROW(fe.prepare(R"({"prompt": []})", Api::Oai, false, lim, 256), server::BadRequest);
    EXPECT_THROW(fe.prepare(R"({"prompt": "x", "post_sampling_probs": true})", Api::Oai, false, lim, 256),
                 server::BadRequest);
    // chat: the template applied, then tokenized with BOS; the Anthropic shape becomes the same chat request
    p = fe.prepare(R"({"messages": [{"role": "user", "content": "hi"}]})", Api::Chat, false, lim, 256);
    EXPECT_EQ(p.prompts[0].ids, tok.encode(fe.chat_prompt(p.request), true, true));
    auto a = fe.prepare(R"({"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})", Api::Anthropic, false,
                        lim, 256);
    EXPECT_EQ(a.prompts[0].ids, p.prompts[0].ids);
    // infill needs FIM tokens, which stories260K lacks: 501, not a 400 or a crash
    EXPECT_THROW(fe.prepare(R"({"input_prefix": "a", "input_suffix": "b"})", Api::Native, true, lim, 256),
                 server::NotImplemented);
    EXPECT_THROW(fe.prepare(R"({"input_prefix": 5})", Api::Native, true, lim, 256), server::BadRequest);
}

// The prompts one after another through one engine with one slot, n_gen tokens each (to the length limit); each
// job's cached prompt tokens (n_cached) into *cached when given.
static std::vector<std::vector<int32_t>> run_prompts(const std::shared_ptr<const Model>& m, const EngineParams& ep,
                                                     int n_gen, const std::vector<std::vector<int32_t>>& prompts,
                                                     std::vector<int>* cached) {
    Engine e(m, nullptr, ep);
    std::vector<std::vector<int32_t>> outs;
    for (const auto& prompt : prompts) {
        JobRequest r = request(n_gen);
        r.prompt = prompt;
        auto j = e.submit(r);
        outs.push_back(drain(*j));
        EXPECT_EQ(j->finish_reason, "length") << j->error;
        if (cached) cached->push_back(j->n_cached);
    }
    return outs;
}

// Window-only caches in the server (issue 31, item 3): a slot reuses its cached prefix where the rings still hold
// the window of its end, and reads the prompt again where they do not; either way the tokens are those of a
// fresh engine with every position kept (--swa-full).
TEST(Engine, PromptPrefixReuseWithWindowOnlyCaches) {
    auto m = Model::load(test::synth_file("tiny-test-gemma3", "Q8_0"));
    std::vector<int32_t> p = {1};
    for (int i = 0; i < 600; i++) p.push_back(int32_t(3 + (i * 37) % 990));
    std::vector<int32_t> q(p.begin(), p.begin() + 50);  // a prefix further back than the rings' slack
    for (int i = 0; i < 40; i++) q.push_back(int32_t(5 + (i * 53) % 990));
    auto run = [&](bool swa_full, const std::vector<std::vector<int32_t>>& prompts, std::vector<int>* cached) {
        EngineParams ep;
        ep.n_ctx = 1600;
        ep.swa_full = swa_full;
        return run_prompts(m, ep, 8, prompts, cached);
    };
    std::vector<int> cached;
    const auto ring = run(false, {p, q, p, p}, &cached);
    EXPECT_EQ(ring[1], run(true, {q}, nullptr)[0]) << "a prefix the rings no longer hold";
    EXPECT_EQ(ring[0], run(true, {p}, nullptr)[0]);
    EXPECT_EQ(ring[2], ring[0]);
    EXPECT_EQ(ring[3], ring[0]) << "a prefix the rings hold";
    ASSERT_EQ(cached.size(), 4u);
    EXPECT_EQ(cached[1], 0) << "the rings no longer hold the window of position 50";
    EXPECT_EQ(cached[3], int(p.size()) - 1) << "the whole prompt but its last token is reused";
}

// Recurrent models in the server (issue 29): the next turn of a conversation whose earlier answer comes back
// different shares the earlier prompt only, which ends further back than the state's rollback window; the slot
// goes on from the checkpoint at that prompt's end (--ctx-checkpoints) instead of reading it all again, and the
// tokens are a fresh engine's. Without checkpoints it reads the prompt again.
TEST(Engine, RecurrentModelResumesTheNextTurnFromACheckpoint) {
    auto m = Model::load(test::synth_file("tiny-ref-qwen35", "Q8_0"));
    std::vector<int32_t> p = {1};
    for (int i = 0; i < 150; i++) p.push_back(int32_t(3 + (i * 37) % 990));
    auto run = [&](int checkpoints, const std::vector<std::vector<int32_t>>& prompts, std::vector<int>* cached) {
        EngineParams ep;
        ep.n_ctx = 512;
        ep.ctx_checkpoints = checkpoints;
        return run_prompts(m, ep, kRecurrentKeep + 8, prompts, cached);
    };
    const auto first = run(kCtxCheckpoints, {p}, nullptr)[0];
    ASSERT_FALSE(first.empty());
    std::vector<int32_t> q = p;  // the earlier answer rendered otherwise, then the user's next message
    for (int i = 0; i < 30; i++) q.push_back(int32_t(7 + (i * 53 + first[0]) % 990));
    ASSERT_NE(q[p.size()], first[0]);
    std::vector<int> cached;
    const auto turns = run(kCtxCheckpoints, {p, q}, &cached);
    EXPECT_EQ(turns[0], first);
    EXPECT_EQ(turns[1], run(kCtxCheckpoints, {q}, nullptr)[0]);
    ASSERT_EQ(cached.size(), 2u);
    EXPECT_EQ(cached[1], int(p.size()) - 1) << "the checkpoint at the end of the first prompt's prefill";
    std::vector<int> none;
    EXPECT_EQ(run(0, {p, q}, &none)[1], turns[1]);
    EXPECT_EQ(none[1], 0) << "without checkpoints the prompt is read again";
}
