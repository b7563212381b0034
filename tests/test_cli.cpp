// The `tandem` program: llama.cpp-compatible flags, JSON output, errors with exit codes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>

#include "tandem/thread_pool.h"
#include "test_util.h"

using nlohmann::json;

namespace {

std::string stories() { return tandem::test::shared_file("models/stories260K.gguf"); }

json run_json(const std::string& args) {
    std::string out;
    int rc = tandem::test::run_command(tandem::test::tandem_bin() + " generate " + args + " --json", &out, false);
    EXPECT_EQ(rc, 0) << out;
    return json::parse(out.substr(0, out.find('\n')));
}

}  // namespace

TEST(Cli, GenerateJsonMatchesReferenceGreedy) {
    json ref = json::parse(tandem::test::read_file(tandem::test::shared_file("reference/stories260K.greedy.json")));
    json j = run_json("-m " + stories() + " -p 'Once upon a time' -n 40 --temp 0");
    EXPECT_EQ(j["prompt_ids"], ref[0]["prompt_ids"]);
    ASSERT_EQ(j["tokens"].size(), 40u);
    for (size_t i = 0; i < 40; i++) EXPECT_EQ(j["tokens"][i], ref[0]["steps"][i]["id"]) << i;
    EXPECT_EQ(j["text"].get<std::string>().rfind(", there was a little girl named Lily.", 0), 0u) << j["text"];
    EXPECT_EQ(j["timings"]["predicted_n"], 40);
    EXPECT_FALSE(j.contains("spec"));
}

TEST(Cli, SpeculativeJsonCarriesStatisticsAndSameText) {
    json plain = run_json("-m " + stories() + " -p 'Tom and Lily went to the park' -n 64 --temp 0");
    json spec = run_json("-m " + stories() + " -md " + stories() +
                         " -p 'Tom and Lily went to the park' -n 64 --temp 0 --draft-max 8 --draft-min 2 --draft-p-min "
                         "0 --draft-adaptive off");
    EXPECT_EQ(spec["tokens"], plain["tokens"]);
    const json& s = spec["spec"];
    for (const char* k : {"type", "n_draft", "n_predict", "n_drafted", "n_accept", "accept", "mean_accepted_length",
                          "accept_by_position", "t_draft_ms", "t_target_ms"})
        EXPECT_TRUE(s.contains(k)) << k;
    EXPECT_EQ(s["type"], "draft");
    EXPECT_EQ(s["n_draft"], 8);
    EXPECT_GT(s["n_drafted"].get<int>(), 0);
    EXPECT_EQ(s["n_accept"], s["n_drafted"]);  // the model as its own draft
    EXPECT_DOUBLE_EQ(s["accept"].get<double>(), 100.0);
    json ngram = run_json("-m " + stories() +
                          " --spec-type ngram --spec-ngram-n 2 -p 'Tom and Lily went to the park' -n 64 --temp 0");
    EXPECT_EQ(ngram["tokens"], plain["tokens"]);
    json self = run_json("-m " + stories() +
                         " --spec-type self --draft-layers 3 -p 'Tom and Lily went to the park' -n 64 --temp 0");
    EXPECT_EQ(self["tokens"], plain["tokens"]);
}

// --grammar / -j (llama-cli and llama-speculative's flags): the output is constrained, the same with speculation.
TEST(Cli, GrammarAndJsonSchemaConstrainTheOutput) {
    const std::string g =
        " -p 'Once upon a time' -n 40 --temp 0 --grammar 'root ::= \" The answer is \" (\"yes\" | \"no\") \".\"'";
    json plain = run_json("-m " + stories() + g);
    EXPECT_TRUE(plain["text"] == " The answer is yes." || plain["text"] == " The answer is no.") << plain["text"];
    EXPECT_EQ(plain["stop_reason"], "eos");
    json spec = run_json("-m " + stories() + " -md " + stories() + " --draft-p-min 0 --draft-adaptive off" + g);
    EXPECT_EQ(spec["tokens"], plain["tokens"]);
    json js = run_json("-m " + stories() +
                       " -p x -n 60 --temp 0 -j '{\"type\": \"object\", \"properties\": {\"a\": {\"type\": "
                       "\"boolean\"}}, \"required\": [\"a\"]}'");
    const json doc = json::parse(js["text"].get<std::string>());
    EXPECT_TRUE(doc["a"].is_boolean()) << js["text"];
}

