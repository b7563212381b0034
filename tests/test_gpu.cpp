// Models on a GPU (SessionParams::gpu, tandem/gpu.h): the forward pass of the CPU on the Vulkan backend's ops. On
// the first Vulkan device (in CI Mesa's lavapipe, which proves correctness, never speed); optional where there is
// none, required with TANDEM_REQUIRE_VULKAN=1 (test_util.h vulkan_unavailable), every validation message a failure.
// Agreement with llama.cpp's reference logits on the GPU is tests/test_reference.cpp's Gpu* suites; speculation's
// identity on the GPU is test_speculative.cpp's Gpu* tests.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "model/device_weights.h"
#include "tandem/error.h"
#include "tandem/gpu.h"
#include "tandem/model.h"
#include "tandem/session.h"
#include "tandem/thread_pool.h"
#include "test_util.h"

using namespace tandem;

namespace {

std::vector<int32_t> prompt_of(int n, int n_vocab) {
    std::vector<int32_t> ids;
    for (int i = 0; i < n; i++) ids.push_back(int32_t(1 + (i * 37 + 11) % (n_vocab - 1)));
    return ids;
}

// The logits of every row of `ids` decoded in one pass by a session with these params.
std::vector<float> all_logits(const std::shared_ptr<const Model>& m, const SessionParams& sp, ThreadPool& pool,
                              const std::vector<int32_t>& ids) {
    Session s(m, sp, pool);
    s.decode(ids, true);
    const size_t nv = size_t(s.n_vocab());
    std::vector<float> out(ids.size() * nv);
    for (size_t r = 0; r < ids.size(); r++) std::memcpy(&out[r * nv], s.logits(int(r)), nv * sizeof(float));
    return out;
}

// The models the GPU tests run: the architectures whose passes differ (MoE, sliding windows, QK-norms, no
// pre-norms, gated DeltaNet, llama4, gemma4's per-layer inputs and shared-KV layers), in weight types whose products
// the CPU computes on float activations, as the GPU does (the CPU rounds activations to 8 bits before Q8_0, Q4_0 and
// K-quant products, as llama.cpp does, which moves logits by ~0.1: those types are held to llama.cpp's references on
// the GPU instead, test_reference.cpp's OnTheGpu tests).
struct GpuCase {
    const char* shape;  // a shared file under models/ (".gguf"), else a synth shape
    const char* type;
};
std::string path_of(const GpuCase& c) {
    const std::string s = c.shape;
    return s.size() > 5 && s.substr(s.size() - 5) == ".gguf" ? test::shared_file("models/" + s)
                                                             : test::synth_file(s, c.type);
}

const GpuCase kCases[] = {
    {"stories260K.gguf", "F32"},
    {"synth-qwen2-gpt2bpe-bf16.gguf", "BF16"},
    {"synth-llama3ish-gpt2bpe-f16.gguf", "F16"},
    {"tiny-test-qwen3moe", "F16"},
    {"tiny-test-gemma3", "F16"},
    {"tiny-test-phi3", "Q4_1"},
    {"tiny-test-gptoss", "F16"},
    {"tiny-ref-olmo2", "Q5_0"},
    {"tiny-ref-glm4moe", "F16"},
    {"tiny-ref-qwen35", "F16"},
    {"tiny-ref-qwen3next", "F16"},
    {"tiny-ref-llama4", "Q5_1"},
    {"tiny-ref-gemma4", "F16"},
    {"tiny-ref-mistral3", "F16"},
};

// Every row's logits on the GPU (all of the model, or its last `layers` layers: a split model) against the CPU's:
// the same sums in other orders, so within 0.2% of the logits' spread (measured: at most 0.0015 of it, gemma4; most
// cases 1e-5), and the same greedy choice wherever the CPU's margin is clear.
void expect_gpu_agrees_with_cpu(const GpuCase& c, ThreadPool& pool, bool split) {
    SCOPED_TRACE(c.shape);
    auto m = Model::load(path_of(c));
    const int layers = split ? std::max(1, m->hparams().n_layer / 2) : -1;
    const auto ids = prompt_of(24, m->hparams().n_vocab);
    SessionParams cpu{64, 0, 256}, gpu = cpu;
    gpu.gpu = place_on_gpu(m, -1, layers);
    const auto a = all_logits(m, cpu, pool, ids), b = all_logits(m, gpu, pool, ids);
    const size_t nv = size_t(m->hparams().n_vocab);
    double max_dev = 0, spread = 0;
    int checked = 0, misses = 0;
    for (size_t r = 0; r < ids.size(); r++) {
        const float* x = &a[r * nv];
        const float* y = &b[r * nv];
        size_t best = 0, second = 0;
        float lo = x[0], hi = x[0];
        for (size_t i = 0; i < nv; i++) {
            ASSERT_TRUE(std::isfinite(y[i])) << "row " << r << " logit " << i;
            max_dev = std::max(max_dev, double(std::fabs(x[i] - y[i])));
            lo = std::min(lo, x[i]);
            hi = std::max(hi, x[i]);
            if (x[i] > x[best]) best = i;
        }
        second = best == 0 ? 1 : 0;
        for (size_t i = 0; i < nv; i++)
            if (i != best && x[i] > x[second]) second = i;
        spread = std::max(spread, double(hi - lo));
        if (x[best] - x[second] > 0.02 * (hi - lo)) {
            checked++;
            size_t gb = 0;
            for (size_t i = 0; i < nv; i++)
                if (y[i] > y[gb]) gb = i;
            misses += gb != best;
        }
    }
    std::printf("[ %s %s ] GPU%s vs CPU: largest logit deviation %.5f (logit spread %.2f), argmax %d of %d\n", c.shape,
                c.type, split ? strprintf(" (last %d of %d layers)", layers, m->hparams().n_layer).c_str() : "",
                max_dev, spread, checked - misses, checked);
    EXPECT_LT(max_dev, 0.002 * spread);
    EXPECT_EQ(misses, 0);
}

}  // namespace

