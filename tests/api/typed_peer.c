// typed_peer: one end of the typed-array API test (tests/api/typed.sh runs two of them as
// separate processes over loopback TCP, in each linking setting).
//
//   typed_peer recv PORTFILE   listens on 127.0.0.1, writes its port to PORTFILE, accepts one
//                              connection and runs the receiving side of every case
//   typed_peer send PORT       connects and runs the sending side
//
// The two sides run the same script of cases in the same order; each case is typed on one
// end and plain (write/read) or typed on the other, so the stream itself checks that typed
// bytes are exactly the plain bytes. Built twice: linked with -lfastsock, and with
// FASTSOCK_DYNAMIC (not linked: the library's entry points when preloaded, libc otherwise).
// Prints "ok: ..." per check, "setting: ..." and "transport: ...", exits 1 on a mismatch.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fastsock/fastsock.h"

#define N 1000
#define MARKER 0xA5
#define BIG_DOUBLES (1u << 20) /* 8 MiB: more than any socket or ring buffer holds */

static const char* g_side = "?";

static void fail(int line, const char* fmt, ...) {
  va_list ap;
  fprintf(stderr, "FAIL (%s, line %d): ", g_side, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));
  exit(1);
}
#define CHECK(cond, ...) ((cond) ? (void)0 : fail(__LINE__, __VA_ARGS__))
#define OK(...) (printf("ok: %s: ", g_side), printf(__VA_ARGS__), printf("\n"))

static const int kTypes[] = {FASTSOCK_BYTE,   FASTSOCK_INT8,   FASTSOCK_UINT8,  FASTSOCK_INT16,
                             FASTSOCK_UINT16, FASTSOCK_INT32,  FASTSOCK_UINT32, FASTSOCK_INT64,
                             FASTSOCK_UINT64, FASTSOCK_FLOAT,  FASTSOCK_DOUBLE};
#define NTYPES (sizeof kTypes / sizeof kTypes[0])

// Element i of the test array of `type`: distinct bytes within an element, so a byte order
// mistake changes the value.
static void fill(void* a, int type, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    const uint64_t v = (uint64_t)(i * 2654435761u + seed) * 0x0102030405060708ull + i;
    switch (type) {
      case FASTSOCK_FLOAT: ((float*)a)[i] = (float)i * 0.5f + (float)seed + 0.25f; break;
      case FASTSOCK_DOUBLE: ((double*)a)[i] = (double)i * 0.125 + seed + 1e-3; break;
      default: memcpy((char*)a + i * fastsock_type_size(type), &v, fastsock_type_size(type));
    }
  }
}

static void swap_each(void* a, size_t size, size_t n) {
  unsigned char* b = a;
  for (size_t i = 0; i < n; ++i, b += size)
    for (size_t j = 0; j < size / 2; ++j) {
      unsigned char t = b[j];
      b[j] = b[size - 1 - j];
      b[size - 1 - j] = t;
    }
}

static void plain_write(int fd, const void* p, size_t len) {
  while (len > 0) {
    ssize_t rc = write(fd, p, len);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 && errno == EAGAIN) {
      struct pollfd q = {fd, POLLOUT, 0};
      poll(&q, 1, -1);
      continue;
    }
    CHECK(rc > 0, "write");
    p = (const char*)p + rc;
    len -= (size_t)rc;
  }
}
static void plain_read(int fd, void* p, size_t len) {
  while (len > 0) {
    ssize_t rc = read(fd, p, len);
    if (rc < 0 && errno == EINTR) continue;
    CHECK(rc > 0, "read (%zd) with %zu bytes left", rc, len);
    p = (char*)p + rc;
    len -= (size_t)rc;
  }
}

// Waits until `fd` is ready for the direction, bounded: an nb call said EAGAIN.
static void await(int fd, int sending) {
  struct pollfd q = {fd, (short)(sending ? POLLOUT : POLLIN), 0};
  CHECK(poll(&q, 1, 10000) == 1, "poll while resuming");
}

// Whether typed receives can convert byte order here: not in the shim without the library.
static int g_can_set_order;

// ---- the cases: each has a send and a receive half --------------------------------------

// Every type, whole arrays, typed on both ends; then typed send, plain read.
static void every_type(int fd, int sending) {
  static char src[N * 8], got[N * 8];
  for (size_t t = 0; t < NTYPES; ++t) {
    const int type = kTypes[t];
    const size_t size = fastsock_type_size(type);
    fill(src, type, N, (unsigned)t);
    if (sending) {
      CHECK(fastsock_send_array(fd, src, type, 0, N) == 0, "send_array type %d", type);
      CHECK(fastsock_send_array(fd, src, type, 0, N) == 0, "send_array type %d", type);
    } else {
      memset(got, 0, sizeof got);
      CHECK(fastsock_recv_array(fd, got, type, 0, N) == 0, "recv_array type %d", type);
      CHECK(memcmp(got, src, N * size) == 0, "type %d: typed receive differs", type);
      memset(got, 0, sizeof got);
      plain_read(fd, got, N * size);
      CHECK(memcmp(got, src, N * size) == 0, "type %d: plain read of typed send differs", type);
    }
  }
  OK("%zu types: typed->typed and typed->plain read, %d elements each", NTYPES, N);
}

// Portions: elements [100, 400) sent, received into [50, 350) of a zeroed array.
static void portions(int fd, int sending) {
  int32_t src[N], got[N];
  fill(src, FASTSOCK_INT32, N, 7);
  if (sending) {
    CHECK(fastsock_send_array(fd, src, FASTSOCK_INT32, 100, 300) == 0, "send portion");
    plain_write(fd, src + 10, 20 * sizeof(int32_t)); // plain write, typed portion receive
  } else {
    memset(got, 0, sizeof got);
    CHECK(fastsock_recv_array(fd, got, FASTSOCK_INT32, 50, 300) == 0, "recv portion");
    CHECK(memcmp(got + 50, src + 100, 300 * sizeof(int32_t)) == 0, "portion content");
    for (int i = 0; i < N; ++i)
      if (i < 50 || i >= 350) CHECK(got[i] == 0, "element %d outside the portion written", i);
    CHECK(fastsock_recv_array(fd, got, FASTSOCK_INT32, 900, 20) == 0, "recv portion 2");
    CHECK(memcmp(got + 900, src + 10, 20 * sizeof(int32_t)) == 0, "plain->typed portion");
  }
  OK("portions: typed (offset 100, count 300) -> (offset 50), plain -> typed (offset 900)");
}