TEST(Cli, LlamaSpeculativeStatisticsLines) {
    std::string out;
    int rc = tandem::test::run_command(tandem::test::tandem_bin() + " generate -m " + stories() + " -md " + stories() +
                                           " -p hello -n 16 --temp 0 -ngl 99 -ngld 99 -td 1 -cd 512",
                                       &out);
    ASSERT_EQ(rc, 0) << out;
    for (const char* line :
         {"encoded ", "decoded ", "n_draft   = 16", "n_predict = 16", "n_drafted = ", "n_accept  = ", "accept    = "})
        EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
    // -ngl 99 -ngld 99: both on the GPU where there is one (lavapipe counts), else a warning and the CPU
    const bool gpu = out.find("target: GPU ") != std::string::npos && out.find("draft: GPU ") != std::string::npos;
    EXPECT_TRUE(gpu || out.find("no usable GPU") != std::string::npos) << out;
}

// -ngl below the layer count: the last layers and the output on the GPU, the first ones on the CPU, said in the
// start-up log (the model, the cache); without a GPU, a warning and the CPU.
TEST(Cli, GpuLayersBelowTheLayerCountSplitTheModel) {
    std::string out;
    int rc = tandem::test::run_command(
        tandem::test::tandem_bin() + " generate -m " + stories() + " -p hello -n 8 --temp 0 -ngl 2 -fa on", &out);
    ASSERT_EQ(rc, 0) << out;
    if (out.find("no usable GPU") != std::string::npos) return;  // (a machine without a Vulkan device)
    for (const char* line : {"2 of 5 layers and the output", "layers 0..2 and the token embedding on the CPU",
                             "the last 2 layers' on the GPU, the others' on the CPU"})
        EXPECT_NE(out.find(line), std::string::npos) << line << "\n" << out;
}

TEST(Cli, PromptFromFileAndSamplingFlags) {
    const std::string path = tandem::test::temp_dir() + "/prompt.txt";
    tandem::test::write_file(path, "Once upon a time");
    json a = run_json("-m " + stories() + " -f " + path + " -n 8 --temp 0");
    json b = run_json("-m " + stories() + " -p 'Once upon a time' -n 8 --temp 0");
    EXPECT_EQ(a["tokens"], b["tokens"]);
    const std::string flags =
        " -p 'Once upon a time' -n 16 --temp 0.9 --top-k 20 --top-p 0.9 --min-p 0.02 --repeat-penalty 1.1 "
        "--samplers 'top_k;top_p;min_p;temperature' -s 7";
    json c = run_json("-m " + stories() + flags);
    json d = run_json("-m " + stories() + flags);
    EXPECT_EQ(c["tokens"], d["tokens"]);  // same seed, same output
}

