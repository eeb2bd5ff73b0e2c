// Several TCP streams per peer (BRAID_SOCKET_NTHREADS x BRAID_NSOCKS_PERTHREAD): one TCP stream
// cannot fill a fast NIC, so large messages are cut into one piece per stream.
//
// A StripedTransport runs over K complete transports of the same ranks (the streams), each with
// its own sockets, lock, epoll set and progress thread, so the K pieces of a message move in
// parallel: while the caller waits on one piece (and drives its stream), the other streams'
// background threads drive theirs.
//   - A message of fewer than stripeMinBytes bytes goes whole over stream 0.
//   - A message of at least stripeMinBytes bytes is cut into K balanced pieces (the first
//     bytes % K pieces one byte longer), piece i sent as an ordinary message with the same tag
//     over stream i. The receiver cuts its posted receive the same way (both sides know the
//     size), so piece i meets piece i.
// Ordering and matching stay exact: every stream keeps posting order, and both sides post the
// same sequence of pieces on every stream (stream 0 carries the small messages and piece 0 of
// every large one; stream i > 0 piece i of every large one). A size that differs between sender
// and receiver changes some piece's size (or whether the message is striped at all), so the
// piece's stream fails it with Error(Mismatch); a tag that differs fails piece 0 on stream 0.
// Failure: any failure of a stream (a connection lost or failed, a timeout, an abort), seen by a
// request or only by the stream's own progress thread, aborts every stream with that error's
// text (StreamFailures), so this rank's peers see it lost on every stream at once and no piece
// is left waiting; requests then throw the first error.
#pragma once

#include <braid/error.hpp>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "transport/transport.hpp"

namespace braid::transport::tcp {

/// The most streams per peer.
inline constexpr int kMaxStreams = 16;

/// Where the streams report their failures (a connection lost or failed, the transport timed
/// out or aborted): report() may be called on any thread with a stream's lock held, so it only
/// records the first error and wakes the striped transport's watcher thread, which then aborts
/// every stream with that error's text. So a stream that breaks fails the whole transport even
/// while the caller waits on another stream.
class StreamFailures {
 public:
  void report(const Error& error) {
    std::lock_guard<std::mutex> lk(mu_);
    if (first_) return;
    first_ = error;
    cv_.notify_all();
  }
  /// The first error reported, if any.
  std::optional<Error> first() {
    std::lock_guard<std::mutex> lk(mu_);
    return first_;
  }
  /// Blocks until an error was reported (returns it) or stop() was called (nullopt).
  std::optional<Error> waitFirst() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return first_.has_value() || stopping_; });
    return stopping_ ? std::nullopt : first_;
  }
  void stop() {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Error> first_;
  bool stopping_ = false;
};

/// `streams` (2..kMaxStreams transports of rank `rank` in a world of `size`, connected in the
/// same order on every rank, reporting their failures to `failures`) behind one Transport.
/// Throws Error(InvalidArgument) otherwise or for stripeMinBytes == 0.
std::unique_ptr<Transport> createStripedTransport(int rank, int size,
                                                  std::vector<std::unique_ptr<Transport>> streams,
                                                  std::size_t stripeMinBytes,
                                                  std::shared_ptr<StreamFailures> failures);

}  // namespace braid::transport::tcp
