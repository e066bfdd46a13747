#include "array_io.hpp"

#include <dlfcn.h>
#include <endian.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

// The shim, not the library: fastsock-pipe must run under any preload library or none.
#define FASTSOCK_DYNAMIC
#include "fastsock/fastsock.h"
#include "net.hpp"

namespace fastsock_pipe {
namespace {

int fastsock_type_of(ElementType t) {
  switch (t) {
    case ElementType::byte: return FASTSOCK_BYTE;
    case ElementType::int32: return FASTSOCK_INT32;
    case ElementType::float64: return FASTSOCK_DOUBLE;
  }
  return FASTSOCK_BYTE;
}

bool library_typed_entry_points() {
  // The same lookup the shim makes on its first call of each entry point.
  return dlsym(RTLD_DEFAULT, "fastsock_send_array") != nullptr &&
         dlsym(RTLD_DEFAULT, "fastsock_recv_array") != nullptr;
}

// Network (big-endian) order <-> native, element by element, between distinct buffers.
// The same function converts both ways: the swap (or copy on a big-endian host) is its own
// inverse.
void convert_order(uint8_t* dst, const uint8_t* src, std::size_t bytes, ElementType t) {
  if (t == ElementType::int32) {
    for (std::size_t i = 0; i < bytes; i += 4) {
      uint32_t v;
      std::memcpy(&v, src + i, 4);
      v = htobe32(v);
      std::memcpy(dst + i, &v, 4);
    }
  } else if (t == ElementType::float64) {
    for (std::size_t i = 0; i < bytes; i += 8) {
      uint64_t v;
      std::memcpy(&v, src + i, 8);
      v = htobe64(v);
      std::memcpy(dst + i, &v, 8);
    }
  } else {
    std::memcpy(dst, src, bytes);
  }
}

bool typed_failed(const char* call) {
  std::fprintf(stderr, "fastsock-pipe: %s: %s\n", call, std::strerror(errno));
  return false;
}

}  // namespace

bool parse_array_api(std::string_view s, ArrayApi& out) {
  if (s == "typed") out = ArrayApi::typed;
  else if (s == "plain") out = ArrayApi::plain;
  else if (s == "portable") out = ArrayApi::portable;
  else return false;
  return true;
}

const char* array_api_name(ArrayApi a) {
  switch (a) {
    case ArrayApi::typed: return "typed";
    case ArrayApi::plain: return "plain";
    case ArrayApi::portable: return "portable";
  }
  return "?";
}

const char* array_path_name(ArrayPath p) {
  switch (p) {
    case ArrayPath::plain: return "plain";
    case ArrayPath::library: return "library";
    case ArrayPath::shim: return "shim";
    case ArrayPath::portable: return "portable";
  }
  return "?";
}

const char* array_path_description(ArrayPath p) {
  switch (p) {
    case ArrayPath::plain: return "plain send/recv";
    case ArrayPath::library: return "typed API, libfastsock's entry points";
    case ArrayPath::shim: return "typed API, no library: the shim's plain sendmsg/recvmsg loops";
    case ArrayPath::portable: return "portable: big-endian staging copy, send/recv";
  }
  return "?";
}

ArrayPath array_path(ElementType t, ArrayApi api) {
  if (t == ElementType::byte || api == ArrayApi::plain) return ArrayPath::plain;
  if (api == ArrayApi::portable) return ArrayPath::portable;
  return library_typed_entry_points() ? ArrayPath::library : ArrayPath::shim;
}

std::string fd_transport(int fd) {
  const char* name = fastsock_transport(fd);
  return name ? name : "";
}

bool send_array_message(int fd, ArrayPath path, ElementType t, const uint8_t* buf,
                        std::size_t bytes, uint8_t* staging) {
  switch (path) {
    case ArrayPath::library:
    case ArrayPath::shim:
      return fastsock_send_array(fd, buf, fastsock_type_of(t), 0, bytes / element_size(t)) == 0 ||
             typed_failed("fastsock_send_array");
    case ArrayPath::portable:
      convert_order(staging, buf, bytes, t);
      return send_all(fd, staging, bytes);
    case ArrayPath::plain:
      break;
  }
  return send_all(fd, buf, bytes);
}

bool recv_array_message(int fd, ArrayPath path, ElementType t, uint8_t* buf, std::size_t bytes,
                        uint8_t* staging) {
  switch (path) {
    case ArrayPath::library:
    case ArrayPath::shim:
      return fastsock_recv_array(fd, buf, fastsock_type_of(t), 0, bytes / element_size(t)) == 0 ||
             typed_failed("fastsock_recv_array");
    case ArrayPath::portable:
      if (!recv_all(fd, staging, bytes)) return false;
      convert_order(buf, staging, bytes, t);
      return true;
    case ArrayPath::plain:
      break;
  }
  return recv_all(fd, buf, bytes);
}

}  // namespace fastsock_pipe