TEST(Gpu, LogitsAgreeWithTheCpuForEveryArchitectureAndType) {
    GPU_OR_SKIP();
    ThreadPool pool(2);
    for (const GpuCase& c : kCases) expect_gpu_agrees_with_cpu(c, pool, false);
    GPU_NO_MESSAGES();
}

// A model split between the CPU and the GPU (-ngl below the layer count: the first half of the layers and the
// embedding on the CPU, the rest and the output on the GPU): the CPU's logits within the same bounds, for the
// architectures a split takes (dense, MoE, sliding windows, biases, sinks, an MTP block, Gated DeltaNet layers, whose
// states each part keeps for its own layers); those it does not take yet are refused by
// name (and -ngl then runs the model on the CPU, with a warning).
TEST(Gpu, ASplitModelAgreesWithTheCpu) {
    GPU_OR_SKIP();
    ThreadPool pool(2);
    for (const GpuCase& c : {kCases[0], kCases[2], kCases[3], kCases[4], kCases[6], kCases[8], kCases[9], kCases[10]})
        expect_gpu_agrees_with_cpu(c, pool, true);
    for (const GpuCase& c : {kCases[12]}) {  // gemma4 (shared-KV layers, per-layer inputs)
        SCOPED_TRACE(c.shape);
        auto m = Model::load(path_of(c));
        EXPECT_NE(gpu_split_unsupported(*m), "");
        EXPECT_THROW(place_on_gpu(m, -1, 1), Error);
        GpuFlags f;
        f.ngl = parse_gpu_layers("1", "-ngl");
        const GpuChoice ch = choose_gpu(m, f, false, 0);
        EXPECT_FALSE(ch.gpu);
        EXPECT_TRUE(ch.warning) << ch.log;
        EXPECT_NE(ch.log.find("not split"), std::string::npos) << ch.log;
    }
    GPU_NO_MESSAGES();
}

