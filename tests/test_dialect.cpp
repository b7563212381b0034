// The answer dialects (src/serve/dialect.h) and the Service's routes (tandem/server.h), without a socket: jobs
// filled by hand go through each API's dialect whole and streamed (the stream, put back together, must say what
// the whole answer says, whatever the pieces' boundaries), failures take each API's error shape, and the Service
// answers requests on a real engine through a recording responder.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "serve/answer_json.h"
#include "serve/dialect.h"
#include "serve/engine.h"
#include "serve/front_end.h"
#include "tandem/model.h"
#include "tandem/server.h"
#include "tandem/suffix_cache.h"
#include "test_util.h"

using namespace tandem;
using namespace tandem::server;
using json = nlohmann::ordered_json;

namespace {

std::shared_ptr<const Model> dialect_stories() {
    static auto m = Model::load(test::shared_file("models/stories260K.gguf"));
    return m;
}

// A Responder that keeps what it was told: the status, the body or the events.
class Recorder : public Responder {
public:
    int status = 0;
    std::string type, body;
    bool streamed = false, ended = false;
    std::vector<SseEvent> events;
    bool send(int st, const std::string& t, const std::string& b, const Headers&) override {
        status = st;
        type = t;
        body = b;
        return true;
    }
    bool begin_stream(int st, const std::string& t, const Headers&) override {
        status = st;
        type = t;
        streamed = true;
        return true;
    }
    bool write(std::string_view) override { return true; }
    bool write_event(const std::string& event, const std::string& data) override {
        events.push_back({event, data});
        return true;
    }
    void end_stream() override { ended = true; }
    bool client_gone() const override { return false; }
    bool answered() const override { return status != 0; }
    json body_json() const { return json::parse(body); }
};

// A finished job that delivered `pieces` (a token each, with its text released at once), then ended with reason.
std::shared_ptr<Job> finished_job(const std::vector<std::string>& pieces, const std::string& reason = "stop",
                                  const std::string& error = "", int status = 500) {
    auto j = std::make_shared<Job>(JobRequest{});
    int32_t id = 10;
    for (const auto& p : pieces) j->push(p, {id++}, {}, {p.size()});
    j->n_prompt = 5;
    j->n_generated = int(pieces.size());
    j->finish(reason, error, status);
    return j;
}

struct DialectFixture {
    FrontEnd fe;
    AnswerContext ctx{fe, "stories", ReasoningFormat::DEEPSEEK, false};
    Generation g;
    // opt: the chat template (and with it the tool-call format) instead of the model's
    DialectFixture(Api api, std::shared_ptr<Job> job, const FrontEndOptions& opt = {}) : fe(*dialect_stories(), opt) {
        g.api = api;
        g.prompts.push_back({{1, 2, 3, 4, 5}, false, false});
        g.jobs.push_back(std::move(job));
        g.job_prompt = {0};
        g.id = "id-1";
        g.created = 1;
    }
    json whole() {
        HttpRequest req;
        Recorder r;
        Call call{req, r, {}};
        auto d = make_dialect(ctx, g);
        answer_whole(call, g, *d);
        EXPECT_EQ(r.status, 200) << r.body;
        return r.body_json();
    }
    Recorder stream() {
        HttpRequest req;
        Recorder r;
        Call call{req, r, {}};
        auto d = make_dialect(ctx, g);
        answer_stream(call, g, *d);
        return r;
    }
};

// The tag split across pieces: the chat parser must hold "<th" back, and nothing may be lost or doubled.
const std::vector<std::string> kPieces = {"<th", "ink>pla", "n</th", "ink>Hel", "lo", " world"};

}  // namespace

