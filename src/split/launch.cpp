// Joining the ranks of a split model, a rank's life, and what ranks compare at start (include/tandem/split.h).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tandem/error.h"
#include "tandem/gguf.h"
#include "tandem/model.h"
#include "tandem/split.h"
#include "tandem/thread_pool.h"

#ifndef TANDEM_BUILD_ID
#define TANDEM_BUILD_ID "unknown"
#endif

namespace tandem {

std::string build_id() { return "tandem " TANDEM_BUILD_ID; }

namespace {
// FNV-1a, 64 bits: a fingerprint, not a defence against a forged file.
struct Fnv {
    uint64_t h = 1469598103934665603ull;
    void add(const void* p, size_t n) {
        const auto* c = static_cast<const uint8_t*>(p);
        for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
    }
    void add(const std::string& s) { add(s.data(), s.size() + 1); }
};
}  // namespace

std::string model_fingerprint(const Model& m) {
    const GgufFile& f = m.gguf();
    Fnv meta, table, data;
    for (const auto& [k, v] : f.metadata()) {
        meta.add(k);
        meta.add(&v.type, sizeof v.type);
        meta.add(&v.u, sizeof v.u);
        meta.add(&v.i, sizeof v.i);
        meta.add(&v.f, sizeof v.f);
        meta.add(v.s);
        const size_t n = v.arr.size();
        meta.add(&n, sizeof n);
    }
    for (const GgufTensor& t : f.tensors()) {
        table.add(t.name);
        table.add(t.ne, sizeof t.ne);
        table.add(&t.type, sizeof t.type);
        table.add(&t.offset, sizeof t.offset);
        data.add(t.data, std::min<size_t>(t.nbytes, 64));  // one page of each tensor: other weights of one shape
    }
    const std::string& path = m.path();
    return strprintf("%s; %s: %zu bytes, %zu keys %016llx, %zu tensors %016llx, data %016llx", build_id().c_str(),
                     path.substr(path.find_last_of('/') + 1).c_str(), f.file_size(), f.metadata().size(),
                     (unsigned long long)meta.h, f.tensors().size(), (unsigned long long)table.h,
                     (unsigned long long)data.h);
}

std::shared_ptr<Cluster> join_cluster(const SplitOptions& opt) {
    std::shared_ptr<Transport> t = mpi_transport();
    if (!t) return nullptr;
    if (const char* e = std::getenv("TANDEM_LINK_EMULATION"); e && *e) {  // benchmarks: "RTT_MS[,GBIT]"
        double rtt = 0, gbit = 0;
        if (std::sscanf(e, "%lf,%lf", &rtt, &gbit) < 1)
            throw Error(std::string("TANDEM_LINK_EMULATION=") + e + ": not RTT_MS[,GBIT]");
        t = emulate_links(t, rtt, gbit);
        if (t->rank() == 0)
            std::fprintf(stderr, "split: links emulated in the transport: %g ms round trip, %s\n", rtt,
                         gbit > 0 ? strprintf("%g Gbit/s", gbit).c_str() : "no rate limit");
    }
    if (opt.mode == SplitMode::NONE)
        throw Error(strprintf(
            "started as one of %d MPI ranks with --split-mode none: give --split-mode layer or tensor", t->size()));
    return std::make_shared<Cluster>(t, opt);
}

int run_rank(const std::shared_ptr<Cluster>& cluster, const std::string& model_path, int n_threads) {
    // SIGINT / SIGTERM (mpirun forwards them to every rank) are rank 0's to act on: a server drains its running
    // generations, which need every rank, and then stops the others; a rank 0 that dies ends them through mpirun.
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGTERM, SIG_IGN);
    try {
        LoadOptions lo;
        lo.cluster = cluster;
        auto model = Model::load(model_path, lo);
        if (cluster->tensor())
            std::fprintf(stderr, "rank %d (%s): its heads and FFN units of every layer of %s\n", cluster->rank(),
                         cluster->host().c_str(), model_path.c_str());
        else
            std::fprintf(stderr, "rank %d (%s): layers %d..%d of %s\n", cluster->rank(), cluster->host().c_str(),
                         cluster->first_layer(), cluster->end_layer() - 1, model_path.c_str());
        ThreadPool pool(n_threads);
        cluster->serve(model, pool);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d (%s): error: %s\n", cluster->rank(), cluster->host().c_str(), e.what());
        std::fflush(stderr);
        return 1;  // (end_ranks then ends every rank)
    }
}

}  // namespace tandem
