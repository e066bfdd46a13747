// Kernel TCP: the last link of every chain. The kernel socket the application holds
// already carries the connection, so attaching is free and always succeeds.
#include <poll.h>
#include <sys/ioctl.h>
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
  void close_listener(Socket&) noexcept override {}
  void prepare_connect(Socket&, const sockaddr*, socklen_t, bool) noexcept override {}
  int attach(Socket&, Side, Socket*, char*, size_t) noexcept override { return 0; }
  bool kernel_carries_data() const noexcept override { return true; }

  // The core calls the kernel directly for this link; these serve a link that hands a
  // connection back to the kernel (a downgrade), with the same semantics.
  ssize_t send(Socket&, int fd, const iovec* iov, int iovcnt, int flags) override {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = size_t(iovcnt);
    return neg_errno(real().sendmsg(fd, &msg, flags));
  }
  ssize_t recv(Socket&, int fd, const iovec* iov, int iovcnt, int flags) override {
    msghdr msg{};
    msg.msg_iov = const_cast<iovec*>(iov);
    msg.msg_iovlen = size_t(iovcnt);
    return neg_errno(real().recvmsg(fd, &msg, flags));
  }
  long bytes_readable(Socket&, int fd) noexcept override {
    int n = 0;
    return real().ioctl(fd, FIONREAD, &n) == 0 ? n : -errno;
  }
  short poll_now(Socket&, int fd, short events) noexcept override {
    pollfd p{fd, events, 0};
    return real().poll(&p, 1, 0) > 0 ? p.revents : 0;
  }
  int wait_fds(Socket&, int fd, short events, pollfd* out) noexcept override {
    out[0] = pollfd{fd, events, 0};
    return 1;
  }
  void disarm(Socket&, WakeWatch) noexcept override {}
  bool peer_shares_cpu(Socket&) noexcept override { return false; }
  void option_set(Socket&, int, int, const void*, socklen_t) noexcept override {}
  void downgrade(Socket&, int, const char*) noexcept override {}
  int shutdown(Socket&, int fd, int how) noexcept override {
    return int(neg_errno(real().shutdown(fd, how)));
  }
  void detach(Socket&) noexcept override {}
};

Probe probe_tcp() noexcept { return Probe{true, "kernel TCP is always available"}; }

constexpr TransportEntry kEntry{TransportId::tcp, 100, probe_tcp, the_instance<TcpTransport>};

}  // namespace

const TransportEntry& tcp_transport_entry() noexcept { return kEntry; }

}  // namespace fastsock
