// The answer dialects: how one API (OpenAI chat and completions, llama-server's /completion, Anthropic Messages,
// OpenAI Responses) writes a generation's results, whole (answer) or as server-sent events (the stream
// callbacks). One interface, a file per API (dialect_*.cpp); the drivers below wait on the jobs and feed a
// dialect, so every dialect is unit-tested with jobs filled by hand (tests/test_dialect.cpp), no engine, no socket.
//
// Stream contract, for each choice c in order: begin_choice(c), then piece() for each piece of text as it is
// released, then end_choice(c) once the job finished well (or fail() once, and the stream ends). The tokens (and
// log-probabilities) behind a piece may arrive before its text: they wait in Held until a dialect uses them
// (and clears Held); a dialect that holds a piece back (the chat answer parser is not sure of it yet) leaves
// them there for the next piece. Chunks never carry empty text, except llama-server's per-token chunks.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/chat_answer.h"
#include "serve/engine.h"
#include "serve/front_end.h"
#include "serve/openai.h"
#include "tandem/server.h"

namespace tandem::server {

// One request's generation: what was asked, its prompts, and its jobs in choice order (prompt-major, then the
// n choices of each prompt: OpenAI's index order). The jobs are cancelled when it goes (a no-op once finished).
struct Generation {
    Api api = Api::Chat;
    ParsedRequest request;
    std::vector<FrontEnd::Prompt> prompts;
    std::vector<std::shared_ptr<Job>> jobs;
    std::vector<size_t> job_prompt;  // [c]: the prompt of choice c
    std::string id;  // the answer's id: chatcmpl-, cmpl-, msg_ or resp_ and a fresh suffix
    int64_t created = 0;

    Generation() = default;
    Generation(const Generation&) = delete;
    Generation& operator=(const Generation&) = delete;
    ~Generation();
    int prompt_tokens() const;  // every prompt's tokens
};

// What every dialect writes from besides the generation: the model's front end and name, the server's flags.
struct AnswerContext {
    const FrontEnd& fe;
    std::string model_id;
    ReasoningFormat reasoning_format = ReasoningFormat::DEEPSEEK;  // --reasoning-format, unless the request says
    bool verbose = false;  // -v: blocking answers carry __verbose
};

struct SseEvent {
    std::string event;  // empty: an unnamed event
    std::string data;  // one line: JSON text, or [DONE]
};
using SseEvents = std::vector<SseEvent>;

// The tokens (and log-probabilities) received whose text has not been sent yet.
struct Held {
    std::vector<int32_t> toks;
    std::vector<TokenLogprob> lps;
    std::vector<TokenSource> src;  // per token: its origin
    std::vector<std::string> texts;  // per token: the text it released (empty while its text is held back)
    int n_received = 0;  // the choice's tokens received so far, sent or held (clear() keeps it)
    void clear() {
        toks.clear();
        lps.clear();
        src.clear();
        texts.clear();
    }
};

class Dialect {
public:
    Dialect(const AnswerContext& ctx, const Generation& g) : ctx_(ctx), g_(g) {}
    virtual ~Dialect() = default;

    // The whole answer: every job finished without error; outs[c] is choice c's output.
    virtual nlohmann::ordered_json answer(const std::vector<JobOutput>& outs) = 0;

    // A piece per token instead of per text release (llama-server's n_probs).
    virtual bool per_token() const { return false; }
    virtual void open(SseEvents&) {}  // before the first choice
    virtual void begin_choice(size_t, SseEvents&) {}
    // A piece of choice c's text.
    virtual void piece(size_t c, const std::string& text, Held& held, SseEvents& ev) = 0;
    // Choice c finished well (with whatever is still held). True: the stream ends here (one choice only).
    virtual bool end_choice(size_t c, Held& held, SseEvents& ev) = 0;
    virtual void fail(const Job& job, SseEvents& ev) = 0;  // the job failed after the stream began
    virtual void close(SseEvents&) {}  // after the last choice
    // A stream's prompt-processing progress of choice c (return_progress; llama-server's prompt_progress chunks:
    // its completion APIs; the others send none)
    virtual void progress(size_t, const PromptProgress&, SseEvents&) {}

protected:
    // The parser of choice c's chat answer: reasoning, content and (with tools) tool calls.
    std::unique_ptr<ChatAnswerParser> answer_parser(size_t c) const;
    // The request's token_origins (null unless it asked): per token, its id, the text it released, its origin
    // ("draft", "tree", "target"), its round's proposer (null for a round that drafted nothing) and its round.
    nlohmann::ordered_json origins_of(const Held& held) const;
    nlohmann::ordered_json origins_of(const JobOutput& out) const;
    const AnswerContext& ctx_;
    const Generation& g_;
};

std::unique_ptr<Dialect> make_dialect(const AnswerContext& ctx, const Generation& g);
// Each API's dialect (make_dialect picks by g.api); exposed for the tests.
std::unique_ptr<Dialect> openai_dialect(const AnswerContext& ctx, const Generation& g);  // chat and completions
std::unique_ptr<Dialect> native_dialect(const AnswerContext& ctx, const Generation& g);
std::unique_ptr<Dialect> anthropic_dialect(const AnswerContext& ctx, const Generation& g);
std::unique_ptr<Dialect> responses_dialect(const AnswerContext& ctx, const Generation& g);

// The drivers. Blocking: every job is waited for (the client is polled every 100 ms: one that goes away
// cancels them) before the status line, so the status is always right; a failed job answers with its status.
void answer_whole(Call& call, Generation& g, Dialect& d);
// Streaming: the status line waits for the first job's first result, so a request that fails before it
// generates anything (shutdown, a refused input) still gets its 4xx/5xx status; a failure after that is sent as
// the dialect's error event and the stream ends.
void answer_stream(Call& call, Generation& g, Dialect& d);

// The whole answer of a choice's output: a job's text pushed through the chat answer parser at once.
ChatDelta parse_whole(ChatAnswerParser& p, const std::string& text);

}  // namespace tandem::server