// The CPU's repacked copies are made only of what runs on the CPU (Model::place_on_cpu): none for a model wholly on
// the GPU, the layers below the split for a split one, the rest when a session runs the whole model on the CPU.
TEST(Gpu, TheLayersTheGpuRunsGetNoHostCopy) {
    GPU_OR_SKIP();
    ThreadPool pool(1);
    auto m = Model::load(test::shared_file("models/synth-llama-spm-q8_0.gguf"));  // Q8_0, 4 layers
    const size_t all = m->unplaced_cpu_bytes();
    if (all == 0) GTEST_SKIP() << "this CPU has no packed layout: the CPU reads every weight in place";
    SessionParams sp{64, 0, 64};
    sp.gpu = place_on_gpu(m, -1);
    { Session whole(m, sp, pool); }
    EXPECT_EQ(m->packed_bytes(), 0u);
    sp.gpu = place_on_gpu(m, -1, 2);
    { Session split(m, sp, pool); }
    const size_t lower = m->packed_bytes();
    EXPECT_GT(lower, 0u);
    EXPECT_LT(lower, all / 2);  // layers 0 and 1 (the output, the largest matrix, is the GPU's)
    EXPECT_EQ(m->unplaced_cpu_bytes(), all - lower);
    Session cpu(m, SessionParams{64, 0, 64}, pool);
    EXPECT_EQ(m->packed_bytes(), all);
    EXPECT_EQ(m->unplaced_cpu_bytes(), 0u);
    GPU_NO_MESSAGES();
}

// Batch invariance at the model's level: a row's logits on the GPU are bit-identical whether its tokens come one pass
// at a time, as a chain of 8 (a verification), as one prompt pass, or beside another session's rows.
TEST(Gpu, ARowsLogitsDoNotDependOnItsPass) {
    GPU_OR_SKIP();
    ThreadPool pool(2);
    // (stories260K and qwen3moe also split between the CPU and the GPU, and they and qwen35 over two GPUs (device 0
    // opened twice), with the first layer on the CPU where it has 3 or more: each part batch invariant on its own, and
    // qwen35's Gated DeltaNet states kept by each part for its layers)
    enum Split { WHOLE, CPU_GPU, CPU_2GPU };
    for (const auto& [c, split] : {std::pair{kCases[0], WHOLE},
                                   {kCases[0], CPU_GPU},
                                   {kCases[0], CPU_2GPU},
                                   {kCases[3], WHOLE},
                                   {kCases[3], CPU_GPU},
                                   {kCases[3], CPU_2GPU},
                                   {kCases[9], WHOLE},
                                   {kCases[9], CPU_2GPU},
                                   {kCases[12], WHOLE}}) {
        SCOPED_TRACE(std::string(c.shape) + (split == CPU_GPU ? " split" : split == CPU_2GPU ? " split over 2" : ""));
        auto m = Model::load(path_of(c));
        const auto ids = prompt_of(16, m->hparams().n_vocab);
        SessionParams sp{64, 0, 256};
        sp.recurrent_keep = kRecurrentKeepTarget;
        const int L = m->hparams().n_layer;
        sp.gpu = split == WHOLE     ? place_on_gpu(m, -1)
                 : split == CPU_GPU ? place_on_gpu(m, -1, L / 2)
                 : L >= 3           ? place_on_gpus(m, {0, 0}, L - 1)
                                    : place_on_gpus(m, {0, 0});  // (qwen3moe's 2 layers: one on each)
        const auto whole = all_logits(m, sp, pool, ids);
        const size_t nv = size_t(m->hparams().n_vocab);
        Session one(m, sp, pool), chains(m, sp, pool);
        for (size_t r = 0; r < ids.size(); r++) {
            one.decode(&ids[r], 1, false);
            ASSERT_EQ(0, std::memcmp(one.logits(0), &whole[r * nv], nv * sizeof(float))) << "row " << r << " alone";
        }
        chains.decode(ids.data(), 8, true);
        chains.decode(ids.data() + 8, 8, true);
        for (int r = 0; r < 8; r++)
            ASSERT_EQ(0, std::memcmp(chains.logits(r), &whole[size_t(8 + r) * nv], nv * sizeof(float)))
                << "row " << 8 + r << " in a chain of 8";
        // two sessions in one pass (as the server batches its slots), and a token tree's nodes
        Session a(m, sp, pool), b(m, sp, pool), t(m, sp, pool);
        a.decode(ids.data(), 12, false);
        b.decode(ids.data(), 4, false);
        Session::decode_batch({{&a, ids.data() + 12, 4, true}, {&b, ids.data() + 4, 4, true}});
        for (int r = 0; r < 4; r++) {
            ASSERT_EQ(0, std::memcmp(a.logits(r), &whole[size_t(12 + r) * nv], nv * sizeof(float))) << "a " << r;
            ASSERT_EQ(0, std::memcmp(b.logits(r), &whole[size_t(4 + r) * nv], nv * sizeof(float))) << "b " << r;
        }
        t.decode(ids.data(), 10, false);
        // root = ids[10]; nodes 1 (ids[11]) and 2 (another token) its children; node 3 (ids[12]) under node 1
        const int32_t toks[4] = {ids[10], ids[11], ids[3], ids[12]}, parents[4] = {-1, 0, 0, 1};
        t.decode_tree(toks, parents, 4);
        for (int node : {0, 1, 3}) {
            const int row = node == 3 ? 12 : 10 + node;
            ASSERT_EQ(0, std::memcmp(t.logits(node), &whole[size_t(row) * nv], nv * sizeof(float))) << "node " << node;
        }
    }
    GPU_NO_MESSAGES();
}

