// Plain POSIX socket helpers: fastsock-pipe never links libfastsock, so whatever library is
// preloaded sees ordinary socket/connect/accept/send/recv calls.
#pragma once

#include <cstddef>
#include <string>

namespace fastsock_pipe {

// Each returns an fd, or -1 after printing the reason to stderr.
int listen_tcp(const char* bind_addr, int port, int* bound_port);
int accept_one(int listen_fd);
int connect_tcp(const std::string& host, int port);

// Full-length transfers; false on error or end of stream (reason printed).
bool send_all(int fd, const void* buf, std::size_t len);
bool recv_all(int fd, void* buf, std::size_t len);

}  // namespace fastsock_pipe
