// Kernel TCP: the last link of every chain. The kernel socket the application holds
// already carries the connection, so attaching is free and always succeeds.
#include <sys/socket.h>

#include "real.hpp"
#include "result.hpp"
#include "socket.hpp"
#include "transport.hpp"

namespace fastsock {

namespace {

class TcpTransport final : public Transport {
 public:
  TransportId id() const noexcept override { return TransportId::tcp; }
  int on_listen(Socket&) noexcept override { return 0; }
  int attach(Socket&, Side, char*, size_t) noexcept override { return 0; }
  bool kernel_carries_data() const noexcept override { return true; }

  ssize_t send(Socket&, int fd, const iovec* iov, int iovcnt, int flags) noexcept override {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = size_t(iovcnt);
    return neg_errno(real().sendmsg(fd, &msg, flags));
  }
  ssize_t recv(Socket&, int fd, const iovec* iov, int iovcnt, int flags) noexcept override {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = size_t(iovcnt);
    return neg_errno(real().recvmsg(fd, &msg, flags));
  }
  int readiness_fd(const Socket&, int fd) const noexcept override { return fd; }
  int shutdown(Socket&, int fd, int how) noexcept override {
    return int(neg_errno(real().shutdown(fd, how)));
  }
  void detach(Socket&) noexcept override {}
};

Probe probe_tcp() noexcept { return Probe{true, "kernel TCP is always available"}; }

Transport& tcp_instance() noexcept {
  static TcpTransport instance;
  return instance;
}

constexpr TransportEntry kEntry{TransportId::tcp, 100, probe_tcp, tcp_instance};

}  // namespace

const TransportEntry& tcp_transport_entry() noexcept { return kEntry; }

}  // namespace fastsock
