// The protocol of a split model (include/tandem/split.h): start-up agreement, twin-session commands, hidden states,
// progress notes and faults, over any Transport.
#include <cstdio>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>

#include "backend/cpu/isa.h"
#include "split/poll.h"
#include "tandem/error.h"
#include "tandem/session.h"
#include "tandem/split.h"

namespace tandem {

namespace {

enum Tag : int {
    TAG_CMD = 11,
    TAG_HIDDEN = 12,
    TAG_PROGRESS = 13,
    TAG_ERROR = 14,
    TAG_AGREE = 15,
    TAG_VERDICT = 16,
    TAG_REDUCE = 17,
    TAG_STOP_ACK = 18
};
enum Op : int32_t {
    OP_OPEN = 1,
    OP_CLOSE,
    OP_DECODE,
    OP_EMBED,
    OP_BATCH,
    OP_KEEP_PATH,
    OP_TRUNCATE,
    OP_SHIFT,
    OP_STOP
};

struct Writer {
    std::vector<uint8_t> b;
    void i32(int32_t v) { raw(&v, sizeof v); }
    void f64(double v) { raw(&v, sizeof v); }
    void ints(const int32_t* p, int n) {
        i32(n);
        raw(p, size_t(n) * sizeof(int32_t));
    }
    void str(const std::string& s) {
        i32(int32_t(s.size()));
        raw(s.data(), s.size());
    }
    void raw(const void* p, size_t n) {
        const auto* c = static_cast<const uint8_t*>(p);
        b.insert(b.end(), c, c + n);
    }
};

// Reads what a Writer wrote; a short or malformed message is an Error (a peer of another version, or corruption).
struct Reader {
    const std::vector<uint8_t>& b;
    size_t at = 0;
    void raw(void* p, size_t n) {
        if (n > b.size() - at) throw Error("a malformed message from rank 0 (truncated)");
        std::memcpy(p, b.data() + at, n);
        at += n;
    }
    int32_t i32() {
        int32_t v;
        raw(&v, sizeof v);
        return v;
    }
    double f64() {
        double v;
        raw(&v, sizeof v);
        return v;
    }
    std::vector<int32_t> ints() {
        const int32_t n = i32();
        if (n < 0 || size_t(n) > (b.size() - at) / sizeof(int32_t)) throw Error("a malformed message (int list)");
        std::vector<int32_t> v(static_cast<size_t>(n));
        raw(v.data(), v.size() * sizeof(int32_t));
        return v;
    }
    std::string str() {
        const int32_t n = i32();
        if (n < 0 || size_t(n) > b.size() - at) throw Error("a malformed message (string)");
        std::string s(reinterpret_cast<const char*>(b.data() + at), size_t(n));
        at += size_t(n);
        return s;
    }
};

}  // namespace

struct Cluster::Impl {
    std::shared_ptr<Transport> t;
    SplitOptions opt;
    std::recursive_mutex mu;
    std::vector<int> plan;
    std::vector<std::string> hosts;  // every rank's, after agree()
    int next_id = 1;
    uint64_t pass = 0;  // forward passes so far (the same count on every rank)
    std::vector<uint64_t> progress;  // rank 0: the last pass each rank reported done
    std::atomic<bool> broken{false};
    std::string reason;
    std::function<void(const std::string&)> on_broken;
    bool stopped = false;
    Traffic sent, received;