// A model split over several GPUs (-sm layer over -dev A,B: place_on_gpus), here device 0 opened twice (two queues
// and two memories of one GPU): each part holds its own layers' weights (the first the token embedding, the last the
// output), a pass hands its rows from part to part, and every row's logits are bit-identical to one device's, with
// the whole model on the GPUs or the first layer on the CPU, for the architectures a split takes (dense, MoE,
// sliding windows, sinks, Gated DeltaNet). A model that cannot split is refused by name, and the flags then take one
// device.
TEST(Gpu, ASplitOverSeveralGpusGivesOneGpusBits) {
    GPU_OR_SKIP();
    ThreadPool pool(2);
    for (const GpuCase& c : {kCases[0], kCases[3], kCases[4], kCases[6], kCases[9]}) {
        SCOPED_TRACE(c.shape);
        auto m = Model::load(path_of(c));
        const int L = m->hparams().n_layer;
        const auto ids = prompt_of(24, m->hparams().n_vocab);
        SessionParams sp{64, 0, 256};
        sp.gpu = place_on_gpu(m, -1);
        const auto one = all_logits(m, sp, pool, ids);
        const size_t whole_bytes = gpu_placement_info(*sp.gpu).weight_bytes;
        for (const auto& [devices, shares] : {std::pair{std::vector<int>{0, 0}, std::vector<float>{}},
                                              {std::vector<int>{0, 0, 0}, std::vector<float>{1, 2, 1}}}) {
            if (int(devices.size()) > L) continue;  // (qwen3moe: 2 layers)
            sp.gpu = place_on_gpus(m, devices, -1, shares);
            const GpuPlacementInfo info = gpu_placement_info(*sp.gpu);
            ASSERT_EQ(info.parts.size(), devices.size());
            int next = 0;
            for (const GpuPartInfo& p : info.parts) {  // contiguous, each at least one layer and less than the whole
                EXPECT_EQ(p.first, next);
                EXPECT_GT(p.end, p.first);
                EXPECT_LT(p.weight_bytes, whole_bytes);
                EXPECT_EQ(p.output, &p == &info.parts.back());
                next = p.end;
            }
            EXPECT_EQ(next, L);
            EXPECT_GE(info.weight_bytes,
                      whole_bytes);  // (a tied output: the embedding on the first, the head on the last)
            const auto split = all_logits(m, sp, pool, ids);
            EXPECT_EQ(0, std::memcmp(split.data(), one.data(), one.size() * sizeof(float)))
                << devices.size() << " devices: " << gpu_parts_text(info);
        }
        // the first layer on the CPU, the others on one device or over two
        if (L < 3) continue;
        sp.gpu = place_on_gpu(m, -1, L - 1);
        const auto cpu_one = all_logits(m, sp, pool, ids);
        sp.gpu = place_on_gpus(m, {0, 0}, L - 1);
        EXPECT_EQ(gpu_placement_info(*sp.gpu).parts[0].first, 1);
        const auto cpu_two = all_logits(m, sp, pool, ids);
        EXPECT_EQ(0, std::memcmp(cpu_two.data(), cpu_one.data(), cpu_one.size() * sizeof(float)));
    }
    // What cannot split: gemma4 (shared-KV layers), refused by name; the flags then take the first device
    auto rec = Model::load(path_of(kCases[12]));
    EXPECT_THROW(place_on_gpus(rec, {0, 0}), Error);
    const GpuChoice one = choose_gpu(rec, parse_gpu_layers("99", "-ngl"), {0, 0}, 0, "target");
    ASSERT_TRUE(one.gpu) << one.log;
    EXPECT_EQ(gpu_placement_info(*one.gpu).parts.size(), 1u);
    EXPECT_NE(one.log.find("not split over 2 devices"), std::string::npos) << one.log;
    // the flags' split: the log names each part; -ts 1,0 leaves the second device out; more shares than devices and
    // more devices than layers are errors naming them
    auto m = Model::load(test::shared_file("models/stories260K.gguf"));
    const GpuChoice two = choose_gpu(m, parse_gpu_layers("99", "-ngl"), {0, 0}, 0, "target", 0, {1, 3});
    ASSERT_TRUE(two.gpu) << two.log;
    EXPECT_NE(two.log.find("2 parts on GPUs"), std::string::npos) << two.log;
    EXPECT_NE(two.log.find("and the output on Vulkan0"), std::string::npos) << two.log;
    const GpuChoice ts = choose_gpu(m, parse_gpu_layers("99", "-ngl"), {0, 0}, 0, "target", 0, {1, 0});
    ASSERT_TRUE(ts.gpu) << ts.log;
    EXPECT_EQ(gpu_placement_info(*ts.gpu).parts.size(), 1u);
    EXPECT_THROW(choose_gpu(m, parse_gpu_layers("99", "-ngl"), {0, 0}, 0, "target", 0, {1, 1, 1}), Error);
    EXPECT_THROW(place_on_gpus(m, std::vector<int>(size_t(m->hparams().n_layer) + 1, 0)), Error);
    EXPECT_THROW(place_on_gpus(m, {0, 0}, -1, {1}), Error);  // a share for each device
    GPU_NO_MESSAGES();
}

