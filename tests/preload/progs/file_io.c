// Zero-copy paths between files, pipes and a TCP socket: sendfile and sendfile64 (both
// symbols: _FILE_OFFSET_BITS is undefined here for the same reason as in nonblock.c),
// splice file -> pipe -> socket, and splice socket -> pipe -> file. The peer checks every
// byte; the log's sent=/received= counts must include the bytes these calls moved.
#undef _FILE_OFFSET_BITS
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"

enum { kFileSize = 300000, kSeed = 12 };

static int temp_file(void) {
  const char* dir = getenv("TMPDIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/fastsock-file_io.XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = (int)SYS(mkstemp(path));
  SYS(unlink(path));
  return fd;
}

static void receive_and_check(int s, size_t len, size_t file_offset, const char* what) {
  static char buf[kFileSize];
  read_exact(s, buf, len);
  check_pattern(buf, len, kSeed, file_offset, what);
}

int main(void) {
  prog_init("file_io");
  int file = temp_file();
  static char content[kFileSize];
  fill_pattern(content, sizeof content, kSeed, 0);
  write_all(file, content, sizeof content);

  int c, s;
  tcp_pair(AF_INET, &c, &s);
  expect_client_log(c);
  expect_server_log(s);
  size_t c_sent = 0, c_received = 0, s_sent = 0, s_received = 0;

  // sendfile with an explicit offset: [1000, 61000); the file position is not moved.
  off_t off = 1000;
  size_t len = 60000;  // each step stays well below the socket buffers: nobody reads yet
  SYS(lseek(file, 5, SEEK_SET));
  while ((size_t)(off - 1000) < len) {
    ssize_t n = sendfile(c, file, &off, len - (size_t)(off - 1000));
    CHECK(n > 0, "sendfile returned %zd", n);
  }
  CHECK(lseek(file, 0, SEEK_CUR) == 5, "sendfile with an offset moved the file position");
  receive_and_check(s, len, 1000, "sendfile data");
  c_sent += len;
  s_received += len;
  ok("sendfile: %zu bytes from offset 1000 intact; file position untouched", len);

  // sendfile64 with a NULL offset: from the file position (5), which it advances.
  len = 30000;
  size_t done = 0;
  while (done < len) {
    ssize_t n = sendfile64(c, file, NULL, len - done);
    CHECK(n > 0, "sendfile64 returned %zd", n);
    done += (size_t)n;
  }
  CHECK(lseek(file, 0, SEEK_CUR) == (off_t)(5 + len), "sendfile64 did not advance position");
  receive_and_check(s, len, 5, "sendfile64 data");
  c_sent += len;
  s_received += len;
  ok("sendfile64: %zu bytes from the file position intact; position advanced", len);

  // splice file -> pipe -> socket.
  int p[2];
  SYS(pipe(p));
  loff_t foff = 100;
  len = 50000;
  done = 0;
  while (done < len) {
    ssize_t in = splice(file, &foff, p[1], NULL, len - done, SPLICE_F_MOVE);
    CHECK(in > 0, "splice file->pipe returned %zd", in);
    ssize_t moved = 0;
    while (moved < in) {
      ssize_t out = splice(p[0], NULL, c, NULL, (size_t)(in - moved), SPLICE_F_MOVE);
      CHECK(out > 0, "splice pipe->socket returned %zd", out);
      moved += out;
    }
    done += (size_t)in;
  }
  receive_and_check(s, len, 100, "splice file->socket data");
  c_sent += len;
  s_received += len;
  ok("splice file -> pipe -> socket: %zu bytes intact", len);

  // splice socket -> pipe -> file, the other way.
  len = 40000;
  write_all(s, content + 7, len);
  s_sent += len;
  int out_file = temp_file();
  done = 0;
  while (done < len) {
    ssize_t in = splice(c, NULL, p[1], NULL, len - done, SPLICE_F_MOVE);
    CHECK(in > 0, "splice socket->pipe returned %zd", in);
    ssize_t moved = 0;
    while (moved < in) {
      ssize_t out = splice(p[0], NULL, out_file, NULL, (size_t)(in - moved), SPLICE_F_MOVE);
      CHECK(out > 0, "splice pipe->file returned %zd", out);
      moved += out;
    }
    done += (size_t)in;
  }
  c_received += len;
  static char back[kFileSize];
  SYS(lseek(out_file, 0, SEEK_SET));
  read_exact(out_file, back, len);
  check_pattern(back, len, kSeed, 7, "splice socket->file data");
  ok("splice socket -> pipe -> file: %zu bytes intact", len);

  expect_closed_log(c, c_sent, c_received);
  expect_closed_log(s, s_sent, s_received);
  SYS(close(c));
  SYS(close(s));
  SYS(close(p[0]));
  SYS(close(p[1]));
  SYS(close(file));
  SYS(close(out_file));
  return 0;
}
