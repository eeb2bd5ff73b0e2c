// Writes the seed corpora of the fuzz targets: valid messages of every kind, so that the fuzzer
// starts from inputs that get deep into each parser. Usage: make_seeds STORE_DIR HANDSHAKE_DIR
// FRAME_DIR [ACCEPTOR_DIR].
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/handshake.hpp"
#include "store/store_protocol.hpp"
#include "transport/tcp/tcp_bootstrap.hpp"
#include "transport/tcp/tcp_connection.hpp"

namespace proto = braid::store_protocol;
namespace sec = braid::security;
using Bytes = std::vector<std::uint8_t>;

namespace {

void write(const std::string& dir, const std::string& name, const Bytes& bytes) {
  std::ofstream f(dir + "/" + name, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

sec::Nonce nonce(std::uint8_t fill) {
  sec::Nonce n;
  n.fill(fill);
  return n;
}

void storeSeeds(const std::string& dir) {
  std::vector<proto::Request> reqs(5);
  reqs[0].type = proto::RequestType::Set;
  reqs[0].keys = {"braid/0/tcp/addr/1"};
  reqs[0].value = {'1', '2', '7', '.', '0', '.', '0', '.', '1', ':', '9'};
  reqs[1].type = proto::RequestType::Get;
  reqs[1].keys = {"k"};
  reqs[1].timeoutMs = 60000;
  reqs[2].type = proto::RequestType::Add;
  reqs[2].keys = {"braid/generation/0"};
  reqs[2].delta = 1;
  reqs[3].type = proto::RequestType::Wait;
  reqs[3].keys = {"a", "b", "c"};
  reqs[3].timeoutMs = 5;
  reqs[4].type = proto::RequestType::Check;
  reqs[4].keys = {"x", ""};
  Bytes all;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    Bytes one;
    proto::appendRequest(reqs[i], one);
    write(dir, "request" + std::to_string(i), one);
    all.insert(all.end(), one.begin(), one.end());
  }
  write(dir, "pipelined", all);
  std::vector<proto::Response> resps(6);
  resps[0].type = proto::ResponseType::Ok;
  resps[1].type = proto::ResponseType::Value;
  resps[1].value = {1, 2, 3};
  resps[2].type = proto::ResponseType::Integer;
  resps[2].integer = -5;
  resps[3].type = proto::ResponseType::Bool;
  resps[3].flag = true;
  resps[4].type = proto::ResponseType::Timeout;
  resps[4].keys = {"missing"};
  resps[5].type = proto::ResponseType::Error;
  resps[5].message = "not a counter";
  for (std::size_t i = 0; i < resps.size(); ++i) {
    Bytes one;
    proto::appendResponse(resps[i], one);
    write(dir, "response" + std::to_string(i), one);
  }
}

void handshakeSeeds(const std::string& dir) {
  const std::string key = "fuzz-key";
  const Bytes ctxI = braid::transport::tcp::encodeRankContext(1, 4);
  const Bytes ctxR = braid::transport::tcp::encodeRankContext(0, 4);
  const auto ni = nonce(0x11), nr = nonce(0x22);
  // What a rank with the key sends the fuzz target's responder: Hello, then a Proof that
  // verifies against the responder's fixed nonce.
  sec::Message hello;
  hello.type = sec::MessageType::Hello;
  hello.flags = sec::kFlagAuthenticated;
  hello.service = sec::Service::Transport;
  hello.nonce = ni;
  hello.context = ctxI;
  sec::Message proof;
  proof.type = sec::MessageType::Proof;
  proof.flags = sec::kFlagAuthenticated;
  proof.service = sec::Service::Transport;
  proof.mac =
      sec::computeProof(key, sec::MessageType::Proof, sec::Service::Transport, ni, nr, ctxI, ctxR);
  Bytes b;
  sec::appendMessage(hello, b);
  write(dir, "hello", b);
  sec::appendMessage(proof, b);
  write(dir, "hello_proof", b);
  // What the responder answers (for the initiator): Reply, then Accept.
  sec::Message reply;
  reply.type = sec::MessageType::Reply;
  reply.flags = sec::kFlagAuthenticated;
  reply.service = sec::Service::Transport;
  reply.nonce = nr;
  reply.context = ctxR;
  reply.mac =
      sec::computeProof(key, sec::MessageType::Reply, sec::Service::Transport, ni, nr, ctxI, ctxR);
  sec::Message accept;
  accept.type = sec::MessageType::Accept;
  accept.flags = sec::kFlagAuthenticated;
  accept.service = sec::Service::Transport;
  b.clear();
  sec::appendMessage(reply, b);
  sec::appendMessage(accept, b);
  write(dir, "reply_accept", b);
  // Without a key, for the store; and a refusal.
  sec::Message plain;
  plain.type = sec::MessageType::Hello;
  plain.service = sec::Service::Store;
  b.clear();
  sec::appendMessage(plain, b);
  write(dir, "store_hello", b);
  sec::Message reject;
  reject.type = sec::MessageType::Reject;
  reject.service = sec::Service::Transport;
  reject.reason = sec::RejectReason::Auth;
  reject.text = "authentication failed";
  b.clear();
  sec::appendMessage(reject, b);
  write(dir, "reject", b);
  write(dir, "rank_context", ctxI);
}

void frameSeeds(const std::string& dir) {
  namespace tcp = braid::transport::tcp;
  auto frame = [](Bytes& out, std::uint64_t tag, std::size_t bytes) {
    std::uint8_t h[tcp::kFrameHeaderBytes];
    tcp::encodeFrameHeader({tag, bytes}, h);
    out.insert(out.end(), h, h + sizeof h);
    for (std::size_t i = 0; i < bytes; ++i) out.push_back(static_cast<std::uint8_t>(i));
  };
  const std::uint64_t p2p = braid::transport::kP2PTagBit;
  // Two receives posted: a collective {tag 7, 10 bytes} and a P2P {tag 9, 3 bytes}.
  Bytes b = {2, 0, 7, 10, 1, 9, 3};
  frame(b, 7, 10);
  frame(b, p2p | 9, 3);
  write(dir, "matched", b);
  // A P2P message before its receive, and an empty frame.
  b = {2, 1, 9, 3, 0, 7, 0};
  frame(b, p2p | 9, 3);
  frame(b, 7, 0);
  write(dir, "held", b);
  // A size mismatch, and a frame cut short.
  b = {1, 0, 7, 10};
  frame(b, 7, 11);
  write(dir, "mismatch", b);
  b = {1, 2, 7, 2};
  frame(b, 7, 194);
  b.resize(b.size() - 50);
  write(dir, "truncated", b);
}

// transport_acceptor_fuzz: a mode byte (bit 0: the job has a key, bit 1: the stranger closes
// its sending side), then what the stranger sends.
void acceptorSeeds(const std::string& dir) {
  namespace tcp = braid::transport::tcp;
  const auto hello = [](std::uint8_t mode, bool keyed, int rank, int size) {
    Bytes b = {mode};
    sec::Initiator(keyed ? "fuzz-key" : "", sec::Service::Transport,
                   tcp::encodeRankContext(rank, size))
        .appendHello(b);
    return b;
  };
  write(dir, "hello_other_size", hello(0, false, 1, 99));
  write(dir, "hello_rank1", hello(0, false, 1, 2));
  write(dir, "hello_rank0", hello(2, false, 0, 2));
  write(dir, "keyed_hello", hello(1, true, 1, 2));
  write(dir, "keyed_other_size", hello(3, true, 1, 99));
  Bytes garbage = {2};
  for (int i = 0; i < 64; ++i) garbage.push_back(static_cast<std::uint8_t>(i * 37));
  write(dir, "garbage", garbage);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: make_seeds STORE_DIR HANDSHAKE_DIR FRAME_DIR [ACCEPTOR_DIR]\n");
    return 2;
  }
  storeSeeds(argv[1]);
  handshakeSeeds(argv[2]);
  frameSeeds(argv[3]);
  if (argc == 5) acceptorSeeds(argv[4]);
  return 0;
}