// A split model's Gated DeltaNet states (qwen35: each part keeps its layers' states, moved together): rolled back
// after a verification pass and after a token tree, the next rows' logits are bit-identical to the rows the first
// time; a state file (the parts' states one after the other, in the layers' order, as one device writes them)
// restored into another session of the same placement gives the saving session's logits bit for bit, and restored
// on one device the same size and cache length. (Suite GpuSplit, not Gpu: it runs under the sanitizer too, the
// split's host side: its stages, their caches and recurrent parts; scripts/test.sh asan_tests.)
TEST(GpuSplit, ARecurrentModelsStatesRollBackAndRestore) {
    GPU_OR_SKIP();
    ThreadPool pool(2);
    auto m = Model::load(path_of(kCases[9]));
    const int L = m->hparams().n_layer;
    const auto ids = prompt_of(14, m->hparams().n_vocab);
    SessionParams sp{64, 0, 256};
    sp.gpu = place_on_gpus(m, {0, 0}, L - 1);  // layer 0 on the CPU, the others over two GPUs
    Session a(m, sp, pool), b(m, sp, pool);
    const size_t nv = size_t(m->hparams().n_vocab);
    {  // a verification pass of 4 rows, 3 rejected, then those rows again; a tree whose second branch is kept
        Session v(m, sp, pool);
        v.decode(ids.data(), 10, false);
        v.decode(ids.data() + 10, 4, true);
        std::vector<float> first(4 * nv);
        for (int r = 0; r < 4; r++) std::memcpy(&first[size_t(r) * nv], v.logits(r), nv * sizeof(float));
        v.truncate(11);
        v.decode(ids.data() + 11, 3, true);
        for (int r = 0; r < 3; r++)
            ASSERT_EQ(0, std::memcmp(v.logits(r), &first[size_t(r + 1) * nv], nv * sizeof(float)))
                << "row " << 11 + r << " after the rollback";
        const int32_t toks[3] = {ids[0], ids[1], ids[2]}, parents[3] = {-1, 0, 0};  // node 2: another child of 0
        v.decode_tree(toks, parents, 3);
        v.keep_path(v.n_past() - 3, {0, 2});
        Session w(m, sp, pool);
        w.decode(ids.data(), 14, false);
        w.decode(&ids[0], 1, false);
        w.decode(&ids[2], 1, false);
        v.decode(&ids[5], 1, true);
        w.decode(&ids[5], 1, true);
        ASSERT_EQ(0, std::memcmp(v.logits(0), w.logits(0), nv * sizeof(float))) << "after the tree's path";
    }
    a.decode(ids.data(), 10, false);
    const std::string path = test::temp_dir() + "/split-qwen35.state";
    const size_t written = a.save_state(path);
    EXPECT_EQ(b.load_state(path), written);
    EXPECT_EQ(b.n_past(), 10);
    a.decode(ids.data() + 10, 4, true);
    b.decode(ids.data() + 10, 4, true);
    for (int r = 0; r < 4; r++) ASSERT_EQ(0, std::memcmp(a.logits(r), b.logits(r), nv * sizeof(float))) << "row " << r;
    SessionParams one = sp;
    one.gpu = place_on_gpu(m, -1);
    Session c(m, one, pool);
    EXPECT_EQ(c.load_state(path), written);
    EXPECT_EQ(c.n_past(), 10);
    GPU_NO_MESSAGES();
}