    std::string who(int r) const {
        return r < int(hosts.size()) ? strprintf("rank %d (%s)", r, hosts[size_t(r)].c_str()) : strprintf("rank %d", r);
    }
    [[noreturn]] void fail(const std::string& why) {
        note_ranks_failed();  // the process then ends every rank (end_ranks: abort, not a finalize that waits)
        if (!broken.exchange(true)) {
            reason = why;
            if (on_broken) on_broken(why);
        }
        throw RankFailure(reason);
    }
    void check_alive() {
        if (broken) throw RankFailure(reason);
    }
    // Rank 0 gives a send timeout_s (a stalled rank breaks the cluster, named); the others wait (rank 0 ends them).
    void send(int to, int tag, const void* p, size_t n) {
        if (!t->send(to, tag, p, n, t->rank() == 0 ? opt.timeout_s : 0)) {
            if (t->rank() == 0) check_errors();  // (a rank that ended is named as such)
            fail(strprintf("%s did not take a message within %g s (--rank-timeout)", who(to).c_str(), opt.timeout_s));
        }
        sent.messages++;
        sent.bytes += n;
    }
    bool try_recv(int from, int tag, std::vector<uint8_t>& out, int* src) {
        if (!t->try_recv(from, tag, out, src)) return false;
        received.messages++;
        received.bytes += out.size();
        return true;
    }
    // Rank 0: a rank's error report, if one came, or a rank whose process ended: the cluster breaks, naming it.
    void check_errors() {
        std::vector<uint8_t> m;
        int src = -1;
        if (try_recv(-1, TAG_ERROR, m, &src)) fail(who(src) + " failed: " + std::string(m.begin(), m.end()));
        if (const int r = t->ended_rank(); r > 0)
            fail(who(r) + " ended: its process exited or was killed (its connection to rank 0 closed)");
    }
    void drain_progress() {
        std::vector<uint8_t> m;
        int src = -1;
        while (try_recv(-1, TAG_PROGRESS, m, &src))
            if (m.size() == sizeof(uint64_t) && src > 0 && src < int(progress.size()))
                std::memcpy(&progress[size_t(src)], m.data(), sizeof(uint64_t));
    }
    // Waits for the message (from, tag). Polls: spins briefly, then sleeps up to `nap_max_us` between looks (a blocked
    // MPI receive would spin a core that the ranks sharing a host need). Rank 0 also watches for error reports.
    // timeout_s <= 0: no limit. Returns false on timeout.
    bool wait(int from, int tag, std::vector<uint8_t>& out, double timeout_s, int nap_max_us) {
        return poll_until(
            [&](int spin) {
                if (try_recv(from, tag, out, nullptr)) return true;
                if (t->rank() == 0 && spin % 64 == 0) check_errors();
                return false;
            },
            timeout_s, nap_max_us);
    }
    void command(const Writer& w) {
        check_alive();
        for (int r = 1; r < t->size(); r++) send(r, TAG_CMD, w.b.data(), w.b.size());
    }
};

Cluster::Cluster(std::shared_ptr<Transport> t, const SplitOptions& opt) : impl_(std::make_unique<Impl>()) {
    TD_ASSERT(t && t->size() >= 2);
    impl_->t = std::move(t);
    impl_->opt = opt;
    impl_->progress.assign(size_t(impl_->t->size()), 0);
}

Cluster::~Cluster() {
    try {
        stop();
    } catch (const std::exception& e) {  // a broken cluster: nothing more to tell the others (end_ranks aborts)
        std::fprintf(stderr, "split: error: %s\n", e.what());
    } catch (...) {}
}

int Cluster::rank() const { return impl_->t->rank(); }
int Cluster::size() const { return impl_->t->size(); }
std::string Cluster::host() const { return impl_->t->host(); }
double Cluster::timeout_s() const { return impl_->opt.timeout_s; }
const SplitOptions& Cluster::options() const { return impl_->opt; }
const std::vector<int>& Cluster::plan() const { return impl_->plan; }
int Cluster::first_layer() const { return tensor() ? 0 : impl_->plan.at(size_t(rank())); }
int Cluster::end_layer() const { return tensor() ? impl_->plan.back() : impl_->plan.at(size_t(rank()) + 1); }
bool Cluster::tensor() const { return impl_->opt.mode == SplitMode::TENSOR; }
bool Cluster::broken() const { return impl_->broken; }
std::string Cluster::broken_reason() const { return impl_->reason; }
void Cluster::on_broken(std::function<void(const std::string&)> fn) { impl_->on_broken = std::move(fn); }
void Cluster::abort(int code) { impl_->t->abort(code); }
Cluster::Traffic Cluster::traffic() const {
    return {impl_->sent.messages + impl_->received.messages, impl_->sent.bytes + impl_->received.bytes};
}
std::unique_lock<std::recursive_mutex> Cluster::lock() { return std::unique_lock<std::recursive_mutex>(impl_->mu); }

namespace {
// The flags every rank must share (each computes its own plan and shares from them): "-sm tensor -ts 3,1". A tensor
// split also needs one SIMD level on every rank: each rank runs the norms, RoPE and a mixture's router itself on
// the summed rows, and kernels of other levels round differently, so a near-tie could route a row to other experts
// on one rank (TANDEM_CPU=<level> picks a common one).
std::string split_flags_text(const SplitOptions& o) {
    std::string s = o.mode == SplitMode::TENSOR ? "-sm tensor" : o.mode == SplitMode::LAYER ? "-sm layer" : "-sm none";
    if (!o.weights.empty()) {
        s += " -ts ";
        for (size_t i = 0; i < o.weights.size(); i++) s += strprintf("%s%g", i ? "," : "", double(o.weights[i]));
    }
    if (o.mode == SplitMode::TENSOR) s += strprintf(", SIMD level %s", cpu_level_name(isa().level));
    return s;
}
}  // namespace

void Cluster::agree(const std::string& fingerprint, int n_layer, double rank0_extra) {
    Impl& I = *impl_;
    const std::string flags = split_flags_text(I.opt);
    const int n = size();
    I.hosts.assign(size_t(n), "");
    I.hosts[size_t(rank())] = host();
    std::string verdict;
    if (leader()) {
        std::vector<std::string> prints(static_cast<size_t>(n)), rank_flags(prints.size());
        prints[0] = fingerprint;
        for (int r = 1; r < n; r++) {
            std::vector<uint8_t> m;
            if (!I.wait(r, TAG_AGREE, m, I.opt.timeout_s, 1000))
                I.fail(strprintf("rank %d did not report its model within %g s (--rank-timeout)", r, I.opt.timeout_s));
            Reader rd{m};
            I.hosts[size_t(r)] = rd.str();
            prints[size_t(r)] = rd.str();
            rank_flags[size_t(r)] = rd.str();
        }
        for (int r = 1; r < n && verdict.empty(); r++)
            if (prints[size_t(r)] != fingerprint)
                verdict =
                    strprintf("%s has another model file or binary than rank 0 (%s):\n  rank 0: %s\n  rank %d: %s",
                              I.who(r).c_str(), I.hosts[0].c_str(), fingerprint.c_str(), r, prints[size_t(r)].c_str());
        for (int r = 1; r < n && verdict.empty(); r++)  // every rank computes its plan or shares from these
            if (rank_flags[size_t(r)] != flags)
                verdict = strprintf(
                    "%s was started with other split flags than rank 0 (%s): '%s' against '%s' (a "
                    "tensor split: TANDEM_CPU=<level> gives every rank the same SIMD level)",
                    I.who(r).c_str(), I.hosts[0].c_str(), rank_flags[size_t(r)].c_str(), flags.c_str());
        if (verdict.empty()) {
            try {
                I.plan = plan_for(n_layer, rank0_extra);
            } catch (const Error& e) {
                verdict = e.what();
            }
        }
        Writer w;
        w.str(verdict);
        for (const auto& h : I.hosts) w.str(h);
        for (int r = 1; r < n; r++) I.send(r, TAG_VERDICT, w.b.data(), w.b.size());
    } else {
        Writer w;
        w.str(host());
        w.str(fingerprint);
        w.str(flags);
        I.send(0, TAG_AGREE, w.b.data(), w.b.size());
        std::vector<uint8_t> m;
        I.wait(0, TAG_VERDICT, m, 0, 1000);
        Reader rd{m};
        verdict = rd.str();
        for (auto& h : I.hosts) h = rd.str();
        if (verdict.empty()) I.plan = plan_for(n_layer, rank0_extra);
    }
    if (!verdict.empty()) I.fail(verdict);
}

// A layer split's ranges; a tensor split runs every layer on every rank (its shares: model/tensor_share.cpp).
std::vector<int> Cluster::plan_for(int n_layer, double rank0_extra) const {
    if (tensor()) return {0, n_layer};
    return split_layers(n_layer, size(), impl_->opt.weights, rank0_extra);
}

int Cluster::open(const SessionParams& p) {
    auto lk = lock();
    const int id = impl_->next_id++;
    Writer w;
    w.i32(OP_OPEN);
    w.i32(id);
    for (int v : {p.n_ctx, p.n_layers, p.n_batch, int(p.type_k), int(p.type_v), int(p.swa_full), p.recurrent_keep,
                  p.ctx_checkpoints})
        w.i32(v);
    impl_->command(w);
    return id;
}

void Cluster::close(int id) {
    auto lk = lock();
    if (impl_->broken || impl_->stopped) return;
    Writer w;
    w.i32(OP_CLOSE);
    w.i32(id);
    impl_->command(w);
}

void Cluster::decode(int id, const int32_t* tokens, int n, bool all_logits) {
    Writer w;
    w.i32(OP_DECODE);
    w.i32(id);
    w.i32(all_logits);
    w.ints(tokens, n);
    impl_->command(w);
}

void Cluster::embed(int id, const int32_t* tokens, int n) {
    Writer w;
    w.i32(OP_EMBED);
    w.i32(id);
    w.ints(tokens, n);
    impl_->command(w);
}

void Cluster::decode_batch(const std::vector<BatchItem>& items) {
    Writer w;
    w.i32(OP_BATCH);
    w.i32(int32_t(items.size()));
    for (const BatchItem& it : items) {
        w.i32(it.id);
        w.i32(it.all_logits);
        w.ints(it.tokens, it.n);
        w.i32(it.parents != nullptr);
        if (it.parents) w.ints(it.parents, it.n);
    }
    impl_->command(w);
}

void Cluster::keep_path(int id, int base, const std::vector<int32_t>& path) {
    Writer w;
    w.i32(OP_KEEP_PATH);
    w.i32(id);
    w.i32(base);
    w.ints(path.data(), int(path.size()));
    impl_->command(w);
}

void Cluster::truncate(int id, int n) {
    Writer w;
    w.i32(OP_TRUNCATE);
    w.i32(id);
    w.i32(n);
    impl_->command(w);
}

void Cluster::shift(int id, int n_keep, int n_discard) {
    Writer w;
    w.i32(OP_SHIFT);
    w.i32(id);
    w.i32(n_keep);
    w.i32(n_discard);
    impl_->command(w);
}

void Cluster::stop() {
    auto lk = lock();
    // (before agreement, or broken: the other ranks are ended by end_ranks' abort instead)
    if (!leader() || impl_->stopped || impl_->broken || impl_->plan.empty()) return;
    impl_->stopped = true;
    Writer w;
    w.i32(OP_STOP);
    impl_->command(w);
    // Acknowledged by every rank within the rank timeout: a stalled rank (a partition, SIGSTOP) breaks the
    // cluster here, named, and the process then aborts the job (end_ranks) instead of waiting in MPI_Finalize
    // without limit.
    std::vector<uint8_t> m;
    for (int r = 1; r < size(); r++)
        if (!impl_->wait(r, TAG_STOP_ACK, m, impl_->opt.timeout_s, 1000))
            impl_->fail(strprintf("%s did not acknowledge the stop within %g s (--rank-timeout)", impl_->who(r).c_str(),
                                  impl_->opt.timeout_s));
}

void Cluster::send_hidden(const float* x, size_t n_floats) {
    Impl& I = *impl_;
    I.check_alive();
    I.send((rank() + 1) % size(), TAG_HIDDEN, x, n_floats * sizeof(float));
    if (!leader()) {  // done with this pass: rank 0 learns who answered, to name the one that did not
        I.pass++;
        I.send(0, TAG_PROGRESS, &I.pass, sizeof I.pass);
    }
}

void Cluster::recv_hidden(float* x, size_t n_floats) {
    Impl& I = *impl_;
    I.check_alive();
    std::vector<uint8_t> m;
    const int from = (rank() + size() - 1) % size();
    if (leader()) {
        I.pass++;
        if (!I.wait(from, TAG_HIDDEN, m, I.opt.timeout_s, 50)) {
            I.drain_progress();
            int late = size() - 1;
            for (int r = 1; r < size(); r++)
                if (I.progress[size_t(r)] < I.pass) {
                    late = r;
                    break;
                }
            I.fail(strprintf("%s did not answer within %g s (pass %llu; --rank-timeout)", I.who(late).c_str(),
                             I.opt.timeout_s, (unsigned long long)I.pass));
        }
        I.drain_progress();
    } else {
        I.wait(from, TAG_HIDDEN, m, 0, 50);
    }
    if (m.size() != n_floats * sizeof(float))
        I.fail(strprintf("%s sent %zu bytes of hidden states, %zu expected (ranks out of step)", I.who(from).c_str(),
                         m.size(), n_floats * sizeof(float)));
    std::memcpy(x, m.data(), m.size());
}

void Cluster::all_reduce(float* x, size_t n_floats) {
    Impl& I = *impl_;
    I.check_alive();
    const size_t bytes = n_floats * sizeof(float);
    std::vector<uint8_t> m;
    if (!leader()) {  // a star, not a ring: no two ranks wait on each other's sends
        I.send(0, TAG_REDUCE, x, bytes);
        I.wait(0, TAG_REDUCE, m, 0, 50);
        if (m.size() != bytes) I.fail(strprintf("rank 0 sent %zu bytes of sums, %zu expected", m.size(), bytes));
        std::memcpy(x, m.data(), bytes);
        return;
    }
    I.pass++;
    for (int r = 1; r < size(); r++) {  // in rank order: the sum's order is fixed
        if (!I.wait(r, TAG_REDUCE, m, I.opt.timeout_s, 50))
            I.fail(strprintf("%s did not answer within %g s (reduction %llu; --rank-timeout)", I.who(r).c_str(),
                             I.opt.timeout_s, (unsigned long long)I.pass));
        if (m.size() != bytes)
            I.fail(strprintf("%s sent %zu bytes of partial sums, %zu expected (ranks out of step)", I.who(r).c_str(),
                             m.size(), bytes));
        const float* p = reinterpret_cast<const float*>(m.data());
        for (size_t i = 0; i < n_floats; i++) x[i] += p[i];
    }
    for (int r = 1; r < size(); r++) I.send(r, TAG_REDUCE, x, bytes);
}

void Cluster::serve(const std::shared_ptr<const Model>& model, ThreadPool& pool) {
    Impl& I = *impl_;
    TD_ASSERT(!leader());
    std::map<int, std::unique_ptr<Session>> sessions;
    auto get = [&](int id) -> Session& {
        auto it = sessions.find(id);
        if (it == sessions.end()) throw Error(strprintf("rank 0 named session %d, which this rank does not hold", id));
        return *it->second;
    };
    try {
        for (;;) {
            std::vector<uint8_t> m;
            I.wait(0, TAG_CMD, m, 0, 200);
            Reader rd{m};
            const int op = rd.i32();
            if (op == OP_STOP) {
                const uint8_t ack = 1;
                I.send(0, TAG_STOP_ACK, &ack, 1);
                return;
            }
            const int id = op == OP_BATCH ? 0 : rd.i32();
            switch (op) {
                case OP_OPEN: {
                    SessionParams p;
                    p.n_ctx = rd.i32();
                    p.n_layers = rd.i32();
                    p.n_batch = rd.i32();
                    p.type_k = TensorType(rd.i32());
                    p.type_v = TensorType(rd.i32());
                    p.swa_full = rd.i32() != 0;
                    p.recurrent_keep = rd.i32();
                    p.ctx_checkpoints = rd.i32();
                    sessions[id] = std::make_unique<Session>(model, p, pool);
                    break;
                }
                case OP_CLOSE: sessions.erase(id); break;
                case OP_DECODE: {
                    const bool all = rd.i32() != 0;
                    const std::vector<int32_t> toks = rd.ints();
                    get(id).decode(toks, all);
                    break;
                }
                case OP_EMBED: {
                    const std::vector<int32_t> toks = rd.ints();
                    get(id).embed(toks.data(), int(toks.size()));
                    break;
                }
                case OP_BATCH: {
                    const int n = rd.i32();
                    std::vector<std::vector<int32_t>> toks(size_t(std::max(0, n))), parents(toks.size());
                    std::vector<Session::DecodeRequest> reqs;
                    for (int i = 0; i < n; i++) {
                        Session& s = get(rd.i32());
                        const bool all = rd.i32() != 0;
                        toks[size_t(i)] = rd.ints();
                        const bool tree = rd.i32() != 0;
                        if (tree) parents[size_t(i)] = rd.ints();
                        reqs.push_back({&s, toks[size_t(i)].data(), int(toks[size_t(i)].size()), all,
                                        tree ? parents[size_t(i)].data() : nullptr});
                    }
                    Session::decode_batch(reqs);
                    break;
                }
                case OP_KEEP_PATH: {
                    const int base = rd.i32();
                    get(id).keep_path(base, rd.ints());
                    break;
                }
                case OP_TRUNCATE: get(id).truncate(rd.i32()); break;
                case OP_SHIFT: {
                    const int keep = rd.i32();
                    get(id).shift(keep, rd.i32());
                    break;
                }
                default: throw Error(strprintf("an unknown command %d from rank 0", op));
            }
        }
    } catch (const std::exception& e) {
        const std::string msg = e.what();
        I.broken = true;
        I.reason = msg;
        try {
            I.send(0, TAG_ERROR, msg.data(), msg.size());
        } catch (...) {}
        throw;
    }
}

}  // namespace tandem
