// A transport wrapper that counts what one rank sends and receives, by link class (taken from a
// topology, which may be fabricated: 64 "hosts" of threads). Tests use it to assert the
// communication volume of every algorithm; it forwards every call unchanged.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "topology/topology.hpp"
#include "transport/transport.hpp"

namespace braid::topology {

struct Traffic {
  std::array<std::uint64_t, kLinkClasses> bytesSent{};
  std::array<std::uint64_t, kLinkClasses> messagesSent{};
  std::array<std::uint64_t, kLinkClasses> bytesReceived{};
  std::array<std::uint64_t, kLinkClasses> messagesReceived{};
  std::uint64_t sent(LinkClass c) const noexcept { return bytesSent[static_cast<int>(c)]; }
  std::uint64_t received(LinkClass c) const noexcept { return bytesReceived[static_cast<int>(c)]; }
  std::uint64_t totalSent() const noexcept;
  std::uint64_t totalMessagesSent() const noexcept;
};

/// Counts at post time (a message counts once posted, whatever becomes of it). The rank and
/// size of `inner` must match the topology's. Not thread-safe beyond what `inner` is: like every
/// transport, one collective at a time.
class TrafficCountingTransport final : public transport::Transport {
 public:
  /// `inner` and `topo` must outlive this object.
  TrafficCountingTransport(transport::Transport& inner, const Topology& topo);

  const Traffic& traffic() const noexcept { return traffic_; }
  void reset() noexcept { traffic_ = Traffic{}; }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                transport::Request& req) override;
  void postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag,
                transport::Request& req) override;
  bool test(transport::Request& req) override { return inner_.test(req); }
  void wait(transport::Request& req, transport::Deadline deadline) override {
    inner_.wait(req, deadline);
  }
  std::string describePeer(int peer) const override { return inner_.describePeer(peer); }
  void abort(const std::string& why) override { inner_.abort(why); }
  transport::SharedMemoryGroup* sharedGroup() override { return inner_.sharedGroup(); }

 private:
  transport::Transport& inner_;
  const Topology& topo_;
  Traffic traffic_;
};

}  // namespace braid::topology
