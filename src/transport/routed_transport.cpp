#include "transport/routed_transport.hpp"

#include <braid/error.hpp>

#include "transport/engine.hpp"
#include "transport/lane_transport.hpp"
#include "transport/shm/shm_transport.hpp"

namespace braid::transport {

RoutedTransport::RoutedTransport(int rank, int size, std::vector<Leg> legs)
    : rank_(rank), size_(size), legs_(std::move(legs)) {
  route_.assign(static_cast<std::size_t>(size), nullptr);
  lane_.assign(static_cast<std::size_t>(size), 0);
  path_.assign(static_cast<std::size_t>(size), nullptr);
  for (Leg& leg : legs_) {
    if (leg.transport == nullptr || leg.transport->rank() != rank ||
        leg.transport->size() != size || leg.paths.size() != static_cast<std::size_t>(size))
      throw Error(ErrorCode::InvalidArgument,
                  "RoutedTransport: rank " + std::to_string(rank) +
                      ": every leg must be a transport of the same rank and size with a path "
                      "per peer");
    // Mismatch errors of a leg name operations the way this transport was told to.
    leg.transport->setTagDescriber([this](std::uint64_t tag) { return describeTag(tag); });
    leg.transport->setMismatchObserver(
        [this](int peer, std::uint64_t expected, std::uint64_t received) {
          noteMismatch(peer, expected, received);
        });
    // A view that numbers ranks as its shared transport does only forwards each call (with its
    // lane): route to the shared transport itself, one virtual call less per post and wait.
    auto* view = dynamic_cast<LaneTransport*>(leg.transport.get());
    Transport* target = view != nullptr ? &view->direct() : leg.transport.get();
    const std::uint64_t lane = view != nullptr && target != view ? view->lane() : 0;
    for (int p = 0; p < size; ++p) {
      const std::size_t i = static_cast<std::size_t>(p);
      if (p == rank || route_[i] != nullptr || leg.paths[i].empty()) continue;
      route_[i] = target;
      lane_[i] = lane;
      path_[i] = &leg.paths[i];
    }
  }
  for (int p = 0; p < size; ++p)
    if (p != rank && route_[static_cast<std::size_t>(p)] == nullptr)
      throw Error(ErrorCode::InvalidArgument, "RoutedTransport: rank " + std::to_string(rank) +
                                                  " has no transport to rank " + std::to_string(p));
}

// Legs go in reverse order of creation (each owns its own threads and memory).
RoutedTransport::~RoutedTransport() {
  while (!legs_.empty()) legs_.pop_back();
}

Transport& RoutedTransport::legOf(int peer, const char* op) const {
  if (peer < 0 || peer >= size_ || peer == rank_)
    engine::throwUnreachable(op, rank_, size_, peer, "", "");
  return *route_[static_cast<std::size_t>(peer)];
}

void RoutedTransport::postSend(int peer, const void* data, std::size_t bytes, std::uint64_t tag,
                               Request& req) {
  Transport& leg = legOf(peer, "postSend");
  req.viewPeer = peer;
  if (const std::uint64_t lane = lane_[static_cast<std::size_t>(peer)]; lane != 0)
    leg.postSendOnLane(lane, peer, data, bytes, tag, req);
  else
    leg.postSend(peer, data, bytes, tag, req);
}

void RoutedTransport::postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag,
                               Request& req) {
  Transport& leg = legOf(peer, "postRecv");
  req.viewPeer = peer;
  if (const std::uint64_t lane = lane_[static_cast<std::size_t>(peer)]; lane != 0)
    leg.postRecvOnLane(lane, peer, data, bytes, tag, req);
  else
    leg.postRecv(peer, data, bytes, tag, req);
}

bool RoutedTransport::test(Request& req) {
  const Request::State s = req.state.load(std::memory_order_acquire);
  if (s == Request::State::Idle || s == Request::State::Done) return true;
  return legOf(req.viewPeer, "test").test(req);
}

void RoutedTransport::wait(Request& req, Deadline deadline) {
  const Request::State s = req.state.load(std::memory_order_acquire);
  if (s == Request::State::Idle || s == Request::State::Done) return;
  legOf(req.viewPeer, "wait").wait(req, deadline);
}

std::string RoutedTransport::describePeer(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) return "rank " + std::to_string(peer);
  return route_[static_cast<std::size_t>(peer)]->describePeer(peer);
}

std::size_t RoutedTransport::connectionCount() const {
  std::size_t n = 0;
  for (const Leg& leg : legs_) n += leg.transport->connectionCount();
  return n;
}

bool RoutedTransport::peerLeft(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) return false;
  // route_ may point past an owner's view to the segment itself: ask the leg.
  for (const Leg& leg : legs_)
    if (!leg.paths[static_cast<std::size_t>(peer)].empty()) return leg.transport->peerLeft(peer);
  return false;
}

bool RoutedTransport::pipelinesLargeMessages(int peer) const {
  if (peer < 0 || peer >= size_ || peer == rank_) return false;
  for (const Leg& leg : legs_)
    if (!leg.paths[static_cast<std::size_t>(peer)].empty())
      return leg.transport->pipelinesLargeMessages(peer);
  return false;
}

void RoutedTransport::abort(const std::string& why) {
  for (Leg& leg : legs_) leg.transport->abort(why);
}

SharedMemoryGroup* RoutedTransport::sharedGroup() {
  return legs_.size() == 1 ? legs_.front().transport->sharedGroup() : nullptr;
}

namespace {

const ShmTransport* shmBase(const LaneTransport& view) {
  return dynamic_cast<const ShmTransport*>(view.base().get());
}

}  // namespace

const ShmTransport* RoutedTransport::sharedMemoryLeg() const {
  for (const Leg& leg : legs_) {
    if (const auto* shm = dynamic_cast<const ShmTransport*>(leg.transport.get())) return shm;
    if (const auto* view = dynamic_cast<const LaneTransport*>(leg.transport.get()))
      if (const ShmTransport* shm = shmBase(*view)) return shm;
  }
  return nullptr;
}

const LaneTransport* RoutedTransport::sharedMemoryView() const {
  for (const Leg& leg : legs_)
    if (const auto* view = dynamic_cast<const LaneTransport*>(leg.transport.get()))
      if (shmBase(*view) != nullptr) return view;
  return nullptr;
}

const LaneTransport* RoutedTransport::laneLeg() const {
  for (const Leg& leg : legs_)
    if (const auto* view = dynamic_cast<const LaneTransport*>(leg.transport.get()))
      if (shmBase(*view) == nullptr) return view;
  return nullptr;
}

std::string RoutedTransport::pathTo(int peer) const {
  if (peer < 0 || peer >= size_) return "";
  if (peer == rank_) return "self";
  return *path_[static_cast<std::size_t>(peer)];
}

}  // namespace braid::transport