TEST(Dialect, OpenAiChatStreamAddsUpToTheWholeAnswer) {
    DialectFixture whole_f(Api::Chat, finished_job(kPieces));
    json w = whole_f.whole();
    EXPECT_EQ(w["object"], "chat.completion");
    EXPECT_EQ(w["choices"][0]["message"]["content"], "Hello world");
    EXPECT_EQ(w["choices"][0]["message"]["reasoning_content"], "plan");
    EXPECT_EQ(w["choices"][0]["finish_reason"], "stop");
    EXPECT_EQ(w["usage"]["prompt_tokens"], 5);
    DialectFixture f(Api::Chat, finished_job(kPieces));
    Recorder r = f.stream();
    ASSERT_TRUE(r.streamed && r.ended);
    ASSERT_FALSE(r.events.empty());
    EXPECT_EQ(r.events.back().data, "[DONE]");
    std::string content, reasoning, finish;
    for (size_t i = 0; i + 1 < r.events.size(); i++) {
        EXPECT_EQ(r.events[i].event, "");
        json c = json::parse(r.events[i].data);
        EXPECT_EQ(c["object"], "chat.completion.chunk");
        const json& d = c["choices"][0]["delta"];
        if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
        if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
        if (c["choices"][0]["finish_reason"].is_string()) finish = c["choices"][0]["finish_reason"];
    }
    EXPECT_EQ(content, "Hello world");
    EXPECT_EQ(reasoning, "plan");
    EXPECT_EQ(finish, "stop");
}

TEST(Dialect, CompletionsAndNativeStreamsAddUpToTheWholeText) {
    const std::string all = "<think>plan</think>Hello world";
    DialectFixture wo(Api::Oai, finished_job(kPieces));
    EXPECT_EQ(wo.whole()["choices"][0]["text"], all);
    DialectFixture so(Api::Oai, finished_job(kPieces));
    Recorder r = so.stream();
    std::string text;
    for (size_t i = 0; i + 1 < r.events.size(); i++) text += json::parse(r.events[i].data)["choices"][0]["text"];
    EXPECT_EQ(text, all);
    EXPECT_EQ(r.events.back().data, "[DONE]");

    DialectFixture wn(Api::Native, finished_job(kPieces, "length"));
    json w = wn.whole();
    EXPECT_EQ(w["content"], all);
    EXPECT_EQ(w["stop_type"], "limit");
    EXPECT_EQ(w["model"], "stories");
    DialectFixture sn(Api::Native, finished_job(kPieces, "length"));
    r = sn.stream();
    text.clear();
    for (const auto& e : r.events) {
        EXPECT_NE(e.data, "[DONE]") << "llama-server's native stream has no [DONE]";
        text += json::parse(e.data)["content"];
    }
    EXPECT_EQ(text, all);
    EXPECT_EQ(json::parse(r.events.back().data)["stop"], true);
    EXPECT_EQ(json::parse(r.events.back().data)["tokens_predicted"], int(kPieces.size()));
}

TEST(Dialect, AnthropicAndResponsesStreamNamedEventsThatAddUpToTheWholeAnswer) {
    DialectFixture wa(Api::Anthropic, finished_job(kPieces));
    json w = wa.whole();
    ASSERT_EQ(w["content"].size(), 2u);
    EXPECT_EQ(w["content"][0]["type"], "thinking");
    EXPECT_EQ(w["content"][0]["thinking"], "plan");
    EXPECT_EQ(w["content"][1]["text"], "Hello world");
    EXPECT_EQ(w["stop_reason"], "end_turn");
    DialectFixture sa(Api::Anthropic, finished_job(kPieces));
    Recorder r = sa.stream();
    ASSERT_GE(r.events.size(), 3u);
    EXPECT_EQ(r.events.front().event, "message_start");
    EXPECT_EQ(r.events.back().event, "message_stop");
    std::string text, thinking;
    for (const auto& e : r.events) {
        json j = json::parse(e.data);
        EXPECT_EQ(j["type"], e.event) << "the event name and the data's type agree";
        if (e.event == "content_block_delta" && j["delta"]["type"] == "text_delta") text += j["delta"]["text"];
        if (e.event == "content_block_delta" && j["delta"]["type"] == "thinking_delta")
            thinking += j["delta"]["thinking"];
    }
    EXPECT_EQ(text, "Hello world");
    EXPECT_EQ(thinking, "plan");

    DialectFixture wr(Api::Responses, finished_job(kPieces));
    w = wr.whole();
    EXPECT_EQ(w["status"], "completed");
    EXPECT_EQ(w["output_text"], "Hello world");
    DialectFixture sr(Api::Responses, finished_job(kPieces));
    r = sr.stream();
    text.clear();
    int seq = 0;
    for (const auto& e : r.events) {
        json j = json::parse(e.data);
        EXPECT_EQ(j["sequence_number"], seq++) << "numbered in order";
        if (e.event == "response.output_text.delta") text += j["delta"];
    }
    EXPECT_EQ(text, "Hello world");
    EXPECT_EQ(r.events.back().event, "response.completed");
}

