// `tandem serve`: OpenAI-compatible HTTP server with speculative decoding (llama-server style flags).
#include <signal.h>

#include <cstdio>
#include <thread>

#include "args.h"
#include "commands.h"
#include "tandem/cpu.h"
#include "io.h"
#include "server/engine.h"
#include "server/http_server.h"
#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/tokenizer.h"

namespace tandem::cli {

int cmd_serve(int argc, char** argv) {
    server::ServeParams sp;
    server::EngineParams ep;
    std::string model_path, draft_path;
    bool spec_type_given = false;
    ArgParser ap("usage: tandem serve -m TARGET.gguf [-md DRAFT.gguf | --spec-type ngram|self] [--draft-max N] [--draft-min N]\n"
                 "       [--draft-p-min P] [-c CTX] [-cd CTX] [-np N] [--host 127.0.0.1] [--port 8080]\n"
                 "       [--api-key KEY | --api-key-file FILE] [--alias NAME] [--chat-template NAME] [-t N] [--queue-max N]");
    ap.add({"-m", "--model"}, "FNAME", "target model", [&](const std::string& v) { model_path = v; });
    ap.add({"-md", "--model-draft", "--spec-draft-model"}, "FNAME", "draft model", [&](const std::string& v) { draft_path = v; });
    ap.add({"-c", "--ctx-size"}, "N", "context per slot (default: model's, at most 4096)", [&](const std::string& v) { ep.n_ctx = to_int("-c", v); });
    ap.add({"-cd", "--ctx-size-draft"}, "N", "draft context per slot", [&](const std::string& v) { ep.n_ctx_draft = to_int("-cd", v); });
    ap.add({"-np", "--parallel"}, "N", "slots (concurrent generations, 1)", [&](const std::string& v) { ep.n_slots = to_int("-np", v); });
    ap.add({"--queue-max"}, "N", "requests waiting beyond the slots before 503 (64)", [&](const std::string& v) { ep.queue_max = to_int("--queue-max", v); });
    ap.add({"-t", "--threads"}, "N", "threads (2)", [&](const std::string& v) { ep.n_threads = to_int("-t", v); });
    ap.add({"--host"}, "ADDR", "bind address (127.0.0.1)", [&](const std::string& v) { sp.host = v; });
    ap.add({"--port"}, "N", "port (8080; 0 = any free port, printed)", [&](const std::string& v) { sp.port = to_int_in("--port", v, 0, 65535); });
    ap.add({"--api-key"}, "KEY", "require Authorization: Bearer KEY", [&](const std::string& v) { sp.api_key = v; });
    ap.add({"--api-key-file"}, "FNAME", "read the API key from a file", [&](const std::string& v) {
        std::string k = read_file_bytes(v);
        while (!k.empty() && (k.back() == '\n' || k.back() == '\r' || k.back() == ' ')) k.pop_back();
        if (k.empty()) throw Error(v + ": empty API key file");
        sp.api_key = k;
    });
    ap.add({"--alias", "-a"}, "NAME", "model id shown by /v1/models", [&](const std::string& v) { sp.alias = v; });
    ap.add({"--chat-template"}, "NAME", "chatml llama2 llama3 mistral phi3 gemma zephyr deepseek deepseek3", [&](const std::string& v) { sp.chat_template = v; });
    ap.add({"--max-body"}, "BYTES", "largest request body (1 MiB)", [&](const std::string& v) { sp.max_body_bytes = size_t(to_int("--max-body", v)); });
    ap.add({"--draft-max", "--draft", "--draft-n", "--spec-draft-n-max"}, "N", "draft length cap (16)", [&](const std::string& v) { ep.spec.n_max = to_int("--draft-max", v); });
    ap.add({"--draft-min", "--draft-n-min", "--spec-draft-n-min"}, "N", "draft-min (0)", [&](const std::string& v) { ep.spec.n_min = to_int("--draft-min", v); });
    ap.add({"--draft-p-min", "--spec-draft-p-min"}, "P", "draft-p-min (0.75)", [&](const std::string& v) { ep.spec.p_min = to_float("--draft-p-min", v); });
    ap.add({"--draft-adaptive"}, "on|off", "adaptive draft length (on)", [&](const std::string& v) { ep.spec.adaptive = to_bool("--draft-adaptive", v); });
    ap.add({"--spec-type"}, "TYPE", "none | draft | ngram | self", [&](const std::string& v) { ep.spec.type = spec_type_from_name(v); spec_type_given = true; });
    ap.add({"--draft-layers"}, "K", "self-speculation layers", [&](const std::string& v) { ep.self_draft_layers = to_int("--draft-layers", v); });
    ap.add({"-ngl", "--gpu-layers", "-ngld", "--gpu-layers-draft"}, "N", "accepted; ignored (no GPU backend)", [&](const std::string&) {});
    auto pos = ap.parse(argc, argv, 2);
    if (!pos.empty()) throw Error("unexpected argument '" + pos[0] + "'");
    if (model_path.empty()) throw Error("-m MODEL is required");
    if (!spec_type_given) ep.spec.type = draft_path.empty() ? SpecType::NONE : SpecType::DRAFT;
    if (ep.spec.type == SpecType::DRAFT && draft_path.empty()) throw Error("--spec-type draft needs -md");
    if (ep.n_slots < 1 || ep.n_slots > 64) throw Error("-np must be 1..64");
    if (ep.queue_max < 0) throw Error("--queue-max must be >= 0");
    sp.http_threads = std::max(16, 2 * (ep.n_slots + ep.queue_max) + 8);

    // Signals: SIGPIPE ignored (a client that goes away is a failed write); SIGINT/SIGTERM stop the server.
    ::signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);

    server::HttpServer http(sp);
    http.start();
    std::fprintf(stderr, "%s\nlistening on http://%s:%d\n", cpu_info_line().c_str(), sp.host.c_str(), http.port());
    std::fflush(stderr);
    std::thread signals([&] {
        int sig = 0;
        sigwait(&set, &sig);
        std::fprintf(stderr, "signal %d: stopping\n", sig);
        http.stop();
    });
    signals.detach();

    auto model = Model::load(model_path);
    auto tok = Tokenizer::from_gguf(model->gguf());
    std::shared_ptr<const Model> draft;
    if (ep.spec.type == SpecType::DRAFT) {
        draft = Model::load(draft_path);
        check_draft_compatible(*tok, *Tokenizer::from_gguf(draft->gguf()));
    }
    auto engine = std::make_shared<server::Engine>(model, draft, ep);
    http.set_spec_defaults(ep.spec);
    http.set_ready(model, engine);
    http.wait();
    return 0;
}

}  // namespace tandem::cli