// Strided: 10 blocks of 2 int16 every 7 elements from element 3; and the reverse direction.
static void strided(int fd, int sending) {
  int16_t src[N], got[N], packed[20];
  fill(src, FASTSOCK_INT16, N, 11);
  for (int b = 0, k = 0; b < 10; ++b)
    for (int j = 0; j < 2; ++j) packed[k++] = src[3 + b * 7 + j];
  if (sending) {
    CHECK(fastsock_send_strided(fd, src, FASTSOCK_INT16, 3, 10, 7, 2) == 0, "send_strided");
    plain_write(fd, packed, sizeof packed);
  } else {
    int16_t flat[20];
    plain_read(fd, flat, sizeof flat);
    CHECK(memcmp(flat, packed, sizeof packed) == 0, "strided gather: wrong elements sent");
    memset(got, 0, sizeof got);
    CHECK(fastsock_recv_strided(fd, got, FASTSOCK_INT16, 3, 10, 7, 2) == 0, "recv_strided");
    for (int i = 0; i < 80; ++i) {
      const int in = i >= 3 && (i - 3) % 7 < 2 && (i - 3) / 7 < 10;
      CHECK(got[i] == (in ? src[i] : 0), "strided scatter: element %d", i);
    }
  }
  OK("strided: gather (offset 3, 10 blocks of 2, stride 7) and scatter into the same places");
}

// Indexed: out-of-order indices; and the reverse direction.
static void indexed(int fd, int sending) {
  static const size_t idx[] = {5, 0, 999, 2, 3, 4, 500, 1};
  const size_t n = sizeof idx / sizeof idx[0];
  uint32_t src[N], got[N], packed[8];
  fill(src, FASTSOCK_UINT32, N, 13);
  for (size_t i = 0; i < n; ++i) packed[i] = src[idx[i]];
  if (sending) {
    CHECK(fastsock_send_indexed(fd, src, FASTSOCK_UINT32, idx, n) == 0, "send_indexed");
    plain_write(fd, packed, sizeof packed);
  } else {
    uint32_t flat[8];
    plain_read(fd, flat, sizeof flat);
    CHECK(memcmp(flat, packed, sizeof packed) == 0, "indexed gather: wrong elements sent");
    memset(got, 0, sizeof got);
    CHECK(fastsock_recv_indexed(fd, got, FASTSOCK_UINT32, idx, n) == 0, "recv_indexed");
    for (size_t i = 0, k = 0; i < N; ++i) {
      int in = 0;
      for (k = 0; k < n; ++k) in |= idx[k] == i;
      CHECK(got[i] == (in ? src[i] : 0), "indexed scatter: element %zu", i);
    }
  }
  OK("indexed: gather of %zu out-of-order elements and scatter into the same places", n);
}

// The selections below, as bytes on the wire: strided u32 (10 blocks of 2), indexed u64 (5),
// multi-strided u16 (3 x 4 blocks of 2), dribbled indexed u64 (6).
#define FOREIGN_SELECTION_BYTES (10 * 2 * 4 + 5 * 8 + 3 * 4 * 2 * 2 + 6 * 8)

// Receives the first 3 bytes of an element at `at` as bytes, so the typed nb call that
// follows starts with done == 3: mid-element.
static void first_three_bytes(int fd, void* at) {
  size_t done = 0;
  while (fastsock_recv_array_nb(fd, at, FASTSOCK_UINT8, 0, 3, &done) != 0) {
    CHECK(errno == EAGAIN, "3-byte step");
    await(fd, 0);
  }
}

