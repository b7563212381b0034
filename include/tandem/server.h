// tandem's server without its transport: what `tandem serve` answers, as a library. A Service holds the engine
// (slots, queue, the inference thread: src/serve/engine.h), the model's request front end (src/serve/front_end.h)
// and one answer dialect per API (src/serve/dialect.h); each route is one member function of one request and
// its responder. The HTTP transport, the route table and SSE framing are the caller's (tools/tandem/server/):
// a unit test drives every route with a hand-made request and a recording Responder, no socket involved.
//
// Threads: routes run concurrently on the caller's worker threads and may block (a generation is waited for);
// they never touch the model, only submit jobs to the engine and read their results.
#pragma once
#include <memory>
#include <optional>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tandem/embedding.h"
#include "tandem/sampling.h"
#include "tandem/session.h"
#include "tandem/spec_params.h"

namespace tandem {
struct SuffixCacheParams;
}  // namespace tandem

namespace tandem::server {

using Headers = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
    std::string method;  // "GET", "POST", ...
    std::string path;  // without the query
    std::string query;  // after '?', undecoded
    Headers headers;  // names lower-cased, in arrival order
    std::string body;  // de-chunked and decoded
    std::string remote;  // peer address
    // Value of the first header with this (lower-case) name; empty when absent.
    std::string header(std::string_view lower_name) const;
    bool has_header(std::string_view lower_name) const;
};

// How a route answers. Exactly one of: send(), or begin_stream() + (write() | write_event())* + end_stream().
// Every call blocks until the bytes are written (or the write timed out); false means the client is gone.
class Responder {
public:
    virtual ~Responder() = default;
    virtual bool send(int status, const std::string& content_type, const std::string& body,
                      const Headers& extra = {}) = 0;
    virtual bool begin_stream(int status, const std::string& content_type, const Headers& extra = {}) = 0;
    virtual bool write(std::string_view data) = 0;  // raw bytes; "" only checks that the client is there
    // One server-sent event: `data` (one line of JSON, or "[DONE]") under an event name, or unnamed when `event`
    // is empty. The framing is the transport's.
    virtual bool write_event(const std::string& event, const std::string& data) = 0;
    virtual void end_stream() = 0;
    // True once the peer closed its side (checked without reading; a route that waits long polls it).
    virtual bool client_gone() const = 0;
    virtual bool answered() const = 0;
};

// How --reasoning-format splits a chat answer (src/serve/reasoning.h).
enum class ReasoningFormat {
    NONE,  // thoughts stay in content, tags included
    DEEPSEEK,  // thoughts go to reasoning_content ("auto" is this: the tags are the same for the models here)
    DEEPSEEK_LEGACY,  // content keeps the <think> text too, and reasoning_content gets the thoughts
};
// "none", "auto", "deepseek", "deepseek-legacy"; throws Error otherwise.
ReasoningFormat reasoning_format_from_name(const std::string& name);

// The OpenAI/llama-server request defaults: temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, no penalties.
SamplerParams server_sampling_defaults();

// The engine: slots, their contexts, the queue, threads (llama-server's -np, -c, -cd, --queue-max, -t, ...).
struct EngineParams {
    int n_slots = 1;
    int n_ctx = 0;  // all slots together, as llama-server's -c: each slot gets n_ctx / n_slots;
        // 0: the model's training context, bounded by memory_budget (choose_context)
    size_t memory_budget = 0;  // bytes the KV caches may take when n_ctx is 0; 0: unbounded
    int n_ctx_draft = 0;  // per slot; 0: the target's
    int n_threads = 2;
    int queue_max = 64;
    int self_draft_layers = 0;
    int n_batch = 256;  // prompt tokens per forward chunk
    int prefill_chunk = 64;  // prompt tokens a slot processes per round while others decode; 0: all at once
    bool kv_unified = false;  // llama-server's --kv-unified: every slot may use the whole -c (memory: n_slots x -c)
    // KV cache element types (-ctk, -ctv; -ctkd, -ctvd for the draft and self-draft sessions)
    TensorType type_k = TensorType::F16, type_v = TensorType::F16;
    TensorType type_k_draft = TensorType::F16, type_v_draft = TensorType::F16;
    bool swa_full = false;  // --swa-full: sliding-window layers keep every position (SessionParams::swa_full)
    int ctx_checkpoints = kCtxCheckpoints;  // -ctxcp (SessionParams::ctx_checkpoints)
    SpecParams spec;  // server defaults (requests may override n_max, n_min, p_min, type)
    // No --spec-type and no -md: a model with a multi-token-prediction block drafts with it (as generate does)
    bool spec_auto_mtp = false;
    // GPU placement of the target and the draft model (tandem/gpu.h GpuFlags, choose_gpu), after the context is chosen
    GpuFlags gpu;
    // Called once (from the engine's thread) when a GPU the models run on is lost (tandem/gpu.h GpuFailure): the
    // requests it affected were answered 503; `tandem serve` then stops as on SIGTERM and exits non-zero.
    std::function<void(const std::string&)> on_gpu_lost;
};

