// Waiting for a message or a send without holding a core: MPI's blocking calls spin, and the ranks that share a host
// (and the thread pool of the rank that computes) need it. Used by Cluster's receives and the MPI transport's sends.
#pragma once
#include <algorithm>
#include <chrono>
#include <thread>

namespace tandem {

// Calls done(spin) until it returns true (then true) or timeout_s (> 0) has passed (then false): 200 calls back to
// back, then naps from 5 us doubling up to nap_max_us between calls.
template <class Done>
bool poll_until(Done&& done, double timeout_s, int nap_max_us) {
    const auto t0 = std::chrono::steady_clock::now();
    int nap = 0;
    for (int spins = 0;; spins++) {
        if (done(spins)) return true;
        if (spins < 200) continue;
        if (timeout_s > 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s)
            return false;
        nap = std::min(nap_max_us, std::max(5, nap * 2));
        std::this_thread::sleep_for(std::chrono::microseconds(nap));
    }
}

}  // namespace tandem