// Strided, indexed and multi-strided receives from a simulated foreign-order peer (set by
// the caller), the nb ones resumed mid-element. Sending: the plain selections, the last one
// written 3 bytes at a time with pauses so the receiver's nb steps end mid-element. Returns
// (receiving) how many nb steps of the dribbled receive ended mid-element.
static int foreign_selections(int fd, int sending, const uint64_t* src, uint64_t* got) {
  static const size_t idx[] = {9, 2, 9, 3, 9};
  static const size_t dribble_idx[] = {4, 4, 1, 0, 1, 4};
  static const struct fastsock_level levels[] = {{3, 40}, {4, 8}};
  const size_t nidx = sizeof idx / sizeof idx[0], ndribble = 6;
  if (sending) {
    const uint32_t* s32 = (const uint32_t*)src;
    const uint16_t* s16 = (const uint16_t*)src;
    uint32_t packed32[20];
    uint64_t packed64[6];
    uint16_t packed16[24];
    for (int b = 0, k = 0; b < 10; ++b)
      for (int j = 0; j < 2; ++j) packed32[k++] = s32[1 + b * 3 + j];
    plain_write(fd, packed32, sizeof packed32);
    for (size_t i = 0; i < nidx; ++i) packed64[i] = src[idx[i]];
    plain_write(fd, packed64, nidx * 8);
    for (int x = 0, k = 0; x < 3; ++x)
      for (int y = 0; y < 4; ++y)
        for (int j = 0; j < 2; ++j) packed16[k++] = s16[5 + x * 40 + y * 8 + j];
    plain_write(fd, packed16, sizeof packed16);
    for (size_t i = 0; i < ndribble; ++i) packed64[i] = src[dribble_idx[i]];
    for (size_t off = 0; off < sizeof packed64; off += 3) {
      const size_t left = sizeof packed64 - off;
      plain_write(fd, (char*)packed64 + off, left < 3 ? left : 3);
      poll(NULL, 0, 1); /* a pause, so each piece arrives on its own */
    }
    return 0;
  }
  uint64_t want[16];
  // Strided u32, resumed at byte 3 of its first element (u32 index 1).
  memset(got, 0, 16 * 8);
  first_three_bytes(fd, (uint32_t*)got + 1);
  size_t done = 3;
  while (fastsock_recv_strided_nb(fd, got, FASTSOCK_UINT32, 1, 10, 3, 2, &done) != 0) {
    CHECK(errno == EAGAIN, "strided_nb");
    await(fd, 0);
  }
  memcpy(want, src, sizeof want);
  swap_each(want, 4, 32);
  for (int i = 0; i < 32; ++i) {
    const int in = i >= 1 && (i - 1) % 3 < 2 && (i - 1) / 3 < 10;
    CHECK(((uint32_t*)got)[i] == (in ? ((uint32_t*)want)[i] : 0), "strided_nb u32 %d", i);
  }
  // Indexed u64 with a repeated index, resumed at byte 3 of element 9.
  memset(got, 0, 16 * 8);
  first_three_bytes(fd, got + 9);
  done = 3;
  while (fastsock_recv_indexed_nb(fd, got, FASTSOCK_UINT64, idx, nidx, &done) != 0) {
    CHECK(errno == EAGAIN, "indexed_nb");
    await(fd, 0);
  }
  memcpy(want, src, sizeof want);
  swap_each(want, 8, 16);
  for (int i = 0; i < 16; ++i)
    CHECK(got[i] == (i == 9 || i == 2 || i == 3 ? want[i] : 0), "indexed_nb u64 %d", i);
  // Multi-strided u16, blocking.
  memset(got, 0, 16 * 8);
  CHECK(fastsock_recv_multistrided(fd, got, FASTSOCK_UINT16, 5, levels, 2, 2) == 0,
        "recv_multistrided");
  memcpy(want, src, sizeof want);
  swap_each(want, 2, 64);
  for (int i = 0; i < 64; ++i) {
    const int r = i - 5, in = r >= 0 && r / 40 < 3 && r % 40 / 8 < 4 && r % 8 < 2;
    CHECK(((uint16_t*)got)[i] == (in ? ((uint16_t*)want)[i] : 0), "multistrided u16 %d", i);
  }
  // Dribbled: the sender's pauses end steps mid-element (how many depends on timing; the
  // result must be right whatever it is).
  memset(got, 0, 16 * 8);
  done = 0;
  int mid = 0;
  while (fastsock_recv_indexed_nb(fd, got, FASTSOCK_UINT64, dribble_idx, ndribble, &done) != 0) {
    CHECK(errno == EAGAIN, "dribbled indexed_nb");
    mid += done % 8 != 0;
    await(fd, 0);
  }
  memcpy(want, src, sizeof want);
  swap_each(want, 8, 16);
  for (int i = 0; i < 16; ++i)
    CHECK(got[i] == (i == 4 || i == 1 || i == 0 ? want[i] : 0), "dribbled indexed_nb u64 %d", i);
  return mid;
}

