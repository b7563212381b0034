// One model across several processes (ranks), usually on several machines: `mpirun -np N tandem generate|serve|bench
// -m model.gguf --split-mode layer|tensor [-ts 3,1]`.
//
// Layer split (a pipeline): rank r runs the contiguous layers [first[r], first[r + 1]) and keeps their KV cache and
// recurrent state; rank 0 also runs the command itself (CLI or HTTP server, tokenizer, sampling, speculation, every
// draft), the token embedding and the output head. Every rank maps the same GGUF file and binds (and repacks) only its
// share. A pass goes rank 0 -> 1 -> ... -> N-1 -> 0 as the rows' hidden states (n x n_embd floats per hop).
//
// Replication: a Session of a split model on rank 0 has a twin on every other rank (same id, same parameters). Each
// public call that changes a session's state (decode, decode_batch, decode_tree, keep_path, embed, truncate, shift)
// is sent to the other ranks, after rank 0 checked it and before it runs, as a command; they make the same call on
// the twin, so every rank's token history, cache rows, windows and recurrent states stay in step, and the forward pass
// differs only in where the layers' input comes from and where their output goes. Commands and hidden states go on
// separate tags; a rank runs its commands in order, one at a time.
//
// Faults: rank 0 waits for a pass at most `timeout_s`; past it, or when a rank reports an error, the cluster is
// broken: the call throws tandem::Error naming the rank (and host) that did not answer or failed, and every later call
// of the split model throws at once. A rank that dies ends the job through the runtime (mpirun kills the others and
// names the rank).
//
// Exactness: the layers compute what one process computes (same kernels, same order of sums); only the place changes.
// A greedy run on N ranks is token-identical to one process.
//
// Tensor split (--split-mode tensor, llama.cpp's "row"): every rank runs every layer on its share of it: a contiguous
// range of KV heads with their query heads (the rows of wq, wk, wv, the columns of wo, their cache rows) and of the
// FFN's hidden units (the rows of gate and up, the columns of down), or of a mixture's experts (the router on every
// rank, a shared expert on rank 0). Each rank's attention output and FFN output are partial sums over its share;
// Cluster::all_reduce adds them (rank 0 gathers and sums in rank order, then sends the sum back: the same bits on
// every rank, and the same for a given N on every run), twice per layer. Every rank embeds the tokens (the table is
// read in place, a row per token); rank 0 runs the output head. Float sums run in another order than one process's,
// so logits agree to rounding, not bit for bit (model/tensor_share.cpp, tests/test_split.cpp). Slices of quantized
// matrices are cut at block boundaries: a share that a block would straddle moves to the next boundary.
// Messages per pass: 2 x n_layer round trips rank 0 <-> each rank, so it wins over the layer split only where links
// are fast (docs/scaling.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/error.h"

