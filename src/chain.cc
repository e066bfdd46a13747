#include "chain.hpp"

#include <cstdio>
#include <cstring>
#include <algorithm>
#include <string_view>

#include "config_load.hpp"
#include "endpoint.hpp"
#include "transport.hpp"

namespace fastsock {

namespace {

// Appends `text` at out[used], truncating, always NUL-terminated. Plain copies rather than
// snprintf: this runs for every connection, and formatting dominated the cost of connect.
void append(char* out, size_t len, size_t& used, std::string_view text) noexcept {
  if (used + 1 >= len) return;
  const size_t n = std::min(text.size(), len - 1 - used);
  memcpy(out + used, text.data(), n);
  used += n;
  out[used] = '\0';
}

// Appends "name: why" to the reasons list, separated by "; ".
void add_reason(char* out, size_t len, size_t& used, TransportId id, const char* why) noexcept {
  if (used) append(out, len, used, "; ");
  append(out, len, used, transport_name(id));
  append(out, len, used, ": ");
  append(out, len, used, why);
}

bool is_registered(TransportId id) noexcept { return find_transport(id) != nullptr; }

struct AttachContext {
  Socket* socket;
  Side side;
  Socket* listener;
};

bool try_attach(void* context, TransportId id, char* why, size_t why_len) noexcept {
  auto& ctx = *static_cast<AttachContext*>(context);
  const TransportEntry* entry = find_transport(id);
  Probe probe = entry->probe();
  if (!probe.available) {
    snprintf(why, why_len, "%s", probe.brief[0] ? probe.brief : probe.reason);
    return false;
  }
  return entry->instance().attach(*ctx.socket, ctx.side, ctx.listener, why, why_len) == 0;
}

}  // namespace

TransportId walk_chain(const ChainInputs& in, char* reasons, size_t reasons_len) noexcept {
  size_t used = 0;
  reasons[0] = '\0';
  const Config& cfg = *in.config;
  const Rule* rule = in.rule_address
                         ? match_rule(cfg.rules, in.program, in.direction, in.rule_address)
                         : nullptr;
  for (TransportId id : cfg.chain) {
    if (id == TransportId::tcp) break;
    char why[96];
    if (rule && !(rule->allowed & bit(id))) {
      snprintf(why, sizeof why, "excluded by rule on line %d", rule->line);
    } else if (!in.registered(id)) {
      add_reason(reasons, reasons_len, used, id, "not built");
      continue;
    } else if (in.attach(in.context, id, why, sizeof why)) {
      return id;
    }
    add_reason(reasons, reasons_len, used, id, why);
  }
  if (cfg.pass_through_forced) {
    // One reason covers every link: the configuration was rejected (see the log).
    used = 0;
    append(reasons, reasons_len, used, "configuration error: pass-through");
    return TransportId::tcp;
  }
  // Links left out of the chain are reasons too: "not accelerated" must always say why.
  const TransportMask configured = mask_of(cfg.chain);
  for (int i = 0; i < kTransportCount; ++i) {
    const auto id = TransportId(i);
    if (id != TransportId::tcp && !(configured & bit(id)))
      add_reason(reasons, reasons_len, used, id, "not in FASTSOCK_TRANSPORTS");
  }
  return TransportId::tcp;
}

namespace {

// With no rules, and no link of the chain able to attach (none is built, or none is
// available on this host), every connection gets the same decision: tcp, for the same
// reasons. It is worked out once and copied, because connection setup is a hot path too.
struct StaticDecision {
  bool valid = false;
  char reasons[sizeof(stats::Slot::reason)] = {};
  size_t reasons_size = 0;  // with the terminating NUL: only that much is copied
};

bool note_attempt(void* attempted, TransportId, char* why, size_t why_len) noexcept {
  *static_cast<bool*>(attempted) = true;
  if (why_len) why[0] = '\0';  // walk_chain appends it as a reason (thrown away here)
  return false;
}

const StaticDecision& static_decision() noexcept {
  static const StaticDecision decision = [] {
    StaticDecision d;
    const Config& cfg = config();
    if (!cfg.rules.empty()) return d;
    bool attempted = false;
    ChainInputs in{&cfg, program_name(), Direction::any, nullptr, is_registered,
                   note_attempt, &attempted};
    // A link that is asked to attach decides per connection: then nothing is cached.
    d.valid = walk_chain(in, d.reasons, sizeof d.reasons) == TransportId::tcp && !attempted;
    d.reasons_size = strnlen(d.reasons, sizeof d.reasons - 1) + 1;
    return d;
  }();
  return decision;
}

}  // namespace

bool links_may_attach() noexcept { return !static_decision().valid; }

void prepare_links(Socket& s, const sockaddr* dst, socklen_t len) noexcept {
  if (static_decision().valid) return;  // no link of the chain can attach: nothing to prepare
  const Config& cfg = config();
  const Rule* rule = match_rule(cfg.rules, program_name(), Direction::client, dst);
  bool first = true;
  for (TransportId id : cfg.chain) {
    if (id == TransportId::tcp) break;
    if (rule && !(rule->allowed & bit(id))) continue;
    const TransportEntry* entry = find_transport(id);
    if (!entry || !entry->probe().available) continue;
    entry->instance().prepare_connect(s, dst, len, first);
    first = false;
  }
}

void choose_link(Socket& s, Side side, Socket* listener) noexcept {
  stats::Slot& slot = *s.slot;
  if (const StaticDecision& d = static_decision(); d.valid) {
    memcpy(slot.reason, d.reasons, d.reasons_size);
    slot.transport = uint8_t(TransportId::tcp);
    s.link = &find_transport(TransportId::tcp)->instance();
    s.user_io.store(false, std::memory_order_relaxed);
    return;
  }
  sockaddr_storage rule_addr;
  const stats::Endpoint& ep = side == Side::client ? slot.peer : slot.local;
  socklen_t len = sockaddr_from(ep, rule_addr);
  AttachContext ctx{&s, side, listener};
  ChainInputs in{&config(), program_name(),
                 side == Side::client ? Direction::client : Direction::server,
                 len ? reinterpret_cast<const sockaddr*>(&rule_addr) : nullptr, is_registered,
                 try_attach, &ctx};
  TransportId id = walk_chain(in, slot.reason, sizeof slot.reason);
  s.link = &find_transport(id)->instance();
  slot.transport = uint8_t(s.link->carries_at_attach() ? id : TransportId::tcp);
  s.user_io.store(!s.link->kernel_carries_data(), std::memory_order_relaxed);
}

}  // namespace fastsock