// A simulated foreign-order peer: the receiver declares the sender's order the other one,
// so every typed receive must swap each element exactly once, including repeated indices
// and the non-blocking variant's split elements.
static void byte_order(int fd, int sending) {
  static uint64_t src[N], got[N], want[N];
  // Element 7 four times (an even count: swapping every arrival in place would undo itself),
  // once right after 6 (adjacent runs merge).
  static const size_t idx[] = {7, 7, 6, 7, 7};
  const size_t nidx = sizeof idx / sizeof idx[0];
  fill(src, FASTSOCK_UINT64, N, 17);
  if (sending) {
    CHECK(fastsock_send_array(fd, src, FASTSOCK_UINT64, 0, N) == 0, "send u64");
    CHECK(fastsock_send_array(fd, src, FASTSOCK_DOUBLE, 0, N) == 0, "send as double");
    CHECK(fastsock_send_array(fd, src, FASTSOCK_UINT16, 0, 4 * N) == 0, "send u16");
    CHECK(fastsock_send_indexed(fd, src, FASTSOCK_UINT64, idx, nidx) == 0, "send indexed");
    CHECK(fastsock_send_array(fd, src, FASTSOCK_UINT32, 0, 2 * N) == 0, "send u32");
    foreign_selections(fd, 1, src, NULL);
    return;
  }
  const int foreign = fastsock_native_byte_order() == FASTSOCK_ORDER_LITTLE ? FASTSOCK_ORDER_BIG
                                                                            : FASTSOCK_ORDER_LITTLE;
  if (!g_can_set_order) {
    CHECK(fastsock_set_peer_byte_order(fd, foreign) == -1 && errno == ENOSYS,
          "the shim without the library cannot convert: ENOSYS");
    for (int i = 0; i < 4; ++i) plain_read(fd, got, sizeof src);
    plain_read(fd, got, nidx * 8);
    plain_read(fd, got, FOREIGN_SELECTION_BYTES);
    printf("skip: byte-order conversion needs the library (the plain fallback never converts)\n");
    return;
  }
  CHECK(fastsock_peer_byte_order(fd) == fastsock_native_byte_order(), "default: our order");
  CHECK(fastsock_set_peer_byte_order(fd, 99) == -1 && errno == EINVAL, "unknown order: EINVAL");
  CHECK(fastsock_set_peer_byte_order(fd, foreign) == 0, "set foreign order");
  CHECK(fastsock_peer_byte_order(fd) == foreign, "order reads back");
  CHECK(fastsock_recv_array(fd, got, FASTSOCK_UINT64, 0, N) == 0, "recv u64");
  memcpy(want, src, sizeof src);
  swap_each(want, 8, N);
  CHECK(memcmp(got, want, sizeof src) == 0, "u64 not converted");
  CHECK(fastsock_recv_array(fd, got, FASTSOCK_DOUBLE, 0, N) == 0, "recv double");
  CHECK(memcmp(got, want, sizeof src) == 0, "double not converted");
  CHECK(fastsock_recv_array(fd, got, FASTSOCK_UINT16, 0, 4 * N) == 0, "recv u16");
  memcpy(want, src, sizeof src);
  swap_each(want, 2, 4 * N);
  CHECK(memcmp(got, want, sizeof src) == 0, "u16 not converted");
  memset(got, 0, sizeof got);
  CHECK(fastsock_recv_indexed(fd, got, FASTSOCK_UINT64, idx, nidx) == 0, "recv indexed");
  want[7] = src[7];
  want[6] = src[6];
  swap_each(&want[7], 8, 1);
  swap_each(&want[6], 8, 1);
  CHECK(got[7] == want[7] && got[6] == want[6] && got[0] == 0, "repeated index swapped once");
  // Non-blocking, one byte at a time at first: elements split across calls.
  size_t done = 0;
  int rc;
  while (done < 3) {
    rc = fastsock_recv_array_nb(fd, got, FASTSOCK_UINT8, 0, done + 1, &done);
    CHECK(rc == 0 || errno == EAGAIN, "nb byte step");
    struct pollfd q = {fd, POLLIN, 0};
    if (rc != 0) poll(&q, 1, -1);
  }
  // The first 3 bytes arrived as bytes (no conversion); the u32s from there on, resumed.
  unsigned char first3[3];
  memcpy(first3, got, 3);
  CHECK(memcmp(first3, src, 3) == 0, "bytes are never converted");
  size_t done32 = 3;
  while ((rc = fastsock_recv_array_nb(fd, got, FASTSOCK_UINT32, 0, 2 * N, &done32)) != 0) {
    CHECK(errno == EAGAIN, "recv_array_nb u32");
    struct pollfd q = {fd, POLLIN, 0};
    poll(&q, 1, -1);
  }
  memcpy(want, src, sizeof src);
  swap_each(want, 4, 2 * N);
  CHECK(memcmp(got, want, sizeof src) == 0, "u32 via nb, resumed mid-element, not converted");
  const int dribbled = foreign_selections(fd, 0, src, got);
  CHECK(fastsock_set_peer_byte_order(fd, fastsock_native_byte_order()) == 0, "reset order");
  OK("byte order: strided_nb and indexed_nb resumed mid-element, multi-strided, and a "
     "dribbled indexed_nb (%d steps ended mid-element) converted once per element", dribbled);
  OK("byte order: u64, double, u16, indexed with a repeated index and nb u32 resumed "
     "mid-element all converted from a simulated %s-endian peer",
     foreign == FASTSOCK_ORDER_BIG ? "big" : "little");
}

// Non-blocking variants over a non-blocking fd with 8 MiB: progress is reported and resumes.
static void nonblocking(int fd, int sending) {
  double* a = malloc(BIG_DOUBLES * sizeof(double));
  CHECK(a != NULL, "malloc");
  fill(a, FASTSOCK_DOUBLE, BIG_DOUBLES, 19);
  const size_t total = BIG_DOUBLES * sizeof(double);
  const int flags = fcntl(fd, F_GETFL);
  CHECK(fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0, "O_NONBLOCK");
  double* got = sending ? NULL : calloc(BIG_DOUBLES, sizeof(double));
  size_t done = 0, prev = 0;
  int steps = 0, again = 0, rc;
  for (;;) {
    rc = sending ? fastsock_send_array_nb(fd, a, FASTSOCK_DOUBLE, 0, BIG_DOUBLES, &done)
                 : fastsock_recv_array_nb(fd, got, FASTSOCK_DOUBLE, 0, BIG_DOUBLES, &done);
    CHECK(done >= prev && done <= total, "progress went backwards or beyond");
    prev = done;
    ++steps;
    if (rc == 0) break;
    CHECK(errno == EAGAIN, "nb step");
    ++again;
    struct pollfd q = {fd, (short)(sending ? POLLOUT : POLLIN), 0};
    CHECK(poll(&q, 1, 10000) == 1, "poll while resuming");
  }
  CHECK(done == total, "complete means done == %zu", total);
  if (!sending) CHECK(memcmp(got, a, total) == 0, "nb 8 MiB content");
  CHECK(fcntl(fd, F_SETFL, flags) == 0, "restore flags");
  // A blocking typed call on a non-blocking fd still moves everything (waits in poll).
  CHECK(fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0, "O_NONBLOCK");
  if (sending)
    CHECK(fastsock_send_array(fd, a, FASTSOCK_DOUBLE, 0, BIG_DOUBLES) == 0, "blocking send");
  else {
    memset(got, 0, total);
    CHECK(fastsock_recv_array(fd, got, FASTSOCK_DOUBLE, 0, BIG_DOUBLES) == 0, "blocking recv");
    CHECK(memcmp(got, a, total) == 0, "blocking on O_NONBLOCK content");
  }
  CHECK(fcntl(fd, F_SETFL, flags) == 0, "restore flags");
  OK("non-blocking: 8 MiB of doubles in %d steps (%d EAGAIN with progress kept); blocking "
     "call on an O_NONBLOCK fd completes", steps, again);
  free(a);
  free(got);
}

// ---- multi-strided regions: faces of a 3-D array, against element-by-element loops ----

#define NX 10
#define NY 12
#define NZ 14
#define AT(x, y, z) (((size_t)(x) * NY + (y)) * NZ + (z))

// A region of the cube and its element-by-element description: elements (x, y, z) with
// x in [x0, x1), y in [y0, y1), z in [z0, z1), in x-major order.
struct region {
  const char* name;
  size_t offset, nlevels, blocklen;
  struct fastsock_level levels[3];
  int x0, x1, y0, y1, z0, z1;
};