namespace tandem {

// A split model's ranks failed or did not answer (Cluster::broken): the server answers 503, not 500.
class RankFailure : public Error {
public:
    using Error::Error;
};

class Model;
class Session;
class ThreadPool;
struct SessionParams;

enum class SplitMode { NONE, LAYER, TENSOR };

// The split flags (llama.cpp's spellings: -sm/--split-mode none|layer|row (= tensor), -ts/--tensor-split 3,1), and
// the rank timeout (--rank-timeout seconds).
struct SplitOptions {
    SplitMode mode = SplitMode::LAYER;  // what several ranks do (one process: nothing)
    std::vector<float> weights;  // a share per rank (-ts); empty: equal
    double timeout_s = 300;
};
// "layer", "tensor" (or llama.cpp's "row"), "none".
SplitMode parse_split_mode(const std::string& v);
std::vector<float> parse_split_weights(const std::string& v);  // "3,1": each >= 0, at least one > 0

// Contiguous layer ranges for n_ranks ranks: rank r runs [first[r], first[r + 1]) (first has n_ranks + 1 entries,
// first[0] = 0, first[n_ranks] = n_layer). Each rank's part of the whole is in proportion to `weights` (empty:
// equal), the whole being the layers and rank 0's output head, `rank0_extra` layers' worth (its weight bytes over a
// layer's), so that rank 0 takes fewer layers; largest remainder, every rank at least one layer. Throws
// tandem::Error when n_layer < n_ranks or the weights do not fit.
std::vector<int> split_layers(int n_layer, int n_ranks, const std::vector<float>& weights, double rank0_extra = 0);

// A tensor split's contiguous shares of n_units parts (KV heads, FFN blocks, experts) in proportion to `weights`
// (split_layers' rule, every rank at least one part); throws tandem::Error naming `what` when there are fewer parts
// than ranks.
std::vector<int> tensor_shares(int n_units, int n_ranks, const std::vector<float>& weights, const std::string& what);

// "layers 0..10 | 11..21" (a layer split) or "tensor: every layer's heads and FFN over 2 ranks", for logs.
class Cluster;
std::string split_plan_text(const Cluster& c);

// Messages between ranks: over MPI (mpi_transport) or between threads of one process (local_transports, for tests).
class Transport {
public:
    virtual ~Transport() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual std::string host() const = 0;  // this rank's host name
    // Sends and waits until the data may be reused: false when that took longer than timeout_s (> 0; the peer does
    // not receive), then the send is left pending (the caller ends the run).
    virtual bool send(int to, int tag, const void* data, size_t bytes, double timeout_s) = 0;
    // A message from `from` (-1: any rank) with `tag` if one has arrived: its bytes to `out`, its sender to *src.
    virtual bool try_recv(int from, int tag, std::vector<uint8_t>& out, int* src) = 0;
    // Ends every rank at once (MPI_Abort); in-process transports mark the world dead instead.
    virtual void abort(int code) = 0;
    // A rank whose process is known to have ended (killed, crashed), or -1; rank 0 learns it of every rank, another
    // rank of rank 0. Does not wait. The MPI transport knows it from a connection each rank holds to rank 0
    // (src/split/liveness.h); a stalled rank has not ended (the rank timeout's).
    virtual int ended_rank() { return -1; }
};
// n ranks as threads of this process (rank i: [i]); a message is copied into the receiver's queue.
std::vector<std::shared_ptr<Transport>> local_transports(int n);
// The MPI world when this process was started by mpirun or srun as one of several ranks (MPI_Init_thread on first
// call); null when started alone. Throws tandem::Error when started as one of several ranks by a build without MPI
// (CMake option TANDEM_MPI).
std::shared_ptr<Transport> mpi_transport();
bool built_with_mpi();
// `t` with every link given a round trip of rtt_ms and a rate of gbit_per_s (0: unlimited), emulated in the transport
// (src/split/transport_link.cpp): for benchmarks of several "machines" on one host whose kernel has no tc netem.
// join_cluster applies it when TANDEM_LINK_EMULATION="RTT_MS[,GBIT]" is set.
std::shared_ptr<Transport> emulate_links(std::shared_ptr<Transport> t, double rtt_ms, double gbit_per_s);
// At the end of the process (main): MPI_Finalize after a clean run; after a failure MPI_Abort, which ends every rank
// (one that waits for a rank 0 that failed, or that stalled). Nothing when MPI was not started.
void end_ranks(bool ok);
// A cluster of this process broke (a rank failed, stalled or did not acknowledge the stop): end_ranks then aborts
// even when the process otherwise ended well, and main exits non-zero.
void note_ranks_failed();
bool ranks_failed();

// The protocol of a split model over a Transport: start-up agreement, session commands, hidden states, faults.
class Cluster {
public:
    Cluster(std::shared_ptr<Transport> t, const SplitOptions& opt);
    ~Cluster();
    int rank() const;
    int size() const;
    bool leader() const { return rank() == 0; }
    bool tensor() const;  // a tensor split (every rank runs every layer, on its share of it)
    std::string host() const;
    double timeout_s() const;
    const SplitOptions& options() const;

