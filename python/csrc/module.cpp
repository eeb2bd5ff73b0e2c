// braid_torch._C: the Python face of the backend. braid_torch/__init__.py registers
// ProcessGroupBraid's constructor as the creator of torch.distributed backend "braid".
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <braid/comm.hpp>
#include <braid/types.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "compression.hpp"
#include "fusion.hpp"
#include "process_group.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace py = pybind11;

namespace braid_torch {
namespace {

c10::intrusive_ptr<ProcessGroupBraid> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                             int size, std::chrono::milliseconds timeout,
                                             const std::string& listenAddress,
                                             std::int64_t graceMicroseconds) {
  BackendConfig config;
  config.timeout = timeout;
  config.listenAddress = listenAddress;
  config.grace = std::chrono::microseconds(std::max<std::int64_t>(0, graceMicroseconds));
  // Bootstrap waits for the other ranks: let other Python threads run meanwhile.
  py::gil_scoped_release nogil;
  return c10::make_intrusive<ProcessGroupBraid>(store, rank, size, config);
}

// The creator of a torch group (braid_torch._create_backend): derived from `parent` (the default
// group's backend) when given, else through the store; ProcessGroupBraid::create.
c10::intrusive_ptr<ProcessGroupBraid> createGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, const std::string& listenAddress,
    std::int64_t graceMicroseconds, const py::object& parentObject,
    const std::vector<int>& parentRanks, const std::string& name, const std::string& why,
    bool enableReconfigure) {
  c10::intrusive_ptr<ProcessGroupBraid> parent;
  if (!parentObject.is_none()) parent = parentObject.cast<c10::intrusive_ptr<ProcessGroupBraid>>();
  BackendConfig config;
  config.timeout = timeout;
  config.listenAddress = listenAddress;
  config.grace = std::chrono::microseconds(std::max<std::int64_t>(0, graceMicroseconds));
  config.enableReconfigure = enableReconfigure;
  if (enableReconfigure && parent) parent.reset();  // it meets its members through the store
  py::gil_scoped_release nogil;
  return ProcessGroupBraid::create(store, rank, size, config, parent.get(), parentRanks, name, why);
}

#if BRAID_TORCH_HAS_COMPLETION_HOOKS
// What a completion hook registered through _register_completion_recorder saw: torch binds no
// Python registration for c10d::CompletionHook (its consumers are C++), so the tests and
// whoever wants to look from Python use this one.
struct CompletionRecorder {
  std::mutex mu;
  std::vector<std::pair<std::uint64_t, std::optional<float>>> seen;
};
#endif

}  // namespace
}  // namespace braid_torch