// tool_choice "required" with parallel calls, cut by max_tokens inside the second call: every API answers with the
// whole first call only (valid JSON arguments, no text block or content holding the cut call's text) and says the
// answer was cut (finish_reason "length", stop_reason "max_tokens", status "incomplete"); a stream may have sent
// the cut call's start (OpenAI streams arguments as they come) but never finishes it as a whole call. Two formats.
TEST(Dialect, ParallelCallsCutByTheLengthLimitAnswerTheWholeCalls) {
    const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters":
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
    const std::string paris = R"({"city":"Paris"})";
    struct Case {
        std::string chat_template;  // its markers give the tool-call format
        std::vector<std::string> pieces;  // the answer, cut inside the second call
        std::string first_piece_only;  // the answer cut inside the first call
    };
    const std::string loop = "{% for m in messages %}{{ m.content }}{% endfor %}";
    const std::vector<Case> cases = {
        {loop + "{% if tools %}<tool_call>{% endif %}",
         {"<tool_call>\n{\"name\": \"get_weather\", ", "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
          "\n<tool_call>\n{\"name\": \"get_weather\", \"argu", "ments\": {\"city\": \"Os"},
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"ci"},
        {loop + "{% if tools %}[TOOL_CALLS]{% endif %}",
         {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": ", "{\"city\": \"Paris\"}}, ",
          "{\"name\": \"get_weather\", \"arguments\": {\"ci"},
         "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par"},
    };
    for (const auto& c : cases) {
        FrontEndOptions opt;
        opt.chat_template = c.chat_template;
        auto fixture = [&](Api api, const std::vector<std::string>& pieces) {
            auto f = std::make_unique<DialectFixture>(api, finished_job(pieces, "length"), opt);
            f->g.request.tools = tools;
            f->g.request.tool_choice = ParsedRequest::ToolChoice::REQUIRED;
            return f;
        };
        const std::string what = c.pieces[0];
        // OpenAI chat, blocking
        json w = fixture(Api::Chat, c.pieces)->whole();
        const json& choice = w["choices"][0];
        EXPECT_EQ(choice["finish_reason"], "length") << what;
        EXPECT_TRUE(choice["message"]["content"].is_null()) << what << ": " << choice["message"]["content"];
        ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << what << ": " << choice;
        EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "get_weather");
        EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], paris);
        // OpenAI chat, streamed: the first call whole, the second only begun, the end says "length"
        Recorder r = fixture(Api::Chat, c.pieces)->stream();
        ASSERT_TRUE(r.ended);
        EXPECT_EQ(r.events.back().data, "[DONE]");
        std::vector<std::string> streamed;
        std::string content, finish;
        int n_finish = 0;
        for (size_t i = 0; i + 1 < r.events.size(); i++) {
            const json ch = json::parse(r.events[i].data)["choices"][0];
            const json& d = ch["delta"];
            if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
            for (const auto& tc : d.value("tool_calls", json::array())) {
                if (tc.contains("id")) streamed.push_back("");
                ASSERT_LT(tc["index"].get<size_t>(), streamed.size());
                streamed[tc["index"].get<size_t>()] += tc["function"]["arguments"].get<std::string>();
            }
            if (ch["finish_reason"].is_string()) {
                finish = ch["finish_reason"];
                n_finish++;
            }
        }
        EXPECT_EQ(n_finish, 1);
        EXPECT_EQ(finish, "length") << what;
        EXPECT_EQ(content, "") << what;
        ASSERT_GE(streamed.size(), 1u) << what;
        EXPECT_EQ(streamed[0], paris);
        if (streamed.size() > 1) EXPECT_TRUE(json::parse(streamed[1], nullptr, false).is_discarded()) << streamed[1];
        // Anthropic: one tool_use block, no text block, stop_reason max_tokens; streamed the same
        json a = fixture(Api::Anthropic, c.pieces)->whole();
        EXPECT_EQ(a["stop_reason"], "max_tokens");
        ASSERT_EQ(a["content"].size(), 1u) << a["content"];
        EXPECT_EQ(a["content"][0]["type"], "tool_use");
        EXPECT_EQ(a["content"][0]["input"], json::parse(paris));
        r = fixture(Api::Anthropic, c.pieces)->stream();
        int n_tool_use = 0, n_text = 0;
        std::string stop_reason;
        for (const auto& e : r.events) {
            const json j = json::parse(e.data);
            if (e.event == "content_block_start" && j["content_block"]["type"] == "tool_use") n_tool_use++;
            if (e.event == "content_block_delta" && j["delta"]["type"] == "text_delta") n_text++;
            if (e.event == "message_delta") stop_reason = j["delta"]["stop_reason"];
        }
        EXPECT_EQ(n_tool_use, 1) << what;
        EXPECT_EQ(n_text, 0) << what;
        EXPECT_EQ(stop_reason, "max_tokens");
        // Responses: one function_call item, no message item, status incomplete; streamed the same
        json o = fixture(Api::Responses, c.pieces)->whole();
        EXPECT_EQ(o["status"], "incomplete");
        EXPECT_EQ(o["incomplete_details"]["reason"], "max_output_tokens");
        ASSERT_EQ(o["output"].size(), 1u) << o["output"];
        EXPECT_EQ(o["output"][0]["type"], "function_call");
        EXPECT_EQ(o["output"][0]["arguments"], paris);
        r = fixture(Api::Responses, c.pieces)->stream();
        int n_calls = 0, n_text_deltas = 0;
        for (const auto& e : r.events) {
            n_calls += e.event == "response.function_call_arguments.done";
            n_text_deltas += e.event == "response.output_text.delta";
        }
        EXPECT_EQ(n_calls, 1) << what;
        EXPECT_EQ(n_text_deltas, 0) << what;
        EXPECT_EQ(r.events.back().event, "response.incomplete");
        // cut inside the first call: no call is claimed (the text stays content, as any text that is not a call),
        // and the answer says it was cut
        w = fixture(Api::Chat, {c.first_piece_only})->whole();
        EXPECT_EQ(w["choices"][0]["finish_reason"], "length");
        EXPECT_FALSE(w["choices"][0]["message"].contains("tool_calls")) << w;
        EXPECT_EQ(w["choices"][0]["message"]["content"], c.first_piece_only);
        a = fixture(Api::Anthropic, {c.first_piece_only})->whole();
        EXPECT_EQ(a["stop_reason"], "max_tokens");
        for (const auto& b : a["content"]) EXPECT_NE(b["type"], "tool_use") << a;
    }
}

