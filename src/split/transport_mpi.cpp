// The MPI world as a Transport (CMake option TANDEM_MPI; Open MPI in the README's build and CI). Without MPI,
// mpi_transport() refuses a start as one of several ranks and returns null otherwise.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "split/liveness.h"
#include "split/poll.h"
#include "tandem/error.h"
#include "tandem/split.h"

#ifdef TANDEM_MPI
#include <mpi.h>
#endif

namespace tandem {

namespace {
std::atomic<bool> g_ranks_failed{false};
}  // namespace

void note_ranks_failed() { g_ranks_failed = true; }
bool ranks_failed() { return g_ranks_failed; }

namespace {
// The world size the launcher gave this process (mpirun: Open MPI's, MPICH's / Slurm's PMI variables); 1 alone.
int launched_world_size() {
    for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"})
        if (const char* s = std::getenv(v)) return std::max(1, std::atoi(s));
    if (const char* s = std::getenv("SLURM_NTASKS"); s && std::getenv("SLURM_STEP_ID"))
        return std::max(1, std::atoi(s));
    return 1;
}
}  // namespace

#ifdef TANDEM_MPI

namespace {
class MpiTransport : public Transport {
public:
    MpiTransport() {
        int provided = 0;
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
        if (provided < MPI_THREAD_SERIALIZED) {
            MPI_Finalize();
            throw Error("the MPI library does not support calls from several threads (MPI_THREAD_SERIALIZED)");
        }
        // Errors are returned (and turned into tandem::Error) instead of aborting inside the library.
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
        char name[MPI_MAX_PROCESSOR_NAME] = {};
        int len = 0;
        MPI_Get_processor_name(name, &len);
        host_.assign(name, size_t(len));
        watch_ranks();
    }
    ~MpiTransport() override { liveness::close_all(peers_); }
    // (MPI_Finalize / MPI_Abort: end_ranks, at the end of the process)
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string host() const override { return host_; }
    bool send(int to, int tag, const void* data, size_t bytes, double timeout_s) override {
        if (bytes > size_t(1) << 31) throw Error(strprintf("a message of %zu bytes is too large for one send", bytes));
        // A blocking send waits for a receiver that does not come (a stalled rank) for ever: a non-blocking one is
        // polled, napping as Cluster's receives do, until it completes or the time is up.
        MPI_Request req;
        check(MPI_Isend(data, int(bytes), MPI_BYTE, to, tag, MPI_COMM_WORLD, &req), "send to", to);
        // A receiver whose process ended does not take it either: rank 0 returns false as soon as that is known.
        // (Another rank's own connection may have been dropped by rank 0 at start-up: it never reads it.)
        bool ended = false;
        const bool done = poll_until(
            [&](int spin) {
                int sent = 0;
                check(MPI_Test(&req, &sent, MPI_STATUS_IGNORE), "send to", to);
                if (!sent && rank_ == 0 && spin % 64 == 63) ended = liveness::first_ended(peers_) == to;
                return sent != 0 || ended;
            },
            timeout_s, 50);
        return done && !ended;
    }
    bool try_recv(int from, int tag, std::vector<uint8_t>& out, int* src) override {
        int flag = 0;
        MPI_Status st;
        check(MPI_Iprobe(from < 0 ? MPI_ANY_SOURCE : from, tag, MPI_COMM_WORLD, &flag, &st), "probe", from);
        if (!flag) return false;
        int count = 0;
        MPI_Get_count(&st, MPI_BYTE, &count);
        out.resize(size_t(count));
        check(MPI_Recv(out.data(), count, MPI_BYTE, st.MPI_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              "receive from", st.MPI_SOURCE);
        if (src) *src = st.MPI_SOURCE;
        return true;
    }
    void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }
    int ended_rank() override { return liveness::first_ended(peers_); }

private:
    // Every rank connects to rank 0 once (src/split/liveness.h): rank 0 then sees a rank's process end when it does.
    // A rank that cannot connect (a firewall) is said, and its end is found by the rank timeout only.
    void watch_ranks() {
        liveness::Listener l;
        if (rank_ == 0) l = liveness::listen_for_ranks();
        int len = int(l.contact.size());
        MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
        std::string contact(size_t(len), '\0');
        if (rank_ == 0) contact = l.contact;
        MPI_Bcast(contact.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
        int fd = -1;
        if (rank_ != 0 && len > 0) fd = liveness::connect_to_leader(contact, rank_, 5.0);
        int connected = fd >= 0;
        std::vector<int> all(size_t(size_), 0);
        MPI_Gather(&connected, 1, MPI_INT, all.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (rank_ != 0) {
            peers_.assign(1, fd);  // held open for the process's life: its end is what rank 0 sees
            return;
        }
        peers_ = liveness::accept_ranks(l.fd, all, 5.0);
        for (int r = 1; r < size_; r++)
            if (peers_[size_t(r)] < 0)
                std::fprintf(stderr,
                             "split: warning: rank %d could not connect to rank 0 (port and addresses \"%s\"): if its "
                             "process ends, it is found by --rank-timeout only\n",
                             r, contact.c_str());
    }

    void check(int rc, const char* what, int peer) const {
        if (rc == MPI_SUCCESS) return;
        char msg[MPI_MAX_ERROR_STRING] = {};
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        throw Error(strprintf("rank %d: MPI %s rank %d failed: %s", rank_, what, peer, msg));
    }
    int rank_ = 0, size_ = 1;
    std::string host_;
    std::vector<int> peers_;  // rank 0: each rank's liveness connection (-1: none); another rank: its own
};
}  // namespace

bool built_with_mpi() { return true; }

namespace {
std::mutex g_mu;
std::shared_ptr<MpiTransport> g_world;  // MPI can be started once per process: it lives until end_ranks
}  // namespace

std::shared_ptr<Transport> mpi_transport() {
    std::lock_guard<std::mutex> lk(g_mu);
    if (launched_world_size() <= 1) return nullptr;
    if (!g_world) g_world = std::make_shared<MpiTransport>();
    return g_world;
}

void end_ranks(bool ok) {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_world) return;
    std::fflush(stdout);
    std::fflush(stderr);
    if (ok && !ranks_failed()) MPI_Finalize();
    else MPI_Abort(MPI_COMM_WORLD, 1);  // (a rank that stalled would keep MPI_Finalize waiting without limit)
}

#else

bool built_with_mpi() { return false; }
void end_ranks(bool) {}

std::shared_ptr<Transport> mpi_transport() {
    if (const int n = launched_world_size(); n > 1)
        throw Error(
            strprintf("started as one of %d MPI ranks, but this tandem was built without MPI (configure with "
                      "-DTANDEM_MPI=ON and Open MPI: README \"Several machines\")",
                      n));
    return nullptr;
}

#endif

}  // namespace tandem
