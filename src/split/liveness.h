// How rank 0 learns at once that another rank's process has ended (killed, crashed, exited): each rank holds a TCP
// connection to rank 0 for the life of the job, and the kernel closes it when the process ends, on any host. Without
// it a dead rank is found only by --rank-timeout, and mpirun ends the job (SIGTERM, then SIGKILL a second later)
// before that: the running requests got no answer. A partition or a stalled rank keeps its connection open; those
// are still the rank timeout's. Sockets only: the MPI transport exchanges the address and the outcome
// (src/split/transport_mpi.cpp).
#pragma once
#include <string>
#include <vector>

namespace tandem::liveness {

// Rank 0: a listening socket on every interface (an ephemeral port). `contact` is what the other ranks need:
// "PORT ADDR ADDR ..." (this host's IPv4 addresses, loopback last). fd -1 and an empty contact if none could be made.
struct Listener {
    int fd = -1;
    std::string contact;
};
Listener listen_for_ranks();

// Another rank: connects to rank 0 through the first address of `contact` that answers within timeout_s, and says
// its rank. The connection's fd, or -1 (then only the rank timeout finds this rank's end).
int connect_to_leader(const std::string& contact, int rank, double timeout_s);

// Rank 0: accepts the connections of the ranks whose `connected[r]` is set (they connected before saying so),
// within timeout_s in all; closes the listener. fds by rank (-1 where none came; [0] is -1).
std::vector<int> accept_ranks(int listen_fd, const std::vector<int>& connected, double timeout_s);

// Rank 0: the first rank whose connection has closed (its process ended), or -1. Does not wait.
int first_ended(const std::vector<int>& fds);

void close_all(std::vector<int>& fds);

}  // namespace tandem::liveness
