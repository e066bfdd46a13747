// zcopy_reuse: sends large messages from buffers that the program then frees, unmaps, remaps
// or drops the pages of, and refills at the same address: the verbs link's zero-copy sends
// must carry the new bytes, never the pages a cached registration pinned before
// (transports/verbs/verbs_regcache.hpp). Run by zero_copy.sh, both ends under the library.
//
//   zcopy_reuse server ADDR        prints its port, accepts one connection, checks every
//                                  message (1 MiB, pattern of its number), answers each with
//                                  one byte; prints "checked N bad B"
//   zcopy_reuse client ADDR PORT   the cases below, one line each: "case NAME reused yes|no"
//                                  (whether the new memory had the old address, without
//                                  which the case proves nothing)
#include <arpa/inet.h>
#include <dlfcn.h>
#include <malloc.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <set>

namespace {

constexpr size_t kMsg = 1 << 20;

uint8_t pattern(uint32_t msg, size_t i) { return uint8_t(msg * 131 + i * 7 + (i >> 12)); }

void fill(uint8_t* p, uint32_t msg) {
  for (size_t i = 0; i < kMsg; ++i) p[i] = pattern(msg, i);
}

[[noreturn]] void die(const char* what) {
  perror(what);
  exit(2);
}

void send_all(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t k = send(fd, p, n, 0);
    if (k <= 0) die("send");
    p += k;
    n -= size_t(k);
  }
}

bool recv_all(int fd, uint8_t* p, size_t n) {
  while (n > 0) {
    const ssize_t k = recv(fd, p, n, 0);
    if (k < 0) die("recv");
    if (k == 0) return false;
    p += k;
    n -= size_t(k);
  }
  return true;
}

int server(const char* addr) {
  const int ls = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  inet_pton(AF_INET, addr, &sa.sin_addr);
  socklen_t len = sizeof sa;
  if (bind(ls, reinterpret_cast<sockaddr*>(&sa), len) != 0 || listen(ls, 1) != 0) die("listen");
  getsockname(ls, reinterpret_cast<sockaddr*>(&sa), &len);
  printf("%u\n", ntohs(sa.sin_port));
  fflush(stdout);
  const int fd = accept(ls, nullptr, nullptr);
  if (fd < 0) die("accept");
  auto* buf = static_cast<uint8_t*>(malloc(kMsg));
  uint32_t got = 0, bad = 0;
  while (recv_all(fd, buf, kMsg)) {
    size_t i = 0;
    while (i < kMsg && buf[i] == pattern(got, i)) ++i;
    if (i < kMsg) {
      ++bad;
      printf("message %u differs from byte %zu on: got %02x %02x %02x %02x, expected %02x %02x %02x %02x\n",
             got, i, buf[i], buf[i + 1], buf[i + 2], buf[i + 3], pattern(got, i),
             pattern(got, i + 1), pattern(got, i + 2), pattern(got, i + 3));
    }
    ++got;
    send_all(fd, reinterpret_cast<const uint8_t*>("k"), 1);
  }
  printf("checked %u bad %u\n", got, bad);
  return bad == 0 ? 0 : 1;
}

int g_fd = -1;
uint32_t g_msg = 0;
// Addresses sent from and not freed or changed since, and how many sends (after the warm-up)
// were from one of them: those must go zero-copy (a buffer is registered at its second
// send, if its memory did not change since the first).
std::set<uintptr_t> g_sent_from;
uint32_t g_repeat_sends = 0;
bool g_warm = false;

// Sends kMsg bytes at p, filled with the next message's pattern, and waits for the answer.
void send_msg(uint8_t* p) {
  if (!g_sent_from.insert(reinterpret_cast<uintptr_t>(p)).second && g_warm) ++g_repeat_sends;
  fill(p, g_msg++);
  send_all(g_fd, p, kMsg);
  uint8_t ack;
  if (!recv_all(g_fd, &ack, 1)) die("the server ended early");
}

void report(const char* name, uintptr_t before, const void* after) {
  printf("case %s reused %s\n", name, before == reinterpret_cast<uintptr_t>(after) ? "yes" : "no");
  fflush(stdout);
}

// A block sent from and freed, then a new block (at the old address when the allocator
// gives it back) sent from.
void malloc_free_malloc(const char* name) {
  auto* first = static_cast<uint8_t*>(malloc(kMsg));
  send_msg(first);
  send_msg(first);  // registered now, and cached
  const auto first_addr = reinterpret_cast<uintptr_t>(first);
  free(first);
  g_sent_from.erase(first_addr);
  auto* second = static_cast<uint8_t*>(malloc(kMsg));
  report(name, first_addr, second);
  send_msg(second);
  free(second);
}

// New anonymous memory, at `where` if that range is free (MAP_FIXED_NOREPLACE: no hook of
// mmap reports it, so only the hook of what freed the range can have told the cache).
void* map_at(void* where) {
  void* p = MAP_FAILED;
  const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (where) p = mmap(where, kMsg, prot, flags | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED) p = mmap(nullptr, kMsg, prot, flags, -1, 0);
  if (p == MAP_FAILED) die("mmap");
  return p;
}