PYBIND11_MODULE(_C, m) {
  using braid_torch::ProcessGroupBraid;
  m.doc() = "braid: torch.distributed backend over braid communicators (C++ part)";
  // The base class must be known to pybind11 before a subclass is bound.
  py::module_::import("torch.distributed");

  m.attr("TORCH_VERSION_BUILT") = py::str(TORCH_VERSION);
  m.attr("USES_BACKEND_CLASS") = py::bool_(BRAID_TORCH_HAS_BACKEND_CLASS != 0);
  m.def("braid_version", [] { return std::string(braid::version()); });
  m.def(
      "tcp_sockets_opened", [] { return braid::transport::tcpSocketsOpened(); },
      "data sockets opened or accepted by every braid TCP transport of this process so far (a "
      "group that shares its parent's connections adds none)");
  m.def(
      "shm_segments_made", [] { return braid::transport::shmSegmentsMade(); },
      "shared-memory segments made by this process's braid transports so far (a group that "
      "shares its parent's segment makes none)");

  py::class_<ProcessGroupBraid, braid_torch::BackendBase, c10::intrusive_ptr<ProcessGroupBraid>>(
      m, "ProcessGroupBraid",
      "A torch.distributed backend over braid (use dist.init_process_group('braid')).")
      .def(py::init(&braid_torch::create), py::arg("store"), py::arg("rank"), py::arg("size"),
           py::arg("timeout"), py::arg("listen_address") = std::string(),
           py::arg("grace_us") = 1000)
      .def_property_readonly(
          "comm_id", [](ProcessGroupBraid& pg) { return pg.comm().id(); },
          "braid's id of the collectives communicator")
      .def_property_readonly(
          "connection_count", [](ProcessGroupBraid& pg) { return pg.comm().connectionCount(); },
          "TCP sockets this rank holds to the group's peers (shared ones included: a group "
          "sharing its parent's connections counts the parent's)")
      .def_property_readonly(
          "shares_connections",
          [](ProcessGroupBraid& pg) {
            return pg.initialized() && pg.comm().options().shareConnections;
          },
          "whether the group's sub-groups share its connections (BRAID_SHARE_CONNECTIONS); "
          "False before the first reconfigure of a group created with enable_reconfigure=True")
      .def_property_readonly("initialized", &ProcessGroupBraid::initialized,
                             "False only for a group created with enable_reconfigure=True "
                             "before torch.distributed._reconfigure() gave it a communicator")
      .def_property_readonly(
          "timeout", [](ProcessGroupBraid& pg) { return pg.timeout(); },
          "the bound on one operation (init_process_group's timeout, or set_timeout's)")
      .def_property_readonly(
          "listen_address", [](ProcessGroupBraid& pg) { return pg.comm().options().listenAddress; })
      .def(
          "path_to", [](ProcessGroupBraid& pg, int peer) { return pg.comm().pathTo(peer); },
          py::arg("peer"),
          "how this rank reaches group rank `peer`: \"shm+cma\", \"shm\", \"tcp\" or \"self\"")
      .def(
          "selected_algorithm",
          [](ProcessGroupBraid& pg, const std::string& collective, std::size_t bytes) {
            auto c = braid::parseCollective(collective);
            if (!c) throw py::value_error("unknown collective '" + collective + "'");
            return pg.comm().selectedAlgorithm(*c, bytes);
          },
          py::arg("collective"), py::arg("bytes"),
          "the algorithm braid picks for this collective and message size")
      .def_static("_create_group", &braid_torch::createGroup, py::arg("store"), py::arg("rank"),
                  py::arg("size"), py::arg("timeout"), py::arg("listen_address"),
                  py::arg("grace_us"), py::arg("parent"), py::arg("parent_ranks"), py::arg("name"),
                  py::arg("why"), py::arg("enable_reconfigure") = false,
                  "a torch group's backend: derived from `parent` (None: through the store)")
      .def("_agree_shrink", &ProcessGroupBraid::agreeShrink,
           "braid's shrink agreement over the live ranks (braid_torch.shrink): the group's "
           "ranks left out; once per group")
      .def("revoke", &ProcessGroupBraid::revoke,
           "revokes the group on every rank: pending and later operations fail with PeerLost")
#if BRAID_TORCH_HAS_COMPLETION_HOOKS
      .def(
          "_register_completion_recorder",
          [](ProcessGroupBraid& pg, std::int64_t hookId, double delayMs) {
            auto rec = std::make_shared<braid_torch::CompletionRecorder>();
            const auto delay = std::chrono::duration<double, std::milli>(delayMs);
            pg.registerCompletionHook(hookId, [rec, delay](const c10d::CompletionHookArgs& a) {
              if (delay.count() > 0) std::this_thread::sleep_for(delay);
              std::lock_guard<std::mutex> lk(rec->mu);
              rec->seen.emplace_back(a.completionKey, a.duration_ms);
            });
            return rec;
          },
          py::arg("hook_id"), py::arg("delay_ms") = 0.0,
          "registers a C++ completion hook (c10d::CompletionHook) under hook_id that records "
          "(completion key, duration in ms or None) per completed operation, after sleeping "
          "delay_ms (a slow hook, for tests); returns the record")
      .def("_unregister_completion_hook", &ProcessGroupBraid::unregisterCompletionHook,
           py::arg("hook_id"))
#endif
      ;
#if BRAID_TORCH_HAS_COMPLETION_HOOKS
  py::class_<braid_torch::CompletionRecorder, std::shared_ptr<braid_torch::CompletionRecorder>>(
      m, "_CompletionRecord")
      .def("records", [](braid_torch::CompletionRecorder& r) {
        std::lock_guard<std::mutex> lk(r.mu);
        return r.seen;
      });
#endif

  braid_torch::bindFusion(m);
  braid_torch::bindCompression(m);
}
