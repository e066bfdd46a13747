/* A test vendor socket library ("tv"), for the vendor adapter's tests (docs/vendor.md).
 *
 * It plays the part rsocket plays on an RDMA host: a socket API whose calls carry a prefix
 * (tvsocket, tvbind, tvlisten, tvaccept, tvconnect, tvsend, tvrecv, tvsendmsg, tvrecvmsg,
 * tvpoll, tvclose, tvshutdown, tvsetsockopt, tvgetsockopt, tvfcntl), taking AF_INET and
 * AF_INET6 addresses. Underneath, a connection is a Unix-domain stream socket: the address
 * and port a socket binds to name a socket file in the directory $TV_DIR
 * ("tv-<address>-<port>", "tv-any-<port>" for the wildcard address), and a connect to
 * <address>:<port> tries the file of that address, then the wildcard's, as the kernel would.
 *
 * Faults, read from the environment at each call so that one test process can change them:
 *   TV_FAIL_SOCKET=1   tvsocket fails with ENETDOWN (the fabric is down)
 *   TV_FAIL_CONNECT=1  tvconnect fails with ECONNREFUSED (no vendor listener)
 *   TV_DROP_AFTER=N    a connection is dropped once it has sent N bytes: the send that
 *                      reaches N sends only up to N, then both directions are shut down;
 *                      later sends fail with ECONNRESET, and the peer reads N bytes, then
 *                      end of stream
 *   TV_SLOW_CLOSE_MS=N tvclose of a connection takes N ms (as rsocket's rclose can while
 *                      the fabric completes what it still holds)
 *   TV_DELAY_MS=N      the library delivers late, as one over a fabric may (rsocket) while
 *                      TCP has long delivered what was sent after: bytes that arrive on an
 *                      idle connection are held back N ms (tvrecv, tvrecvmsg: EAGAIN, or a
 *                      sleep when blocking; tvpoll does not report them readable before)
 * Built twice: libtv.so with every entry point, and libtv_nopoll.so without tvpoll
 * (-DTV_NO_POLL), for the "library lacks a symbol" case.
 *
 * Port 0 (any port) is not supported: the tests always name one. Not thread-safe beyond
 * what the kernel gives: the per-descriptor table is plain memory, as a test needs no more. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define TV_API __attribute__((visibility("default")))
#define TV_MAX_FDS 4096

struct tv_sock {
  int family;                 /* 0: not a tv socket */
  unsigned long long sent;    /* bytes sent, for TV_DROP_AFTER */
  int dropped;
  long long readable_since_ms;  /* TV_DELAY_MS: when fresh bytes were first seen, or 0 */
  char bound[sizeof(((struct sockaddr_un*)0)->sun_path)];
};
static struct tv_sock g_socks[TV_MAX_FDS];

static struct tv_sock* tv_get(int fd) {
  if (fd < 0 || fd >= TV_MAX_FDS || g_socks[fd].family == 0) return NULL;
  return &g_socks[fd];
}

static int env_flag(const char* name) {
  const char* v = getenv(name);
  return v && strcmp(v, "1") == 0;
}

/* TV_DROP_AFTER, or -1 when unset or malformed. */
static long long drop_after(void) {
  const char* v = getenv("TV_DROP_AFTER");
  if (!v || !*v) return -1;
  char* end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  return (errno || *end || n < 0) ? -1 : n;
}

static int fail(int err) {
  errno = err;
  return -1;
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* TV_DELAY_MS, or 0. */
static long long delay_ms(void) {
  const char* v = getenv("TV_DELAY_MS");
  return v && *v ? atoll(v) : 0;
}

static int kernel_readable(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

/* TV_DELAY_MS: how long `s`'s bytes are still held back (0: deliverable now). */
static long long held_ms(int fd, struct tv_sock* s) {
  const long long delay = delay_ms();
  if (delay <= 0 || !kernel_readable(fd)) return 0;
  const long long now = now_ms();
  if (s->readable_since_ms == 0) s->readable_since_ms = now;
  const long long left = s->readable_since_ms + delay - now;
  return left > 0 ? left : 0;
}

/* Before a receive: waits out (blocking) or refuses (non-blocking) held-back bytes. */
static int deliver_late(int fd, struct tv_sock* s, int flags) {
  const long long left = held_ms(fd, s);
  if (left == 0) return 0;
  int nonblocking = (flags & MSG_DONTWAIT) || (fcntl(fd, F_GETFL) & O_NONBLOCK);
  if (nonblocking) return fail(EAGAIN);
  usleep((useconds_t)(left * 1000));
  return 0;
}

/* After a receive: bytes that arrive on the drained connection wait again. */
static void received(int fd, struct tv_sock* s) {
  if (!kernel_readable(fd)) s->readable_since_ms = 0;
}

/* The socket file for addr (or its wildcard form when `wildcard`), into `out`. */
static int tv_path(const struct sockaddr* addr, socklen_t len, int wildcard,
                   struct sockaddr_un* out) {
  const char* dir = getenv("TV_DIR");
  if (!dir || !*dir) return fail(EADDRNOTAVAIL);
  char host[INET6_ADDRSTRLEN];
  unsigned port;
  if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
    const struct sockaddr_in* in = (const struct sockaddr_in*)addr;
    if (!inet_ntop(AF_INET, &in->sin_addr, host, sizeof host)) return -1;
    if (in->sin_addr.s_addr == htonl(INADDR_ANY)) wildcard = 1;
    port = ntohs(in->sin_port);
  } else if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
    const struct sockaddr_in6* in6 = (const struct sockaddr_in6*)addr;
    if (!inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host)) return -1;
    if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) wildcard = 1;
    port = ntohs(in6->sin6_port);
  } else {
    return fail(EAFNOSUPPORT);
  }
  if (port == 0) return fail(EINVAL);
  memset(out, 0, sizeof *out);
  out->sun_family = AF_UNIX;
  int n = snprintf(out->sun_path, sizeof out->sun_path, "%s/tv-%s-%u", dir,
                   wildcard ? "any" : host, port);
  if (n < 0 || (size_t)n >= sizeof out->sun_path) return fail(ENAMETOOLONG);
  return 0;
}