// A context shift on the GPU runs on the device, through its ops (Session::shift: the moved rows gathered, their keys
// re-rotated, stored back; no row through the host): a one-layer session attends after it like a fresh cache of
// the kept tokens (the CPU's test, Session.ShiftAttendsLikeAFreshCacheOfTheKeptTokens, at the same bound); a split
// model's parts each shift their own layers, bit-identical to one device's; sliding-window rings (gemma3) shift as
// the CPU's do, within the GPU-vs-CPU bound.
TEST(Gpu, AContextShiftRunsOnTheDevice) {
    GPU_OR_SKIP();
    ThreadPool pool(2);
    auto m = Model::load(test::shared_file("models/stories260K.gguf"));
    std::vector<int32_t> seq = {1};
    for (int i = 0; i < 60; i++) seq.push_back(int32_t(260 + (i * 53) % 240));
    const int n_keep = 5, n_discard = 20;
    std::vector<int32_t> kept(seq.begin(), seq.begin() + n_keep);
    kept.insert(kept.end(), seq.begin() + n_keep + n_discard, seq.end());
    auto last = [](Session& s, int32_t t) {
        s.decode(&t, 1, false);
        return std::vector<float>(s.last_logits(), s.last_logits() + s.n_vocab());
    };
    {  // one layer: like a fresh cache of the kept tokens
        SessionParams sp{0, 1, 256};
        sp.gpu = place_on_gpu(m, -1);
        Session a(m, sp, pool), b(m, sp, pool);
        a.decode(seq, false);
        a.shift(n_keep, n_discard);
        ASSERT_EQ(a.tokens(), kept);
        b.decode(kept, false);
        const auto x = last(a, 300), y = last(b, 300);
        float worst = 0, scale = 0;
        for (size_t v = 0; v < x.size(); v++) {
            worst = std::max(worst, std::fabs(x[v] - y[v]));
            scale = std::max(scale, std::fabs(y[v]));
        }
        EXPECT_LT(worst, 0.01f * scale + 1e-3f)
            << "largest logit difference " << worst << " (logits up to " << scale << ")";
    }
    {  // the first layer on the CPU and the others on one GPU, or over two: the same bits after two shifts
        const int L = m->hparams().n_layer;
        SessionParams one{64, 0, 256}, two = one;
        one.gpu = place_on_gpu(m, -1, L - 1);
        two.gpu = place_on_gpus(m, {0, 0}, L - 1);
        Session a(m, one, pool), b(m, two, pool);
        for (Session* s : {&a, &b}) {
            s->decode(std::vector<int32_t>(seq.begin(), seq.begin() + 50), false);
            s->shift(n_keep, n_discard);
            s->decode(std::vector<int32_t>(seq.begin() + 50, seq.end()), false);
            s->shift(n_keep, 10);
        }
        const auto x = last(a, 417), y = last(b, 417);
        EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float)));
    }
    {  // gemma3's sliding-window rings: the GPU's shift as the CPU's
        auto g = Model::load(path_of(kCases[4]));
        ASSERT_GT(g->hparams().n_swa, 0);
        std::vector<int32_t> ids = prompt_of(600, g->hparams().n_vocab);
        SessionParams cpu{1024, 0, 256}, gpu = cpu;
        gpu.gpu = place_on_gpu(g, -1);
        Session a(g, cpu, pool), b(g, gpu, pool);
        ASSERT_LT(b.swa_positions(), 600);  // rings, which wrap
        std::vector<float> x, y;
        for (Session* s : {&a, &b}) {
            s->decode(ids, false);
            s->shift(4, 100);
            (s == &a ? x : y) = last(*s, ids[7]);
        }
        float worst = 0, lo = x[0], hi = x[0];
        for (size_t v = 0; v < x.size(); v++) {
            worst = std::max(worst, std::fabs(x[v] - y[v]));
            lo = std::min(lo, x[v]);
            hi = std::max(hi, x[v]);
        }
        EXPECT_LT(worst, 0.002f * (hi - lo)) << "largest logit deviation " << worst;
    }
    GPU_NO_MESSAGES();
}

