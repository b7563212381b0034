// A small fork-join thread pool for data-parallel loops.
//
// parallel_for(n, fn) splits [0, n) into contiguous pieces (about 4 per thread) that the threads, the calling one
// included, take in order until none is left; fn(begin, end, thread_index) may run several times per thread. Workers spin briefly after a job (a forward pass issues many back-to-back jobs),
// then sleep on a condition variable, so an idle engine uses no CPU.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tandem {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }
    // More threads than CPUs this process may run on: then nobody spins (a spinning thread would take the
    // core from the one it waits for), waiting threads yield or sleep at once.
    bool oversubscribed() const { return oversubscribed_; }

    // CPUs this process may run on (sched_getaffinity; hardware_concurrency elsewhere).
    static int available_cpus();
    // A one-line warning when n threads are more than available_cpus(); empty otherwise.
    static std::string oversubscription_warning(int n_threads);

    // fn(begin, end, thread_index). Blocks until all chunks are done. Not reentrant.
    void parallel_for(size_t n, const std::function<void(size_t, size_t, int)>& fn);

private:
    void worker(int idx);
    void run_chunk(int idx);

    int n_threads_;
    bool oversubscribed_ = false;
    std::vector<std::thread> threads_;
    const std::function<void(size_t, size_t, int)>* job_ = nullptr;
    size_t job_n_ = 0;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<size_t> next_{0};  // first index not yet taken
    std::atomic<bool> stop_{false};
    std::mutex mu_;
    std::condition_variable cv_;
};

}  // namespace tandem
