// Ranks as threads of one process (tests): each rank's inbox is a list of (sender, tag, bytes), in arrival order.
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <mutex>

#include "tandem/error.h"
#include "tandem/split.h"

namespace tandem {

namespace {

struct World {
    struct Message {
        int from, tag;
        std::vector<uint8_t> bytes;
    };
    std::mutex mu;
    std::vector<std::deque<Message>> inbox;
    bool aborted = false;
    int abort_code = 0;
};

class LocalTransport : public Transport {
public:
    LocalTransport(std::shared_ptr<World> w, int rank) : w_(std::move(w)), rank_(rank) {}
    int rank() const override { return rank_; }
    int size() const override { return int(w_->inbox.size()); }
    std::string host() const override { return "local"; }
    bool send(int to, int tag, const void* data, size_t bytes, double) override {
        std::lock_guard<std::mutex> lk(w_->mu);
        if (w_->aborted) throw Error(strprintf("rank %d: the world was aborted (code %d)", rank_, w_->abort_code));
        const auto* p = static_cast<const uint8_t*>(data);
        w_->inbox[size_t(to)].push_back({rank_, tag, std::vector<uint8_t>(p, p + bytes)});
        return true;  // queued: never waits for the receiver
    }
    bool try_recv(int from, int tag, std::vector<uint8_t>& out, int* src) override {
        std::lock_guard<std::mutex> lk(w_->mu);
        if (w_->aborted) throw Error(strprintf("rank %d: the world was aborted (code %d)", rank_, w_->abort_code));
        auto& q = w_->inbox[size_t(rank_)];
        for (auto it = q.begin(); it != q.end(); ++it)  // the first matching message: MPI's order per sender and tag
            if ((from < 0 || it->from == from) && it->tag == tag) {
                out = std::move(it->bytes);
                if (src) *src = it->from;
                q.erase(it);
                return true;
            }
        return false;
    }
    void abort(int code) override {
        std::lock_guard<std::mutex> lk(w_->mu);
        w_->aborted = true;
        w_->abort_code = code;
    }

private:
    std::shared_ptr<World> w_;
    int rank_;
};

}  // namespace

std::vector<std::shared_ptr<Transport>> local_transports(int n) {
    TD_ASSERT(n >= 1);
    auto w = std::make_shared<World>();
    w->inbox.resize(size_t(n));
    std::vector<std::shared_ptr<Transport>> out;
    for (int r = 0; r < n; r++) out.push_back(std::make_shared<LocalTransport>(w, r));
    return out;
}

}  // namespace tandem
