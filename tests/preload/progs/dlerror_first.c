// A program whose first realloc runs inside glibc's dlerror() (which formats its message
// with asprintf) must keep an intact heap under the library. The library's allocator hooks
// used to look up the next realloc with dlsym at that first call; a dlsym made inside
// dlerror frees the result object dlerror then writes into, and the corrupted free list
// crashed a later malloc or free (wrk did this at exit: preload/hooks_memory.cc). The bins
// are filled first, so that the corrupted block is not the last of its bin.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

enum { kSizes = 8, kPerSize = 4, kBlocks = 256 };

// Freed blocks of every small size class (volatile: the compiler drops a malloc/free pair).
static void fill_bins(void) {
  void* volatile blocks[kPerSize][kSizes];
  for (int n = 0; n < kPerSize; ++n)
    for (int k = 0; k < kSizes; ++k) blocks[n][k] = malloc(8 + 8 * (size_t)k);
  for (int n = 0; n < kPerSize; ++n)
    for (int k = 0; k < kSizes; ++k) free(blocks[n][k]);
}

int main(void) {
  prog_init("dlerror_first");
  fill_bins();
  for (int round = 0; round < 3; ++round) {
    CHECK(dlopen("libfastsock-test-no-such-library.so", RTLD_NOW) == NULL,
          "dlopen of a missing library succeeded");
    const char* err = dlerror();
    CHECK(err && strstr(err, "libfastsock-test-no-such-library.so"), "dlerror: %s",
          err ? err : "(null)");
    CHECK(dlerror() == NULL, "a second dlerror() still reports an error");
  }
  ok("dlerror after a failed dlopen, three times");
  void* blocks[kBlocks];
  for (int i = 0; i < kBlocks; ++i) {
    const size_t size = 8 + (size_t)(i % 64);
    blocks[i] = malloc(size);
    CHECK(blocks[i] != NULL, "malloc(%zu) failed", size);
    memset(blocks[i], 0x5a, size);
  }
  for (int i = 0; i < kBlocks; ++i) free(blocks[i]);
  ok("%d blocks of 8-71 bytes allocated, written and freed afterwards", kBlocks);
  return 0;
}
