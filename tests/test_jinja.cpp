// The chat-template interpreter: language features on small templates, and conformance with
// @huggingface/jinja on the real templates of llama.cpp's models/templates (expected renderings in
// tests/data/chat-templates, made by scripts/chat-templates/generate.mjs; the templates themselves are fetched
// outside the repository by scripts/fetch-chat-templates.sh into $TANDEM_CHAT_TEMPLATES, default
// ~/.cache/tandem/chat-templates).
#include <gtest/gtest.h>

#include <chrono>

#include <cstdlib>
#include <dirent.h>
#include <map>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include "chat/chat_formatter.h"
#include "chat/jinja.h"
#include "tandem/error.h"
#include "test_util.h"

using namespace tandem;
using namespace tandem::jinja;
using ojson = nlohmann::ordered_json;

namespace {

std::string render(const std::string& src, const std::string& ctx_json = "{}") {
    return Template(src).render(Value::from_json(ojson::parse(ctx_json)));
}

std::tm fixed_clock() {  // what generate.mjs gives strftime_now
    std::tm t{};
    t.tm_year = 2026 - 1900;
    t.tm_mon = 0;
    t.tm_mday = 15;
    t.tm_hour = 10;
    t.tm_min = 30;
    return t;
}

}  // namespace

TEST(Jinja, WhitespaceControlAsTransformers) {
    // trim_blocks and lstrip_blocks on, one trailing newline dropped, '-' strips
    EXPECT_EQ(render("{% if true %}\n  a\n  {% endif %}\nb\n"), "  a\nb");
    EXPECT_EQ(render("x  {{- 'y' -}}  z"), "xyz");
    EXPECT_EQ(render("a {#- c -#} b"), "ab");
    EXPECT_EQ(render("{%- generation -%} kept {% endgeneration %}"), "kept ");
}

TEST(Jinja, ExpressionsAndOutputFollowTheReference) {
    EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ 7 / 2 }} {{ 2 ** 3 }} {{ -7 % 3 }}"), "7 3 3.5 8 -1");
    EXPECT_EQ(render("{{ true }} {{ none }}|{{ undefined_var }}|{{ 1.0 }} {{ [1, 'a'] }} {{ {'k': none} }}"),
              "true ||1.0 [1, \"a\"] {\"k\": null}");
    EXPECT_EQ(render("{{ 'a' ~ 1 ~ true }} {{ 'x' + 2 }}"), "a1true x2");
    EXPECT_EQ(render("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }}"),
              "true true true true");
    EXPECT_EQ(render("{{ x is defined }} {{ x is not defined }} {{ none is none }} {{ 'a' is string }}"),
              "false true true true");
    EXPECT_EQ(render("{{ 'yes' if 0 else 'no' }} {{ 1 and 'b' }} {{ 0 or [] }}"), "no b []");
    EXPECT_EQ(render("{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1,2,3][-1] }} {{ 'hé'|length }}"), "el olleh 3 2");
    EXPECT_EQ(render("{{ x == none }} {{ 1 == 1.0 }} {{ '1' == 1 }}"), "true true true");  // JavaScript's ==
}

TEST(Jinja, StatementsLoopsMacrosNamespaces) {
    EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif %}{% endfor %}",
                     R"({"xs": ["a", "b"]})"),
              "1a,2b");
    EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
    EXPECT_EQ(render("{% for x in [1,2,3,4] if x is even %}{{ x }}{% endfor %}"), "24");
    EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", R"({"d": {"b": 1, "a": 2}})"),
              "b=1;a=2;");
    EXPECT_EQ(render("{% for x in [1,2,3] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 3 %}{% break %}{% endif "
                     "%}{{ x }}{% endfor %}"),
              "1");
    EXPECT_EQ(render("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{% endfor %}{{ x }}"), "1");  // loop scope
    EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1] %}{% set ns.x = 2 %}{% endfor %}{{ ns.x }}"), "2");
    EXPECT_EQ(render("{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}"), "[1B][12]");
    EXPECT_EQ(render("{% macro m() %}<{{ caller() }}>{% endmacro %}{% call m() %}in{% endcall %}"), "<in>");
    EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{% set t %}block{% endset %}{{ t|upper }}"), "2BLOCK");
    EXPECT_EQ(render("{% filter upper %}abc{% endfilter %}"), "ABC");
}