TEST(Cli, ErrorsExitNonZeroWithAMessage) {
    struct Case {
        std::string args;
        std::string needle;
    };
    std::vector<Case> cases = {
        {"generate -m " + stories() + " -p hi --bogus", "unknown argument '--bogus'"},
        {"generate -m " + stories() + " -p hi -n abc", "not an integer"},
        {"generate -p hi", "-m MODEL is required"},
        {"generate -m /nonexistent.gguf -p hi", "/nonexistent.gguf"},
        {"generate -m " + stories() + " -c 8 -p 'Once upon a time there was a little girl named Lily'",
         "does not fit the context"},
        {"generate -m " + stories() + " -p hi --spec-type draft", "needs -md"},
        {"generate -m " + stories() + " -p hi --samplers bogus", "unknown sampler"},
        {"generate -m " + stories() + " -p hi --grammar 'root ::= foo'", "rule 'foo' is not defined"},
        {"generate -m " + stories() + " -p hi -j '{\"type\": \"array\", \"uniqueItems\": true}'",
         "'uniqueItems' is not supported"},
        {"tokenize -m " + stories(), "exactly one of -p TEXT or -f FILE"},
        {"quantize " + stories() + " /tmp/x.gguf Q9_9", "unknown quantization type"},
        {"nosuchcommand", "unknown command"},
    };
    for (const auto& c : cases) {
        std::string out;
        int rc = tandem::test::run_command(tandem::test::tandem_bin() + " " + c.args, &out);
        EXPECT_NE(rc, 0) << c.args;
        EXPECT_LT(rc, 128) << "crashed: " << c.args << "\n" << out;
        EXPECT_NE(out.find(c.needle), std::string::npos) << c.args << "\n" << out;
    }
}

TEST(Cli, TokenizeIdsAndFileBytesExactly) {
    const std::string path = tandem::test::temp_dir() + "/tok.txt";
    tandem::test::write_file(path, "Hello world\n");
    std::string a, b;
    ASSERT_EQ(tandem::test::run_command(
                  tandem::test::tandem_bin() + " tokenize -m " + stories() + " -f " + path + " --ids --no-special", &a),
              0);
    ASSERT_EQ(
        tandem::test::run_command(
            tandem::test::tandem_bin() + " tokenize -m " + stories() + " -p 'Hello world' --ids --no-special", &b),
        0);
    json ja = json::parse(a), jb = json::parse(b);
    EXPECT_EQ(ja.size(), jb.size() + 1);  // the trailing newline is tokenized, not stripped
    std::string info;
    ASSERT_EQ(tandem::test::run_command(tandem::test::tandem_bin() + " info " + stories(), &info), 0);
    EXPECT_NE(info.find("params:    292800"), std::string::npos) << info;
}

TEST(Cli, TokenizeWorksForByteLevelBpeVocabs) {
    // `tandem tokenize --ids --no-special` on a vocab-only GGUF gives the conformance ids of the test strings.
    for (const char* vocab : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-deepseek-llm.gguf", "ggml-vocab-falcon.gguf"}) {
        const std::string path = tandem::test::shared_file(std::string("tokenizer-tests/") + vocab);
        const std::string text_file = tandem::test::temp_dir() + "/bpe-" + vocab + ".txt";
        tandem::test::write_file(text_file, "Hello world! 3333 \xe4\xb8\x96\xe7\x95\x8c  tabs\tand\nnewlines");
        std::string out;
        ASSERT_EQ(tandem::test::run_command(
                      tandem::test::tandem_bin() + " tokenize -m " + path + " -f " + text_file + " --ids --no-special",
                      &out, false),
                  0)
            << vocab;
        json ids = json::parse(out);
        ASSERT_GT(ids.size(), 5u) << vocab;
        std::string info;
        ASSERT_EQ(
            tandem::test::run_command(
                tandem::test::tandem_bin() + " tokenize -m " + path + " -f " + text_file + " --no-special", &info),
            0);
        EXPECT_NE(info.find(std::to_string(ids.size()) + " tokens"), std::string::npos) << info;
    }
}

