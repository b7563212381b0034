#include "server/http_transport.h"

#include <poll.h>
#include <sys/resource.h>
#include <zlib.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "tandem/error.h"

namespace tandem::server {

namespace beast = boost::beast;
namespace http = boost::beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

// A request problem found by the transport: answered with `status` and the connection closed.
struct TransportError {
    int status;
    std::string message;
};

std::string lower(std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

// gzip or zlib ("deflate") body, decoded up to `cap` bytes.
std::string inflate_body(const std::string& in, size_t cap) {
    z_stream zs{};
    if (inflateInit2(&zs, 15 + 32) != Z_OK) throw TransportError{500, "zlib initialisation failed"};
    std::string out;
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    zs.avail_in = uInt(in.size());
    char buf[65536];
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
        zs.next_out = reinterpret_cast<Bytef*>(buf);
        zs.avail_out = sizeof buf;
        rc = inflate(&zs, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END) {
            inflateEnd(&zs);
            throw TransportError{400, "the request body is not valid gzip/deflate data"};
        }
        out.append(buf, sizeof buf - zs.avail_out);
        if (out.size() > cap) {
            inflateEnd(&zs);
            throw TransportError{413, strprintf("the decoded request body is larger than %zu bytes (--max-body)", cap)};
        }
        if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) {
            inflateEnd(&zs);
            throw TransportError{400, "the compressed request body is truncated"};
        }
    }
    inflateEnd(&zs);
    return out;
}

std::string status_line(int status) {
    auto reason = http::obsolete_reason(http::status(status));
    return strprintf("HTTP/1.1 %d %.*s\r\n", status, int(reason.size()), reason.data());
}

}  // namespace

struct HttpTransport::Impl : std::enable_shared_from_this<HttpTransport::Impl> {
    TransportParams p;
    Handler handler;
    ErrorBodyFn error_body;
    net::io_context ioc;
    std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
    // The acceptors (one per listening address) live on their own strand: the accept loops and
    // stop_accepting()'s close never run at once.
    net::strand<net::io_context::executor_type> astrand{net::make_strand(ioc)};
    std::vector<std::unique_ptr<tcp::acceptor>> acceptors;
    int bound_port = 0;
    std::vector<std::thread> io_threads, workers;
    std::atomic<bool> draining{false};

    // Worker queue: complete requests waiting for a thread.
    std::mutex wmu;
    std::condition_variable wcv, idle_cv;
    std::deque<std::function<void()>> tasks;
    bool wstop = false;
    int in_flight = 0;  // requests dispatched and not yet finished

    class Conn;
    std::mutex cmu;
    std::unordered_map<Conn*, std::weak_ptr<Conn>> conns;

    void post_task(std::function<void()> f) {
        {
            std::lock_guard<std::mutex> lk(wmu);
            tasks.push_back(std::move(f));
            in_flight++;
        }
        wcv.notify_one();
    }
    void task_done() {
        std::lock_guard<std::mutex> lk(wmu);
        in_flight--;
        idle_cv.notify_all();
    }
    void worker_loop() {
        for (;;) {
            std::function<void()> f;
            {
                std::unique_lock<std::mutex> lk(wmu);
                wcv.wait(lk, [&] { return wstop || !tasks.empty(); });
                if (tasks.empty()) return;
                f = std::move(tasks.front());
                tasks.pop_front();
            }
            f();
        }
    }

    void do_accept(tcp::acceptor& a);
    void run_handler(const std::shared_ptr<Conn>& c, const HttpRequest& req);
};

// One TCP connection. Its socket lives on a strand: reads and writes run there, one at a time.
class HttpTransport::Impl::Conn : public std::enable_shared_from_this<Conn> {
public:
    // The read buffer is bounded: chunk-size lines and trailers are not covered by Beast's header and body
    // limits, and would otherwise grow it without end.
    Conn(std::shared_ptr<Impl> impl, tcp::socket sock)
        : I_(std::move(impl)), stream_(std::move(sock)), buf_(I_->p.max_header_bytes + (size_t(64) << 10)) {
        beast::error_code ec;
        auto ep = stream_.socket().remote_endpoint(ec);
        if (!ec) remote_ = ep.address().to_string();
        stream_.socket().set_option(tcp::no_delay(true), ec);
        fd_ = stream_.socket().native_handle();
    }
    ~Conn() {
        std::lock_guard<std::mutex> lk(I_->cmu);
        I_->conns.erase(this);
    }