TEST(Jinja, FiltersAndMethods) {
    EXPECT_EQ(render("{{ {'a': [1, 'é'], 'b': {'c': true}}|tojson }}"), R"({"a": [1, "é"], "b": {"c": true}})");
    EXPECT_EQ(render("{{ {'a': [1]}|tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ]\n}");
    EXPECT_EQ(render("{{ {'b': 1, 'a': 2}|tojson(separators=(',', ':'), sort_keys=true) }}"), R"({"a":2,"b":1})");
    EXPECT_EQ(render("{{ '  x  '|trim }}|{{ ' y '.strip() }}|{{ 'a,b'.split(',') }}|{{ 'aXbX'.replace('X', '-', 1) }}"),
              "x|y|[\"a\", \"b\"]|a-bX");
    EXPECT_EQ(render("{{ ['a','b']|join(', ') }} {{ [3,1,2]|sort|first }} {{ [1,2]|last }} {{ x|default('d') }} {{ "
                     "[1,1,2]|unique|length }}"),
              "a, b 1 2 d 2");
    EXPECT_EQ(render("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='c')|join }}",
                     R"({"ms": [{"role": "user", "c": "1"}, {"role": "x", "c": "2"}, {"role": "user", "c": "3"}]})"),
              "13");
    EXPECT_EQ(render("{{ ms|rejectattr('t')|length }}", R"({"ms": [{"t": true}, {"t": false}, {}]})"), "2");
    EXPECT_EQ(
        render("{{ 'a\nb'|indent(2) }}|{{ 'ab'.startswith(('x', 'a')) }}|{{ 'hi there'|title }}|{{ '3'|int + 1 }}"),
        "a\n  b|true|Hi There|4");
    EXPECT_EQ(
        render("{{ d.get('x', 5) }} {{ d|dictsort|first|first }} {{ d|items|length }}", R"({"d": {"b": 1, "a": 2}})"),
        "5 a 2");
    EXPECT_EQ(render("{{ range(3)|list }} {{ 2.5|round }} {{ -3|abs }}"), "[0, 1, 2] 3.0 3");
}

TEST(Jinja, ErrorsNameTheLineAndConstruct) {
    auto message = [](const std::string& src, const std::string& ctx = "{}") {
        try {
            render(src, ctx);
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };
    EXPECT_NE(message("a\n{% with x = 1 %}{% endwith %}").find("line 2: unknown statement"), std::string::npos);
    EXPECT_NE(message("{% if x %}never closed").find("'if' is not closed"), std::string::npos);
    EXPECT_NE(message("{{ raise_exception('Only user and assistant roles') }}").find("Only user and assistant roles"),
              std::string::npos);
    EXPECT_NE(message("{{ x|nosuchfilter }}", R"({"x": "s"})").find("unknown filter 'nosuchfilter'"),
              std::string::npos);
    EXPECT_NE(message("\n\n{{ undefined_fn() }}").find("line 3"), std::string::npos);
}

TEST(Jinja, StrftimeNowUsesTheGivenClock) {
    RenderOptions o;
    o.now = fixed_clock;
    EXPECT_EQ(Template("{{ strftime_now('%d %b %Y') }} {{ strftime_now('%B %H:%M %A') }}").render(Value::object(), o),
              "15 Jan 2026 January 10:30 %A");
}

// Every template of llama.cpp's models/templates renders byte for byte as @huggingface/jinja renders it, for
// every case the reference itself renders (the reference fails some cases, e.g. templates that refuse tool
// messages; those are counted, not compared).
TEST(Jinja, RealTemplatesRenderLikeHuggingFaceJinja) {
    const char* env = std::getenv("TANDEM_CHAT_TEMPLATES");
    const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "/root";
    const std::string dir = env && *env ? env : home + "/.cache/tandem/chat-templates";
    struct stat st {};
    ASSERT_EQ(stat(dir.c_str(), &st), 0) << "the chat templates are not at " << dir
                                         << ": run scripts/fetch-chat-templates.sh (or set TANDEM_CHAT_TEMPLATES)";
    const std::string data = std::string(TANDEM_SOURCE_DIR) + "/tests/data/chat-templates";
    const ojson convs = ojson::parse(test::read_file(data + "/conversations.json"));
    std::vector<std::string> files;
    if (DIR* d = opendir(data.c_str())) {
        while (dirent* e = readdir(d)) {
            std::string n = e->d_name;
            if (n.size() > 5 && n.substr(n.size() - 5) == ".json" && n != "conversations.json") files.push_back(n);
        }
        closedir(d);
    }
    std::sort(files.begin(), files.end());
    ASSERT_GE(files.size(), 60u);
    RenderOptions opt;
    opt.now = fixed_clock;
    int templates_ok = 0, cases_ok = 0, cases_total = 0, reference_failed = 0;
    std::string report;
    for (const auto& f : files) {
        const ojson exp = ojson::parse(test::read_file(data + "/" + f));
        const std::string name = exp["template"];
        const std::string src = test::read_file(dir + "/" + name);
        uint64_t h = 0xcbf29ce484222325ull;
        for (unsigned char c : src) h = (h ^ c) * 0x100000001b3ull;
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
        ASSERT_EQ(src.size(), exp["length"].get<size_t>())
            << name << ": not the template the expectations were made from";
        ASSERT_EQ(std::string(hex), exp["fnv1a64"].get<std::string>()) << name;
        if (exp.contains("parse_error")) {
            report += "  " + name + ": the reference cannot parse it (" +
                      exp["parse_error"].get<std::string>().substr(0, 60) + ")\n";
            continue;
        }
        std::unique_ptr<Template> t;
        try {
            t = std::make_unique<Template>(src);
        } catch (const Error& e) {
            ADD_FAILURE() << name << ": " << e.what();
            continue;
        }
        int ok = 0, n = 0;
        for (const auto& c : exp["cases"]) {
            if (!c.contains("output")) {
                reference_failed++;
                continue;
            }
            n++;
            const ojson& conv = convs[c["conversation"].get<std::string>()];
            ojson ctx = {{"messages", conv["messages"]},
                         {"add_generation_prompt", c["add_generation_prompt"]},
                         {"bos_token", "<BOS>"},
                         {"eos_token", "<EOS>"}};
            if (conv.contains("tools")) ctx["tools"] = conv["tools"];
            std::string got;
            try {
                got = t->render(Value::from_json(ctx), opt);
            } catch (const Error& e) {
                got = std::string("(error) ") + e.what();
            }
            const std::string want = c["output"];
            if (got == want) {
                ok++;
                continue;
            }
            size_t at = 0;
            while (at < got.size() && at < want.size() && got[at] == want[at]) at++;
            ADD_FAILURE() << name << " [" << c["conversation"].get<std::string>()
                          << ", add_generation_prompt=" << c["add_generation_prompt"] << "] differs at byte " << at
                          << "\n  got:  " << got.substr(at > 40 ? at - 40 : 0, 120)
                          << "\n  want: " << want.substr(at > 40 ? at - 40 : 0, 120);
        }
        cases_ok += ok;
        cases_total += n;
        templates_ok += ok == n;
        report += "  " + name + ": " + std::to_string(ok) + "/" + std::to_string(n) + "\n";
    }
    std::printf(
        "chat templates: %d of %zu templates render every case like @huggingface/jinja; %d/%d cases; %d cases "
        "the reference itself fails\n%s",
        templates_ok, files.size(), cases_ok, cases_total, reference_failed, report.c_str());
    EXPECT_EQ(cases_ok, cases_total);
}

// The formatter chosen from the flags (src/chat/chat_formatter.h).
TEST(ChatFormatter, ChoosesTheTemplateAsLlamaServerAndNeverFallsBackSilently) {
    const ojson msgs = ojson::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
    ChatFormatterOptions o;
    o.model_template =
        "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}{% if add_generation_prompt "
        "%}<a>{% endif %}";
    o.bos_token = "<s>";
    ChatFormatter f(o);
    EXPECT_TRUE(f.is_jinja());
    EXPECT_EQ(f.apply(msgs, ojson(), true, ojson::object(), true), "<system>S<user>U<a>");  // the tokenizer adds BOS
    EXPECT_EQ(f.apply(msgs, ojson(), false, ojson::object(), false), "<s><system>S<user>U");
    // --chat-template NAME: the built-in, whatever the model has
    o.template_name = "chatml";
    ChatFormatter named(o);
    EXPECT_FALSE(named.is_jinja());
    EXPECT_EQ(named.apply(msgs, ojson(), true, ojson::object(), true),
              "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
    o.template_name = "nonsense";
    EXPECT_THROW(ChatFormatter{o}, Error);
    o.template_name.clear();
    // a template that cannot be parsed: an error naming the line, not a silent fallback
    o.model_template = "ok\n{% for m in messages %}";
    try {
        ChatFormatter bad(o);
        FAIL() << "accepted a broken template";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("--chat-template NAME"), std::string::npos) << e.what();
    }
    // --no-jinja: recognised by its markers, or refused
    o.jinja = false;
    o.model_template = "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{% endfor %}";
    EXPECT_EQ(ChatFormatter(o).builtin(), ChatTemplate::LLAMA3);
    o.model_template = "{{ messages }}";
    EXPECT_THROW(ChatFormatter{o}, Error);
}

// The official Llama 3.1 template, executed: the system block with the knowledge date and today's date (the
// date_string llama.cpp gives every template), no trailing newline the template trims (the built-in
// approximation got both wrong).
TEST(ChatFormatter, Llama31TemplateIsRenderedAsWritten) {
    const char* env = std::getenv("TANDEM_CHAT_TEMPLATES");
    const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "/root";
    const std::string dir = env && *env ? env : home + "/.cache/tandem/chat-templates";
    ChatFormatterOptions o;
    o.model_template = test::read_file(dir + "/meta-llama-Llama-3.1-8B-Instruct.jinja");
    ASSERT_FALSE(o.model_template.empty()) << "run scripts/fetch-chat-templates.sh";
    o.bos_token = "<|begin_of_text|>";
    o.now = fixed_clock;
    const std::string p = ChatFormatter(o).apply(ojson::parse(R"([{"role": "user", "content": "Hi"}])"), ojson(), true,
                                                 ojson::object(), true);
    EXPECT_EQ(p,
              "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 15 Jan "
              "2026\n\n"
              "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_"
              "header_id|>\n\n");
}

// Hostile templates get errors, not stack overflows or hangs: endless recursion, deep nesting, huge ranges.
TEST(Jinja, HostileTemplatesFailCleanly) {
    EXPECT_THROW(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), Error);
    EXPECT_THROW(render("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"), Error);
    EXPECT_THROW(render("{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}"), Error);
    EXPECT_THROW(render(std::string(3000, '-').insert(0, "{{ ") + "1 }}"), Error);
    std::string nested;
    for (int i = 0; i < 500; i++) nested += "{% if true %}";
    EXPECT_THROW(render(nested), Error);
    EXPECT_THROW(render("{{ range(100000000)|length }}"), Error);
    // a macro recursing a little is fine
    EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}"),
              "54321");
}