// The halo faces of the cube's interior (ghost layer of 1 excluded) and a sub-cube written
// with two and with three levels. Each region's levels must select exactly its box.
static const struct region kRegions[] = {
    {"x face (x=1)", AT(1, 1, 1), 1, NZ - 2, {{NY - 2, NZ}}, 1, 2, 1, NY - 1, 1, NZ - 1},
    {"y face (y=NY-2)", AT(1, NY - 2, 1), 1, NZ - 2, {{NX - 2, NY * NZ}}, 1, NX - 1, NY - 2,
     NY - 1, 1, NZ - 1},
    {"z face (z=1)", AT(1, 1, 1), 2, 1, {{NX - 2, NY * NZ}, {NY - 2, NZ}}, 1, NX - 1, 1, NY - 1,
     1, 2},
    {"z face (z=NZ-2)", AT(1, 1, NZ - 2), 2, 1, {{NX - 2, NY * NZ}, {NY - 2, NZ}}, 1, NX - 1, 1,
     NY - 1, NZ - 2, NZ - 1},
    {"sub-cube, 2 levels", AT(2, 3, 4), 2, 5, {{4, NY * NZ}, {6, NZ}}, 2, 6, 3, 9, 4, 9},
    {"sub-cube, 3 levels", AT(2, 3, 4), 3, 1, {{4, NY * NZ}, {6, NZ}, {5, 1}}, 2, 6, 3, 9, 4, 9},
    {"whole cube, 0 levels", 0, 0, NX * NY * NZ, {{0, 0}}, 0, NX, 0, NY, 0, NZ},
};

// The region's elements of `cube`, packed in x-major order; returns their count.
static size_t pack_region(const struct region* r, const double* cube, double* out) {
  size_t n = 0;
  for (int x = r->x0; x < r->x1; ++x)
    for (int y = r->y0; y < r->y1; ++y)
      for (int z = r->z0; z < r->z1; ++z) out[n++] = cube[AT(x, y, z)];
  return n;
}
static int in_region(const struct region* r, int x, int y, int z) {
  return x >= r->x0 && x < r->x1 && y >= r->y0 && y < r->y1 && z >= r->z0 && z < r->z1;
}

static void multistrided(int fd, int sending) {
  static double cube[NX * NY * NZ], got[NX * NY * NZ], packed[NX * NY * NZ],
      flat[NX * NY * NZ];
  const size_t nregions = sizeof kRegions / sizeof kRegions[0];
  fill(cube, FASTSOCK_DOUBLE, NX * NY * NZ, 23);
  for (size_t i = 0; i < nregions; ++i) {
    const struct region* r = &kRegions[i];
    const size_t n = pack_region(r, cube, packed);
    if (sending) {
      // Gather (read plainly by the peer), then scatter of a plain write.
      CHECK(fastsock_send_multistrided(fd, cube, FASTSOCK_DOUBLE, r->offset, r->levels,
                                       r->nlevels, r->blocklen) == 0, "send %s", r->name);
      plain_write(fd, packed, n * sizeof(double));
      continue;
    }
    plain_read(fd, flat, n * sizeof(double));
    CHECK(memcmp(flat, packed, n * sizeof(double)) == 0, "%s: gathered elements differ",
          r->name);
    memset(got, 0, sizeof got);
    CHECK(fastsock_recv_multistrided(fd, got, FASTSOCK_DOUBLE, r->offset, r->levels, r->nlevels,
                                     r->blocklen) == 0, "recv %s", r->name);
    for (int x = 0; x < NX; ++x)
      for (int y = 0; y < NY; ++y)
        for (int z = 0; z < NZ; ++z)
          CHECK(got[AT(x, y, z)] == (in_region(r, x, y, z) ? cube[AT(x, y, z)] : 0.0),
                "%s: scatter, element (%d,%d,%d)", r->name, x, y, z);
  }
  OK("multi-strided: %zu regions of a %dx%dx%d array (4 halo faces, a sub-cube in 2 and 3 "
     "levels, 0 levels) gathered and scattered as element-by-element loops say", nregions,
     NX, NY, NZ);
}

// ---- non-blocking strided, indexed and multi-strided, large enough to need many steps --

#define NB_ELEMS (1u << 20) /* 8 MiB of doubles */
#define NB_CUBE 96          /* a 96^3 cube of doubles: 6.75 MiB */

// One whole nb transfer: steps until complete, polling on EAGAIN. Returns the steps taken.
typedef int (*nb_step)(int fd, void* a, size_t* done, int sending);
static int nb_loop(int fd, void* a, size_t total, nb_step step, int sending, const char* what) {
  size_t done = 0, prev = 0;
  int steps = 0;
  // The receiver starts late, so the sender fills the socket (or ring) and has to resume.
  if (!sending) poll(NULL, 0, 50);
  for (;;) {
    const int rc = step(fd, a, &done, sending);
    CHECK(done >= prev && done <= total, "%s: progress went backwards or beyond", what);
    prev = done;
    ++steps;
    if (rc == 0) break;
    CHECK(errno == EAGAIN, "%s: nb step", what);
    await(fd, sending);
  }
  CHECK(done == total, "%s: complete means done == %zu, not %zu", what, total, done);
  return steps;
}