int client(const char* addr, int port) {
  g_fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  inet_pton(AF_INET, addr, &sa.sin_addr);
  if (connect(g_fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) die("connect");
  // Warm-up until the link carries the stream (up to 20 s: the connection's RDMA side comes
  // up in the background, a new process's first one after librdmacm opened the devices):
  // the cases below must be zero-copy sends. One more send after that switches the stream
  // to the link; the buffer's first send there is copied (registered at its second).
  using TransportFn = const char* (*)(int);
  auto transport = reinterpret_cast<TransportFn>(dlsym(RTLD_DEFAULT, "fastsock_transport"));
  if (!transport) die("fastsock_transport (not under the library)");
  auto* warm = static_cast<uint8_t*>(map_at(nullptr));
  const time_t give_up = time(nullptr) + 20;
  auto on_link = [&] {
    const char* t = transport(g_fd);
    return t && strcmp(t, "verbs") == 0;
  };
  while (!on_link() && time(nullptr) < give_up) send_msg(warm);
  if (!on_link()) die("the connection is not carried by verbs after 20 s");
  send_msg(warm);
  g_warm = true;
  send_msg(warm);  // registered at the latest now (the warm-up's first may have gone on TCP)
  send_msg(warm);  // and from the cache: the same pages, new bytes (a hit is right)

  // munmap, then new pages at the same address.
  uint8_t* a = static_cast<uint8_t*>(map_at(nullptr));
  send_msg(a);
  send_msg(a);  // registered now, and cached
  munmap(a, kMsg);
  g_sent_from.erase(reinterpret_cast<uintptr_t>(a));
  uint8_t* a2 = static_cast<uint8_t*>(map_at(a));
  report("munmap", reinterpret_cast<uintptr_t>(a), a2);
  send_msg(a2);

  // madvise(MADV_DONTNEED): the next write maps fresh pages at the same address.
  send_msg(a2);
  madvise(a2, kMsg, MADV_DONTNEED);
  g_sent_from.erase(reinterpret_cast<uintptr_t>(a2));
  report("madvise", reinterpret_cast<uintptr_t>(a2), a2);
  send_msg(a2);

  // mremap moves the pages away; new ones at the old address.
  send_msg(a2);  // a2 registered again (its pages changed at the madvise)
  uint8_t* elsewhere = static_cast<uint8_t*>(map_at(nullptr));
  void* moved = mremap(a2, kMsg, kMsg, MREMAP_MAYMOVE | MREMAP_FIXED, elsewhere);
  if (moved == MAP_FAILED) die("mremap");
  g_sent_from.erase(reinterpret_cast<uintptr_t>(a2));
  uint8_t* a3 = static_cast<uint8_t*>(map_at(a2));
  report("mremap", reinterpret_cast<uintptr_t>(a2), a3);
  send_msg(a3);
  send_msg(static_cast<uint8_t*>(moved));  // the moved pages at their new address

  // malloc's own mapping: a large block is mmapped (threshold fixed, so that it stays so),
  // and free unmaps it inside glibc, where no munmap hook sees it.
  mallopt(M_MMAP_THRESHOLD, 256 << 10);
  malloc_free_malloc("malloc-mmap");

  // The heap: blocks below the mmap threshold, the top trimmed by free (sbrk inside glibc).
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 0);
  malloc_free_malloc("malloc-heap");

  // A buffer registered and kept while others come and go: more buffers than the cache has
  // entries, and more than it remembers sends from, each sent from twice (registered) and
  // unmapped. Every second send must still go zero-copy (the cache gives back what is dead
  // and not held), and each one given back shrinks the span the hooks watch to what is
  // still cached: it must still cover the kept buffer, whose pages are replaced last.
  uint8_t* kept = static_cast<uint8_t*>(map_at(nullptr));
  send_msg(kept);
  send_msg(kept);  // registered now, and cached
  for (int i = 0; i < 70; ++i) {
    auto* b = static_cast<uint8_t*>(map_at(nullptr));
    send_msg(b);
    send_msg(b);
    munmap(b, kMsg);
    g_sent_from.erase(reinterpret_cast<uintptr_t>(b));
  }
  munmap(kept, kMsg);
  g_sent_from.erase(reinterpret_cast<uintptr_t>(kept));
  uint8_t* kept2 = static_cast<uint8_t*>(map_at(kept));
  report("narrowed", reinterpret_cast<uintptr_t>(kept), kept2);
  send_msg(kept2);

  shutdown(g_fd, SHUT_WR);
  uint8_t rest;
  while (recv(g_fd, &rest, 1, 0) > 0) {
  }
  close(g_fd);
  printf("repeat-sends %u\n", g_repeat_sends);
  printf("sent %u\n", g_msg);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "server") == 0) return server(argv[2]);
  if (argc == 4 && strcmp(argv[1], "client") == 0) return client(argv[2], atoi(argv[3]));
  fprintf(stderr, "usage: zcopy_reuse server ADDR | client ADDR PORT\n");
  return 2;
}