// Corrupted real templates (bytes cut, dropped, duplicated or replaced) parse and render to a result or an
// Error, never a crash (run under ASan/UBSan in CI).
TEST(Jinja, MutatedRealTemplatesNeverCrash) {
    const char* env = std::getenv("TANDEM_CHAT_TEMPLATES");
    const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "/root";
    const std::string dir = env && *env ? env : home + "/.cache/tandem/chat-templates";
    const std::string base = test::read_file(dir + "/meta-llama-Llama-3.1-8B-Instruct.jinja") +
                             test::read_file(dir + "/Qwen-Qwen3-0.6B.jinja");
    ASSERT_FALSE(base.empty()) << "run scripts/fetch-chat-templates.sh";
    const Value ctx = Value::from_json(
        ojson::parse(R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a", "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}, {"role": "tool", "content": "r"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}], "add_generation_prompt": true})"));
    uint64_t rng = 12345;
    auto next = [&] { return rng = rng * 6364136223846793005ull + 1442695040888963407ull, uint32_t(rng >> 33); };
    int rendered = 0, refused = 0;
    for (int i = 0; i < 400; i++) {
        std::string t = base;
        for (int k = 0, n = 1 + int(next() % 4); k < n && !t.empty(); k++) {
            const size_t at = next() % t.size();
            switch (next() % 4) {
                case 0: t.erase(at, 1 + next() % 8); break;
                case 1: t.insert(at, t.substr(next() % t.size(), 1 + next() % 12)); break;
                case 2: t[at] = "{}%#-()[]|.'\"~ \n"[next() % 16]; break;
                case 3: t.resize(at); break;
            }
        }
        try {
            Template(t).render(ctx);
            rendered++;
        } catch (const Error&) {
            refused++;
        }
    }
    EXPECT_EQ(rendered + refused, 400);
    std::printf("mutated templates: %d rendered, %d refused with an error\n", rendered, refused);
}

