// Runner of the rendezvous tests: Catch2's session, plus exit status 77 (meson's "skipped")
// when a case skipped itself (rendezvous_skip.hpp) and nothing failed. The privileged cases
// ([root], [netns]) run as their own meson tests, so a skip there never hides a pass.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "rendezvous_skip.hpp"

int main(int argc, char** argv) {
  const int failed = Catch::Session().run(argc, argv);
  if (failed == 0 && rvskip::skipped_count() > 0) return 77;
  return failed;
}