// What cannot run on a GPU is said by name, before any pass: a model whose heads the GPU's attention does not take.
TEST(Gpu, WhatCannotRunOnTheGpuIsRefusedByName) {
    GPU_OR_SKIP();
    auto mla = Model::load(test::synth_file("tiny-ref-deepseek2", "F16"));
    EXPECT_NE(gpu_unsupported(*mla), "");
    try {
        place_on_gpu(mla, -1);
        ADD_FAILURE() << "an MLA model placed on the GPU";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("latent"), std::string::npos) << e.what();
    }
    auto m = Model::load(test::shared_file("models/stories260K.gguf"));
    auto other = Model::load(test::shared_file("models/synth-llama-spm-q8_0.gguf"));
    ThreadPool pool(1);
    SessionParams sp;
    sp.gpu = place_on_gpu(other, -1);
    EXPECT_THROW(Session(m, sp, pool), Error);  // another model's placement
    EXPECT_THROW(place_on_gpu(m, 99), Error);  // no such device
    GPU_NO_MESSAGES();
}

// The flags' one rule for a target and its draft (llama.cpp's): -ngld else -ngl; the target over -dev's devices
// (default: every GPU of the best kind) with -sm layer, on one device (-dev's first, else -mg) with -sm none; the
// draft on one device, -devd else -dev's first else -mg; the values as llama.cpp spells them.
TEST(Gpu, TheFlagsPlaceTheTargetAndTheDraftByOneRule) {
    using V = std::vector<int>;
    GpuFlags f;
    EXPECT_FALSE(f.layers(false).given);
    EXPECT_EQ(f.devices_for(false), V{});  // the default split
    EXPECT_EQ(f.devices_for(true), V{0});
    f.ngl = parse_gpu_layers("99", "-ngl");
    EXPECT_EQ(f.layers(true).n, 99);  // the draft as the target
    f.ngld = parse_gpu_layers("0", "-ngld");
    EXPECT_EQ(f.layers(true).n, 0);
    EXPECT_EQ(f.layers(false).n, 99);
    f.main_gpu = 1;
    EXPECT_EQ(f.devices_for(false), V{});  // -sm layer: -mg is not used (llama.cpp's)
    EXPECT_EQ(f.devices_for(true), V{1});
    f.split = false;  // -sm none
    EXPECT_EQ(f.devices_for(false), V{1});
    f.devices = parse_gpu_devices("Vulkan1,0");
    EXPECT_EQ(f.devices, (V{1, 0}));
    EXPECT_EQ(f.devices_for(false), V{1});  // -sm none: -dev's first over -mg
    f.split = true;
    EXPECT_EQ(f.devices_for(false), (V{1, 0}));
    EXPECT_EQ(f.devices_for(true), V{1});
    f.device_draft = parse_gpu_device("none");
    EXPECT_EQ(f.devices_for(true), V{-1});
    f.devices = parse_gpu_devices("none");
    EXPECT_EQ(f.devices_for(false), V{-1});
    EXPECT_EQ(parse_gpu_devices("0,0"), (V{0, 0}));
    EXPECT_THROW(parse_gpu_devices("Vulkan0,"), Error);
    EXPECT_THROW(parse_gpu_devices("gpu"), Error);
    EXPECT_TRUE(parse_gpu_layers("auto", "-ngl").automatic);
    EXPECT_TRUE(parse_gpu_layers("-1", "-ngl").automatic);
    EXPECT_TRUE(parse_gpu_layers("all", "-ngl").all);
    EXPECT_THROW(parse_gpu_layers("many", "-ngl"), Error);
}

