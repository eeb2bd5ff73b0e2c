// libFuzzer target: the topology JSON reader (src/topology/json.cpp, topology_json.cpp), which
// reads files named by BRAID_TOPO_FILE and the PeerInfo every rank publishes through the store.
// Any input must either parse or fail with braid::Error; what parses must write back to text
// that parses to the same text again, and a topology that loads must dump and reload equal.
#include <braid/error.hpp>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "topology/json.hpp"
#include "topology/topology_json.hpp"

namespace topo = braid::topology;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const topo::json::Value v = topo::json::parse(text, "fuzz");
    const std::string once = topo::json::write(v);
    check(topo::json::write(topo::json::parse(once, "again")) == once);
  } catch (const braid::Error&) {
  }
  try {
    const topo::Topology t = topo::fromJson(text, "fuzz");
    const std::string dumped = topo::toJson(t);
    const topo::Topology u = topo::fromJson(dumped, "dump");
    check(u.size() == t.size() && u.numNodes() == t.numNodes());
    check(topo::toJson(u) == dumped);
  } catch (const braid::Error&) {
  }
  return 0;
}
