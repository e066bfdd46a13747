#include "verbs_lib.hpp"

#include <dlfcn.h>

#include <mutex>

#include "guard.hpp"

namespace fastsock::verbs {

namespace {

struct Loaded {
  Lib lib{};
  const char* why = nullptr;  // null: loaded
};

Loaded load() noexcept {
  ReentryGuard guard;  // the libraries' own initialisers open files and sockets
  Loaded out;
  // RTLD_LOCAL: the application's own use of rdma-core (if any) is not affected.
  void* verbs = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!verbs) {
    out.why = "libibverbs.so.1 is not installed";
    return out;
  }
  void* cm = dlopen("librdmacm.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!cm) {
    out.why = "librdmacm.so.1 is not installed";
    return out;
  }
#define FASTSOCK_VERBS_RESOLVE(handle, name)                                 \
  out.lib.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name)); \
  if (!out.lib.name) {                                                       \
    out.why = "rdma-core lacks " #name;                                      \
    return out;                                                              \
  }
#define FASTSOCK_VERBS_RESOLVE_VERBS(name) FASTSOCK_VERBS_RESOLVE(verbs, name)
#define FASTSOCK_VERBS_RESOLVE_CM(name) FASTSOCK_VERBS_RESOLVE(cm, name)
  FASTSOCK_VERBS_FUNCTIONS(FASTSOCK_VERBS_RESOLVE_VERBS)
  FASTSOCK_RDMACM_FUNCTIONS(FASTSOCK_VERBS_RESOLVE_CM)
#undef FASTSOCK_VERBS_RESOLVE_CM
#undef FASTSOCK_VERBS_RESOLVE_VERBS
#undef FASTSOCK_VERBS_RESOLVE
  return out;
}

}  // namespace

const Lib* lib(const char** why) noexcept {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (loaded.why) {
    if (why) *why = loaded.why;
    return nullptr;
  }
  return &loaded.lib;
}

}  // namespace fastsock::verbs