// Where @huggingface/jinja errors and Python's Jinja (what model authors test with) does not, tandem follows
// Python: templates that loop over `tools` unguarded (Hermes 2/3 tool_use, Command R+) work without tools.
TEST(Jinja, PythonLeniencyWhereTheReferenceFails) {
    EXPECT_EQ(render("[{% for t in tools %}x{% endfor %}]{{ tools|length }}"), "[]0");
    // llama.cpp's leniency too: a string joined with none/undefined (firefunction), filters over none (functionary)
    EXPECT_EQ(render("{{ 'a' + functions }}|{{ none ~ 'b' }}"), "a|b");
    EXPECT_EQ(render("{% set t = none %}{{ t | selectattr('type', 'equalto', 'x') | list | length }}"), "0");
}

TEST(Jinja, NumbersOutOfRangeAreErrors) {
    EXPECT_THROW(render("{{ 99999999999999999999999 }}"), Error);
    EXPECT_EQ(render("{{ 2.50 }} {{ 10.0 }}"), "2.5 10.0");
}

// A chat template comes from a model file: untrusted. Each of these (from an adversarial run, issue 26) crashed the
// server (stack overflow, SIGFPE), kept a core busy without end, or took gigabytes; each must end with an Error that
// names the bound (jinja_value.h, Limits), and the same interpreter must still render normally afterwards.
TEST(Jinja, HostileTemplatesEndWithAnErrorNamingTheBound) {
    auto repeat = [](const std::string& s, int n) {
        std::string out;
        for (int i = 0; i < n; i++) out += s;
        return out;
    };
    // the step-bound cases run with a budget of 300,000 steps (RenderOptions::max_steps) to keep the test fast;
    // the server renders with Limits::kSteps
    auto fails_with = [&](const std::string& src, const std::string& what) {
        const auto t0 = std::chrono::steady_clock::now();
        struct Timer {
            std::chrono::steady_clock::time_point t0;
            std::string src;
            ~Timer() {
                std::printf("  %.2f s  %s\n",
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                            src.substr(0, 70).c_str());
            }
        } timer{t0, src};
        try {
            RenderOptions opt;
            opt.max_steps = 300'000;
            Template(src).render(Value::from_json(ojson::parse(R"({"messages": [{"role": "user", "content": "hi"}]})")),
                                 opt);
            ADD_FAILURE() << "rendered: " << src.substr(0, 80);
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    };
    // stack depth: long chains are refused when parsed
    fails_with("{{ messages" + repeat(".x", 10000) + " }}", "chains more than");
    fails_with("{{ 1" + repeat(" + 1", 20000) + " }}", "chains more than");
    fails_with("{{ 'a'" + repeat(" | trim", 20000) + " }}", "chains more than");
    fails_with("{{ f" + repeat("()", 20000) + " }}", "nested too deeply");
    // a value nested 100,000 deep, built in a loop, then printed
    fails_with(
        "{% set ns = namespace(d=none) %}{% for i in range(100000) %}{% set ns.d = {'a': ns.d} %}{% endfor %}"
        "{{ ns.d | tojson }}",
        "nested more than 200 levels");
    fails_with("{% set ns = namespace(d=[]) %}{% for i in range(1000) %}{% set ns.d = [ns.d] %}{% endfor %}",
               "nested more than 200 levels");
    // time: nested loops and a macro calling itself twice per level run out of steps
    fails_with(
        "{% for i in range(1000) %}{% for j in range(1000) %}{% for k in range(1000) %}{% endfor %}{% endfor %}"
        "{% endfor %}",
        "steps");
    fails_with("{{ range(1000000) | length }}", "steps");  // what a function makes is paid for too
    fails_with("{% macro m(n) %}{% if n > 0 %}{{ m(n - 1) }}{{ m(n - 1) }}{% endif %}{% endmacro %}{{ m(45) }}",
               "steps");
    // memory: doubling strings and lists, huge indents, a tojson indent of 10^9
    fails_with("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
               "would make a string of");
    fails_with("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
               "would make a string of");
    fails_with(
        "{% set ns = namespace(l=range(1000)|list) %}{% for i in range(30) %}{% set ns.l = ns.l + ns.l %}"
        "{% endfor %}{{ ns.l | join(',') }}",
        "a list of more than");
    // a string or list grown in a loop copies quadratically: its size is charged (issue 26's fuzz run: this ran
    // for minutes)
    fails_with(
        "{% set ns = namespace(s='') %}{% for i in range(1000) %}{% for j in range(1000) %}"
        "{% set ns.s = ns.s ~ 'ab' %}{% endfor %}{% endfor %}",
        "steps");
    fails_with(
        "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% for j in range(1000) %}"
        "{% set ns.l = ns.l + [1] %}{% endfor %}{% endfor %}",
        "steps");
    fails_with("{{ 'a\nb' | indent(1500000000) }}", "indent would make a string");
    fails_with("{{ messages | tojson(indent=1000000000) }}", "indent must be at most 1000");
    fails_with("{% for i in range(100000) %}{{ '" + repeat("0123456789", 100) + "' }}{% endfor %}",
               "the loop's output");
    // arithmetic past int64 is a float (JavaScript's numbers), never a trap or a wrapped value
    EXPECT_EQ(render("{{ (-9223372036854775807 - 1) % -1 }}"), "0");
    // int of what has no integer: its default, never an undefined cast (UBSan aborted here)
    EXPECT_EQ(render("{{ 'nan' | float | int }}"), "0");
    EXPECT_EQ(render("{{ '-inf' | float | int }}"), "0");
    EXPECT_EQ(render("{{ '1e300' | float | int }}"), render("{{ '1e300' | float }}"));
    EXPECT_EQ(render("{{ 9223372036854775807 + 1 }}"), "9223372036854776000.0");
    EXPECT_EQ(render("{{ -(-9223372036854775807 - 1) }}"), "9223372036854776000.0");
    EXPECT_EQ(render("{{ 3037000500 * 3037000500 }}"), "9223372037000250000.0");
    EXPECT_EQ(render("{{ (-9223372036854775807 - 1) | abs }}"), "9223372036854776000.0");
    // and ordinary templates still render
    EXPECT_EQ(render("{% for m in messages %}{{ m.role }}: {{ m.content }}{% endfor %}",
                     R"({"messages": [{"role": "user", "content": "hi"}]})"),
              "user: hi");
}

// parallel_tool_calls' default follows the template, as llama-server's (issue 49): a template that renders every
// call of an assistant turn says yes, one that renders the first only or refuses two says no; the official
// Llama 3.1 template raises on two calls ("only supports single tool-calls"), Qwen2.5's renders both.
TEST(ChatFormatter, ParallelToolCallsAreWhatTheTemplateRenders) {
    ChatFormatterOptions o;
    o.model_template =
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% if m.tool_calls %}{% for c in m.tool_calls %}"
        "[{{ c.function.name }}]{% endfor %}{% endif %}{% endfor %}";
    EXPECT_TRUE(ChatFormatter(o).renders_parallel_tool_calls());
    o.model_template =
        "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% if m.tool_calls %}[{{ m.tool_calls[0].function.name "
        "}}]{% endif %}{% endfor %}";
    EXPECT_FALSE(ChatFormatter(o).renders_parallel_tool_calls());
    o.model_template =
        "{% for m in messages %}{% if m.tool_calls and m.tool_calls | length > 1 %}{{ raise_exception('one call') }}"
        "{% endif %}<{{ m.role }}>{{ m.content }}{% endfor %}";
    EXPECT_FALSE(ChatFormatter(o).renders_parallel_tool_calls());
    const char* env = std::getenv("TANDEM_CHAT_TEMPLATES");
    const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "/root";
    const std::string dir = env && *env ? env : home + "/.cache/tandem/chat-templates";
    o.model_template = test::read_file(dir + "/meta-llama-Llama-3.1-8B-Instruct.jinja");
    ASSERT_FALSE(o.model_template.empty()) << "run scripts/fetch-chat-templates.sh";
    EXPECT_FALSE(ChatFormatter(o).renders_parallel_tool_calls());
    o.model_template = test::read_file(dir + "/Qwen-Qwen2.5-7B-Instruct.jinja");
    ASSERT_FALSE(o.model_template.empty());
    EXPECT_TRUE(ChatFormatter(o).renders_parallel_tool_calls());
}
