#include "env_config.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace fastsock::tool {

bool read_text_file(const std::string& path, std::string& out, std::string& error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    error = path + ": " + std::strerror(errno);
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = path + ": not a regular file";
    ::close(fd);
    return false;
  }
  out.clear();
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      error = path + ": " + std::strerror(errno);
      ::close(fd);
      return false;
    }
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return true;
}

Config config_from_environment() {
  std::string rules_text;
  std::string read_error;
  const char* rules_path = std::getenv("FASTSOCK_RULES");
  bool rules_ok = rules_path == nullptr || *rules_path == '\0' ||
                  read_text_file(rules_path, rules_text, read_error);
  Config config =
      config_from([](const char* name) -> const char* { return std::getenv(name); }, rules_text);
  if (!rules_ok && !config.pass_through_forced) {
    config.pass_through_forced = true;
    config.chain = {TransportId::tcp};
    config.error = "FASTSOCK_RULES: cannot read " + read_error;
  }
  return config;
}

}  // namespace fastsock::tool