    void start() {
        {
            std::lock_guard<std::mutex> lk(I_->cmu);
            I_->conns[this] = weak_from_this();
        }
        net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read_header(); });
    }

    // From any thread: close the connection if it is waiting for a request's headers (shutdown).
    void close_if_idle() {
        net::post(stream_.get_executor(), [self = shared_from_this()] {
            if (self->parser_ && !self->parser_->is_header_done()) self->close();
        });
    }
    // From any thread: close the socket (on the strand).
    void close_async() {
        net::post(stream_.get_executor(), [self = shared_from_this()] { self->close(); });
    }

    // Refuse at accept time (too many connections): a short 503 and close.
    void refuse(int status, const std::string& msg) {
        net::dispatch(stream_.get_executor(), [self = shared_from_this(), status, msg] { self->fail(status, msg); });
    }

    // --- called from the worker thread handling this connection's request ------------------------------
    bool write_blocking(std::string data) {
        if (closed_.load()) return false;
        auto done = std::make_shared<std::promise<bool>>();
        auto fut = done->get_future();
        net::post(stream_.get_executor(), [self = shared_from_this(),
                                           data = std::make_shared<std::string>(std::move(data)), done] {
            if (self->closed_.load()) {
                done->set_value(false);
                return;
            }
            self->stream_.expires_after(std::chrono::seconds(self->I_->p.write_timeout_s));
            net::async_write(self->stream_, net::buffer(*data), [self, data, done](beast::error_code ec, size_t) {
                if (ec) self->close();
                done->set_value(!ec);
            });
        });
        // The strand always completes the promise while the I/O threads run; the bound only guards shutdown.
        if (fut.wait_for(std::chrono::seconds(I_->p.write_timeout_s + 5)) != std::future_status::ready) return false;
        return fut.get();
    }
    // POLLRDHUP: the peer closed its sending side. A client that half-closes on purpose and still waits for the
    // answer cannot be told from one that went away until a write fails; like llama-server, the generation is
    // cancelled, since abandoned generations would otherwise hold slots.
    bool peer_closed() const {
        if (closed_.load()) return true;
        pollfd pfd{fd_, POLLRDHUP, 0};
        if (::poll(&pfd, 1, 0) < 0) return false;
        return (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
    }
    bool keep_alive() const { return keep_alive_ && !I_->draining.load(); }
    bool http10() const { return version_ < 11; }
    bool head_request() const { return head_; }
    // The handler finished: read the next request (pipelined bytes are already in the buffer) or close.
    void request_done(bool reusable) {
        net::post(stream_.get_executor(), [self = shared_from_this(), reusable] {
            if (reusable && self->keep_alive() && !self->closed_.load()) self->read_header();
            else self->close();
        });
    }

private:
    void read_header() {
        if (I_->draining.load()) return close();
        parser_.emplace();
        parser_->header_limit(std::uint32_t(I_->p.max_header_bytes));
        parser_->body_limit(I_->p.max_body_bytes);
        stream_.expires_after(std::chrono::seconds(I_->p.header_timeout_s));
        http::async_read_header(stream_, buf_, *parser_,
                                [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
    }

    void on_header(beast::error_code ec) {
        if (ec == http::error::header_limit)
            return fail(431, strprintf("the request headers are larger than %zu bytes", I_->p.max_header_bytes));
        if (ec == http::error::buffer_overflow)
            return fail(431, strprintf("the request headers are larger than %zu bytes", I_->p.max_header_bytes));
        if (ec == http::error::body_limit)  // a Content-Length over the limit is refused with the headers
            return fail(413, strprintf("the request body is larger than %zu bytes (--max-body)", I_->p.max_body_bytes));
        if (ec == http::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
            ec == net::error::operation_aborted || ec == net::error::connection_reset)
            return close();
        if (ec) return fail(400, "malformed HTTP request: " + ec.message());
        const auto& h = parser_->get();
        int count = 0;
        for (auto it = h.begin(); it != h.end(); ++it) count++;
        if (count > I_->p.max_header_count)
            return fail(
                431, strprintf("the request has %d headers, at most %d are accepted", count, I_->p.max_header_count));
        encoding_ = lower(std::string(h[http::field::content_encoding]));
        if (!encoding_.empty() && encoding_ != "identity" && encoding_ != "gzip" && encoding_ != "deflate" &&
            encoding_ != "x-gzip")
            return fail(415, "Content-Encoding '" + encoding_ + "' is not supported (identity, gzip, deflate)");
        if (lower(std::string(h[http::field::expect])) == "100-continue" && !parser_->is_done()) {
            auto msg = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
            net::async_write(stream_, net::buffer(*msg),
                             [self = shared_from_this(), msg](beast::error_code ec2, size_t) {
                                 if (ec2) return self->close();
                                 self->read_body();
                             });
            return;
        }
        read_body();
    }

    void read_body() {
        stream_.expires_after(std::chrono::seconds(I_->p.body_timeout_s));
        http::async_read(stream_, buf_, *parser_,
                         [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
    }

    void on_body(beast::error_code ec) {
        if (ec == http::error::body_limit)
            return fail(413, strprintf("the request body is larger than %zu bytes (--max-body)", I_->p.max_body_bytes));
        if (ec == http::error::buffer_overflow)
            return fail(413, "a chunk-size line or trailer of the request body is too long");
        if (ec == beast::error::timeout) return fail(408, "the request body did not arrive in time");
        if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset ||
            ec == net::error::operation_aborted)
            return close();
        if (ec) return fail(400, "malformed HTTP request: " + ec.message());
        stream_.expires_never();
        auto msg = parser_->release();
        auto req = std::make_shared<HttpRequest>();
        req->method = std::string(msg.method_string());
        std::string target(msg.target());
        size_t q = target.find('?');
        req->path = target.substr(0, q);
        if (q != std::string::npos) req->query = target.substr(q + 1);
        for (const auto& f : msg)
            req->headers.emplace_back(lower(std::string(f.name_string())), std::string(f.value()));
        if (int(req->headers.size()) > I_->p.max_header_count)  // chunked trailers add fields after the headers
            return fail(431, strprintf("the request has %zu header and trailer fields, at most %d are accepted",
                                       req->headers.size(), I_->p.max_header_count));
        req->remote = remote_;
        version_ = msg.version();
        head_ = msg.method() == http::verb::head;
        keep_alive_ = msg.keep_alive();
        try {
            if (!encoding_.empty() && encoding_ != "identity")
                req->body = inflate_body(msg.body(), I_->p.max_body_bytes);
            else req->body = std::move(msg.body());
        } catch (const TransportError& e) {
            return fail(e.status, e.message);
        }
        I_->post_task([self = shared_from_this(), req] { self->I_->run_handler(self, *req); });
    }

public:
    // Answers with a transport error and closes the connection (on the strand).
    void fail(int status, const std::string& msg) {
        if (closed_.load()) return;
        std::string body = I_->error_body(status, msg);
        auto data = std::make_shared<std::string>(
            status_line(status) + "Server: tandem\r\nContent-Type: application/json\r\n" +
            strprintf("Content-Length: %zu\r\nConnection: close\r\n\r\n", body.size()) + body);
        stream_.expires_after(std::chrono::seconds(5));
        net::async_write(stream_, net::buffer(*data), [self = shared_from_this(), data](beast::error_code ec, size_t) {
            if (ec) return self->close();
            // Read what the client is still sending for a moment before closing: closing a socket with unread
            // data sends a reset, which can destroy the error response before the client reads it.
            beast::error_code ec2;
            self->stream_.socket().shutdown(tcp::socket::shutdown_send, ec2);
            self->stream_.expires_after(std::chrono::seconds(2));
            self->drain();
        });
    }
    void drain() {
        stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t n) {
            self->drained_ += n;
            if (ec || self->drained_ > (size_t(4) << 20)) return self->close();
            self->drain();
        });
    }
    void close() {
        if (closed_.exchange(true)) return;
        beast::error_code ec;
        stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
        stream_.close();
    }

private:
    std::shared_ptr<Impl> I_;
    beast::tcp_stream stream_;
    beast::flat_buffer buf_;
    std::optional<http::request_parser<http::string_body>> parser_;
    std::string remote_, encoding_;
    std::array<char, 16384> discard_{};
    size_t drained_ = 0;
    int fd_ = -1;
    unsigned version_ = 11;
    bool keep_alive_ = true, head_ = false;
    std::atomic<bool> closed_{false};

    friend struct HttpTransport::Impl;
};

namespace {

// The Responder of one request, used by the worker thread running its handler.
class ConnResponder final : public Responder {
public:
    explicit ConnResponder(std::shared_ptr<HttpTransport::Impl::Conn> c) : c_(std::move(c)) {}

    bool send(int status, const std::string& content_type, const std::string& body, const Headers& extra) override {
        if (answered_) return false;
        answered_ = true;
        std::string s = head(status, content_type, extra);
        if (status == 204 || status == 304) s += "\r\n";  // no body, and no Content-Length either (RFC 9110)
        else s += strprintf("Content-Length: %zu\r\n\r\n", body.size()) + (c_->head_request() ? std::string() : body);
        ok_ = c_->write_blocking(std::move(s));
        return ok_;
    }
    bool begin_stream(int status, const std::string& content_type, const Headers& extra) override {
        if (answered_) return false;
        answered_ = streaming_ = true;
        chunked_ = !c_->http10();
        std::string s = head(status, content_type, extra);
        s += chunked_ ? "Transfer-Encoding: chunked\r\n\r\n" : "\r\n";
        ok_ = c_->write_blocking(std::move(s));
        return ok_;
    }
    bool write(std::string_view data) override {
        if (!streaming_ || !ok_) return false;
        if (data.empty()) return !c_->peer_closed();
        std::string s = chunked_ ? strprintf("%zx\r\n", data.size()) : std::string();
        s.append(data);
        if (chunked_) s += "\r\n";
        ok_ = c_->write_blocking(std::move(s));
        return ok_;
    }
    // Server-sent events (the WHATWG EventSource format): an optional event line, one data line, a blank line.
    bool write_event(const std::string& event, const std::string& data) override {
        return write((event.empty() ? std::string() : "event: " + event + "\n") + "data: " + data + "\n\n");
    }
    void end_stream() override {
        if (!streaming_ || ended_) return;
        ended_ = true;
        if (ok_ && chunked_) ok_ = c_->write_blocking("0\r\n\r\n");
    }
    bool client_gone() const override { return !ok_ || c_->peer_closed(); }
    bool answered() const override { return answered_; }
    bool streaming() const { return streaming_; }

    // Whether the connection can carry another request.
    bool reusable() const { return ok_ && answered_ && (!streaming_ || (ended_ && chunked_)) && !close_; }

private:
    std::string head(int status, const std::string& content_type, const Headers& extra) {
        std::string s = status_line(status) + "Server: tandem\r\n";
        if (!content_type.empty()) s += "Content-Type: " + content_type + "\r\n";
        for (const auto& [k, v] : extra) {
            if (lower(k) == "connection" && lower(v) == "close") close_ = true;
            s += k + ": " + v + "\r\n";
        }
        const bool keep = c_->keep_alive() && !close_ && !(c_->http10());
        if (!keep) close_ = true;
        s += keep ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
        return s;
    }

    std::shared_ptr<HttpTransport::Impl::Conn> c_;
    bool answered_ = false, streaming_ = false, chunked_ = true, ended_ = false, ok_ = true, close_ = false;
};

}  // namespace

void HttpTransport::Impl::run_handler(const std::shared_ptr<Conn>& c, const HttpRequest& req) {
    ConnResponder r(c);
    bool failed = false;
    try {
        handler(req, r);
    } catch (const std::exception& e) {
        failed = true;
        if (!r.answered()) r.send(500, "application/json", error_body(500, e.what()), {});
    } catch (...) {
        failed = true;
        if (!r.answered()) r.send(500, "application/json", error_body(500, "internal error"), {});
    }
    if (!r.answered()) r.send(500, "application/json", error_body(500, "the handler gave no answer"), {});
    // A stream cut by an exception is not ended cleanly (the client would take it as complete): the
    // connection closes without the last chunk.
    if (!(failed && r.streaming())) r.end_stream();
    c->request_done(r.reusable() && !failed);
    task_done();
}

void HttpTransport::Impl::do_accept(tcp::acceptor& a) {
    a.async_accept(net::make_strand(ioc), [self = shared_from_this(), &a](beast::error_code ec, tcp::socket sock) {
        if (ec == net::error::operation_aborted || !a.is_open()) return;
        if (ec) {
            // Out of descriptors and the like: wait a little rather than spin, then accept again.
            auto t = std::make_shared<net::steady_timer>(self->astrand, std::chrono::milliseconds(50));
            t->async_wait([self, t, &a](beast::error_code) {
                if (a.is_open()) self->do_accept(a);
            });
            return;
        }
        size_t open;
        {
            std::lock_guard<std::mutex> lk(self->cmu);
            open = self->conns.size();
        }
        auto c = std::make_shared<Conn>(self, std::move(sock));
        if (int(open) >= self->p.max_connections) c->refuse(503, "too many open connections; retry later");
        else c->start();
        self->do_accept(a);
    });
}

HttpTransport::HttpTransport(const TransportParams& p, Handler handler, ErrorBodyFn error_body)
    : impl_(std::make_shared<Impl>()) {
    impl_->p = p;
    impl_->handler = std::move(handler);
    impl_->error_body = std::move(error_body);
    // Descriptors: raise the soft limit to the hard one; keep room for model files and the like.
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        if (rl.rlim_cur != RLIM_INFINITY)
            impl_->p.max_connections =
                int(std::min<rlim_t>(rlim_t(impl_->p.max_connections), rl.rlim_cur > 128 ? rl.rlim_cur - 64 : 64));
    }
}

