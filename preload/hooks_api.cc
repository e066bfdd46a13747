// The C API of include/fastsock/fastsock.h that the library itself implements.
#include "fastsock/fastsock.h"

#include <cerrno>

#include "fastsock_build_config.h"
#include "api.hpp"

const char* fastsock_version(void) { return FASTSOCK_VERSION; }

const char* fastsock_transport(int fd) {
  const char* name = fastsock::api::transport_of(fd);
  if (!name) errno = EBADF;
  return name;
}
