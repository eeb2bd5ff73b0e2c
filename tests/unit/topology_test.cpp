// src/topology alone: the JSON reader/writer, the pure topology builder, the JSON form of a
// topology (dump, load, fabricated files) and this process's PeerInfo.
#include "topology/topology.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <braid/error.hpp>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include "topology/json.hpp"
#include "topology/topology_json.hpp"

namespace braid::topology {
namespace {

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(Json, ParsesEveryKindAndWritesItBack) {
  const std::string text =
      R"({"a": [1, -2.5, 3e2, true, false, null], "b": {"c": "x\"y\\n\u00e9\ud83d\ude00"}, "d": []})";
  json::Value v = json::parse(text, "t");
  ASSERT_EQ(v.kind(), json::Value::Kind::Object);
  const json::Value* a = v.find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->items().size(), 6u);
  EXPECT_EQ(a->items()[0].asNumber(), 1);
  EXPECT_EQ(a->items()[1].asNumber(), -2.5);
  EXPECT_EQ(a->items()[2].asNumber(), 300);
  EXPECT_TRUE(a->items()[3].asBool());
  EXPECT_FALSE(a->items()[4].asBool());
  EXPECT_TRUE(a->items()[5].isNull());
  EXPECT_EQ(v.find("b")->find("c")->asString(), "x\"y\\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.find("zzz"), nullptr);
  // Write, parse again: the same structure.
  json::Value w = json::parse(json::write(v), "again");
  EXPECT_EQ(json::write(w), json::write(v));
  EXPECT_EQ(w.find("b")->find("c")->asString(), v.find("b")->find("c")->asString());
}

TEST(Json, ErrorsNameSourceLineAndColumn) {
  EXPECT_NE(errorOf([] {
              json::parse("{\n  \"a\": 1,\n  \"b\" 2\n}", "f.json");
            }).find("f.json:3:7: expected ':'"),
            std::string::npos);
  EXPECT_NE(errorOf([] { json::parse("[1, 2", "f"); }).find("f:1:6: expected ',' or ']'"),
            std::string::npos);
  EXPECT_NE(errorOf([] { json::parse("{\"a\":1,\"a\":2}", "f"); }).find("duplicate member"),
            std::string::npos);
  EXPECT_NE(errorOf([] { json::parse("\"abc", "f"); }).find("unterminated string"),
            std::string::npos);
  EXPECT_NE(errorOf([] { json::parse("1 2", "f"); }).find("f:1:3: unexpected text"),
            std::string::npos);
  EXPECT_NE(errorOf([] { json::parse("01", "f"); }).find("unexpected text"), std::string::npos);
  EXPECT_NE(errorOf([] { json::parse("1e999", "f"); }).find("out of range"), std::string::npos);
  EXPECT_NE(errorOf([] { json::parse("\"\\ud800\"", "f"); }).find("surrogate"), std::string::npos);
  EXPECT_NE(errorOf([] { json::parse("", "f"); }).find("unexpected end"), std::string::npos);
  EXPECT_NE(errorOf([] { json::parse("[tru]", "f"); }).find("f:1:2: expected 'true'"),
            std::string::npos);
  EXPECT_NE(errorOf([] { json::parse("\"a\x01\"", "f"); }).find("control character"),
            std::string::npos);
}

TEST(Json, NestingIsBounded) {
  std::string deep(json::kMaxDepth + 1, '[');
  deep += std::string(json::kMaxDepth + 1, ']');
  EXPECT_NE(errorOf([&] { json::parse(deep, "deep"); }).find("nesting deeper"), std::string::npos);
  std::string ok(json::kMaxDepth - 1, '[');
  ok += std::string(json::kMaxDepth - 1, ']');
  EXPECT_NO_THROW(json::parse(ok, "ok"));
}

TEST(Json, TruncatedDocumentsFailCleanly) {
  const std::string text = toJson(uniformTopology(3, 2));
  const std::size_t end = text.rfind('}');  // cutting only the trailing newline stays valid
  for (std::size_t n = 0; n < end; n += 7) {
    try {
      json::parse(text.substr(0, n), "cut");
      ADD_FAILURE() << "accepted a document cut at " << n;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(": cut:"), std::string::npos) << e.what();
    }
  }
}

PeerInfo peer(const std::string& host) {
  PeerInfo p;
  p.hostname = host;
  p.hostId = host + "/boot/net:1";
  return p;
}