TEST(Cli, BenchJsonHasOneObjectPerTestInLlamaBenchShape) {
    // The shape the issue asks for: {"model", "type", "test", "n_threads", "avg_ts", "stddev_ts", "gbps",
    // "bw_fraction"} per test, vbK with its ratio to vb1, and a memory record; with the bandwidth probe on, the
    // generation test is compared with it. A speculative run adds a "spec" record whose output matched plain.
    std::string out;
    int rc = tandem::test::run_command(tandem::test::tandem_bin() + " bench -m " + stories() +
                                           " -p 16 -n 8 --vb 1,2 -r 2 -t 1 --json --spec-type ngram --spec-n 16",
                                       &out, false);
    ASSERT_EQ(rc, 0) << out;
    json j = json::parse(out);
    ASSERT_TRUE(j.is_array());
    std::map<std::string, json> by_test;
    for (const auto& r : j) by_test[r.at("test").get<std::string>()] = r;
    for (const char* t : {"pp16", "tg8", "vb1", "vb2"}) {
        ASSERT_TRUE(by_test.count(t)) << t << "\n" << out;
        const json& r = by_test[t];
        for (const char* k : {"model", "type", "n_threads", "avg_ts", "stddev_ts", "gbps", "bw_fraction"})
            EXPECT_TRUE(r.contains(k)) << t << " " << k;
        EXPECT_EQ(r["model"], "stories260K.gguf");
        EXPECT_EQ(r["type"], "F32");
        EXPECT_EQ(r["n_threads"], 1);
        EXPECT_GT(r["avg_ts"].get<double>(), 0) << t;
    }
    EXPECT_GT(by_test["tg8"]["gbps"].get<double>(), 0);
    EXPECT_GT(by_test["tg8"]["bw_fraction"].get<double>(), 0);
    EXPECT_DOUBLE_EQ(by_test["vb1"]["x_vb1"].get<double>(), 1.0);
    EXPECT_GT(by_test["vb2"]["x_vb1"].get<double>(), 0);
    ASSERT_TRUE(by_test.count("memory"));
    EXPECT_GT(by_test["memory"]["bandwidth_gbps"].get<double>(), 0);
    EXPECT_GT(by_test["memory"]["generation_peak_rss_mib"].get<double>(), 0);
    ASSERT_TRUE(by_test.count("spec"));
    const json& s = by_test["spec"]["spec"];
    EXPECT_EQ(s["type"], "ngram");
    EXPECT_GT(s["plain_ts"].get<double>(), 0);
    EXPECT_GT(s["speedup"].get<double>(), 0);
    EXPECT_EQ(s["projected"].size(), 3u);
}

TEST(Cli, GenerateJsonWithInvalidUtf8TextIsValidJson) {
    // A lone UTF-8 continuation byte forced by a logit bias on its byte token (<0x80>, id 3 + 0x80 in
    // SentencePiece vocabularies): --json used to end in std::terminate on the invalid text.
    json j = run_json("-m " + stories() + " -p 'Once upon a time' -n 4 --temp 0 --logit-bias 131+100");
    ASSERT_EQ(j["tokens"].size(), 4u);
    for (const auto& t : j["tokens"]) EXPECT_EQ(t, 131);
    EXPECT_NE(j["text"].get<std::string>().find("\xEF\xBF\xBD"), std::string::npos) << j["text"];  // U+FFFD
}

TEST(Cli, ServePortOutOfRangeIsRefused) {
    // --port 83808 used to bind 18272 (the value modulo 65536): a different port than asked, silently. (`timeout`:
    // a server that starts anyway is stopped and the test fails instead of hanging.)
    std::string out;
    int rc = tandem::test::run_command(
        "timeout 20 " + tandem::test::tandem_bin() + " serve -m " + stories() + " --port 83808", &out);
    EXPECT_EQ(rc, 1) << out;
    EXPECT_NE(out.find("--port"), std::string::npos) << out;
    EXPECT_NE(out.find("out of range (0 to 65535)"), std::string::npos) << out;
}

