// Sub-communicators (split, subgroup), several communicators running concurrently in one
// process, communicators created asynchronously, and async operations issued back to back.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "harness/checks.hpp"
#include "harness/ranks.hpp"
#include "store/memory_store.hpp"

namespace braid::test {
namespace {

TEST(SubComm, SplitByColorOrdersByKeyThenRank) {
  for (int n : {1, 2, 3, 5, 8}) {
    runThreads(n, testOptions(), [](Comm& c) {
      // Two colors (even/odd ranks), keys reversed: new rank order is descending old rank.
      auto sub = c.split(c.rank() % 2, -c.rank());
      ASSERT_NE(sub, nullptr);
      const int members = (c.size() + 1 - c.rank() % 2) / 2;
      EXPECT_EQ(sub->size(), members);
      // Sum of old ranks within the color, computed through the sub-communicator.
      std::int64_t mine = c.rank(), sum = 0;
      sub->allreduce(&mine, &sum, 1, DataType::Int64, ReduceOp::Sum);
      std::int64_t expect = 0;
      for (int r = c.rank() % 2; r < c.size(); r += 2) expect += r;
      EXPECT_EQ(sum, expect);
      // Rank order: the highest old rank of the color is new rank 0.
      std::vector<std::int64_t> order(sub->size());
      sub->allgather(&mine, order.data(), 1, DataType::Int64);
      for (std::size_t i = 1; i < order.size(); ++i) EXPECT_GT(order[i - 1], order[i]);
      // The parent keeps working, interleaved with the child.
      sweepCollectives(*sub, std::vector<std::size_t>{0, 7});
      c.barrier();
    });
  }
}

TEST(SubComm, UndefinedColorGetsNoCommunicator) {
  runThreads(4, testOptions(), [](Comm& c) {
    auto sub = c.split(c.rank() == 3 ? kUndefinedColor : 0, 0);
    EXPECT_EQ(sub == nullptr, c.rank() == 3);
    if (sub) {
      EXPECT_EQ(sub->size(), 3);
      sub->barrier();
    }
  });
}

TEST(SubComm, SubgroupAndNestedSplits) {
  runThreads(5, testOptions(), [](Comm& c) {
    std::vector<int> members = {4, 0, 2};
    auto g = c.subgroup(members);
    if (c.rank() == 1 || c.rank() == 3) {
      EXPECT_EQ(g, nullptr);
    } else {
      ASSERT_NE(g, nullptr);
      EXPECT_EQ(g->size(), 3);
      // Position in the list is the new rank.
      EXPECT_EQ(g->rank(), c.rank() == 4 ? 0 : c.rank() == 0 ? 1 : 2);
      auto nested = g->split(g->rank() == 0 ? 0 : 1, 0);
      ASSERT_NE(nested, nullptr);
      int one = 1, total = 0;
      nested->allreduce(&one, &total, 1, DataType::Int32, ReduceOp::Sum);
      EXPECT_EQ(total, g->rank() == 0 ? 1 : 2);
    }
    c.barrier();
  });
}

TEST(Concurrency, SeveralCommunicatorsRunConcurrentlyInOneProcess) {
  // Two independent worlds of 3 ranks each, all six threads in this process at once.
  std::thread other([] {
    runThreads(3, testOptions(),
               [](Comm& c) { sweepCollectives(c, std::vector<std::size_t>{13}); });
  });
  runThreads(3, testOptions("ring"),
             [](Comm& c) { sweepCollectives(c, std::vector<std::size_t>{13}); });
  other.join();
}

TEST(Concurrency, TwoCommunicatorsOfOneRankUsedFromTwoThreads) {
  runThreads(3, testOptions(), [](Comm& c) {
    auto dup = c.split(0, c.rank());
    std::thread t([&] { sweepCollectives(*dup, std::vector<std::size_t>{7}); });
    sweepCollectives(c, std::vector<std::size_t>{7});
    t.join();
  });
}

// Comm::createAsync: two world communicators in flight at once on every rank, collected in the
// opposite order, after other work; each gets the id of its call's position and works.
TEST(CreateAsync, CommunicatorsInFlightTogetherAreNumberedInCallOrderAndWork) {
  for (int n : {1, 3, 4}) {
    auto store = std::make_shared<MemoryStore>();
    std::vector<std::string> errors(n);
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r)
      ranks.emplace_back([&, r] {
        try {
          auto first = Comm::createAsync(store, r, n, testOptions());
          auto second = Comm::createAsync(store, r, n, testOptions());
          double work = 0;  // start-up work that overlaps the creations
          for (int i = 1; i < 100000; ++i) work += 1.0 / i;
          std::unique_ptr<Comm> b = second.get();
          std::unique_ptr<Comm> a = first.get();
          if (a->id() != "0" || b->id() != "1" || a->rank() != r || b->size() != n)
            throw std::runtime_error("ids " + a->id() + "," + b->id());
          std::int64_t x = r + 1, y = 10 * (r + 1), sx = 0, sy = 0;
          b->allreduce(&y, &sy, 1, DataType::Int64, ReduceOp::Sum);
          a->allreduce(&x, &sx, 1, DataType::Int64, ReduceOp::Sum);
          if (sx != std::int64_t{n} * (n + 1) / 2 || sy != 10 * sx || work <= 0)
            throw std::runtime_error("sums " + std::to_string(sx) + "," + std::to_string(sy));
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    for (auto& t : ranks) t.join();
    for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " of " << n;
  }
}

TEST(CreateAsync, BadArgumentsThrowAtTheCallAndFailuresAtGet) {
  auto store = std::make_shared<MemoryStore>();
  auto what = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const Error& e) {
      return std::string(toString(e.code())) + ": " + e.what();
    }
    return "no error";
  };
  EXPECT_NE(what([&] {
              (void)Comm::createAsync(nullptr, 0, 2, testOptions());
            }).find("InvalidArgument: Comm::createAsync: store is null"),
            std::string::npos);
  EXPECT_NE(what([&] {
              (void)Comm::createAsync(store, 5, 3, testOptions());
            }).find("rank 5 is outside world size 3"),
            std::string::npos);
  // Rank 1 never comes: the creation fails within the connect timeout, at get().
  Options o = testOptions();
  o.connectTimeout = std::chrono::milliseconds(300);
  auto f = Comm::createAsync(store, 0, 2, o);
  const std::string failed = what([&] { (void)f.get(); });
  EXPECT_EQ(failed.rfind("Timeout: ", 0), 0u) << failed;
}

TEST(Async, BackToBackOpsCompleteInIssueOrderWithCorrectResults) {
  for (int n : {2, 3, 4}) {
    runThreads(n, testOptions(), [](Comm& c) {
      constexpr int kOps = 40;
      const std::size_t count = 300;  // several chunks each
      std::vector<std::vector<float>> bufs(kOps, std::vector<float>(count));
      std::vector<std::vector<float>> gathered(kOps, std::vector<float>(count * c.size()));
      std::vector<Work> works;
      for (int k = 0; k < kOps; ++k) {
        for (std::size_t i = 0; i < count; ++i)
          bufs[k][i] = static_cast<float>(k + c.rank() + i % 7);
        if (k % 3 == 2)
          works.push_back(
              c.allgatherAsync(bufs[k].data(), gathered[k].data(), count, DataType::Float32));
        else
          works.push_back(c.allreduceAsync(bufs[k].data(), bufs[k].data(), count, DataType::Float32,
                                           ReduceOp::Sum));
      }
      // A blocking op issued behind the queue runs after it.
      c.barrier();
      for (int k = 0; k < kOps; ++k) EXPECT_TRUE(works[k].test()) << "op " << k;
      for (auto& w : works) w.wait();
      const int n = c.size();
      for (int k = 0; k < kOps; ++k) {
        for (std::size_t i = 0; i < count; ++i) {
          if (k % 3 == 2) {
            for (int r = 0; r < n; ++r)
              ASSERT_EQ(gathered[k][r * count + i], static_cast<float>(k + r + i % 7));
          } else {
            float expect = 0;
            for (int r = 0; r < n; ++r) expect += static_cast<float>(k + r + i % 7);
            ASSERT_EQ(bufs[k][i], expect) << "op " << k << " i " << i;
          }
        }
      }
    });
  }
}

TEST(Async, IrecvBeforeSendDoesNotDeadlock) {
  runThreads(2, testOptions(), [](Comm& c) {
    std::vector<int> out(1000, c.rank()), in(1000, -1);
    const int peer = 1 - c.rank();
    Work r = c.recvAsync(in.data(), in.size(), DataType::Int32, peer, 5);
    c.send(out.data(), out.size(), DataType::Int32, peer, 5);
    r.wait();
    for (int v : in) ASSERT_EQ(v, peer);
  });
}

}  // namespace
}  // namespace braid::test