// A job that fails before any output keeps its HTTP status (streamed or not); one that fails after output ends
// the stream with the API's own error event.
TEST(Dialect, FailuresTakeEachApisShape) {
    for (bool stream : {false, true}) {
        DialectFixture f(Api::Chat, finished_job({}, "error", "the grammar is too deep", 400));
        HttpRequest req;
        Recorder r;
        Call call{req, r, {}};
        auto d = make_dialect(f.ctx, f.g);
        if (stream) answer_stream(call, f.g, *d);
        else answer_whole(call, f.g, *d);
        EXPECT_EQ(r.status, 400) << "stream " << stream;
        EXPECT_FALSE(r.streamed);
        EXPECT_EQ(r.body_json()["error"]["message"], "the grammar is too deep");
    }
    const std::map<Api, std::string> error_event = {
        {Api::Chat, ""}, {Api::Oai, ""}, {Api::Native, ""}, {Api::Anthropic, "error"}, {Api::Responses, "error"}};
    for (const auto& [api, name] : error_event) {
        DialectFixture f(api, finished_job({"Hel", "lo"}, "error", "out of memory", 500));
        Recorder r = f.stream();
        ASSERT_TRUE(r.streamed);
        EXPECT_TRUE(r.ended);
        ASSERT_FALSE(r.events.empty());
        EXPECT_EQ(r.events.back().event, name) << int(api);
        EXPECT_NE(r.events.back().data.find("out of memory"), std::string::npos) << r.events.back().data;
    }
}

