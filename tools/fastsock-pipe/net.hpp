// Plain POSIX socket helpers: fastsock-pipe never links libfastsock, so whatever library is
// preloaded sees ordinary socket/connect/accept/send/recv calls.
#pragma once

#include <cstddef>
#include <string>

namespace fastsock_pipe {

// Where a receiver listens or a transmitter connects.
enum class Family { inet, inet6, unix_stream };

struct Address {
  Family family = Family::inet;
  std::string host;  // inet/inet6: numeric address or name (empty: any address to listen on)
  int port = 0;      // inet/inet6 (0 to listen on a free port)
  std::string path;  // unix_stream: the socket's file name
  // inet/inet6: SO_SNDBUF and SO_RCVBUF set before listen/connect (NPtcp's -b), 0 to leave
  // them to the kernel's autotuning. An accepted socket inherits the listener's.
  int socket_buffer = 0;
  std::string describe() const;  // "127.0.0.1 port 5002", "unix:/tmp/s", ...
};

// Each returns an fd, or -1 after printing the reason to stderr. listen_on() stores the port
// actually bound in *bound_port (inet/inet6); for a Unix socket it replaces a stale socket
// file left at the path but never another kind of file.
int listen_on(const Address& a, int* bound_port);
int accept_one(int listen_fd);
int connect_to(const Address& a);

// Ends both directions of a connection, waking a thread blocked on it.
void shutdown_both(int fd);

// Full-length transfers; false on error or end of stream (reason printed).
bool send_all(int fd, const void* buf, std::size_t len);
bool recv_all(int fd, void* buf, std::size_t len);

}  // namespace fastsock_pipe
