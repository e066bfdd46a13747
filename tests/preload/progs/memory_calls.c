// The memory calls the library hooks for its registration cache (preload/hooks_memory.cc:
// free, realloc, reallocarray, munmap, mremap, madvise, mmap, mmap64, shmdt, brk, sbrk)
// behave exactly as libc's: results, errno, and what the memory holds afterwards. The hooks
// only report ranges and pass the call on; this checks the passing on, with a connection
// open and used (so the library is fully initialised), on whatever link carries it.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "common.h"

static void heap_calls(void) {
  char* p = malloc(100);
  CHECK(p != NULL, "malloc(100) failed");
  memset(p, 'a', 100);
  p = realloc(p, 1 << 20);  // grows into a new mapping: the bytes follow
  CHECK(p != NULL && p[0] == 'a' && p[99] == 'a', "realloc lost the bytes");
  p = reallocarray(p, 10, 20);
  CHECK(p != NULL && p[0] == 'a' && p[99] == 'a', "reallocarray lost the bytes");
  if (dlsym(RTLD_DEFAULT, "__asan_init")) {
    // AddressSanitizer's own reallocarray aborts on an overflow (its default) before ours.
    note_skip("reallocarray's overflow: AddressSanitizer is loaded");
  } else {
    errno = 0;
    volatile size_t huge = SIZE_MAX / 2;  // (volatile: the compiler would warn of the overflow)
    void* q = reallocarray(p, huge, 4);    // overflows: fails, p untouched
    CHECK(q == NULL && errno == ENOMEM, "reallocarray overflow: %p, errno %d", q, errno);
    CHECK(p[0] == 'a', "reallocarray's failure touched the block");
  }
  free(p);
  free(NULL);
  void* z = realloc(NULL, 16);  // as malloc
  CHECK(z != NULL, "realloc(NULL, 16) failed");
  free(z);
  ok("malloc, realloc, reallocarray (and its ENOMEM), free, free(NULL)");
}

static void mapping_calls(void) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char* m = (char*)SYS(mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  memset(m, 'x', 4 * page);
  // MAP_FIXED over the second page replaces it with a zero page.
  char* f = (char*)SYS(mmap(m + page, page, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0));
  CHECK(f == m + page && f[0] == 0 && m[0] == 'x', "MAP_FIXED did not replace the page");
  // MADV_DONTNEED on a private anonymous page: it reads zero afterwards.
  SYS(madvise(m + 2 * page, page, MADV_DONTNEED));
  CHECK(m[2 * page] == 0 && m[3 * page] == 'x', "MADV_DONTNEED: %d %d", m[2 * page], m[3 * page]);
  SYS(madvise(m, page, MADV_WILLNEED));
  CHECK(m[0] == 'x', "MADV_WILLNEED changed the page");
  errno = 0;
  CHECK(madvise(m + 1, page, MADV_DONTNEED) == -1 && errno == EINVAL, "unaligned madvise: errno %d", errno);
  // mremap grows (moving if need be) and keeps the bytes; MREMAP_FIXED moves to a target.
  char* g = (char*)mremap(m, 4 * page, 64 * page, MREMAP_MAYMOVE);
  CHECK(g != MAP_FAILED && g[0] == 'x' && g[3 * page] == 'x', "mremap lost the bytes");
  char* target = (char*)SYS(mmap(NULL, 64 * page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  char* h = (char*)mremap(g, 64 * page, 64 * page, MREMAP_MAYMOVE | MREMAP_FIXED, target);
  CHECK(h == target && h[0] == 'x', "MREMAP_FIXED: %p, wanted %p", (void*)h, (void*)target);
  SYS(munmap(h, 64 * page));
  errno = 0;
  CHECK(munmap((char*)h + 1, page) == -1 && errno == EINVAL, "unaligned munmap: errno %d", errno);
  char* m64 = (char*)mmap64(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(m64 != MAP_FAILED, "mmap64 failed");
  m64[0] = 1;
  SYS(munmap(m64, page));
  ok("mmap (MAP_FIXED), mmap64, madvise (DONTNEED, WILLNEED, EINVAL), mremap (grow, FIXED), munmap (EINVAL)");
}

static void shm_calls(void) {
  const int id = shmget(IPC_PRIVATE, 65536, IPC_CREAT | 0600);
  if (id < 0) {
    note_skip("shmget: %s (no System V shared memory here)", strerror(errno));
    return;
  }
  char* a = (char*)shmat(id, NULL, 0);
  shmctl(id, IPC_RMID, NULL);
  CHECK(a != (void*)-1, "shmat: %s", strerror(errno));
  a[0] = 's';
  SYS(shmdt(a));
  errno = 0;
  CHECK(shmdt(a) == -1 && errno == EINVAL, "shmdt of a detached address: errno %d", errno);
  ok("shmat, shmdt (and its EINVAL)");
}

static void break_calls(void) {
  char* start = sbrk(0);
  CHECK(start != (void*)-1, "sbrk(0)");
  char* old = sbrk(8192);
  CHECK(old == start && sbrk(0) == start + 8192, "sbrk(8192): %p %p", (void*)old, sbrk(0));
  old[0] = old[8191] = 'b';
  CHECK(sbrk(-4096) == start + 8192 && sbrk(0) == start + 4096, "sbrk(-4096)");
  SYS(brk(start));
  CHECK(sbrk(0) == start, "brk back to the start: %p, wanted %p", sbrk(0), (void*)start);
  ok("sbrk (grow, shrink), brk");
}

int main(void) {
  prog_init("memory_calls");
  int client, server;
  tcp_pair(AF_INET, &client, &server);
  char byte = 'm';
  write_all(client, &byte, 1);
  read_exact(server, &byte, 1);
  heap_calls();
  mapping_calls();
  shm_calls();
  break_calls();
  write_all(server, &byte, 1);
  read_exact(client, &byte, 1);
  close(client);
  close(server);
  ok("memory_calls done");
  return 0;
}