// The Service on a real engine, through its routes: a chat completion, tokenize, a malformed body, an endpoint that
// is off, and the Host check.
TEST(Service, AnswersRoutesWithoutASocket) {
    ServeParams sp;
    sp.sampling.temp = 0;
    Service svc(sp);
    EngineParams ep;
    ep.n_ctx = 256;
    svc.load(test::shared_file("models/stories260K.gguf"), "", ep, SuffixCacheParams{});
    ASSERT_TRUE(svc.ready());
    auto call = [&](void (Service::*route)(Call&), const std::string& body, Recorder& r) {
        HttpRequest req;
        req.method = "POST";
        req.body = body;
        Call c{req, r, {}};
        (svc.*route)(c);
        return c.status;
    };
    Recorder r;
    EXPECT_EQ(call(&Service::chat_completions,
                   R"({"messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 8})", r),
              200);
    json a = r.body_json();
    EXPECT_EQ(a["usage"]["completion_tokens"], 8);
    EXPECT_EQ(a["model"], "stories260K.gguf");
    Recorder t;
    EXPECT_EQ(call(&Service::tokenize, R"({"content": "Once"})", t), 200);
    EXPECT_FALSE(t.body_json()["tokens"].empty());
    Recorder bad;
    EXPECT_EQ(call(&Service::chat_completions, R"({"messages": 5})", bad), 400);
    EXPECT_EQ(bad.body_json()["error"]["type"], "invalid_request_error");
    // a JSON library's exception text stays out of the answers (issue 26, defect 9)
    for (const auto& [route, body] : std::vector<std::pair<void (Service::*)(Call&), std::string>>{
             {&Service::tokenize, R"({"content": "x", "add_special": "yes"})"},
             {&Service::chat_completions, R"({"messages": [{"role": "user", "content": "hi"}], "stream": "no"})"},
             {&Service::completions, R"({"prompt": "x", "max_tokens": "5"})"},
             {&Service::detokenize, "[1, 2"}}) {
        Recorder e;
        EXPECT_EQ(call(route, body, e), 400) << body;
        EXPECT_EQ(e.body.find("json.exception"), std::string::npos) << e.body;
    }
    Recorder off;
    EXPECT_EQ(call(&Service::metrics, "", off), 501);
    HttpRequest req;
    req.method = "GET";
    req.headers = {{"host", "evil.example"}};
    Recorder denied;
    Call c{req, denied, {}};
    EXPECT_FALSE(svc.admit(c, "/v1/models"));
    EXPECT_EQ(denied.status, 403);
    svc.shutdown(0);
}

