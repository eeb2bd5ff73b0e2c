// RecyclingQueue: FIFO order across growth and wrap-around, popped elements' storage handed out
// again, and a drained burst's storage released.
#include "common/recycling_queue.hpp"

#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <vector>

namespace braid {
namespace {

struct Item {
  int value = 0;
  std::vector<int> payload;
};

TEST(RecyclingQueue, KeepsFifoOrderThroughGrowthAndWrapAround) {
  RecyclingQueue<Item> q;
  std::deque<int> model;  // what a plain FIFO holds
  std::mt19937 rng(7);
  int next = 0;
  for (int step = 0; step < 20000; ++step) {
    // Bursts of pushes (so the queue grows past its kept size) and of pops (so it drains).
    const bool pushing = (step / 500) % 2 == 0;
    const bool push = model.empty() || (pushing ? rng() % 4 != 0 : rng() % 4 == 0);
    if (push) {
      Item& it = q.push();
      it.value = next;
      it.payload.assign(static_cast<std::size_t>(next % 5), next);
      model.push_back(next++);
    } else {
      ASSERT_FALSE(q.empty());
      ASSERT_EQ(q.front().value, model.front());
      ASSERT_EQ(q.front().payload,
                std::vector<int>(static_cast<std::size_t>(model.front() % 5), model.front()));
      q.pop();
      model.pop_front();
    }
    ASSERT_EQ(q.size(), model.size());
    ASSERT_EQ(q.empty(), model.empty());
  }
}

TEST(RecyclingQueue, HandsOutPoppedStorageAgain) {
  RecyclingQueue<Item> q;
  q.push().payload.reserve(1000);
  q.pop();
  // One element in, one out: the same slot comes back with its capacity.
  for (int i = 0; i < 100; ++i) {
    Item& it = q.push();
    it.payload.clear();
    EXPECT_GE(it.payload.capacity(), 1000u) << i;
    q.pop();
  }
}

TEST(RecyclingQueue, ADrainedBurstReleasesItsStorage) {
  RecyclingQueue<Item> q;
  for (int i = 0; i < 1000; ++i) q.push().payload.assign(100, i);
  for (int i = 0; i < 1000; ++i) {
    ASSERT_EQ(q.front().payload.front(), i);
    q.pop();
  }
  EXPECT_TRUE(q.empty());
  // Back to the kept slots: at most a handful still hold storage from the burst.
  int holding = 0;
  for (int i = 0; i < 64; ++i) {
    if (q.push().payload.capacity() > 0) ++holding;
  }
  EXPECT_EQ(holding, 0);
  q.clear();
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.size(), 0u);
}

}  // namespace
}  // namespace braid
