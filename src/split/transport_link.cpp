// A link of given latency and bandwidth between ranks, emulated in the transport (benchmarks on one host where the
// kernel has no tc netem; include/tandem/split.h emulate_links). Each message carries the time it arrives: the
// sender's link to that peer is busy for bytes / rate after the previous message, then the message travels the
// one-way delay; the receiver holds it until then. Ranks of one host share the monotonic clock.
#include <chrono>
#include <cstring>
#include <deque>

#include "tandem/error.h"
#include "tandem/split.h"

namespace tandem {

namespace {

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

class LinkTransport : public Transport {
public:
    LinkTransport(std::shared_ptr<Transport> inner, double one_way_ms, double gbit_per_s)
        : in_(std::move(inner)),
          delay_ns_(int64_t(one_way_ms * 1e6)),
          ns_per_byte_(gbit_per_s > 0 ? 8.0 / gbit_per_s : 0.0),
          link_free_(size_t(in_->size()), 0) {}
    int rank() const override { return in_->rank(); }
    int size() const override { return in_->size(); }
    std::string host() const override { return in_->host(); }
    bool send(int to, int tag, const void* data, size_t bytes, double timeout_s) override {
        const int64_t now = now_ns();
        int64_t& busy = link_free_[size_t(to)];
        busy = std::max(busy, now) + int64_t(double(bytes) * ns_per_byte_);
        const int64_t arrive = busy + delay_ns_;
        buf_.resize(sizeof arrive + bytes);
        std::memcpy(buf_.data(), &arrive, sizeof arrive);
        if (bytes) std::memcpy(buf_.data() + sizeof arrive, data, bytes);
        return in_->send(to, tag, buf_.data(), buf_.size(), timeout_s);
    }
    bool try_recv(int from, int tag, std::vector<uint8_t>& out, int* src) override {
        std::vector<uint8_t> m;
        int s = -1;
        while (in_->try_recv(from, tag, m, &s)) {  // everything that came, held until it is due
            if (m.size() < sizeof(int64_t)) throw Error("a message without its arrival time (emulated links)");
            Held h{s, tag, 0, {}};
            std::memcpy(&h.due, m.data(), sizeof h.due);
            h.bytes.assign(m.begin() + sizeof h.due, m.end());
            held_.push_back(std::move(h));
        }
        const int64_t now = now_ns();
        for (auto it = held_.begin(); it != held_.end(); ++it) {
            if ((from >= 0 && it->from != from) || it->tag != tag) continue;
            if (it->due > now) return false;  // the first of its kind is not there yet: nor are those behind it
            out = std::move(it->bytes);
            if (src) *src = it->from;
            held_.erase(it);
            return true;
        }
        return false;
    }
    void abort(int code) override { in_->abort(code); }
    int ended_rank() override { return in_->ended_rank(); }

private:
    struct Held {
        int from, tag;
        int64_t due;
        std::vector<uint8_t> bytes;
    };
    std::shared_ptr<Transport> in_;
    int64_t delay_ns_;
    double ns_per_byte_;
    std::vector<int64_t> link_free_;  // per peer: when this rank's link to it is free again
    std::vector<uint8_t> buf_;
    std::deque<Held> held_;
};

}  // namespace

std::shared_ptr<Transport> emulate_links(std::shared_ptr<Transport> t, double rtt_ms, double gbit_per_s) {
    if (rtt_ms < 0 || gbit_per_s < 0) throw Error("emulated links: the round trip and the rate must be >= 0");
    return std::make_shared<LinkTransport>(std::move(t), rtt_ms / 2, gbit_per_s);
}

}  // namespace tandem