    // Start-up, on every rank at the same point (Model::load): exchanges `fingerprint` (the binary's version and the
    // model file's identity, model_fingerprint()) and the split flags (-sm, -ts: each rank computes its plan and
    // shares from its own; a tensor split also the SIMD level), and refuses, on every rank, a rank whose differ,
    // naming it and its host; then fixes the layer plan (split_layers of n_layer by the weights, rank 0's head
    // rank0_extra layers' worth; a tensor split: every layer). Throws tandem::Error.
    void agree(const std::string& fingerprint, int n_layer, double rank0_extra = 0);
    const std::vector<int>& plan() const;  // split_layers' result, after agree() (a tensor split: {0, n_layer})
    int first_layer() const;  // this rank's layers: [first_layer(), end_layer()) (a tensor split: all)
    int end_layer() const;

    // Rank 0, from Session: the twin commands. Each takes the cluster's lock for itself and the pass it starts
    // (lock() from the caller's side keeps a call and its pass together).
    std::unique_lock<std::recursive_mutex> lock();
    int open(const SessionParams& p);  // a new twin; returns its id
    void close(int id);
    void decode(int id, const int32_t* tokens, int n, bool all_logits);
    void embed(int id, const int32_t* tokens, int n);
    struct BatchItem {
        int id;
        const int32_t* tokens;
        int n;
        bool all_logits;
        const int32_t* parents;
    };
    void decode_batch(const std::vector<BatchItem>& items);
    void keep_path(int id, int base, const std::vector<int32_t>& path);
    void truncate(int id, int n);
    void shift(int id, int n_keep, int n_discard);
    // Rank 0: tells the other ranks to end (their serve() returns); also from the destructor.
    void stop();

    // The forward pass, on every rank: the rows' input from the previous rank (rank 0: from the last) and the
    // output to the next. Rank 0 waits at most timeout_s and names the rank that did not answer.
    void recv_hidden(float* x, size_t n_floats);
    void send_hidden(const float* x, size_t n_floats);
    // A tensor split's reduction, on every rank at the same point of a pass: x (n_floats, this rank's partial sums)
    // becomes the sum over the ranks, p_0 + p_1 + ... + p_{N-1} in that order, the same bits on every rank. Rank 0
    // waits at most timeout_s for each rank's part and names the one that did not answer.
    void all_reduce(float* x, size_t n_floats);

    // Ranks > 0: runs rank 0's commands on twins of `model`'s sessions until rank 0 stops; a failure is reported to
    // rank 0 (which throws it, naming this rank) and rethrown here.
    void serve(const std::shared_ptr<const Model>& model, ThreadPool& pool);

    // Broken: a rank failed or did not answer. Every later command throws `broken_reason()`.
    bool broken() const;
    std::string broken_reason() const;
    // Called once when the cluster breaks (the server stops taking requests and exits non-zero).
    void on_broken(std::function<void(const std::string&)> fn);
    void abort(int code);  // ends every rank (the transport's abort)

    // Messages and bytes this rank sent and received (hidden states and commands), for benchmarks.
    struct Traffic {
        uint64_t messages = 0, bytes = 0;
    };
    Traffic traffic() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
    std::vector<int> plan_for(int n_layer, double rank0_extra) const;
};

// The identity ranks compare at start: this binary's version and build, and the model file's size, metadata keys,
// tensor table and the first bytes of every tensor.
std::string model_fingerprint(const Model& m);
std::string build_id();

// Every command that loads a target model (generate, serve, bench): the cluster when this process is one of several
// MPI ranks (null: alone). `mode` NONE with several ranks is refused (every rank would run the whole command).
std::shared_ptr<Cluster> join_cluster(const SplitOptions& opt);
// A rank > 0's whole life: loads its share of `model_path`, agrees, runs rank 0's commands until it stops. Returns
// the exit code (errors are printed, naming this rank and host, and end every rank).
int run_rank(const std::shared_ptr<Cluster>& cluster, const std::string& model_path, int n_threads);

}  // namespace tandem
