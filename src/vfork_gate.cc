#include "vfork_gate.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "exec_handover.hpp"
#include "fd_table.hpp"
#include "internal_fds.hpp"
#include "log.hpp"
#include "real.hpp"
#include "socket.hpp"
#include "transport.hpp"
#include "user_io.hpp"

namespace fastsock::vfork_gate {

namespace {

int g_child_end = -1;  // in a vfork child: its end of the control socket

// In the child: the parent's connections, turned into kernel sockets here.
Socket** g_parents = nullptr;
int g_parent_count = 0, g_parent_capacity = 0;

bool is_parents(const Socket& s) {
  for (int i = 0; i < g_parent_count; ++i)
    if (g_parents[i] == &s) return true;
  return false;
}

void abandon(int fd, Socket& s, void* tcp) {
  if (!ops::user_link(s)) return;  // (nor a second descriptor of one abandoned already)
  if (g_parent_count == g_parent_capacity) {
    const int capacity = g_parent_capacity ? 2 * g_parent_capacity : 16;
    if (auto* grown = static_cast<Socket**>(std::realloc(g_parents, sizeof(Socket*) * size_t(capacity)))) {
      g_parents = grown;
      g_parent_capacity = capacity;
    }
  }
  if (g_parent_count < g_parent_capacity)
    g_parents[g_parent_count++] = &s;
  else
    LOG_ERROR("fd=%d vfork child: out of memory: if the program exec'd next inherits this "
              "connection, its stream stays on the parent's link", fd);
  // Abandoned in any case: the link's state is the parent's (its rings, its queue pair),
  // never touched or released here (the exec or _exit that follows frees the memory).
  s.link = static_cast<Transport*>(tcp);
  s.link_state = nullptr;
  s.user_io.store(false, std::memory_order_relaxed);
}

// Child: asks the parent to move the connection `s` to TCP; true once it did.
bool ask_parent(Socket* s) {
  const auto address = reinterpret_cast<uintptr_t>(s);
  if (real().send(g_child_end, &address, sizeof address, MSG_NOSIGNAL) != sizeof address)
    return false;
  char answer = 0;
  ssize_t n;
  while ((n = real().recv(g_child_end, &answer, 1, 0)) < 0 && errno == EINTR) {
  }
  return n == 1;
}

struct Request {
  uintptr_t address;
  bool done;
};

void downgrade_requested(int fd, Socket& s, void* context) {
  auto& request = *static_cast<Request*>(context);
  if (request.done || reinterpret_cast<uintptr_t>(&s) != request.address) return;
  request.done = true;
  if (Transport* link = ops::user_link(s))
    link->downgrade(s, fd, "vfork (the exec'd program inherits it)");
}

void ask_if_inherited(int fd, Socket& s, void*) {
  if (!is_parents(s) || !exec_handover::inherited_by_exec(fd)) return;
  if (!ask_parent(&s))
    LOG_ERROR("fd=%d vfork child: the parent did not move the connection to TCP; the program "
              "exec'd now inherits it while its stream is on the parent's link", fd);
  // Asked once per connection, whatever its other descriptors.
  for (int i = 0; i < g_parent_count; ++i)
    if (g_parents[i] == &s) g_parents[i] = g_parents[--g_parent_count];
}

}  // namespace

bool open(Gate& gate) noexcept {
  int pair[2];
  if (real().socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return false;
  gate.parent_end = internal_fds::take(pair[0]);
  gate.child_end = internal_fds::take(pair[1]);
  return true;
}

void enter_child(Gate& gate) noexcept {
  internal_fds::close(gate.parent_end);
  g_child_end = gate.child_end;
  g_parent_count = 0;
  fd_table::for_each_socket(abandon, &find_transport(TransportId::tcp)->instance());
}

void wait_for_child(Gate& gate, pid_t pid) noexcept {
  const int saved_errno = errno;
  internal_fds::close(gate.child_end);
  while (pid > 0) {
    Request request{0, false};
    const ssize_t n = real().recv(gate.parent_end, &request.address, sizeof request.address, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n != sizeof request.address) break;  // 0: the child exec'd or ended
    fd_table::for_each_socket(downgrade_requested, &request);
    const char answer = 1;
    (void)real().send(gate.parent_end, &answer, 1, MSG_NOSIGNAL);
  }
  internal_fds::close(gate.parent_end);
  errno = saved_errno;
}

void before_exec() noexcept {
  if (g_child_end < 0 || g_parent_count == 0) return;
  const int saved_errno = errno;
  fd_table::for_each_socket(ask_if_inherited, nullptr);
  errno = saved_errno;
}

}  // namespace fastsock::vfork_gate
