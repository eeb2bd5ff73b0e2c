// Stores over stores: PrefixStore namespaces, deletion on every store that supports it, and the
// gather by node (store/all_gather.hpp) with its request counts.

#include <gtest/gtest.h>

#include <braid/error.hpp>
#include <braid/store.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "harness/errors.hpp"
#include "harness/store_helpers.hpp"
#include "store/all_gather.hpp"
#include "store/memory_store.hpp"
#include "store/store_protocol.hpp"

namespace braid {
namespace {

namespace proto = store_protocol;
using std::chrono::milliseconds;
using test::connectTo;
using test::kLong;
using test::thrownBy;

TEST(PrefixStore, IsolatesNamespaces) {
  TcpStoreServer server("127.0.0.1", 0);
  std::shared_ptr<Store> base = connectTo(server);
  PrefixStore a(base, "comm1");
  PrefixStore b(base, "comm10");
  a.setString("0", "from a");
  b.setString("0", "from b");
  EXPECT_EQ(a.getString("0", kLong), "from a");
  EXPECT_EQ(b.getString("0", kLong), "from b");
  EXPECT_EQ(base->getString("comm1/0", kLong), "from a");

  a.setString("only-a", "x");
  EXPECT_TRUE(a.check({"only-a", "0"}));
  EXPECT_FALSE(b.check({"only-a"}));
  EXPECT_EQ(thrownBy([&] { b.get("only-a", milliseconds(50)); }).code(), ErrorCode::Timeout);
  EXPECT_EQ(thrownBy([&] { b.wait({"only-a"}, milliseconds(50)); }).code(), ErrorCode::Timeout);
  a.wait({"only-a"}, milliseconds(50));

  EXPECT_EQ(a.add("n", 5), 5);
  EXPECT_EQ(b.add("n", 1), 1);
  PrefixStore nested(std::make_shared<PrefixStore>(base, "comm1"), "sub");
  nested.setString("k", "v");
  EXPECT_EQ(a.getString("sub/k", kLong), "v");
}

// deleteKeys / deletePrefix / numKeys, the same on every store that supports them; `count`
// reads the key count independently of the client (the server's own, or numKeys).
void checkDeletion(Store& store, const std::function<std::size_t()>& count) {
  ASSERT_TRUE(store.supportsDelete());
  const std::size_t before = count();
  EXPECT_EQ(static_cast<std::size_t>(store.numKeys()), before);
  for (int i = 0; i < 5; ++i) store.setString("d/" + std::to_string(i), std::string(i, 'x'));
  store.add("d/counter", 3);
  store.setString("dd/other", "kept");  // shares "d" but not "d/"
  EXPECT_EQ(count(), before + 7);
  EXPECT_EQ(store.numKeys(), static_cast<std::int64_t>(before + 7));
  // A missing key is no error, and counts 0.
  EXPECT_EQ(store.deleteKeys({"d/0", "d/missing", "d/0"}), 1);
  EXPECT_FALSE(store.check({"d/0"}));
  EXPECT_TRUE(store.deleteKey("d/1"));
  EXPECT_FALSE(store.deleteKey("d/1"));
  EXPECT_EQ(store.deleteKeys({}), 0);
  EXPECT_EQ(count(), before + 5);
  // A deleted key is waited for anew, and can be set again.
  EXPECT_EQ(thrownBy([&] { store.get("d/1", milliseconds(50)); }).code(), ErrorCode::Timeout);
  store.setString("d/1", "again");
  EXPECT_EQ(store.getString("d/1", kLong), "again");
  EXPECT_EQ(store.add("d/counter", 0), 3);
  EXPECT_EQ(store.deletePrefix("d/"), 5);  // d/1 (set again), d/2, d/3, d/4, d/counter
  EXPECT_TRUE(store.check({"dd/other"}));
  EXPECT_EQ(store.add("d/counter", 1), 1) << "a deleted counter starts from 0";
  EXPECT_EQ(store.deletePrefix("d"), 2);  // d/counter and dd/other
  EXPECT_EQ(store.deletePrefix("d"), 0);
  EXPECT_EQ(count(), before);
}

TEST(TcpStore, DeleteKeysPrefixAndCount) {
  TcpStoreServer server("127.0.0.1", 0);
  auto store = connectTo(server);
  auto other = connectTo(server);
  EXPECT_EQ(server.keyCount(), 0u);
  checkDeletion(*store, [&] { return static_cast<std::size_t>(other->numKeys()); });
  EXPECT_EQ(server.keyCount(), 0u);
  // The server's count agrees with NUMKEYS, and every request is counted.
  const std::uint64_t before = server.requestCount();
  store->setString("a", "1");
  store->setString("b", "2");
  EXPECT_EQ(server.keyCount(), 2u);
  EXPECT_EQ(store->deleteKeys({"a", "b", "c"}), 2);
  EXPECT_EQ(server.requestCount(), before + 3);
  EXPECT_EQ(server.keyCount(), 0u);
}

TEST(TcpStore, DeleteBadInputIsAnError) {
  TcpStoreServer server("127.0.0.1", 0);
  auto store = connectTo(server);
  store->setString("k", "v");
  Error e = thrownBy([&] { store->deleteKeys({"k", std::string(5000, 'x')}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.detail().find("DELETE"), std::string::npos) << e.what();
  e = thrownBy([&] { store->deletePrefix(std::string(5000, 'x')); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.detail().find("DELPREFIX"), std::string::npos) << e.what();
  std::vector<std::string> tooMany(proto::kMaxKeys + 1, "k");
  EXPECT_EQ(thrownBy([&] { store->deleteKeys(tooMany); }).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(store->getString("k", kLong), "v") << "nothing was deleted and the connection lives";
  // A store without deletion says so.
  class Plain final : public Store {
   public:
    void set(const std::string&, const std::vector<std::uint8_t>&) override {}
    std::vector<std::uint8_t> get(const std::string&, milliseconds) override { return {}; }
    std::int64_t add(const std::string&, std::int64_t) override { return 0; }
    void wait(const std::vector<std::string>&, milliseconds) override {}
    bool check(const std::vector<std::string>&) override { return true; }
  } plain;
  EXPECT_FALSE(plain.supportsDelete());
  e = thrownBy([&] { plain.deleteKeys({"k"}); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.detail().find("deleteKeys"), std::string::npos) << e.what();
  EXPECT_EQ(thrownBy([&] { plain.numKeys(); }).code(), ErrorCode::InvalidArgument);
  EXPECT_EQ(thrownBy([&] { plain.deletePrefix("k"); }).code(), ErrorCode::InvalidArgument);
}

TEST(MemoryStore, DeleteKeysPrefixAndCount) {
  MemoryStore store;
  checkDeletion(store, [&] { return static_cast<std::size_t>(store.numKeys()); });
}

TEST(PrefixStore, DeletesOnlyItsNamespace) {
  TcpStoreServer server("127.0.0.1", 0);
  std::shared_ptr<Store> base = connectTo(server);
  auto a = std::make_shared<PrefixStore>(base, "braid/0/");
  PrefixStore child(base, "braid/0/s1c0/");
  a->setString("tcp/addr/0", "x");
  a->setString("tcp/addr/1", "y");
  child.setString("tcp/addr/0", "z");
  base->setString("braid/generation/0", "1");
  EXPECT_EQ(a->numKeys(), 4) << "numKeys counts the whole store, as torch's num_keys";
  EXPECT_TRUE(a->deleteKey("tcp/addr/1"));
  EXPECT_FALSE(base->check({"braid/0//tcp/addr/1"}));
  // The whole namespace, not the child's ("braid/0//" vs "braid/0/s1c0//").
  EXPECT_EQ(a->deletePrefix(""), 1);
  EXPECT_EQ(child.getString("tcp/addr/0", kLong), "z");
  EXPECT_EQ(server.keyCount(), 2u);
  checkDeletion(*a, [&] { return server.keyCount(); });
}

// A store that counts the requests each rank makes (one instance per rank, over a shared base).
class CountingStore final : public Store {
 public:
  explicit CountingStore(Store& base) : base_(base) {}
  void set(const std::string& k, const std::vector<std::uint8_t>& v) override {
    ++n;
    base_.set(k, v);
  }
  std::vector<std::uint8_t> get(const std::string& k, milliseconds t) override {
    ++n;
    return base_.get(k, t);
  }
  std::int64_t add(const std::string& k, std::int64_t d) override {
    ++n;
    return base_.add(k, d);
  }
  void wait(const std::vector<std::string>& k, milliseconds t) override {
    ++n;
    base_.wait(k, t);
  }
  bool check(const std::vector<std::string>& k) override {
    ++n;
    return base_.check(k);
  }
  int n = 0;

 private:
  Store& base_;
};

// Gather by node over the real TCP store, ranks as threads, nodes of uneven sizes: every rank
// gets every value; the requests per rank and in all are as all_gather.hpp states (computed
// here from the layout), and the server saw exactly that many.
TEST(GatherByNode, UnevenNodesGetEveryValueWithTheStatedRequestCounts) {
  // Node of each rank, per size: one node, one node per rank, and uneven mixes.
  const std::vector<std::vector<int>> layouts = {
      {0},
      {0, 0},
      {0, 1},
      {0, 0, 1},
      {0, 1, 1},
      {7, 3, 7},  // any ints, not in rank order
      {0, 0, 0, 1, 2},
      {0, 1, 0, 2, 1},
      {0, 0, 0, 0, 0},
      {0, 1, 2, 3, 4},
      {0, 0, 0, 0, 0, 1, 1, 2},
      {2, 1, 0, 2, 1, 0, 2, 2},
      {0, 1, 2, 3, 4, 5, 6, 7},
  };
  for (const auto& nodes : layouts) {
    const int size = static_cast<int>(nodes.size());
    SCOPED_TRACE("nodes " + ::testing::PrintToString(nodes));
    TcpStoreServer server("127.0.0.1", 0);
    std::vector<std::unique_ptr<TcpStore>> clients;
    std::vector<std::unique_ptr<CountingStore>> counting;
    for (int r = 0; r < size; ++r) {
      clients.push_back(connectTo(server));
      counting.push_back(std::make_unique<CountingStore>(*clients.back()));
    }
    const std::uint64_t before = server.requestCount();
    std::vector<std::vector<std::string>> got(static_cast<std::size_t>(size));
    std::vector<std::string> errors(static_cast<std::size_t>(size));
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r)
      threads.emplace_back([&, r] {
        try {
          got[static_cast<std::size_t>(r)] =
              gatherByNode(*counting[static_cast<std::size_t>(r)], "g", r, size, nodes,
                           "value of " + std::to_string(r) + std::string(r, '\0'), kLong, "it");
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    for (auto& t : threads) t.join();
    // Expected counts, from the layout.
    std::map<int, int> nodeSize;
    for (int n : nodes) ++nodeSize[n];
    const int hosts = static_cast<int>(nodeSize.size());
    int total = 0;
    for (int r = 0; r < size; ++r) {
      ASSERT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
      for (int q = 0; q < size; ++q)
        EXPECT_EQ(got[static_cast<std::size_t>(r)][static_cast<std::size_t>(q)],
                  "value of " + std::to_string(q) + std::string(q, '\0'))
            << "rank " << r << " entry " << q;
      const int p = nodeSize[nodes[static_cast<std::size_t>(r)]];
      bool leader = true;
      for (int q = 0; q < r; ++q)
        if (nodes[static_cast<std::size_t>(q)] == nodes[static_cast<std::size_t>(r)])
          leader = false;
      int want = 2;
      if (r == 0)
        want = 1 + (p > 1 ? p : 0) + (hosts > 1 ? hosts : 0);
      else if (leader)
        want = 2 + (p > 1 ? p : 0);
      EXPECT_EQ(counting[static_cast<std::size_t>(r)]->n, want) << "rank " << r;
      total += want;
    }
    int multi = 0;
    for (const auto& [n, p] : nodeSize)
      if (p > 1) multi += p;
    EXPECT_EQ(total, 2 * size - 1 + multi + (hosts > 1 ? hosts : 0));
    EXPECT_LE(total, 3 * size + hosts - 1);
    EXPECT_EQ(server.requestCount() - before, static_cast<std::uint64_t>(total));
  }
}

TEST(GatherByNode, BadInputAndMissingRanksAreNamed) {
  MemoryStore store;
  const std::vector<int> nodes = {0, 0, 1};
  Error e = thrownBy([&] { gatherByNode(store, "g", 3, 3, nodes, "x", kLong, "their host"); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.detail().find("rank 3"), std::string::npos) << e.what();
  e = thrownBy([&] { gatherByNode(store, "g", 0, 2, nodes, "x", kLong, "their host"); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.detail().find("nodeOf has 3 entries for 2 ranks"), std::string::npos) << e.what();
  // Rank 0 alone: its node's rank 1 and node 1's leader (rank 2) never come.
  e = thrownBy(
      [&] { gatherByNode(store, "g", 0, 3, nodes, "x", milliseconds(200), "their host"); });
  EXPECT_EQ(e.code(), ErrorCode::Timeout);
  EXPECT_NE(e.detail().find("rank 0 timed out after 200 ms waiting for ranks 1 to publish their "
                            "host"),
            std::string::npos)
      << e.what();
  // Rank 1 alone: it waits for rank 0's table.
  MemoryStore fresh;
  e = thrownBy(
      [&] { gatherByNode(fresh, "g", 1, 3, nodes, "x", milliseconds(100), "their host"); });
  EXPECT_EQ(e.code(), ErrorCode::Timeout);
  EXPECT_NE(e.detail().find("rank 1 timed out after 100 ms waiting for rank 0 to publish the "
                            "table of their host"),
            std::string::npos)
      << e.what();
  // Rank 0 with its node complete, the other leader missing.
  MemoryStore third;
  third.setString("g/r/1", "y");
  e = thrownBy(
      [&] { gatherByNode(third, "g", 0, 3, nodes, "x", milliseconds(100), "their host"); });
  EXPECT_EQ(e.code(), ErrorCode::Timeout);
  EXPECT_NE(e.detail().find("waiting for ranks 2 to publish their host for their node"),
            std::string::npos)
      << e.what();
}
}  // namespace
}  // namespace braid
