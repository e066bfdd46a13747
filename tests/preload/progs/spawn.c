// Child processes started without fork(): posix_spawn, posix_spawnp, system(), popen(),
// and vfork().
//
// glibc starts the child of posix_spawn (and of system() and popen(), which use it) with
// clone(CLONE_VM | CLONE_VFORK) and an exec inside glibc: no fork or exec hook runs. A
// connection the child inherits is then used by two processes at once, as after fork, so
// it must be on TCP before the child starts; one the child does not inherit (FD_CLOEXEC,
// and not the source of a dup2 file action) is the parent's alone and keeps its link.
//
// 1. inherited: posix_spawn of exec_child with the connection as an inherited descriptor;
//    exec_child reads a request and answers on it while the parent talks from the other
//    end. Before the library moved such connections, the request went into the shm ring
//    and the child, reading the kernel socket, waited for it for ever.
// 2. dup2 action: the connection is FD_CLOEXEC, and posix_spawnp hands it to the child by
//    posix_spawn_file_actions_adddup2 onto another number.
// 3. system(): a shell runs exec_child with the inherited descriptor.
// 4. not inherited: FD_CLOEXEC connections stay on their link across posix_spawnp,
//    system() and popen() (the child cannot reach them), and keep working.
// 5. vfork + exec: a FD_CLOEXEC connection stays on its link; an inherited one reaches the
//    exec'd program; so does one the child makes inheritable before its exec.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

extern char** environ;

static char g_child_path[4096];

// A connection whose link is up (one byte each way), client end `*c`, server end `*s`.
static void linked_pair(int* c, int* s) {
  tcp_pair(AF_INET, c, s);
  byte_both_ways(*c, *s, 0);
}

// The child (started by `how`) got the client end as descriptor `child_fd`: the parent
// sends it a request on the server end `s` and checks its answer.
static void talk_to_child(int s, int pid, const char* how, unsigned seed) {
  char buf[8192];
  fill_pattern(buf, 1500, seed, 0);
  write_all(s, buf, 1500);
  read_exact(s, buf, 2500);
  check_pattern(buf, 2500, seed + 100, 0, how);
  if (pid > 0) wait_child_ok(pid, how);
}

static void set_cloexec(int fd) { SYS(fcntl(fd, F_SETFD, FD_CLOEXEC)); }

static void child_argv(char* argv[7], char args[4][16], int fd, unsigned seed, const char* how) {
  snprintf(args[0], 16, "%d", fd);
  snprintf(args[1], 16, "%d", 1500);
  snprintf(args[2], 16, "%u", seed);
  snprintf(args[3], 16, "%d", 2500);
  argv[0] = "exec_child";
  argv[1] = args[0];
  argv[2] = args[1];
  argv[3] = args[2];
  argv[4] = args[3];
  argv[5] = (char*)how;
  argv[6] = NULL;
}

static void spawn_inherited(void) {
  int c, s;
  linked_pair(&c, &s);
  char args[4][16];
  char* argv[7];
  child_argv(argv, args, c, 30, "posix_spawn");
  int pid;
  CHECK(posix_spawn(&pid, g_child_path, NULL, NULL, argv, environ) == 0, "posix_spawn");
  talk_to_child(s, pid, "posix_spawn, inherited descriptor", 30);
  expect_transport(c, "tcp");
  const char* link = both_ends_link();
  if (strcmp(link, "tcp") != 0)  // shm words its reason its own way
    expect_log("fd=%d falls back to tcp (%s: %sposix_spawn)", c, link,
               strcmp(link, "shm") == 0 ? "moved to TCP: " : "");
  // The parent's copy still works after the child closed its own.
  byte_both_ways(c, s, 1);
  SYS(close(c));
  SYS(close(s));
  ok("posix_spawn: the child used the inherited connection, the parent's copy still works");
}

static void spawn_dup2_action(void) {
  int c, s;
  linked_pair(&c, &s);
  set_cloexec(c);
  enum { kChildFd = 77 };
  posix_spawn_file_actions_t actions;
  CHECK(posix_spawn_file_actions_init(&actions) == 0, "posix_spawn_file_actions_init");
  CHECK(posix_spawn_file_actions_adddup2(&actions, c, kChildFd) == 0, "adddup2");
  char args[4][16];
  char* argv[7];
  child_argv(argv, args, kChildFd, 40, "posix_spawnp");
  int pid;
  CHECK(posix_spawnp(&pid, "exec_child", &actions, NULL, argv, environ) == 0, "posix_spawnp");
  posix_spawn_file_actions_destroy(&actions);
  talk_to_child(s, pid, "posix_spawnp, dup2 file action", 40);
  expect_transport(c, "tcp");
  byte_both_ways(c, s, 2);
  SYS(close(c));
  SYS(close(s));
  ok("posix_spawnp: a FD_CLOEXEC connection handed over by a dup2 action reached the child");
}