TV_API int tvsocket(int domain, int type, int protocol) {
  if (env_flag("TV_FAIL_SOCKET")) return fail(ENETDOWN);
  if (domain != AF_INET && domain != AF_INET6) return fail(EAFNOSUPPORT);
  if ((type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC)) != SOCK_STREAM) return fail(EPROTOTYPE);
  if (protocol != 0 && protocol != IPPROTO_TCP) return fail(EPROTONOSUPPORT);
  int fd = socket(AF_UNIX, type, 0);
  if (fd < 0) return -1;
  if (fd >= TV_MAX_FDS) {
    close(fd);
    return fail(EMFILE);
  }
  memset(&g_socks[fd], 0, sizeof g_socks[fd]);
  g_socks[fd].family = domain;
  return fd;
}

TV_API int tvbind(int fd, const struct sockaddr* addr, socklen_t len) {
  struct tv_sock* s = tv_get(fd);
  if (!s) return fail(EBADF);
  if (!addr || addr->sa_family != s->family) return fail(EAFNOSUPPORT);
  struct sockaddr_un un;
  if (tv_path(addr, len, 0, &un) < 0) return -1;
  if (bind(fd, (const struct sockaddr*)&un, sizeof un) < 0) return -1;
  memcpy(s->bound, un.sun_path, sizeof s->bound);
  return 0;
}

TV_API int tvlisten(int fd, int backlog) {
  if (!tv_get(fd)) return fail(EBADF);
  return listen(fd, backlog);
}

TV_API int tvaccept(int fd, struct sockaddr* addr, socklen_t* len) {
  struct tv_sock* s = tv_get(fd);
  if (!s) return fail(EBADF);
  int c = accept(fd, NULL, NULL);
  if (c < 0) return -1;
  if (c >= TV_MAX_FDS) {
    close(c);
    return fail(EMFILE);
  }
  memset(&g_socks[c], 0, sizeof g_socks[c]);
  g_socks[c].family = s->family;
  if (addr && len) {
    /* The peer is on this host; its port is not known to a Unix socket. */
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t n;
    if (s->family == AF_INET) {
      struct sockaddr_in* in = (struct sockaddr_in*)&ss;
      in->sin_family = AF_INET;
      in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      n = sizeof *in;
    } else {
      struct sockaddr_in6* in6 = (struct sockaddr_in6*)&ss;
      in6->sin6_family = AF_INET6;
      in6->sin6_addr = in6addr_loopback;
      n = sizeof *in6;
    }
    memcpy(addr, &ss, *len < n ? *len : n);
    *len = n;
  }
  return c;
}

TV_API int tvconnect(int fd, const struct sockaddr* addr, socklen_t len) {
  struct tv_sock* s = tv_get(fd);
  if (!s) return fail(EBADF);
  if (env_flag("TV_FAIL_CONNECT")) return fail(ECONNREFUSED);
  if (!addr || addr->sa_family != s->family) return fail(EAFNOSUPPORT);
  struct sockaddr_un un;
  if (tv_path(addr, len, 0, &un) < 0) return -1;
  if (connect(fd, (const struct sockaddr*)&un, sizeof un) == 0) return 0;
  if (errno != ENOENT && errno != ECONNREFUSED) return -1;
  /* Nobody on that address: a listener on the wildcard address takes it. */
  if (tv_path(addr, len, 1, &un) < 0) return -1;
  if (connect(fd, (const struct sockaddr*)&un, sizeof un) == 0) return 0;
  return errno == ENOENT ? fail(ECONNREFUSED) : -1;
}