// Regression (issue 12, defects 9, 14, 16): numeric flags outside what can be honoured, an empty API key, and
// files that are not regular files (a directory read as an empty prompt; a FIFO or /dev/zero that hung) are
// refused with a message, exit 1, before anything is served or generated. (`timeout`: a command that hangs
// or starts serving fails the test instead of hanging it.)
TEST(Cli, InputsThatCannotBeHonouredAreRefused) {
    const std::string dir = tandem::test::temp_dir();
    const std::string fifo = dir + "/prompt.fifo";
    ::unlink(fifo.c_str());
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    tandem::test::write_file(dir + "/empty.key", "\n");
    struct Case {
        std::string args;
        std::string needle;
    };
    const std::string m = " -m " + stories();
    std::vector<Case> cases = {
        {"serve" + m + " --api-key ''", "--api-key: the key is empty"},
        {"serve" + m + " --api-key-file " + dir + "/empty.key", "empty API key file"},
        {"serve" + m + " -np 0", "'-np': 0 is out of range (1 to 64)"},
        {"serve" + m + " --max-body -5", "'--max-body': -5 is out of range"},
        {"serve" + m + " --draft-p-min 1.5", "'--draft-p-min': 1.5 is out of range (0 to 1)"},
        {"serve" + m + " -t 0", "'-t': 0 is out of range (1 to 1024)"},
        {"serve" + m + " --timeout 0", "'--timeout': 0 is out of range"},
        {"serve -m " + dir, "is a directory, not a regular file"},
        {"serve -m " + fifo, "is a FIFO, not a regular file"},
        {"generate" + m + " -p hi --top-p 2", "'--top-p': 2 is out of range (0 to 1)"},
        {"generate" + m + " -p hi --draft-max 100000", "'--draft-max': 100000 is out of range (0 to 256)"},
        {"generate" + m + " -p hi -c -1", "'-c': -1 is out of range"},
        {"generate" + m + " -f " + dir, "is a directory, not a regular file"},
        {"generate" + m + " -f " + fifo, "is a FIFO, not a regular file"},
        {"generate -m /dev/zero -p hi", "is a device, not a regular file"},
        {"generate -m " + fifo + " -p hi", "is a FIFO, not a regular file"},
        {"tokenize" + m + " -f " + dir, "is a directory, not a regular file"},
        {"bench" + m + " -r 0", "'-r': 0 is out of range"},
        {"quantize " + stories() + " " + dir + "/x.gguf Q8_0 --keep-layers 0", "'--keep-layers': 0 is out of range"},
        // one speculative setup for all three commands (issue 11): K must be below the layer count everywhere
        {"generate" + m + " -p hi -n 4 --spec-type self --draft-layers 5",
         "--draft-layers 5 must be below the target's 5 layers"},
        {"bench" + m + " -p 0 -n 0 -r 1 --spec-type self --draft-layers 9",
         "--draft-layers 9 must be below the target's 5 layers"},
        {"serve" + m + " --port 0 --spec-type self --draft-layers 5",
         "--draft-layers 5 must be below the target's 5 layers"},
    };
    for (const auto& c : cases) {
        std::string out;
        int rc =
            tandem::test::run_command("timeout 20 " + tandem::test::tandem_bin() + " " + c.args + " </dev/null", &out);
        EXPECT_EQ(rc, 1) << c.args << "\n" << out;
        EXPECT_NE(out.find(c.needle), std::string::npos) << c.args << "\n" << out;
    }
}

// Regression (issue 12, defect 10): more threads than CPUs made every parallel loop spin-wait for threads that
// had no core (32 tokens: 6.5 s at -t 8 on 2 cores). Now nobody spins then, and the user is warned.
TEST(Cli, MoreThreadsThanCpusWarns) {
    const int n = tandem::ThreadPool::available_cpus() + 1;
    std::string out;
    int rc = tandem::test::run_command("timeout 60 " + tandem::test::tandem_bin() + " generate -m " + stories() +
                                           " -p 'Once upon a time' -n 16 --temp 0 -t " + std::to_string(n),
                                       &out);
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("warning: " + std::to_string(n) + " threads on"), std::string::npos) << out;
    tandem::ThreadPool pool(n);
    EXPECT_TRUE(pool.oversubscribed());
}