// What llama.cpp's web UI and clients ask of llama-server beyond the completions (issue 49): its tools and CORS
// proxy answer 403 "feature_disabled" (the UI treats only that as "off"), the resumable streams as a server with
// none buffered, a model by its id, and /v1/models in Anthropic's shape for Anthropic's client.
TEST(Service, AnswersTheWebUisOtherEndpointsAsLlamaServer) {
    ServeParams sp;
    sp.alias = "tiny,stories";
    Service svc(sp);
    EngineParams ep;
    ep.n_ctx = 128;
    svc.load(test::shared_file("models/stories260K.gguf"), "", ep, SuffixCacheParams{});
    ASSERT_TRUE(svc.ready());
    auto call = [&](auto route, const std::string& method, const std::string& query, const std::string& body,
                    Recorder& r, Headers headers = {}) {
        HttpRequest req;
        req.method = method;
        req.query = query;
        req.body = body;
        req.headers = std::move(headers);
        Call c{req, r, {}};
        route(c);
        return c.status;
    };
    Recorder tools;
    EXPECT_EQ(call([&](Call& c) { svc.feature_disabled(c); }, "GET", "", "", tools), 403);
    EXPECT_EQ(tools.body_json()["error"]["type"], "feature_disabled");
    Recorder lookup, bad_lookup, get, del, del_missing;
    EXPECT_EQ(call([&](Call& c) { svc.streams_lookup(c); }, "POST", "", R"({"conversation_ids": ["a"]})", lookup), 200);
    EXPECT_EQ(lookup.body_json(), json::array());
    EXPECT_EQ(call([&](Call& c) { svc.streams_lookup(c); }, "POST", "", "{", bad_lookup), 400);
    EXPECT_EQ(call([&](Call& c) { svc.stream_get(c); }, "GET", "conv_id=a&from=0", "", get), 404);
    EXPECT_EQ(call([&](Call& c) { svc.stream_delete(c); }, "DELETE", "conv_id=a", "", del), 204);
    EXPECT_EQ(call([&](Call& c) { svc.stream_delete(c); }, "DELETE", "", "", del_missing), 400);
    Recorder one, alias, none;
    EXPECT_EQ(call([&](Call& c) { svc.model(c, "tiny"); }, "GET", "", "", one), 200);
    EXPECT_EQ(one.body_json()["id"], "tiny");
    EXPECT_EQ(call([&](Call& c) { svc.model(c, "stories"); }, "GET", "", "", alias), 200);
    EXPECT_EQ(call([&](Call& c) { svc.model(c, "gpt-4"); }, "GET", "", "", none), 404);
    Recorder oai, anth;
    EXPECT_EQ(call([&](Call& c) { svc.models(c); }, "GET", "", "", oai), 200);
    EXPECT_EQ(oai.body_json()["object"], "list");
    EXPECT_EQ(call([&](Call& c) { svc.models(c); }, "GET", "", "", anth, {{"anthropic-version", "2023-06-01"}}), 200);
    const json a = anth.body_json();
    EXPECT_EQ(a["data"][0]["type"], "model");
    EXPECT_EQ(a["first_id"], a["data"][0]["id"]);
    EXPECT_EQ(a["has_more"], false);
    svc.shutdown(0);
}

// /health answers 503 while loading and again from drain() on, 200 in between: behind a load balancer the first
// SIGTERM takes the server out of rotation at once, while the requests still sent to it are served until the
// drain ends; after shutdown() new generations are refused with 503 (not started: a balancer may send them on).
TEST(Service, HealthAnswers503WhileLoadingAndFromTheDrainOn) {
    ServeParams sp;
    Service svc(sp);
    auto call = [&](void (Service::*route)(Call&), const std::string& body, Recorder& r) {
        HttpRequest req;
        req.method = body.empty() ? "GET" : "POST";
        req.body = body;
        Call c{req, r, {}};
        (svc.*route)(c);
        return c.status;
    };
    const std::string gen = R"({"prompt": "Once", "max_tokens": 4})";
    Recorder loading;
    EXPECT_EQ(call(&Service::health, "", loading), 503);
    EngineParams ep;
    ep.n_ctx = 256;
    svc.load(test::shared_file("models/stories260K.gguf"), "", ep, SuffixCacheParams{});
    Recorder up;
    EXPECT_EQ(call(&Service::health, "", up), 200);
    EXPECT_EQ(up.body_json()["status"], "ok");
    svc.drain();
    Recorder down, served;
    EXPECT_EQ(call(&Service::health, "", down), 503);
    EXPECT_NE(down.body.find("shutting down"), std::string::npos) << down.body;
    EXPECT_EQ(call(&Service::completions, gen, served), 200) << served.body;
    svc.shutdown(1000);
    Recorder still_down, refused;
    EXPECT_EQ(call(&Service::health, "", still_down), 503);
    EXPECT_EQ(call(&Service::completions, gen, refused), 503);
    EXPECT_NE(refused.body.find("shutting down"), std::string::npos) << refused.body;
}