HttpTransport::~HttpTransport() { stop(); }

void HttpTransport::listen(const std::string& host, int port) {
    Impl& I = *impl_;
    if (port == 0 && I.bound_port != 0) port = I.bound_port;  // more addresses: the port the first one got
    auto fail = [&](const std::string& why) {
        throw Error(strprintf("cannot listen on %s:%d: %s", host.c_str(), port, why.c_str()));
    };
    beast::error_code ec;
    tcp::resolver res(I.ioc);
    auto results = res.resolve(host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
    if (ec || results.empty()) fail(ec ? ec.message() : "no such address");
    tcp::endpoint ep = results.begin()->endpoint();
    auto a = std::make_unique<tcp::acceptor>(I.astrand);
    a->open(ep.protocol(), ec);
    if (ec) fail(ec.message());
    // SO_REUSEADDR lets a restarted server bind while old connections sit in TIME_WAIT; unlike SO_REUSEPORT it
    // does not let two listeners share the port.
    a->set_option(net::socket_base::reuse_address(true), ec);
    if (ep.protocol() == tcp::v6()) a->set_option(net::ip::v6_only(true), ec);  // "::1" beside "127.0.0.1"
    a->bind(ep, ec);
    if (ec == net::error::address_in_use)
        fail("the address is already in use (is another server running on this port?)");
    if (ec) fail(ec.message());
    a->listen(net::socket_base::max_listen_connections, ec);
    if (ec) fail(ec.message());
    I.bound_port = a->local_endpoint().port();
    I.acceptors.push_back(std::move(a));
}

int HttpTransport::port() const { return impl_->bound_port; }

void HttpTransport::start() {
    Impl& I = *impl_;
    I.work.emplace(I.ioc.get_executor());
    for (auto& a : I.acceptors) I.do_accept(*a);
    for (int i = 0; i < std::max(1, I.p.workers); i++) I.workers.emplace_back([&I] { I.worker_loop(); });
    for (int i = 0; i < std::max(1, I.p.io_threads); i++) I.io_threads.emplace_back([&I] { I.ioc.run(); });
}

void HttpTransport::stop_accepting() {
    Impl& I = *impl_;
    I.draining.store(true);
    net::post(I.astrand, [&I] {
        beast::error_code ec;
        for (auto& a : I.acceptors) a->close(ec);
    });
    // Connections waiting for their next request close now; those with a request in progress close after it.
    std::vector<std::shared_ptr<Impl::Conn>> open;
    {
        std::lock_guard<std::mutex> lk(I.cmu);
        for (auto& [p, w] : I.conns)
            if (auto c = w.lock()) open.push_back(c);
    }
    for (auto& c : open) c->close_if_idle();
}

bool HttpTransport::wait_idle(int timeout_ms) {
    Impl& I = *impl_;
    std::unique_lock<std::mutex> lk(I.wmu);
    return I.idle_cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return I.in_flight == 0; });
}

void HttpTransport::stop() {
    Impl& I = *impl_;
    if (I.io_threads.empty() && I.workers.empty()) return;
    stop_accepting();
    std::vector<std::shared_ptr<Impl::Conn>> open;
    {
        std::lock_guard<std::mutex> lk(I.cmu);
        for (auto& [p, w] : I.conns)
            if (auto c = w.lock()) open.push_back(c);
    }
    for (auto& c : open) c->close_async();
    open.clear();
    {
        std::lock_guard<std::mutex> lk(I.wmu);
        I.wstop = true;
    }
    I.wcv.notify_all();
    for (auto& t : I.workers) t.join();  // handlers see their writes fail and return
    I.workers.clear();
    // Let the operations aborted by the closes finish (their handlers hold the connections, and the connections
    // hold this Impl), then stop whatever is left and run the remaining ready handlers here.
    I.work.reset();
    for (int i = 0; i < 200 && !I.ioc.stopped(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    I.ioc.stop();
    for (auto& t : I.io_threads) t.join();
    I.io_threads.clear();
    I.ioc.restart();
    I.ioc.poll();
}

}  // namespace tandem::server