// Blocks of 3 every 4 doubles: 6 MiB.
static int strided_step(int fd, void* a, size_t* done, int sending) {
  return sending ? fastsock_send_strided_nb(fd, a, FASTSOCK_DOUBLE, 1, NB_ELEMS / 4, 4, 3, done)
                 : fastsock_recv_strided_nb(fd, a, FASTSOCK_DOUBLE, 1, NB_ELEMS / 4, 4, 3, done);
}
// Every fourth element, last to first, each twice in a row: a reversed, repeated gather.
static size_t* g_nb_idx;
#define NB_NIDX (NB_ELEMS / 2)
static int indexed_step(int fd, void* a, size_t* done, int sending) {
  return sending ? fastsock_send_indexed_nb(fd, a, FASTSOCK_DOUBLE, g_nb_idx, NB_NIDX, done)
                 : fastsock_recv_indexed_nb(fd, a, FASTSOCK_DOUBLE, g_nb_idx, NB_NIDX, done);
}
// The cube's interior, one layer in from every side, in two levels over rows.
static const struct fastsock_level kCubeLevels[] = {{NB_CUBE - 2, NB_CUBE * NB_CUBE},
                                                    {NB_CUBE - 2, NB_CUBE}};
#define NB_CUBE_FIRST ((size_t)NB_CUBE * NB_CUBE + NB_CUBE + 1)
static int cube_step(int fd, void* a, size_t* done, int sending) {
  return sending ? fastsock_send_multistrided_nb(fd, a, FASTSOCK_DOUBLE, NB_CUBE_FIRST,
                                                 kCubeLevels, 2, NB_CUBE - 2, done)
                 : fastsock_recv_multistrided_nb(fd, a, FASTSOCK_DOUBLE, NB_CUBE_FIRST,
                                                 kCubeLevels, 2, NB_CUBE - 2, done);
}

static void nonblocking_selections(int fd, int sending) {
  const size_t bytes = NB_ELEMS * sizeof(double);
  double* a = malloc(bytes);
  double* got = calloc(NB_ELEMS, sizeof(double));
  g_nb_idx = malloc(NB_NIDX * sizeof(size_t));
  CHECK(a && got && g_nb_idx, "malloc");
  fill(a, FASTSOCK_DOUBLE, NB_ELEMS, 29);
  for (size_t i = 0; i < NB_NIDX; ++i) g_nb_idx[i] = NB_ELEMS - 2 - 4 * (i / 2);
  const int flags = fcntl(fd, F_GETFL);
  CHECK(fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0, "O_NONBLOCK");
  void* buf = sending ? (void*)a : (void*)got;
  const int s1 = nb_loop(fd, buf, NB_ELEMS / 4 * 3 * sizeof(double), strided_step, sending,
                         "strided_nb");
  if (!sending)
    for (size_t i = 0; i < NB_ELEMS; ++i)
      CHECK(got[i] == (i >= 1 && (i - 1) % 4 < 3 ? a[i] : 0.0),
            "strided_nb element %zu", i);
  memset(got, 0, bytes);
  const int s2 = nb_loop(fd, buf, NB_NIDX * sizeof(double), indexed_step, sending, "indexed_nb");
  if (!sending)
    for (size_t i = 0; i < NB_ELEMS; ++i)
      CHECK(got[i] == (i % 4 == (NB_ELEMS - 2) % 4 ? a[i] : 0.0), "indexed_nb element %zu", i);
  memset(got, 0, bytes);
  const size_t inner = (size_t)(NB_CUBE - 2) * (NB_CUBE - 2) * (NB_CUBE - 2);
  const int s3 = nb_loop(fd, buf, inner * sizeof(double), cube_step, sending, "multistrided_nb");
  if (!sending)
    for (size_t x = 0; x < NB_CUBE; ++x)
      for (size_t y = 0; y < NB_CUBE; ++y)
        for (size_t z = 0; z < NB_CUBE; ++z) {
          const size_t i = (x * NB_CUBE + y) * NB_CUBE + z;
          const int in = x > 0 && x < NB_CUBE - 1 && y > 0 && y < NB_CUBE - 1 && z > 0 &&
                         z < NB_CUBE - 1;
          CHECK(got[i] == (in ? a[i] : 0.0), "multistrided_nb element (%zu,%zu,%zu)", x, y, z);
        }
  CHECK(fcntl(fd, F_SETFL, flags) == 0, "restore flags");
  OK("non-blocking selections on an O_NONBLOCK fd: strided 6 MiB in %d steps, indexed "
     "(reversed, repeated) 4 MiB in %d, multi-strided cube interior in %d; scatter exact",
     s1, s2, s3);
  free(a);
  free(got);
  free(g_nb_idx);
}