static void system_inherited(void) {
  int c, s;
  linked_pair(&c, &s);
  char command[4200];
  snprintf(command, sizeof command, "exec '%s' %d 1500 50 2500 system", g_child_path, c);
  // system() returns only when the child has finished, so the request goes first; the
  // kernel's buffers hold it and the answer.
  char buf[8192];
  fill_pattern(buf, 1500, 50, 0);
  write_all(s, buf, 1500);
  const int status = system(command);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "system(): status 0x%x", status);
  read_exact(s, buf, 2500);
  check_pattern(buf, 2500, 150, 0, "system(), inherited descriptor");
  expect_transport(c, "tcp");
  byte_both_ways(c, s, 3);
  SYS(close(c));
  SYS(close(s));
  ok("system(): the shell's program used the inherited connection");
}

// A child that cannot reach the connection leaves it on its link.
static void not_inherited(void) {
  int c, s;
  linked_pair(&c, &s);
  set_cloexec(c);
  set_cloexec(s);
  const char* link = both_ends_link();
  char* argv[] = {"true", NULL};
  int pid;
  CHECK(posix_spawnp(&pid, "true", NULL, NULL, argv, environ) == 0, "posix_spawnp true");
  wait_child_ok(pid, "posix_spawnp true");
  CHECK(system("true") == 0, "system(\"true\")");
  FILE* p = popen("true", "r");
  CHECK(p && pclose(p) == 0, "popen(\"true\")");
  expect_transport(c, link);
  expect_transport(s, link);
  for (int i = 4; i < 8; i++) byte_both_ways(c, s, i);
  SYS(close(c));
  SYS(close(s));
  ok("FD_CLOEXEC connections stayed on %s across posix_spawnp, system() and popen()", link);
}

// vfork: the child may only exec or _exit, so only what the exec'd program inherits
// leaves the link. `how`: "kept" (FD_CLOEXEC, the child execs `true`), "inherited" (no
// FD_CLOEXEC: moved before the child starts), "made inheritable" (FD_CLOEXEC cleared in the
// child, as Python's pass_fds does: the child has the waiting parent move it at exec).
static void vfork_child_exec(const char* how) {
  int c, s;
  linked_pair(&c, &s);
  const char* link = both_ends_link();
  const int inherited = strcmp(how, "inherited") == 0, kept = strcmp(how, "kept") == 0;
  if (!inherited) set_cloexec(c);
  set_cloexec(s);
  char args[4][16];
  char* argv[7];
  child_argv(argv, args, c, 60, "vfork");
  fflush(stdout);
  const int pid = vfork();
  if (pid == 0) {
    if (kept) execlp("true", "true", (char*)NULL);
    if (!kept && !inherited && fcntl(c, F_SETFD, 0) != 0) _exit(126);
    if (!kept) execv(g_child_path, argv);
    _exit(127);
  }
  CHECK(pid > 0, "vfork");
  if (kept) {
    wait_child_ok(pid, "vfork + exec of true");
    expect_transport(c, link);
    expect_transport(s, link);
  } else {
    talk_to_child(s, pid, how, 60);
    expect_transport(c, "tcp");
    if (strcmp(link, "tcp") != 0)
      expect_log("fd=%d falls back to tcp (%s: %svfork%s)", c, link,
                 strcmp(link, "shm") == 0 ? "moved to TCP: " : "",
                 inherited ? "" : " (the exec'd program inherits it)");
  }
  for (int i = 10; i < 14; i++) byte_both_ways(c, s, i);
  SYS(close(c));
  SYS(close(s));
  ok("vfork, connection %s: %s", how,
     kept ? "stayed on its link" : "the exec'd program used it, the parent's copy works");
}

int main(void) {
  prog_init("spawn");
  sibling_program("exec_child", g_child_path, sizeof g_child_path);
  hang_guard(60, "spawn");

  not_inherited();
  spawn_inherited();
  spawn_dup2_action();
  system_inherited();
  vfork_child_exec("kept");
  vfork_child_exec("inherited");
  vfork_child_exec("made inheritable");
  return 0;
}
