#include "config_load.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <mutex>
#include <new>
#include <string>

#include "guard.hpp"
#include "log.hpp"
#include "real.hpp"

namespace fastsock {

namespace {

constexpr size_t kMaxRulesFile = 1 << 20;

// The rules file: up to 1 MiB, read with the real entry points (our hooks stay out).
bool read_rules_file(const char* path, std::string& out, std::string& error) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    error = std::string("FASTSOCK_RULES: cannot open '") + path + "': " + strerrordesc_np(errno);
    return false;
  }
  char buf[8192];
  for (;;) {
    ssize_t n = real().read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = std::string("FASTSOCK_RULES: cannot read '") + path + "': " + strerrordesc_np(errno);
      real().close(fd);
      return false;
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
    if (out.size() > kMaxRulesFile) {
      error = std::string("FASTSOCK_RULES: '") + path + "' is larger than 1 MiB";
      real().close(fd);
      return false;
    }
  }
  real().close(fd);
  return true;
}

// secure_getenv: in a setuid/setgid program the environment belongs to another user, who
// must not choose which file the library appends its log to or reads rules from.
const char* lookup_env(const char* name) { return secure_getenv(name); }

Config* load() noexcept {
  ReentryGuard guard;
  static Config* cfg = nullptr;
  try {
    std::string rules_text;
    std::string file_error;
    // secure_getenv: a setuid program must not be steered into reading arbitrary files.
    const char* rules_path = secure_getenv("FASTSOCK_RULES");
    bool file_ok = !(rules_path && *rules_path) || read_rules_file(rules_path, rules_text, file_error);
    cfg = new Config(config_from(&lookup_env, rules_text));
    if (!file_ok && !cfg->pass_through_forced) {
      cfg->pass_through_forced = true;
      cfg->chain = {TransportId::tcp};
      cfg->error = file_error;
    }
  } catch (...) {
    // Out of memory while parsing: the built-in pass-through config needs no allocation
    // beyond this one, which is tiny.
    static Config fallback;
    fallback.chain.clear();  // the chain always ends with tcp, even when empty
    fallback.pass_through_forced = true;
    cfg = &fallback;
  }
  log_configure(*cfg);
  if (cfg->pass_through_forced)
    LOG_ERROR("%s; running in pass-through: every connection stays on kernel TCP",
              cfg->error.empty() ? "out of memory while loading the configuration"
                                 : cfg->error.c_str());
  return cfg;
}

std::once_flag g_once;
std::atomic<Config*> g_config{nullptr};

}  // namespace

const Config& config() noexcept {
  // Every connection asks; after the first load this is one acquire load.
  if (Config* cfg = g_config.load(std::memory_order_acquire)) [[likely]] return *cfg;
  std::call_once(g_once, [] { g_config.store(load(), std::memory_order_release); });
  return *g_config.load(std::memory_order_acquire);
}

const char* program_name() noexcept { return program_invocation_short_name; }

}  // namespace fastsock
