#include "protocol.hpp"

#include <endian.h>

namespace fastsock_pipe {

void to_wire(SizeRequest& r) {
  r.magic = htobe32(r.magic);
  r.version = htobe32(r.version);
  r.command = htobe32(r.command);
  r.mode = htobe32(r.mode);
  r.bytes = htobe64(r.bytes);
  r.repeats = htobe64(r.repeats);
  r.pool_bytes = htobe64(r.pool_bytes);
  r.warmup = htobe32(r.warmup);
  r.trials = htobe32(r.trials);
  r.flags = htobe32(r.flags);
  r.element = htobe32(r.element);
}

void from_wire(SizeRequest& r) {
  r.magic = be32toh(r.magic);
  r.version = be32toh(r.version);
  r.command = be32toh(r.command);
  r.mode = be32toh(r.mode);
  r.bytes = be64toh(r.bytes);
  r.repeats = be64toh(r.repeats);
  r.pool_bytes = be64toh(r.pool_bytes);
  r.warmup = be32toh(r.warmup);
  r.trials = be32toh(r.trials);
  r.flags = be32toh(r.flags);
  r.element = be32toh(r.element);
}

void to_wire(SizeReply& r) {
  r.errors = htobe64(r.errors);
  r.first_bad_offset = htobe64(r.first_bad_offset);
  r.array_path = htobe32(r.array_path);
}

void from_wire(SizeReply& r) {
  r.errors = be64toh(r.errors);
  r.first_bad_offset = be64toh(r.first_bad_offset);
  r.array_path = be32toh(r.array_path);
}

}  // namespace fastsock_pipe
