// /proc/PID/stat parsing and process liveness (tools/fastsock/proc_info.hpp).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "proc_info.hpp"

using fastsock::tool::live_process_start_ticks;
using fastsock::tool::parse_proc_stat;

namespace {
// A /proc/PID/stat line with `comm` and start time 987654 (field 22).
std::string stat_line(const std::string& comm, char state = 'S') {
  return "42 (" + comm + ") " + state +
         " 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 200 "
         "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
}
}  // namespace

TEST_CASE("field 22 is found whatever the command name holds", "[tool][proc]") {
  for (std::string comm : {"sleep", "a b c", "x) (y", ")", "((", "name with ) 1 2 3"}) {
    auto st = parse_proc_stat(stat_line(comm));
    REQUIRE(st.has_value());
    CHECK(st->start_time_ticks == 987654);
    CHECK(st->state == 'S');
  }
}

TEST_CASE("malformed stat text is rejected", "[tool][proc]") {
  CHECK_FALSE(parse_proc_stat("").has_value());
  CHECK_FALSE(parse_proc_stat("42 (x) S 1 2 3").has_value());           // too short
  CHECK_FALSE(parse_proc_stat("42 no parenthesis S 1").has_value());
  std::string bad = stat_line("x");
  bad.replace(bad.find("987654"), 6, "98x654");
  CHECK_FALSE(parse_proc_stat(bad).has_value());
}

TEST_CASE("this process is alive, with the start time /proc reports", "[tool][proc]") {
  auto ticks = live_process_start_ticks(getpid());
  REQUIRE(ticks.has_value());
  CHECK(*ticks > 0);
  CHECK(live_process_start_ticks(getpid()) == ticks);
}

TEST_CASE("exited processes, zombies included, are not alive", "[tool][proc]") {
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  // Until reaped the child is a zombie: its stats file would already be stale.
  bool zombie = false;
  for (int i = 0; i < 2000 && !zombie; ++i) {
    zombie = !live_process_start_ticks(child).has_value();
    if (!zombie) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(zombie);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK_FALSE(live_process_start_ticks(child).has_value());
  CHECK_FALSE(live_process_start_ticks(0).has_value());
  CHECK_FALSE(live_process_start_ticks(-1).has_value());
}