// The fit: an -ngl count the device cannot hold is an error naming the sizes (here the device's memory is all but
// taken by another model of the command); -ngl auto takes as many of the last layers as fit, or the CPU, and fewer
// when the device then refuses the memory.
TEST(Gpu, AModelThatDoesNotFitIsRefusedOrGetsTheLayersThatFit) {
    GPU_OR_SKIP();
    auto m = Model::load(test::shared_file("models/stories260K.gguf"));
    const size_t mem = gpu_devices()[0].memory_bytes;
    ASSERT_GT(mem, 0u);
    // exactly the last 2 of 5 layers (with the output and the pass's scratch) fit beside `taken`
    const size_t taken = mem - DeviceWeights::bytes_for(*m, {3}) - gpu_scratch_bytes(*m);
    try {
        choose_gpu(m, parse_gpu_layers("99", "-ngl"), {0}, 0, "draft", taken);
        ADD_FAILURE() << "placed beyond the device's memory";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("do not fit"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("beside the"), std::string::npos) << e.what();
    }
    const GpuChoice two = choose_gpu(m, parse_gpu_layers("auto", "-ngl"), {0}, 0, "target", taken);
    ASSERT_TRUE(two.gpu) << two.log;
    EXPECT_EQ(gpu_placement_info(*two.gpu).layers, 2) << two.log;
    const GpuChoice none = choose_gpu(m, parse_gpu_layers("auto", "-ngl"), {0}, 0, "target", mem);
    EXPECT_FALSE(none.gpu);
    EXPECT_TRUE(none.warning) << none.log;
    // A device that refuses the memory it reported free (TANDEM_VK_MEMORY_LIMIT: room for the last 2 layers'
    // weights only): auto takes a quarter fewer layers a try (5, 3, 2) and says why; an explicit count is an error.
    setenv("TANDEM_VK_MEMORY_LIMIT", std::to_string(DeviceWeights::bytes_for(*m, {3}) + 4096).c_str(), 1);
    const GpuChoice refused = choose_gpu(m, parse_gpu_layers("auto", "-ngl"), {0}, 0, "target");
    std::string explicit_error;
    try {
        choose_gpu(m, parse_gpu_layers("99", "-ngl"), {0}, 0, "target");
    } catch (const Error& e) {
        explicit_error = e.what();
    }
    unsetenv("TANDEM_VK_MEMORY_LIMIT");
    ASSERT_TRUE(refused.gpu) << refused.log;
    EXPECT_EQ(gpu_placement_info(*refused.gpu).layers, 2) << refused.log;
    EXPECT_NE(refused.log.find("did not fit after all"), std::string::npos) << refused.log;
    EXPECT_NE(explicit_error.find("out of device memory"), std::string::npos) << explicit_error;
    GPU_NO_MESSAGES();
}