// What `tandem serve`'s flags set besides the engine.
struct ServeParams {
    // The target split across MPI ranks (rank 0 serves; tandem/split.h); null: the whole target here.
    std::shared_ptr<Cluster> cluster;
    std::string host = "127.0.0.1";  // comma-separated: every address listens
    int port = 8080;
    std::string api_key;
    std::string alias;  // comma-separated: the first is the model id
    std::string tags;  // comma-separated
    std::string chat_template;  // --chat-template: a built-in's name, or a Jinja text; empty: the model's
    std::vector<std::string> allowed_hosts, cors_origins;
    size_t max_body_bytes = 1 << 20;
    int http_threads = 32;
    int timeout_s = 60;  // whole-body read and each write; headers get min(timeout, 10 s)
    bool reuse_port = false;
    // llama-server's defaults for requests (its sampling flags, -n, --ignore-eos)
    SamplerParams sampling = server_sampling_defaults();
    int n_predict = -1;
    bool ignore_eos = false;
    bool verbose = false;  // -v: "__verbose" in non-streamed answers
    std::string chat_template_text;  // --chat-template-file: a Jinja template used instead of the model's
    std::string grammar;  // --grammar / --grammar-file: GBNF for requests that bring none
    ReasoningFormat reasoning_format = ReasoningFormat::DEEPSEEK;  // --reasoning-format (auto)
    bool jinja = true;  // --jinja (default) / --no-jinja (recognise templates, render built-ins)
    nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();  // --chat-template-kwargs
    bool webui = true;
    std::string public_path;  // --path: a directory served at / instead of the chat page (tools/.../static_files.h)
    std::string api_prefix;  // every route also under this prefix
    bool slots_endpoint = true, props_post = false, metrics = false;
    std::string slot_save_path;
    bool embeddings = false;  // --embedding: serve /v1/embeddings and /embedding(s)
    std::optional<Pooling> pooling;  // --pooling; unset: the model's (default_pooling)
};

// One request being answered: the request, its responder, the CORS headers every answer carries, and the shape
// of its errors.
struct Call {
    const HttpRequest& req;
    Responder& res;
    Headers cors;
    int status = 0;  // what was answered (for the log)
    bool anthropic = false;  // /v1/messages: errors in Anthropic's shape

    void send(int st, const std::string& type, const std::string& body, Headers extra = {});
    void json_ok(const nlohmann::ordered_json& j);
    // An error object of the route's API (OpenAI's, or Anthropic's) with this status.
    void error(int st, const std::string& msg, Headers extra = {});
    bool begin_stream(const std::string& type);
};

// The JSON text of an OpenAI-style error object for `status` (what the transport answers itself: 413, 431, ...).
std::string error_json(int status, const std::string& message);

class Service {
public:
    explicit Service(const ServeParams& p);
    ~Service();

    // Loads the target (and the draft: -md, or the first layers of the target for --spec-type self), checks that
    // they speak one vocabulary, and starts the engine. Until then routes that need the model answer 503.
    // Throws Error (a file that is not a model, incompatible vocabularies, ...).
    void load(const std::string& model_path, const std::string& draft_path, EngineParams ep,
              const SuffixCacheParams& suffix);
    bool ready() const;
    // The drain before a graceful stop: /health answers 503 from now on, so that a load balancer takes this
    // server out of its rotation, while every other route is served as before (a request the balancer still
    // sends meanwhile is answered, not refused: balancers do not all retry a refusal reliably).
    void drain();
    // Graceful stop (implies drain()): no new jobs; queued ones are refused (503); running ones go on for at
    // most grace_ms.
    void shutdown(int grace_ms);

    // Access (Host, Origin, API key, preflight: src/serve/access.h) of a request to `path` (the API prefix
    // removed). Sets call.cors; answers a preflight or a refusal itself and then returns false. page_file: the
    // path names a file of --path's directory (open without the key).
    bool admit(Call& call, const std::string& path, bool page_file = false);
    void count_http_request();

    // /health: 200 {"status":"ok"} once ready; 503 while loading and from drain() on. Needs no model.
    void health(Call& c);
    // The routes (their paths are the caller's table). A route that needs the model must be called once ready().
    void chat_completions(Call& c);  // /v1/chat/completions
    void completions(Call& c);  // /v1/completions
    void completion_native(Call& c);  // llama-server's /completion
    void infill(Call& c);  // llama-server's /infill
    void anthropic_messages(Call& c);  // /v1/messages
    void anthropic_count_tokens(Call& c);  // /v1/messages/count_tokens
    void responses(Call& c);  // /v1/responses
    void input_tokens(Call& c);  // llama-server: the prompt size of a chat request, nothing generated
    void apply_template(Call& c);  // /apply-template: the prompt a chat request would get
    void embeddings(Call& c);  // /v1/embeddings, /embedding(s)
    void tokenize(Call& c);
    void detokenize(Call& c);
    void models(Call& c);  // /v1/models (Anthropic's shape when asked with an anthropic-version header)
    void model(Call& c, const std::string& id);  // /v1/models/{id}: the model by its id or an alias, else 404
    // llama-server's endpoints of features tandem does not have, answered as llama-server answers with them off:
    // /tools and /cors-proxy (its server tools and MCP proxy) 403 "feature_disabled"; the resumable streams
    // (/v1/streams/lookup, /v1/stream) as a server that holds no stream's buffer: a lookup finds none (200 []), a
    // replay 404, a delete 204 (a client's Stop still ends the job: it closes the request's connection).
    void feature_disabled(Call& c);
    void streams_lookup(Call& c);  // POST /v1/streams/lookup
    void stream_get(Call& c);  // GET /v1/stream?conv_id=
    void stream_delete(Call& c);  // DELETE /v1/stream?conv_id=
    void metrics(Call& c);  // Prometheus text (--metrics)
    void props_get(Call& c);
    void props_post(Call& c);
    void slots(Call& c);  // GET /slots
    void slot_action(Call& c, const std::string& id_text);  // POST /slots/{id}?action=...

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace tandem::server