// token_origins (asked for): every token once, in order, with the text it released and its origin, in the stream
// (spread over the chunks, held back with the chat parser's held text) and in the whole answer; the texts add up
// to the answer's text. Not asked for: no such field.
TEST(Dialect, TokenOriginsFollowEveryToken) {
    auto job = [] {
        auto j = std::make_shared<Job>(JobRequest{});
        // "<th" is held back by the chat parser; token 12 releases no text (an incomplete character, say)
        const std::vector<std::pair<std::string, TokenSource>> toks = {
            {"<th", {TokenOrigin::TARGET, SpecType::NONE, 1}}, {"ink>a</th", {TokenOrigin::DRAFT, SpecType::DRAFT, 2}},
            {"", {TokenOrigin::TREE, SpecType::DRAFT, 2}},     {"ink>Hel", {TokenOrigin::TARGET, SpecType::DRAFT, 2}},
            {"lo", {TokenOrigin::DRAFT, SpecType::NGRAM, 3}},  {" world", {TokenOrigin::TARGET, SpecType::NGRAM, 3}}};
        int32_t id = 10;
        for (const auto& [text, src] : toks) j->push(text, {id++}, {}, {text.size()}, {src});
        j->n_prompt = 5;
        j->n_generated = int(toks.size());
        j->finish("stop");
        return j;
    };
    const std::vector<std::string> origin = {"target", "draft", "tree", "target", "draft", "target"};
    const std::vector<json> proposer = {nullptr, "draft", "draft", "draft", "ngram", "ngram"};
    auto check = [&](const json& list, const std::string& what) {
        ASSERT_EQ(list.size(), origin.size()) << what << ": " << list.dump();
        std::string text;
        for (size_t i = 0; i < list.size(); i++) {
            EXPECT_EQ(list[i]["id"], 10 + int(i)) << what;
            EXPECT_EQ(list[i]["origin"], origin[i]) << what << " token " << i;
            EXPECT_EQ(list[i]["proposer"], proposer[i]) << what << " token " << i;
            EXPECT_EQ(list[i]["round"], i == 0 ? 1 : i < 4 ? 2 : 3) << what;
            text += list[i]["text"].get<std::string>();
        }
        EXPECT_EQ(text, "<think>a</think>Hello world") << what;
    };
    for (Api api : {Api::Chat, Api::Native}) {
        const std::string what = api == Api::Chat ? "chat" : "native";
        DialectFixture wf(api, job());
        wf.g.request.token_origins = true;
        json w = wf.whole();
        check(api == Api::Chat ? w["choices"][0]["token_origins"] : w["token_origins"], what + " whole");
        DialectFixture sf(api, job());
        sf.g.request.token_origins = true;
        Recorder r = sf.stream();
        json all = json::array();
        for (const auto& e : r.events) {
            if (e.data == "[DONE]") continue;
            json o = json::parse(e.data);
            if (o.contains("token_origins"))
                for (const auto& t : o["token_origins"]) all.push_back(t);
        }
        check(all, what + " stream");
        DialectFixture plain(api, job());
        EXPECT_EQ(plain.whole().dump().find("token_origins"), std::string::npos) << what;
        for (const auto& e : plain.stream().events) EXPECT_EQ(e.data.find("token_origins"), std::string::npos) << what;
    }
}

// timings_per_token's chunks count as the final timings do: the prompt tokens processed, the cached ones apart (they
// counted cached tokens in prompt_n, with no cache_n, and came out ~65x fast); an answer of n choices times them
// all (its timings described one choice while usage counted all).
TEST(Timings, LiveChunksCountCachedTokensApartAndChoicesTogether) {
    JobProgress p;
    p.n_prompt = 100;
    p.n_cached = 90;
    p.prompt_ms = 10;
    const json live = live_timings_json(p);
    EXPECT_EQ(live["prompt_n"], 10);
    EXPECT_EQ(live["cache_n"], 90);
    EXPECT_DOUBLE_EQ(live["prompt_per_second"].get<double>(), 1000.0);
    std::vector<std::shared_ptr<Job>> jobs;
    for (int c = 0; c < 3; c++) {
        jobs.push_back(finished_job({"a", "b", "c", "d", "e"}));
        jobs.back()->n_generated = 50;
        jobs.back()->gen_ms = 100.0 + c;
        jobs.back()->spec.n_drafted = 10;
        jobs.back()->spec.n_accept = 4;
    }
    const json t = timings_json(jobs);
    EXPECT_EQ(t["predicted_n"], 150);  // = usage.completion_tokens
    EXPECT_EQ(usage_json(jobs, 5)["completion_tokens"], 150);
    EXPECT_DOUBLE_EQ(t["predicted_ms"].get<double>(), 102.0);
    EXPECT_EQ(t["draft_n"], 30);
    EXPECT_EQ(t["draft_n_accepted"], 12);
    EXPECT_EQ(timings_json(*jobs[0])["predicted_n"], 50);  // a choice's own
}
