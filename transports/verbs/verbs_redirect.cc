// The redirect table of pre-forking servers: verbs_redirect.hpp.
#include "verbs_redirect.hpp"

#include <sys/mman.h>

#include <cstring>
#include <new>

#include "endpoint.hpp"
#include "verbs_cm.hpp"

namespace fastsock::verbs {

namespace {

bool same_key(const stats::Endpoint& local, const stats::Endpoint& peer, const TcpKey& key) noexcept {
  return same_endpoint(local, key.local) && same_endpoint(peer, key.peer);
}

}  // namespace

RedirectTable* RedirectTable::create(pid_t owner) noexcept {
  // MAP_SHARED anonymous memory: shared with the children forked later, zero-filled (every
  // entry free), and no file anyone else could open.
  void* p = mmap(nullptr, sizeof(RedirectTable), PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto* table = new (p) RedirectTable;
  table->owner_.store(owner, std::memory_order_release);
  return table;
}

void RedirectTable::destroy(RedirectTable* table) noexcept {
  if (table) munmap(table, sizeof(RedirectTable));
}

bool RedirectTable::publish(const TcpKey& key, uint16_t port, int64_t now_ns) noexcept {
  for (Entry& e : entries_) {
    uint32_t s = e.state.load(std::memory_order_acquire);
    // A published entry nobody took in time is free for another connection; its claim
    // (the CAS) decides between two children that both found it stale.
    const bool stale =
        s == kPublished && now_ns - e.published_ns.load(std::memory_order_relaxed) > kStaleNs;
    if (s != kFree && !stale) continue;
    if (!e.state.compare_exchange_strong(s, kWriting, std::memory_order_acquire)) continue;
    e.local = key.local;
    e.peer = key.peer;
    e.port = port;
    e.published_ns.store(now_ns, std::memory_order_relaxed);
    e.state.store(kPublished, std::memory_order_release);
    return true;
  }
  return false;
}

uint16_t RedirectTable::take(const TcpKey& key) noexcept {
  for (Entry& e : entries_) {
    uint32_t s = kPublished;
    if (e.state.load(std::memory_order_acquire) != kPublished) continue;
    if (!e.state.compare_exchange_strong(s, kTaking, std::memory_order_acquire)) continue;
    const bool match = same_key(e.local, e.peer, key);
    const uint16_t port = e.port;
    // Not ours: published again as it was (its time is unchanged).
    e.state.store(match ? kFree : kPublished, std::memory_order_release);
    if (match && port != 0) return port;
  }
  return 0;
}

}  // namespace fastsock::verbs
