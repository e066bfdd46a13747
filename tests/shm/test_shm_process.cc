// current_pid(): cached, and the cache does not survive into a forked child
// (shm/shm_process.hpp).
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include "shm_process.hpp"

using namespace fastsock::shm;

TEST_CASE("current_pid is this process's pid, also in a forked child") {
  REQUIRE(current_pid() == getpid());
  REQUIRE(current_pid() == getpid());  // now from the cache
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(current_pid() == getpid() ? 0 : 1);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 1: the child saw its parent's pid
  CHECK(current_pid() == getpid());
}