TV_API ssize_t tvsend(int fd, const void* buf, size_t len, int flags) {
  struct tv_sock* s = tv_get(fd);
  if (!s) return fail(EBADF);
  if (s->dropped) return fail(ECONNRESET);
  const long long limit = drop_after();
  size_t n = len;
  if (limit >= 0 && s->sent + n > (unsigned long long)limit)
    n = (size_t)((unsigned long long)limit - s->sent);
  ssize_t r = n > 0 || len == 0 ? send(fd, buf, n, flags | MSG_NOSIGNAL) : 0;
  if (r > 0) s->sent += (unsigned long long)r;
  if (limit >= 0 && s->sent >= (unsigned long long)limit) {
    s->dropped = 1;
    shutdown(fd, SHUT_RDWR);
    if (r <= 0 && len > 0) return fail(ECONNRESET);
  }
  return r;
}

TV_API ssize_t tvrecv(int fd, void* buf, size_t len, int flags) {
  struct tv_sock* s = tv_get(fd);
  if (!s) return fail(EBADF);
  if (deliver_late(fd, s, flags) < 0) return -1;
  ssize_t r = recv(fd, buf, len, flags);
  received(fd, s);
  return r;
}

TV_API ssize_t tvsendmsg(int fd, const struct msghdr* msg, int flags) {
  struct tv_sock* s = tv_get(fd);
  if (!s) return fail(EBADF);
  if (drop_after() < 0 && !s->dropped) {
    ssize_t r = sendmsg(fd, msg, flags | MSG_NOSIGNAL);
    if (r > 0) s->sent += (unsigned long long)r;
    return r;
  }
  /* With a drop pending, gather into one buffer so that tvsend applies the limit. */
  char buf[65536];
  size_t n = 0;
  for (size_t i = 0; i < msg->msg_iovlen && n < sizeof buf; ++i) {
    size_t take = msg->msg_iov[i].iov_len;
    if (take > sizeof buf - n) take = sizeof buf - n;
    memcpy(buf + n, msg->msg_iov[i].iov_base, take);
    n += take;
  }
  return tvsend(fd, buf, n, flags);
}

TV_API ssize_t tvrecvmsg(int fd, struct msghdr* msg, int flags) {
  struct tv_sock* s = tv_get(fd);
  if (!s) return fail(EBADF);
  if (deliver_late(fd, s, flags) < 0) return -1;
  ssize_t r = recvmsg(fd, msg, flags);
  received(fd, s);
  return r;
}

#ifndef TV_NO_POLL
/* Takes kernel descriptors too, as rsocket's rpoll does (an rsocket fd and a kernel fd may
 * be polled together): the vendor link's service sleeps on its eventfd through it. */
TV_API int tvpoll(struct pollfd* fds, nfds_t nfds, int timeout) {
  for (;;) {
    int n = poll(fds, nfds, timeout);
    if (n <= 0 || delay_ms() <= 0) return n;
    /* Held-back bytes are not readable yet: hide them, and look again when they are. */
    long long wait = -1;
    n = 0;
    for (nfds_t i = 0; i < nfds; ++i) {
      struct tv_sock* s = tv_get(fds[i].fd);
      long long left = s && (fds[i].revents & POLLIN) ? held_ms(fds[i].fd, s) : 0;
      if (left > 0) {
        fds[i].revents &= (short)~POLLIN;
        if (wait < 0 || left < wait) wait = left;
      }
      if (fds[i].revents) ++n;
    }
    if (n > 0 || wait < 0) return n;
    if (timeout >= 0 && timeout < wait) wait = timeout;  /* a caller's timeout comes first */
    usleep((useconds_t)(wait * 1000));
    if (timeout >= 0 && (timeout -= (int)wait) <= 0) return 0;
  }
}
#endif

TV_API int tvclose(int fd) {
  struct tv_sock* s = tv_get(fd);
  if (!s) return fail(EBADF);
  const char* slow = getenv("TV_SLOW_CLOSE_MS");
  if (slow && !s->bound[0]) usleep((useconds_t)(atoi(slow) * 1000));
  if (s->bound[0]) unlink(s->bound);  /* a listener's name goes with it, as a port would */
  memset(s, 0, sizeof *s);
  return close(fd);
}

TV_API int tvshutdown(int fd, int how) {
  if (!tv_get(fd)) return fail(EBADF);
  return shutdown(fd, how);
}

TV_API int tvsetsockopt(int fd, int level, int name, const void* value, socklen_t len) {
  if (!tv_get(fd)) return fail(EBADF);
  if (level == IPPROTO_TCP) return 0;  /* TCP_NODELAY and friends: nothing to tune here */
  if (level != SOL_SOCKET) return fail(ENOPROTOOPT);
  return setsockopt(fd, level, name, value, len);
}

TV_API int tvgetsockopt(int fd, int level, int name, void* value, socklen_t* len) {
  if (!tv_get(fd)) return fail(EBADF);
  if (level != SOL_SOCKET) return fail(ENOPROTOOPT);
  return getsockopt(fd, level, name, value, len);
}

TV_API int tvfcntl(int fd, int cmd, ...) {
  if (!tv_get(fd)) return fail(EBADF);
  va_list ap;
  va_start(ap, cmd);
  long arg = va_arg(ap, long);  /* the commands tv supports take an int or nothing */
  va_end(ap);
  return fcntl(fd, cmd, arg);
}
