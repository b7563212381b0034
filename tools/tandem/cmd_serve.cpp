// `tandem serve`: OpenAI-compatible HTTP server with speculative decoding (llama-server style flags).
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "args.h"
#include "commands.h"
#include "tandem/cpu.h"
#include "io.h"
#include "llama_flags.h"
#include "tandem/suffix_cache.h"
#include "tandem/thread_pool.h"
#include "server/http_server.h"
#include "tandem/error.h"
#include "tandem/files.h"
#include "tandem/server.h"

namespace tandem::cli {

namespace {

// SIGINT/SIGTERM: the first starts a graceful stop, a second one exits at once.
// (Namespace scope: the signal thread is detached and may outlive cmd_serve's frame when loading fails.)
std::mutex g_sig_mu;
std::condition_variable g_sig_cv;
bool g_stop = false;
sigset_t g_sigset;
std::atomic<bool> g_loaded{false};

}  // namespace

int cmd_serve(int argc, char** argv) {
    server::ServeParams sp;
    server::EngineParams ep;
    std::string model_path;
    SpecFlags sf{ep.spec};  // -md, --draft-layers and whether --spec-type was given
    std::string& draft_path = sf.draft_model;
    SuffixCacheParams suffix_params;
    int grace_s = 5;
    float drain_s = 0;
    std::vector<std::string> notes;
    std::string hf_repo, hf_file, hf_repo_draft;
    ArgParser ap(
        "usage: tandem serve -m TARGET.gguf [-md DRAFT.gguf | --spec-type ngram|self] [--draft-max N] [--draft-min N]\n"
        "       [--draft-p-min P] [-c CTX] [-cd CTX] [-np N] [--host 127.0.0.1] [--port 8080]\n"
        "       [--api-key KEY | --api-key-file FILE] [--alias NAME] [--chat-template NAME] [-t N] [--queue-max N]\n"
        "       [--allowed-hosts H,H] [--cors-origins O,O] [--timeout S] [--shutdown-grace S]\n"
        "       [--shutdown-drain S]");
    ap.add({"-m", "--model"}, "FNAME", "target model", [&](const std::string& v) { model_path = v; });
    GpuFlags gpu;
    add_gpu_flags(ap, gpu);
    ap.add({"-c", "--ctx-size"}, "N",
           "context of all slots together (default: the model's training context, bounded by memory)",
           [&](const std::string& v) { ep.n_ctx = to_int_in("-c", v, 0, 1 << 24); });
    ap.add({"-cd", "--ctx-size-draft"}, "N", "draft context per slot",
           [&](const std::string& v) { ep.n_ctx_draft = to_int_in("-cd", v, 0, 1 << 24); });
    ap.add({"-np", "--parallel"}, "N", "slots (concurrent generations, 1)",
           [&](const std::string& v) { ep.n_slots = to_int_in("-np", v, 1, 64); });
    ap.add({"--queue-max"}, "N", "requests waiting beyond the slots before 503 (64)",
           [&](const std::string& v) { ep.queue_max = to_int_in("--queue-max", v, 0, 4096); });
    ap.add({"-t", "--threads"}, "N", "threads (2)",
           [&](const std::string& v) { ep.n_threads = to_int_in("-t", v, 1, 1024); });
    ap.add({"--host"}, "ADDR", "bind address (127.0.0.1)", [&](const std::string& v) { sp.host = v; });
    ap.add({"--port"}, "N", "port (8080; 0 = any free port, printed)",
           [&](const std::string& v) { sp.port = to_int_in("--port", v, 0, 65535); });
    ap.add({"--api-key"}, "KEY", "require Authorization: Bearer KEY", [&](const std::string& v) {
        if (v.empty()) throw Error("--api-key: the key is empty (an empty key would turn authentication off)");
        sp.api_key = v;
    });
    ap.add({"--api-key-file"}, "FNAME", "read the API key from a file", [&](const std::string& v) {
        std::string k = read_file_bytes(v);
        while (!k.empty() && (k.back() == '\n' || k.back() == '\r' || k.back() == ' ' || k.back() == '\t'))
            k.pop_back();
        if (k.empty()) throw Error(v + ": empty API key file (an empty key would turn authentication off)");
        if (k.find_first_of("\r\n") != std::string::npos)
            throw Error(v + ": the API key file holds more than one line");
        sp.api_key = k;
    });
    ap.add({"--alias", "-a"}, "NAME[,NAME]", "model id shown by /v1/models (more names: aliases)",
           [&](const std::string& v) { sp.alias = v; });
    ap.add({"--tags"}, "T,T", "model tags shown by /v1/models", [&](const std::string& v) { sp.tags = v; });
    ap.add({"--chat-template"}, "NAME|TEXT",
           "a built-in template (chatml llama2 llama3 mistral phi3 gemma zephyr deepseek deepseek3) or a Jinja text",
           [&](const std::string& v) { sp.chat_template = v; });
    ap.add({"--chat-template-kwargs"}, "JSON",
           "extra variables for the chat template, e.g. '{\"enable_thinking\": false}'", [&](const std::string& v) {
               auto j = nlohmann::ordered_json::parse(v, nullptr, false);
               if (j.is_discarded() || !j.is_object()) throw Error("--chat-template-kwargs: not a JSON object: " + v);
               sp.chat_template_kwargs = j;
           });
    ap.add({"--max-body"}, "BYTES", "largest request body, counted after decoding (1 MiB)",
           [&](const std::string& v) { sp.max_body_bytes = size_t(to_int_in("--max-body", v, 1, 1 << 30)); });
    ap.add({"--allowed-hosts"}, "H,H", "Host names accepted besides loopback ones when bound to loopback ('*': any)",
           [&](const std::string& v) { sp.allowed_hosts = split_list(v); });
    ap.add({"--cors-origins"}, "O,O", "browser origins allowed besides loopback and same-origin ones ('*': any)",
           [&](const std::string& v) { sp.cors_origins = split_list(v); });
    ap.add({"-to", "--timeout"}, "S", "seconds a request body and each write may take (60)",
           [&](const std::string& v) { sp.timeout_s = to_int_in("--timeout", v, 1, 86400); });
    ap.add({"--shutdown-grace"}, "S", "seconds running generations may continue after SIGTERM (5)",
           [&](const std::string& v) { grace_s = to_int_in("--shutdown-grace", v, 0, 3600); });
    ap.add({"--shutdown-drain"}, "S",
           "seconds after SIGTERM during which /health answers 503 and everything else is served as before, so "
           "that a load balancer takes the server out before it stops (0)",
           [&](const std::string& v) { drain_s = to_float_in("--shutdown-drain", v, 0.0f, 3600.0f); });
    add_spec_flags(ap, sf);
    CacheFlags cache;
    add_cache_flags(ap, cache);
    SplitOptions split;  // -sm, -ts, --rank-timeout: the target across MPI ranks
    add_split_flags(ap, &split, gpu);
    ap.add({"--spec-suffix-max-tokens"}, "N", "tokens of finished requests the suffix cache keeps (1048576)",
           [&](const std::string& v) {
               suffix_params.max_tokens = size_t(to_int_in("--spec-suffix-max-tokens", v, 0, INT32_MAX));
           });
    ap.add(
        {"--spec-suffix-min-prob"}, "P", "suffix proposals stop below this estimated probability (0.1)",
        [&](const std::string& v) { suffix_params.min_prob = to_float_in("--spec-suffix-min-prob", v, 0.0f, 1.0f); });
    // Sampling flags set the defaults requests start from (as llama-server); -n is also a cap.
    SamplerParams& sd = sp.sampling;
    add_sampling_flags(ap, sd, notes);  // the defaults requests start from (temperature 0.8, top-k 40, ...)
    ap.flag({"--ignore-eos"}, "requests ignore end-of-generation tokens by default", [&] { sp.ignore_eos = true; });
    ap.add({"-n", "--predict", "--n-predict"}, "N", "default and largest max_tokens (-1: none)",
           [&](const std::string& v) { sp.n_predict = std::max(-1, to_int_in("-n", v, -2, INT32_MAX)); });
    ap.add({"-b", "--batch-size", "-ub", "--ubatch-size"}, "N", "prompt tokens per forward chunk (256)",
           [&](const std::string& v) { ep.n_batch = to_int_in("-b", v, 1, 1 << 16); });
    ap.add({"--prefill-chunk"}, "N",
           "prompt tokens a slot processes per round while other slots decode (64; 0: a whole prompt at once)",
           [&](const std::string& v) { ep.prefill_chunk = to_int_in("--prefill-chunk", v, 0, 1 << 16); });
    // Server behaviour
    ap.add({"--chat-template-file"}, "FNAME", "a Jinja chat template file, used instead of the model's",
           [&](const std::string& v) { sp.chat_template_text = read_file_bytes(v); });
    ap.flag({"--jinja"}, "run the chat template (default)", [&] { sp.jinja = true; });
    add_grammar_flags(ap, sp.grammar, "every request without its own grammar");
    ap.add(
        {"--reasoning-format"}, "FORMAT",
        "none | auto | deepseek | deepseek-legacy: where <think> text goes in chat answers (auto: reasoning_content)",
        [&](const std::string& v) { sp.reasoning_format = server::reasoning_format_from_name(v); });
    ap.add({"-rea", "--reasoning"}, "on|off|auto",
           "thinking: sets the template's enable_thinking (auto: the template's default)", [&](const std::string& v) {
               if (v == "on" || v == "true" || v == "1") sp.chat_template_kwargs["enable_thinking"] = true;
               else if (v == "off" || v == "false" || v == "0") sp.chat_template_kwargs["enable_thinking"] = false;
               else if (v != "auto") throw Error("--reasoning: expected on, off or auto, not '" + v + "'");
           });
    ap.flag({"-v", "--verbose", "--log-verbose"},
            "answers carry a \"__verbose\" object with the prompt as the model saw it (llama-server's debug field)",
            [&] { sp.verbose = true; });
    ap.flag({"--no-jinja"}, "recognise the chat template and render it with a built-in renderer instead",
            [&] { sp.jinja = false; });
    ap.flag({"--ui", "--webui"}, "serve the chat page at / (default)", [&] { sp.webui = true; });
    ap.flag({"--no-ui", "--no-webui"}, "do not serve the chat page", [&] { sp.webui = false; });
    ap.add({"--path"}, "DIR",
           "serve the files of DIR at / instead of the chat page (another web UI, e.g. llama.cpp's built with npm)",
           [&](const std::string& v) { sp.public_path = v; });
    ap.add({"--api-prefix"}, "PREFIX", "serve every path under PREFIX (e.g. /api)", [&](const std::string& v) {
        if (!v.empty() && v[0] != '/') throw Error("--api-prefix: must start with '/'");
        sp.api_prefix = v;
        while (!sp.api_prefix.empty() && sp.api_prefix.back() == '/') sp.api_prefix.pop_back();
    });
    ap.flag({"--slots"}, "expose GET /slots (default)", [&] { sp.slots_endpoint = true; });
    ap.flag({"--no-slots"}, "GET /slots answers 501", [&] { sp.slots_endpoint = false; });
    ap.flag({"--props"}, "allow POST /props", [&] { sp.props_post = true; });
    ap.flag({"--metrics"}, "expose GET /metrics (Prometheus); without it the endpoint answers 501, as llama-server",
            [&] { sp.metrics = true; });
    ap.add({"--slot-save-path"}, "DIR", "directory for POST /slots/ID?action=save|restore",
           [&](const std::string& v) { sp.slot_save_path = v; });
    ap.flag({"--embedding", "--embeddings"}, "serve /v1/embeddings and /embedding(s) (final hidden states, pooled)",
            [&] { sp.embeddings = true; });
    ap.add({"--pooling"}, "TYPE", "embedding pooling: none | mean | cls | last (default: the model's, else last)",
           [&](const std::string& v) { sp.pooling = pooling_from_name(v); });
    ap.flag({"--reuse-port"}, "let other processes listen on the same port (SO_REUSEPORT)",
            [&] { sp.reuse_port = true; });
    ap.flag({"--context-shift"}, "when a slot's context is full, forget the older half after --keep tokens and go on",
            [&] { ep.spec.context_shift = true; });
    ap.flag({"--no-context-shift"}, "a full context ends the generation with finish_reason \"length\" (default)",
            [&] { ep.spec.context_shift = false; });
    ap.flag({"-kvu", "--kv-unified"},
            "every slot may use the whole -c (each slot still has its own cache: memory n_slots x -c)",
            [&] { ep.kv_unified = true; });
    ap.flag({"-no-kvu", "--no-kv-unified"}, "-c is shared by the slots (default)", [&] { ep.kv_unified = false; });
    ap.add({"--keep"}, "N", "tokens kept at the start on a context shift (0; -1: the whole prompt)",
           [&](const std::string& v) { ep.spec.n_keep = to_int_in("--keep", v, -1, INT32_MAX); });
    register_llama_server_flags(ap, [&](const std::string& flag, const std::string& v) {
        if (flag == "-hf" || flag == "-hfr" || flag == "--hf-repo") hf_repo = v;
        else if (flag == "-hff" || flag == "--hf-file") hf_file = v;
        else if (flag == "-hfd" || flag == "-hfrd" || flag == "--hf-repo-draft" || flag == "--spec-draft-hf")
            hf_repo_draft = v;
        else if (flag == "-hft" || flag == "--hf-token") {
        } else
            throw Error(flag + " " + v +
                        ": tandem does not download models; download the file and pass it with -m PATH");
    });
    auto pos = ap.parse(argc, argv, 2);
    if (!pos.empty()) throw Error("unexpected argument '" + pos[0] + "'");
    ep.gpu = gpu;
    for (const auto& n : notes) std::fprintf(stderr, "note: %s\n", n.c_str());
    // -hf: a model llama.cpp already downloaded is found in its Hugging Face cache; tandem never downloads.
    if (!hf_repo.empty()) {  // as llama-server, -hf names the model even beside -m
        model_path = hf_cached_model(hf_repo, hf_file);
        std::fprintf(stderr, "-hf %s: using the cached file %s\n", hf_repo.c_str(), model_path.c_str());
    } else if (!hf_file.empty() && hf_repo.empty()) {
        throw Error("--hf-file needs --hf-repo");
    }
    if (draft_path.empty() && !hf_repo_draft.empty()) draft_path = hf_cached_model(hf_repo_draft, "");
    if (model_path.empty()) throw Error("-m MODEL is required");
    resolve_spec_flags(sf);
    ep.spec_auto_mtp = !sf.type_given && draft_path.empty();
    ep.self_draft_layers = sf.draft_layers;
    ep.memory_budget = memory_budget_bytes();
    ep.type_k = cache.type_k;
    ep.swa_full = cache.swa_full;
    ep.ctx_checkpoints = cache.ctx_checkpoints;
    ep.type_v = cache.type_v;
    ep.type_k_draft = cache.type_k_draft;
    ep.type_v_draft = cache.type_v_draft;
    sp.http_threads = std::max(16, 2 * (ep.n_slots + ep.queue_max) + 8);
    if (auto w = ThreadPool::oversubscription_warning(ep.n_threads); !w.empty())
        std::fprintf(stderr, "%s\n", w.c_str());
    // Fail before binding on files that cannot be models (a directory, a FIFO, a missing file).
    {
        int fd = open_regular_file(model_path);
        ::close(fd);
    }
    if (!draft_path.empty()) {
        int fd = open_regular_file(draft_path);
        ::close(fd);
    }

    // Signals: SIGPIPE ignored (a client that goes away is a failed write). SIGINT/SIGTERM go to one thread:
    // the first starts a graceful stop (or exits at once while the model is still loading), a second exits now.
    ::signal(SIGPIPE, SIG_IGN);
    sigset_t& set = g_sigset;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    // One of several MPI ranks: rank 0 serves, the others run their layers of the target until it ends. (After the
    // mask: the MPI library's own threads inherit it, so that the signals reach the thread below.)
    std::shared_ptr<Cluster> cluster;
    if (int rc = 0; run_as_rank(split, model_path, ep.n_threads, cluster, &rc)) return rc;
    sp.cluster = cluster;

    server::Service svc(sp);
    server::HttpServer http(sp, svc);
    http.start();
    std::fprintf(stderr, "%s\n", cpu_info_line().c_str());
    for (const std::string& h : split_list(sp.host))
        std::fprintf(stderr, "listening on http://%s:%d\n",
                     h.find(':') != std::string::npos ? ("[" + h + "]").c_str() : h.c_str(), http.port());
    std::fflush(stderr);
    std::atomic<bool>& loaded = g_loaded;
    std::thread signals([] {
        int sig = 0;
        sigwait(&g_sigset, &sig);
        if (!g_loaded.load()) {
            std::fprintf(stderr, "signal %d while loading: exiting\n", sig);
            std::fflush(stderr);
            std::_Exit(0);
        }
        std::fprintf(stderr, "signal %d: stopping (a second signal exits at once)\n", sig);
        {
            std::lock_guard<std::mutex> lk(g_sig_mu);
            g_stop = true;
        }
        g_sig_cv.notify_all();
        sigwait(&g_sigset, &sig);
        std::fprintf(stderr, "signal %d again: exiting now\n", sig);
        std::fflush(stderr);
        std::_Exit(1);
    });
    signals.detach();

    // A split target whose ranks fail: the server stops as on SIGTERM (503 to new requests) and exits non-zero.
    static std::atomic<bool> cluster_broken{false};
    if (cluster)
        cluster->on_broken([](const std::string& why) {
            std::fprintf(stderr, "split: %s; stopping\n", why.c_str());
            cluster_broken = true;
            {
                std::lock_guard<std::mutex> lk(g_sig_mu);
                g_stop = true;
            }
            g_sig_cv.notify_all();
        });
    // A lost GPU: the same (the engine answered the requests it affected with 503).
    static std::atomic<bool> gpu_lost{false};
    ep.on_gpu_lost = [](const std::string&) {
        gpu_lost = true;
        {
            std::lock_guard<std::mutex> lk(g_sig_mu);
            g_stop = true;
        }
        g_sig_cv.notify_all();
    };
    svc.load(model_path, draft_path, ep, suffix_params);
    loaded.store(true);

    {
        std::unique_lock<std::mutex> lk(g_sig_mu);
        g_sig_cv.wait(lk, [] { return g_stop; });
    }
    // Graceful stop. First --shutdown-drain seconds in which /health answers 503 (a load balancer takes the
    // server out) and the rest is served as before. Then no new connections or requests; queued generations get
    // 503; running ones may go on for the grace period and then end with finish_reason "length"; the answers
    // are written; exit.
    svc.drain();
    if (drain_s > 0) std::this_thread::sleep_for(std::chrono::milliseconds(int64_t(drain_s * 1000)));
    http.stop_accepting();
    svc.shutdown(grace_s * 1000);
    if (!http.wait_idle(grace_s * 1000 + 3000))
        std::fprintf(stderr, "shutdown: requests still open after the grace period; closing them\n");
    http.stop();
    std::fprintf(stderr, "stopped\n");
    return cluster_broken || gpu_lost ? 1 : 0;
}

}  // namespace tandem::cli
