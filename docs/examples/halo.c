// halo.c: a halo exchange with the typed-array API (docs/api.md).
//
// Two ranks (a parent and a forked child, connected over loopback TCP) each own half of a
// ROWS x COLS grid of doubles, stored row-major with one ghost column on each side. Every
// step each rank sends its edge column to its neighbour with one strided gather (a column
// is ROWS blocks of 1 element, COLS + 2 apart) and receives the neighbour's into its ghost
// column with the matching strided scatter; then it relaxes its interior (Jacobi). After
// STEPS steps both ranks check their halves against the same computation done on the whole
// grid in one process. Build: cc -DFASTSOCK_DYNAMIC -Iinclude docs/examples/halo.c, then run
// it plain or under LD_PRELOAD=libfastsock.so (linking with -lfastsock works too).
#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fastsock/fastsock.h"

enum { ROWS = 64, HALF = 32, STEPS = 50 };
#define W (HALF + 2) /* row width with the two ghost columns */

// One Jacobi step over columns 1..HALF of `g` (ghosts included) into `next`.
static void relax(const double* g, double* next, int width, int from, int to) {
  for (int r = 1; r < ROWS - 1; ++r)
    for (int c = from; c <= to; ++c)
      next[r * width + c] = 0.25 * (g[(r - 1) * width + c] + g[(r + 1) * width + c] +
                                    g[r * width + c - 1] + g[r * width + c + 1]);
}

static double initial(int r, int c) { return (r * 31 + c * 17) % 11; } // c: global column

static int rank_main(int fd, int rank) {
  static double g[ROWS * W], next[ROWS * W];
  for (int r = 0; r < ROWS; ++r)
    for (int c = 0; c < W; ++c) g[r * W + c] = initial(r, rank * HALF + c - 1);
  // Rank 0's right edge is column HALF, its ghost HALF + 1; rank 1's left edge column 1,
  // its ghost 0. (The outer ghosts stay fixed: the boundary condition.)
  const size_t edge = rank == 0 ? HALF : 1, ghost = rank == 0 ? HALF + 1 : 0;
  for (int step = 0; step < STEPS; ++step) {
    // Rank 0 sends first and rank 1 receives first: no deadlock with blocking calls even
    // when the column does not fit a socket buffer.
    for (int turn = 0; turn < 2; ++turn) {
      const int rc = (turn == rank)
          ? fastsock_send_strided(fd, g, FASTSOCK_DOUBLE, edge, ROWS, W, 1)
          : fastsock_recv_strided(fd, g, FASTSOCK_DOUBLE, ghost, ROWS, W, 1);
      if (rc != 0) return perror("halo exchange"), 1;
    }
    memcpy(next, g, sizeof g);
    relax(g, next, W, 1, HALF);
    memcpy(g, next, sizeof g);
  }
  // The reference: the whole grid in one process.
  static double whole[ROWS * (2 * HALF + 2)], wnext[ROWS * (2 * HALF + 2)];
  const int ww = 2 * HALF + 2;
  for (int r = 0; r < ROWS; ++r)
    for (int c = 0; c < ww; ++c) whole[r * ww + c] = initial(r, c - 1);
  for (int step = 0; step < STEPS; ++step) {
    memcpy(wnext, whole, sizeof whole);
    relax(whole, wnext, ww, 1, 2 * HALF);
    memcpy(whole, wnext, sizeof whole);
  }
  for (int r = 0; r < ROWS; ++r)
    for (int c = 1; c <= HALF; ++c)
      if (fabs(g[r * W + c] - whole[r * ww + rank * HALF + c]) > 1e-12) {
        fprintf(stderr, "rank %d: cell (%d, %d) differs\n", rank, r, c);
        return 1;
      }
  printf("rank %d: %d steps of %dx%d, halves match the single-process result (transport %s)\n",
         rank, STEPS, ROWS, HALF, fastsock_transport(fd) ? fastsock_transport(fd) : "none");
  return 0;
}

int main(void) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof sa;
  int l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0 || bind(l, (struct sockaddr*)&sa, sizeof sa) || listen(l, 1) ||
      getsockname(l, (struct sockaddr*)&sa, &len))
    return perror("listen"), 1;
  setvbuf(stdout, NULL, _IOLBF, 0);
  const pid_t child = fork();
  if (child < 0) return perror("fork"), 1;
  if (child == 0) {
    close(l);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, (struct sockaddr*)&sa, sizeof sa)) return perror("connect"), 1;
    _exit(rank_main(fd, 1));
  }
  int fd = accept(l, NULL, NULL);
  if (fd < 0) return perror("accept"), 1;
  int status = 0, rc = rank_main(fd, 0);
  close(fd);
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) rc = 1;
  return rc;
}