// Every bad argument: -1, the errno, and nothing moved (the peer's next byte is the marker).
static void bad_arguments(int fd, int sending) {
  double buf[16] = {0};
  size_t idx[2] = {0, SIZE_MAX / 4}, done = 0;
  if (sending) {
    int closed = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(closed >= 0 && close(closed) == 0, "a closed descriptor");
    CHECK(fastsock_send_array(fd, NULL, FASTSOCK_INT32, 0, 5) == -1 && errno == EINVAL, "null");
    CHECK(fastsock_send_array(fd, buf, 999, 0, 1) == -1 && errno == EINVAL, "type");
    CHECK(fastsock_send_array(fd, buf, FASTSOCK_DOUBLE, 0, SIZE_MAX / 4) == -1 &&
          errno == EOVERFLOW, "overflow");
    CHECK(fastsock_send_array(fd, buf, FASTSOCK_BYTE, SIZE_MAX, 2) == -1 && errno == EOVERFLOW,
          "offset overflow");
    CHECK(fastsock_send_array(fd, (char*)buf + 4, FASTSOCK_DOUBLE, 0, 2) == -1 &&
          errno == EINVAL, "misaligned");
    CHECK(fastsock_send_array(-1, buf, FASTSOCK_DOUBLE, 0, 2) == -1 && errno == EBADF, "fd -1");
    CHECK(fastsock_send_array(closed, buf, FASTSOCK_DOUBLE, 0, 2) == -1 && errno == EBADF,
          "closed fd");
    CHECK(fastsock_send_array_nb(closed, buf, FASTSOCK_DOUBLE, 0, 2, &done) == -1 &&
          errno == EBADF && done == 0, "closed fd nb");
    CHECK(fastsock_send_array_nb(fd, buf, FASTSOCK_DOUBLE, 0, 2, NULL) == -1 && errno == EINVAL,
          "nb null done");
    CHECK(fastsock_send_strided(fd, buf, FASTSOCK_INT64, 0, SIZE_MAX / 2, 4, 1) == -1 &&
          errno == EOVERFLOW, "strided overflow");
    CHECK(fastsock_send_strided(fd, NULL, FASTSOCK_INT64, 0, 2, 4, 1) == -1 && errno == EINVAL,
          "strided null");
    CHECK(fastsock_send_strided(fd, buf, 42, 0, 2, 4, 1) == -1 && errno == EINVAL,
          "strided type");
    CHECK(fastsock_send_indexed(fd, buf, FASTSOCK_DOUBLE, NULL, 3) == -1 && errno == EINVAL,
          "indexed null");
    CHECK(fastsock_send_indexed(fd, buf, FASTSOCK_DOUBLE, idx, 2) == -1 && errno == EOVERFLOW,
          "indexed overflow");
    CHECK(fastsock_send_indexed(closed, buf, FASTSOCK_DOUBLE, idx, 1) == -1 && errno == EBADF,
          "indexed closed");
    const struct fastsock_level lv[] = {{2, 4}, {2, 1}};
    const struct fastsock_level huge_count[] = {{SIZE_MAX / 2, 1}, {4, 1}};
    const struct fastsock_level huge_stride[] = {{2, SIZE_MAX / 2}, {2, 1}};
    const struct fastsock_level wide[] = {{1u << 20, 0}, {1u << 20, 0}};
    const struct fastsock_level empty[] = {{3, SIZE_MAX}, {0, 1}};
    CHECK(fastsock_send_multistrided(fd, NULL, FASTSOCK_DOUBLE, 0, lv, 2, 1) == -1 &&
          errno == EINVAL, "multistrided null base");
    CHECK(fastsock_send_multistrided(fd, buf, FASTSOCK_DOUBLE, 0, NULL, 2, 1) == -1 &&
          errno == EINVAL, "multistrided null levels");
    CHECK(fastsock_send_multistrided(fd, buf, 0, 0, lv, 2, 1) == -1 && errno == EINVAL,
          "multistrided type");
    CHECK(fastsock_send_multistrided(fd, buf, FASTSOCK_DOUBLE, 0, huge_count, 2, 1) == -1 &&
          errno == EOVERFLOW, "multistrided count product overflow");
    CHECK(fastsock_send_multistrided(fd, buf, FASTSOCK_DOUBLE, 0, huge_stride, 2, 1) == -1 &&
          errno == EOVERFLOW, "multistrided extent overflow");
    CHECK(fastsock_send_multistrided(fd, buf, FASTSOCK_DOUBLE, 0, wide, 2, 1u << 20) == -1 &&
          errno == EOVERFLOW, "multistrided total bytes overflow");
    CHECK(fastsock_send_multistrided(fd, (char*)buf + 1, FASTSOCK_INT16, 0, lv, 2, 1) == -1 &&
          errno == EINVAL, "multistrided misaligned");
    CHECK(fastsock_send_multistrided(closed, buf, FASTSOCK_DOUBLE, 0, lv, 2, 1) == -1 &&
          errno == EBADF, "multistrided closed fd");
    CHECK(fastsock_send_multistrided_nb(fd, buf, FASTSOCK_DOUBLE, 0, lv, 2, 1, NULL) == -1 &&
          errno == EINVAL, "multistrided_nb null done");
    CHECK(fastsock_send_strided_nb(fd, buf, FASTSOCK_DOUBLE, 0, 2, 4, 1, NULL) == -1 &&
          errno == EINVAL, "strided_nb null done");
    CHECK(fastsock_send_strided_nb(closed, buf, FASTSOCK_DOUBLE, 0, 2, 4, 1, &done) == -1 &&
          errno == EBADF && done == 0, "strided_nb closed fd");
    done = 17;
    CHECK(fastsock_send_strided_nb(fd, buf, FASTSOCK_DOUBLE, 0, 2, 4, 1, &done) == -1 &&
          errno == EINVAL && done == 17, "strided_nb done beyond the selection");
    done = 0;
    CHECK(fastsock_send_indexed_nb(fd, buf, FASTSOCK_DOUBLE, idx, 2, &done) == -1 &&
          errno == EOVERFLOW, "indexed_nb overflow");
    CHECK(fastsock_send_indexed_nb(fd, buf, FASTSOCK_DOUBLE, idx, 1, NULL) == -1 &&
          errno == EINVAL, "indexed_nb null done");
    CHECK(fastsock_send_multistrided(fd, buf, FASTSOCK_DOUBLE, 0, empty, 2, 1) == 0,
          "a level of count 0 selects nothing, whatever the strides");
    CHECK(fastsock_send_array(fd, buf, FASTSOCK_DOUBLE, 3, 0) == 0, "count 0 sends nothing");
    const unsigned char marker = MARKER;
    plain_write(fd, &marker, 1);
    OK("29 bad sends: -1 with EINVAL/EOVERFLOW/EBADF; then the marker");
    return;
  }
  // Bad receives consume nothing either: the marker is still the next byte.
  CHECK(fastsock_recv_array(fd, NULL, FASTSOCK_INT32, 0, 5) == -1 && errno == EINVAL, "null");
  CHECK(fastsock_recv_array(fd, (char*)buf + 2, FASTSOCK_INT32, 0, 1) == -1 && errno == EINVAL,
        "misaligned receive");
  CHECK(fastsock_recv_array(fd, buf, FASTSOCK_UINT64, 1, SIZE_MAX / 8) == -1 &&
        errno == EOVERFLOW, "overflowing receive");
  CHECK(fastsock_recv_strided(fd, buf, 77, 0, 1, 1, 1) == -1 && errno == EINVAL, "type");
  CHECK(fastsock_recv_indexed(fd, buf, FASTSOCK_DOUBLE, idx, 2) == -1 && errno == EOVERFLOW,
        "indexed");
  CHECK(fastsock_recv_strided_nb(fd, buf, FASTSOCK_INT64, 0, 2, 4, 1, NULL) == -1 &&
        errno == EINVAL, "strided_nb receive, null done");
  CHECK(fastsock_recv_multistrided(fd, (char*)buf + 4, FASTSOCK_DOUBLE, 0, NULL, 0, 1) == -1 &&
        errno == EINVAL, "multistrided misaligned receive");
  unsigned char first = 0;
  plain_read(fd, &first, 1);
  CHECK(first == MARKER, "the first byte after the bad calls is 0x%02x, not the marker", first);
  OK("bad sends moved nothing (the next byte is the marker); 7 bad receives consumed nothing");
}

