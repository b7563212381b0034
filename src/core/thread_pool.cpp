#include "tandem/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <thread>

#if defined(__linux__)
#include <sched.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TD_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define TD_PAUSE() __asm__ __volatile__("yield")
#else
#define TD_PAUSE() ((void)0)
#endif

namespace tandem {

int ThreadPool::available_cpus() {
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
    return std::max(1u, std::thread::hardware_concurrency());
}

std::string ThreadPool::oversubscription_warning(int n_threads) {
    const int cpus = available_cpus();
    if (n_threads <= cpus) return {};
    return "warning: " + std::to_string(n_threads) + " threads on " + std::to_string(cpus) +
           " available CPUs: threads will wait for each other; -t " + std::to_string(cpus) + " is faster";
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    oversubscribed_ = n_threads_ > available_cpus();
    for (int i = 1; i < n_threads_; i++) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_.store(true);
        generation_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::run_chunk(int idx) {
    // Pieces of about 1/(4 * threads) of the range, taken in order from a shared counter: a thread slowed down
    // (a busy neighbour on a shared machine) leaves its last pieces to the others instead of holding everyone up.
    const size_t n = job_n_;
    const size_t grain = std::max<size_t>(1, n / (size_t(n_threads_) * 4));
    for (;;) {
        const size_t b = next_.fetch_add(grain, std::memory_order_relaxed);
        if (b >= n) break;
        (*job_)(b, std::min(n, b + grain), idx);
    }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t, int)>& fn) {
    if (n_threads_ == 1 || n <= 1) {
        if (n > 0) fn(0, n, 0);
        return;
    }
    job_ = &fn;
    job_n_ = n;
    next_.store(0, std::memory_order_relaxed);
    pending_.store(n_threads_ - 1, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lk(mu_);
        generation_.fetch_add(1, std::memory_order_release);
    }
    cv_.notify_all();
    run_chunk(0);
    // Spin for the stragglers, then yield the core: on an oversubscribed machine the thread being waited for may
    // need it.
    const int max_spin = oversubscribed_ ? 0 : 4096;
    for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; spin++) {
        if (spin < max_spin) TD_PAUSE();
        else std::this_thread::yield();
    }
    job_ = nullptr;
}

void ThreadPool::worker(int idx) {
    uint64_t seen = 0;
    for (;;) {
        // Spin a while for the next job, then sleep.
        uint64_t g = generation_.load(std::memory_order_acquire);
        const int max_spin = oversubscribed_ ? 0 : 20000;
        for (int spin = 0; g == seen && spin < max_spin; spin++) {
            TD_PAUSE();
            g = generation_.load(std::memory_order_acquire);
        }
        if (g == seen) {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
            g = generation_.load(std::memory_order_acquire);
        }
        seen = g;
        if (stop_.load()) return;
        run_chunk(idx);
        pending_.fetch_sub(1, std::memory_order_acq_rel);
    }
}

}  // namespace tandem
