#include "local_pair.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "session.hpp"

namespace fastsock_pipe {

bool pin_to(int cpu, const char* who) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) {
    std::fprintf(stderr, "fastsock-pipe: cannot pin the %s to CPU %d: %s\n", who, cpu,
                 std::strerror(errno));
    return false;
  }
  return true;
}

Address local_address(const Options& opt) {
  Address a;
  if (!opt.unix_path.empty()) {
    a.family = Family::unix_stream;
    a.path = opt.unix_path;
  } else {
    a.family = opt.ipv6 ? Family::inet6 : Family::inet;
    a.host = opt.ipv6 ? "::1" : "127.0.0.1";
    a.port = opt.port;
    a.socket_buffer = opt.socket_buffer;
  }
  return a;
}

// The receiver listens in its own process, after the fork: accelerators that shadow a
// listening socket with one of their own (fastsock's verbs link, rsocket) own that shadow in
// the process that listened, so a connection accepted by a forked child of the listener's
// process would never leave TCP, and the comparison would measure TCP under every name.
bool start_local_pair(const Address& addr, const Options& opt, LocalPair& out) {
  int port_pipe[2];
  if (pipe2(port_pipe, O_CLOEXEC) != 0) {
    std::perror("fastsock-pipe: pipe");
    return false;
  }
  std::fflush(nullptr);
  pid_t child = fork();
  if (child < 0) {
    std::perror("fastsock-pipe: fork");
    close(port_pipe[0]);
    close(port_pipe[1]);
    return false;
  }
  if (child == 0) {
    close(port_pipe[0]);
    if (opt.pin && !pin_to(opt.cpu_rx, "receiver")) _exit(1);
    int port = 0;  // stays 0 for a Unix socket
    int lfd = listen_on(addr, &port);
    if (lfd < 0) port = -1;
    // Where to connect, once the listener is there (-1: it failed).
    const bool told = write(port_pipe[1], &port, sizeof port) == sizeof port;
    close(port_pipe[1]);
    if (lfd < 0 || !told) _exit(1);
    int fd = accept_one(lfd);
    close(lfd);
    if (fd < 0) _exit(1);
    int rc = run_receiver(fd);
    close(fd);
    _exit(rc);
  }
  close(port_pipe[1]);
  out.receiver = child;
  int port = -1;
  ssize_t got;
  while ((got = read(port_pipe[0], &port, sizeof port)) < 0 && errno == EINTR) {
  }
  close(port_pipe[0]);
  Address peer = addr;
  peer.port = port;
  if (got == sizeof port && port >= 0 && (!opt.pin || pin_to(opt.cpu_tx, "transmitter")))
    out.fd = connect_to(peer);
  if (out.fd < 0) {
    kill(child, SIGTERM);  // it would wait in accept() forever
    reap_receiver(out);
    return false;
  }
  return true;
}

bool reap_receiver(LocalPair& pair) {
  if (pair.receiver <= 0) return true;
  int status = 0;
  while (waitpid(pair.receiver, &status, 0) < 0 && errno == EINTR) {
  }
  pair.receiver = -1;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace fastsock_pipe