// The element type out of band: where the link carries it (shm: both ends run the library
// on one host), a typed receive of another type than the typed sender's fails with EBADMSG
// and takes nothing, so the same bytes can be read again with the right type; raw bytes
// (FASTSOCK_BYTE) agree with any type. Elsewhere (TCP, no library) there is no channel for
// it: the bytes are simply received, as a plain read would.
static void type_agreement(int fd, int sending) {
  double d[64];
  int32_t w[32];
  for (int i = 0; i < 64; ++i) d[i] = i * 0.5 + 0.25;
  for (int i = 0; i < 32; ++i) w[i] = i * 7 - 100;
  if (sending) {
    CHECK(fastsock_send_array(fd, d, FASTSOCK_DOUBLE, 0, 64) == 0, "send doubles");
    CHECK(fastsock_send_array(fd, w, FASTSOCK_INT32, 0, 32) == 0, "send int32s");
    CHECK(fastsock_send_array(fd, d, FASTSOCK_DOUBLE, 0, 8) == 0, "send 8 doubles");
    OK("typed doubles, int32s and doubles sent for the type checks");
    return;
  }
  const char* link = fastsock_transport(fd);
  const int carried = link != NULL && strcmp(link, "shm") == 0;
  double got[64];
  int64_t wrong[64];
  if (carried) {
    errno = 0;
    CHECK(fastsock_recv_array(fd, wrong, FASTSOCK_INT64, 0, 64) == -1 && errno == EBADMSG,
          "int64s received from a typed double sender");
    CHECK(fastsock_recv_array(fd, got, FASTSOCK_DOUBLE, 0, 64) == 0 &&
              memcmp(got, d, sizeof d) == 0, "the same bytes as doubles after the refusal");
  } else {
    CHECK(fastsock_recv_array(fd, wrong, FASTSOCK_INT64, 0, 64) == 0 &&
              memcmp(wrong, d, sizeof d) == 0, "the bytes, as a plain read would give them");
  }
  int32_t w2[32];
  CHECK(fastsock_recv_array(fd, w2, FASTSOCK_INT32, 0, 32) == 0 && memcmp(w2, w, sizeof w) == 0,
        "int32s of the same type");
  unsigned char raw[64];
  CHECK(fastsock_recv_array(fd, raw, FASTSOCK_BYTE, 0, 64) == 0 && memcmp(raw, d, 64) == 0,
        "raw bytes of typed doubles");
  if (carried)
    OK("type agreement on %s: a mismatch is EBADMSG with nothing taken; bytes agree with all", link);
  else
    OK("type agreement not carried on %s: bytes received as sent", link ? link : "plain sockets");
}

typedef void (*case_fn)(int fd, int sending);
static const case_fn kCases[] = {every_type,   portions,    strided,
                                 indexed,      byte_order,  nonblocking,
                                 multistrided, nonblocking_selections, type_agreement,
                                 bad_arguments};

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc != 3 || (strcmp(argv[1], "send") && strcmp(argv[1], "recv"))) {
    fprintf(stderr, "usage: %s send PORT | recv PORTFILE\n", argv[0]);
    return 2;
  }
  const int sending = strcmp(argv[1], "send") == 0;
  g_side = sending ? "sender" : "receiver";
  const char* version = fastsock_version();
  printf("setting: %s\n", version ? "library" : "plain fallback");
  g_can_set_order = version != NULL;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd;
  if (sending) {
    sa.sin_port = htons((uint16_t)atoi(argv[2]));
    fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0 && connect(fd, (struct sockaddr*)&sa, sizeof sa) == 0, "connect");
  } else {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof sa;
    CHECK(l >= 0 && bind(l, (struct sockaddr*)&sa, sizeof sa) == 0 && listen(l, 1) == 0 &&
              getsockname(l, (struct sockaddr*)&sa, &len) == 0, "listen");
    FILE* f = fopen(argv[2], "w");
    CHECK(f && fprintf(f, "%d\n", ntohs(sa.sin_port)) > 0 && fclose(f) == 0, "port file");
    fd = accept(l, NULL, NULL);
    CHECK(fd >= 0, "accept");
    close(l);
  }
  const char* transport = fastsock_transport(fd);
  printf("transport: %s\n", transport ? transport : "(none)");
  for (size_t i = 0; i < sizeof kCases / sizeof kCases[0]; ++i) kCases[i](fd, sending);
  if (sending) {
    CHECK(shutdown(fd, SHUT_WR) == 0, "shutdown");
    char c;
    CHECK(read(fd, &c, 1) == 0, "the receiver closes after its checks");
  } else {
    char c;
    CHECK(read(fd, &c, 1) == 0, "end of stream after the last case");
    // A typed receive at the end of the stream: ECONNRESET, not a short success.
    CHECK(fastsock_recv_array(fd, &c, FASTSOCK_BYTE, 0, 1) == -1 && errno == ECONNRESET,
          "typed receive at end of stream");
  }
  close(fd);
  printf("ok: %s: all cases passed\n", g_side);
  return 0;
}