TEST(Topology, GroupsRanksByHostInOrderOfLowestRank) {
  // Ranks 0, 2, 5 on b; 1, 3 on a; 4 on c.
  Topology t = buildTopology({peer("b"), peer("a"), peer("b"), peer("a"), peer("c"), peer("b")});
  ASSERT_EQ(t.size(), 6);
  ASSERT_EQ(t.numNodes(), 3);
  EXPECT_EQ(t.node(0).hostname, "b");
  EXPECT_EQ(t.node(0).ranks, (std::vector<int>{0, 2, 5}));
  EXPECT_EQ(t.node(1).ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ(t.node(2).ranks, (std::vector<int>{4}));
  EXPECT_EQ(t.nodeOf(5), 0);
  EXPECT_EQ(t.localRank(5), 2);
  EXPECT_EQ(t.localRank(3), 1);
  EXPECT_EQ(t.localSize(3), 2);
  EXPECT_TRUE(t.isLeader(1));
  EXPECT_FALSE(t.isLeader(3));
  EXPECT_EQ(t.node(1).leader(), 1);
  EXPECT_FALSE(t.uniform());
  EXPECT_EQ(t.maxLocalSize(), 3);
  EXPECT_EQ(t.link(2, 2), LinkClass::Self);
  EXPECT_EQ(t.link(0, 5), LinkClass::Shm);
  EXPECT_EQ(t.link(0, 1), LinkClass::Network);
  EXPECT_EQ(t.summary(), "3 nodes, 1-3 ranks per node (6 ranks)");
  EXPECT_STREQ(toString(LinkClass::Network), "network");
}

TEST(Topology, SameHostnameInAnotherNamespaceIsAnotherNode) {
  PeerInfo a = peer("vm");
  PeerInfo b = peer("vm");
  b.hostId = "vm/boot/net:2";
  Topology t = buildTopology({a, b});
  EXPECT_EQ(t.numNodes(), 2);
  EXPECT_EQ(t.link(0, 1), LinkClass::Network);
  PeerInfo empty;
  EXPECT_NE(errorOf([&] {
              buildTopology({a, empty});
            }).find("rank 1 has an empty host id"),
            std::string::npos);
}

TEST(Topology, UniformLayoutsBlockedAndCyclic) {
  Topology t = uniformTopology(64, 8);
  EXPECT_EQ(t.size(), 512);
  EXPECT_EQ(t.numNodes(), 64);
  EXPECT_TRUE(t.uniform());
  EXPECT_EQ(t.nodeOf(17), 2);
  EXPECT_EQ(t.localRank(17), 1);
  EXPECT_EQ(t.summary(), "64 nodes x 8 ranks (512 ranks)");
  Topology c = uniformTopology(4, 3, true);
  EXPECT_EQ(c.node(1).ranks, (std::vector<int>{1, 5, 9}));
  EXPECT_EQ(c.link(1, 5), LinkClass::Shm);
  EXPECT_EQ(c.link(1, 2), LinkClass::Network);
  EXPECT_THROW(uniformTopology(0, 3), Error);
}

TEST(Topology, SubsetRenumbers) {
  Topology t = uniformTopology(2, 3);  // node0: 0 1 2, node1: 3 4 5
  const int members[] = {4, 1, 3};
  Topology s = t.subset(members);
  ASSERT_EQ(s.size(), 3);
  EXPECT_EQ(s.numNodes(), 2);
  EXPECT_EQ(s.node(0).hostname, "node1");
  EXPECT_EQ(s.node(0).ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(s.link(0, 2), LinkClass::Shm);
  EXPECT_EQ(s.link(0, 1), LinkClass::Network);
  const int bad[] = {1, 1};
  EXPECT_NE(errorOf([&] { t.subset(bad); }).find("listed twice"), std::string::npos);
  const int outside[] = {6};
  EXPECT_NE(errorOf([&] { t.subset(outside); }).find("outside"), std::string::npos);
}

TEST(Topology, JsonRoundTripKeepsEveryField) {
  PeerInfo a = peer("a");
  a.netns = "4026531840";
  a.numaNode = 1;
  a.cpus = "0-3,8";
  a.interfaces = {{"lo", {"127.0.0.1/8", "::1/128"}}, {"eth0", {"198.18.0.1/24"}}};
  Topology t = buildTopology({a, peer("b"), a});
  const std::string text = toJson(t);
  Topology u = fromJson(text, "dump");
  ASSERT_EQ(u.size(), 3);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(u.peer(r), t.peer(r)) << r;
  EXPECT_EQ(u.node(0).ranks, (std::vector<int>{0, 2}));
  EXPECT_EQ(toJson(u), text);
}

TEST(Topology, FabricatedNodesOnlyFile) {
  Topology t = fromJson(R"({"nodes": [{"host": "h0", "ranks": [0, 2]},
                                      {"host": "h1", "ranks": [1, 3]}]})",
                        "fab.json");
  ASSERT_EQ(t.size(), 4);
  EXPECT_EQ(t.numNodes(), 2);
  EXPECT_EQ(t.nodeOf(3), 1);
  EXPECT_EQ(t.link(0, 2), LinkClass::Shm);
  EXPECT_EQ(t.link(0, 1), LinkClass::Network);
  EXPECT_EQ(t.peer(1).hostname, "h1");
}

