#include "split/liveness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <sstream>

namespace tandem::liveness {

namespace {

// A socket that a child process does not inherit (POSIX: no SOCK_CLOEXEC / accept4 on every system).
int cloexec(int fd) {
    if (fd >= 0) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    return fd;
}

int ms_left(std::chrono::steady_clock::time_point end) {
    const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    return d.count() > 0 ? int(d.count()) : 0;
}

std::chrono::steady_clock::time_point after(double s) {
    return std::chrono::steady_clock::now() +
           std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// This host's IPv4 addresses that are up, loopback last (the ranks on this host reach any of them).
std::vector<std::string> host_addresses() {
    std::vector<std::string> out, loop;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) == 0) {
        for (ifaddrs* a = list; a; a = a->ifa_next) {
            if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
            char buf[INET_ADDRSTRLEN] = {};
            const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
            if (!inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf)) continue;
            (std::strncmp(buf, "127.", 4) == 0 ? loop : out).push_back(buf);
        }
        freeifaddrs(list);
    }
    out.insert(out.end(), loop.begin(), loop.end());
    if (out.empty()) out.push_back("127.0.0.1");
    return out;
}

bool say_rank(int fd, int32_t r) {
#ifdef MSG_NOSIGNAL  // (rank 0 gone between accept and this: an error, not SIGPIPE)
    return ::send(fd, &r, sizeof r, MSG_NOSIGNAL) == ssize_t(sizeof r);
#else
    return ::write(fd, &r, sizeof r) == ssize_t(sizeof r);
#endif
}

bool read_exact(int fd, void* p, size_t n, std::chrono::steady_clock::time_point end) {
    auto* b = static_cast<uint8_t*>(p);
    while (n > 0) {
        pollfd pf{fd, POLLIN, 0};
        if (::poll(&pf, 1, ms_left(end)) <= 0) return false;
        const ssize_t got = ::recv(fd, b, n, 0);
        if (got <= 0) return false;
        b += got;
        n -= size_t(got);
    }
    return true;
}

}  // namespace

Listener listen_for_ranks() {
    Listener l;
    const int fd = cloexec(::socket(AF_INET, SOCK_STREAM, 0));
    if (fd < 0) return l;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 256) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        ::close(fd);
        return l;
    }
    l.fd = fd;
    l.contact = std::to_string(ntohs(a.sin_port));
    for (const std::string& h : host_addresses()) l.contact += " " + h;
    return l;
}

int connect_to_leader(const std::string& contact, int rank, double timeout_s) {
    std::istringstream in(contact);
    int port = 0;
    if (!(in >> port) || port <= 0 || port > 65535) return -1;
    const auto end = after(timeout_s);
    for (std::string host; in >> host && ms_left(end) > 0;) {
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(uint16_t(port));
        if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) continue;
        const int fd = cloexec(::socket(AF_INET, SOCK_STREAM, 0));
        if (fd < 0 || ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
            if (fd >= 0) ::close(fd);
            return -1;
        }
        bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
        if (!up && errno == EINPROGRESS) {  // an address that drops the connection costs a share of the time only
            pollfd pf{fd, POLLOUT, 0};
            int err = 0;
            socklen_t el = sizeof err;
            up = ::poll(&pf, 1, std::min(ms_left(end), 1000)) == 1 &&
                 ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0;
        }
        const int32_t r = rank;
        if (up && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) == 0 && say_rank(fd, r)) return fd;
        ::close(fd);
    }
    return -1;
}

std::vector<int> accept_ranks(int listen_fd, const std::vector<int>& connected, double timeout_s) {
    std::vector<int> fds(connected.size(), -1);
    if (listen_fd < 0) return fds;
    size_t want = 0;
    for (size_t r = 1; r < connected.size(); r++) want += connected[r] != 0;
    const auto end = after(timeout_s);
    for (size_t got = 0; got < want;) {
        pollfd pf{listen_fd, POLLIN, 0};
        const int ready = ::poll(&pf, 1, ms_left(end));
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) break;
        const int fd = cloexec(::accept(listen_fd, nullptr, nullptr));
        if (fd < 0) continue;
        int32_t r = -1;
        if (!read_exact(fd, &r, sizeof r, end) || r < 1 || size_t(r) >= fds.size() || fds[size_t(r)] >= 0) {
            ::close(fd);  // (not one of ours: something else found the port)
            continue;
        }
        fds[size_t(r)] = fd;
        got++;
    }
    ::close(listen_fd);
    return fds;
}

int first_ended(const std::vector<int>& fds) {
    std::vector<pollfd> pf;
    std::vector<int> rank_of;
    for (size_t r = 0; r < fds.size(); r++)
        if (fds[r] >= 0) {
            pf.push_back({fds[r], POLLIN, 0});
            rank_of.push_back(int(r));
        }
    if (pf.empty() || ::poll(pf.data(), pf.size(), 0) <= 0) return -1;
    for (size_t i = 0; i < pf.size(); i++) {
        if (!pf[i].revents) continue;
        uint8_t b[64];
        const ssize_t got = ::recv(pf[i].fd, b, sizeof b, MSG_DONTWAIT);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return rank_of[i];
    }
    return -1;
}

void close_all(std::vector<int>& fds) {
    for (int& fd : fds)
        if (fd >= 0) {
            ::close(fd);
            fd = -1;
        }
}

}  // namespace tandem::liveness