TEST(Topology, MalformedFilesNameFileAndPosition) {
  struct Bad {
    const char* text;
    const char* message;
  } cases[] = {
      {R"([1])", "f.json:1:1: the document must be an object"},
      {R"({"size": 2})", "f.json:1:1: missing member \"nodes\""},
      {R"({"nodes": [{"host": "a", "ranks": [0, 0]}]})", "f.json:1:39: rank 0 appears twice"},
      {R"({"nodes": [{"host": "a", "ranks": [0, 2]}]})", "f.json:1:39: a rank must be an integer"},
      {R"({"nodes": [{"host": "a", "ranks": [0.5]}]})", "must be an integer"},
      {R"({"nodes": [{"ranks": [0]}]})", "missing member \"host\""},
      {R"({"nodes": [{"host": "a", "ranks": [0]}], "size": 3})", "\"size\" is 3 but 1 ranks"},
      {R"({"nodes": [{"host": "b", "ranks": [1]}, {"host": "a", "ranks": [0]}]})",
       "ordered by their lowest rank"},
      {R"({"version": 7, "nodes": []})", "unsupported version"},
      {R"({"nodes": []})", "has no ranks"},
      {R"({"ranks": [{"host_id": "a", "rank": 1}]})", "\"rank\" must be 0"},
      {R"({"ranks": [{"hostname": "a"}]})", "missing member \"host_id\""},
      {R"({"ranks": [{"host_id": "a", "node": 1}]})", "rank 0 is on node 0"},
      {R"({"ranks": [{"host_id": "a"}, {"host_id": "b"}], "nodes": [{"host": "a", "ranks": [0, 1]}]})",
       "lists 1 nodes but the ranks are on 2"},
      {R"({"ranks": [{"host_id": "a", "interfaces": [{"name": 3}]}]})",
       "\"name\" must be a string"},
  };
  for (const Bad& b : cases) {
    const std::string msg = errorOf([&] { fromJson(b.text, "f.json"); });
    EXPECT_NE(msg.find(b.message), std::string::npos) << b.text << " -> " << msg;
  }
}

TEST(Topology, FilesDumpAndLoad) {
  const std::string path =
      testing::TempDir() + "braid_topo_" + std::to_string(::getpid()) + ".json";
  Topology t = uniformTopology(64, 8, true);
  dumpTopologyFile(t, path);
  Topology u = loadTopologyFile(path);
  EXPECT_EQ(u.size(), 512);
  EXPECT_EQ(u.numNodes(), 64);
  EXPECT_EQ(u.node(5).ranks, t.node(5).ranks);
  std::remove(path.c_str());
  EXPECT_NE(errorOf([&] { loadTopologyFile(path); }).find(path), std::string::npos);
  {
    std::ofstream out(path);
    out << "{\n  \"nodes\": [\n    {\"host\": \"a\" \"ranks\": [0]}\n  ]\n}\n";
  }
  EXPECT_NE(errorOf([&] { loadTopologyFile(path); }).find(path + ":3:18: expected ',' or '}'"),
            std::string::npos);
  std::remove(path.c_str());
}

TEST(Topology, LocalPeerInfoDescribesThisProcess) {
  PeerInfo p = localPeerInfo();
  EXPECT_FALSE(p.hostId.empty());
  EXPECT_FALSE(p.hostname.empty());
  EXPECT_FALSE(p.netns.empty());
  EXPECT_FALSE(p.cpus.empty());
  bool loopback = false;
  for (const auto& i : p.interfaces)
    for (const auto& a : i.addresses) loopback = loopback || a.rfind("127.", 0) == 0;
  EXPECT_TRUE(loopback) << "no 127.x address among the interfaces";
  EXPECT_EQ(localPeerInfo("fixed").hostId, "fixed");
  EXPECT_EQ(formatCpuList({3, 0, 1, 2, 8, 10, 9}), "0-3,8-10");
  EXPECT_EQ(formatCpuList({}), "");
}

}  // namespace
}  // namespace braid::topology
