// The collectives and point-to-point operations of ProcessGroupBraid: checking torch's
// arguments, turning tensors into braid buffers and enqueueing each call on the group's worker
// (the lifecycle, the queue and the monitored barrier are in process_group.cpp).
#include <c10/util/Exception.h>

#include <algorithm>
#include <braid/error.hpp>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>

#include "process_group.hpp"
#include "tensor_util.hpp"

namespace braid_torch {

namespace {

constexpr auto kByte = braid::DataType::Uint8;

std::vector<std::size_t> byteCounts(const std::vector<at::Tensor>& ts) {
  std::vector<std::size_t> c;
  c.reserve(ts.size());
  for (const auto& t : ts) c.push_back(byteSize(t));
  return c;
}

bool allEqual(const std::vector<std::size_t>& v) {
  return std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) == v.end();
}

/// Splits along dim 0 in elements of bytes: torch's all_to_all_single split sizes are rows.
std::vector<std::size_t> splitBytes(const at::Tensor& t, const std::vector<std::int64_t>& splits,
                                    int size, const char* what) {
  const std::int64_t rows = t.dim() > 0 ? t.size(0) : 1;
  const std::size_t rowBytes = rows > 0 ? byteSize(t) / static_cast<std::size_t>(rows) : 0;
  std::vector<std::size_t> out(static_cast<std::size_t>(size));
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "braid: all_to_all_single: ", what, " has ", rows,
                " rows, not divisible by the group size ", size, " (pass split sizes)");
    std::fill(out.begin(), out.end(), rowBytes * static_cast<std::size_t>(rows / size));
    return out;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == size, "braid: all_to_all_single: ", what,
              " split sizes have ", splits.size(), " entries for a group of ", size);
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < splits.size(); ++i) {
    TORCH_CHECK(splits[i] >= 0, "braid: all_to_all_single: ", what, " split size ", i,
                " is negative");
    sum += splits[i];
    out[i] = rowBytes * static_cast<std::size_t>(splits[i]);
  }
  TORCH_CHECK(sum == rows, "braid: all_to_all_single: ", what, " split sizes add up to ", sum,
              " rows but the tensor has ", rows);
  return out;
}

bool sharesMemory(const at::Tensor& a, const at::Tensor& b) {
  if (!a.has_storage() || !b.has_storage()) return false;
  return a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl();
}

// The flat forms (reduce_scatter_tensor, all_gather_into_tensor) and each pair of their
// coalesced forms (`index`): both tensors checked, of one type, the whole one (the output when
// `outputIsWhole`, else the input) group size x the other.
void checkWholeAndPart(const at::Tensor& output, const at::Tensor& input, bool outputIsWhole,
                       int size, const char* op, std::optional<std::size_t> index = {}) {
  checkTensor(input, op, index ? "an input" : "input");
  checkTensor(output, op, index ? "an output" : "output");
  checkSameType(input, output, op, index ? "an output" : "the output");
  const std::string n = index ? " " + std::to_string(*index) : "";
  const at::Tensor& whole = outputIsWhole ? output : input;
  const at::Tensor& part = outputIsWhole ? input : output;
  TORCH_CHECK(whole.numel() == part.numel() * size, "braid: ", op, ": ", index ? "" : "the ",
              outputIsWhole ? "output" : "input", n, " has ", whole.numel(),
              " elements; it must have group size (", size, ") x ",
              outputIsWhole ? "input" : "output", n, " (", part.numel(), ")");
}

// The coalesced flat forms: as many outputs as inputs, each pair as checkWholeAndPart checks it.
void checkCoalesced(const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                    bool outputIsWhole, int size, const char* op) {
  TORCH_CHECK(outputs.size() == inputs.size(), "braid: ", op, ": ", outputs.size(), " outputs for ",
              inputs.size(), " inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    checkWholeAndPart(outputs[i], inputs[i], outputIsWhole, size, op, i);
}

// reduce_scatter's inputs or all_gather's outputs (`role`): one list of `size` tensors, each
// of `mine`'s type, checked.
const std::vector<at::Tensor>& listPerProcess(const std::vector<std::vector<at::Tensor>>& lists,
                                              int size, const at::Tensor& mine, const char* op,
                                              const char* role) {
  TORCH_CHECK(lists.size() == 1, "braid: ", op, " takes one ", role, " list per process, got ",
              lists.size());
  const auto& list = lists[0];
  TORCH_CHECK(static_cast<int>(list.size()) == size, "braid: ", op, ": the ", role, " list has ",
              list.size(), " tensors for a group of ", size);
  const std::string an = std::string("an ") + role;
  for (const auto& t : list) {
    checkTensor(t, op, role);
    checkSameType(mine, t, op, an.c_str());
  }
  return list;
}

// Gather's outputs or scatter's inputs: on the root one list of `size` tensors (`role`: "output"
// or "input"), each like `mine` (this rank's `other` tensor), checked; elsewhere none (empty).
std::vector<at::Tensor> rootList(const std::vector<std::vector<at::Tensor>>& lists, bool isRoot,
                                 int root, int size, const at::Tensor& mine, const char* op,
                                 const char* role, const char* other) {
  if (!isRoot) {
    TORCH_CHECK(lists.empty() || (lists.size() == 1 && lists[0].empty()), "braid: ", op,
                ": only the root (rank ", root, ") passes an ", role, " list");
    return {};
  }
  TORCH_CHECK(lists.size() == 1 && static_cast<int>(lists[0].size()) == size, "braid: ", op,
              ": the root needs one ", role, " list of ", size, " tensors");
  const std::string an = std::string("an ") + role;
  for (const auto& t : lists[0]) {
    checkTensor(t, op, role);
    checkSameType(mine, t, op, an.c_str());
    TORCH_CHECK(t.numel() == mine.numel(), "braid: ", op, ": ", an, " has ", t.numel(),
                " elements but the ", other, " has ", mine.numel());
  }
  return lists[0];
}

}  // namespace

// ---------------------------------------------------------------- reductions

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].is_sparse())
    return allreduceSparse(tensors, opts);
  const at::Tensor& t = checkSingle(tensors, "all_reduce", "input");
  const Reduction red = toReduction(opts.reduceOp, t, "all_reduce");
  const auto dtype = red.dtype;
  const auto op = red.op;
  auto comm = comm_;
  return enqueue(
      c10d::OpType::ALLREDUCE, "braid:all_reduce", tensors, tensors,
      [comm, t, dtype, op] {
        InOutStage s(t);
        comm->allreduce(s.ptr(), s.ptr(), static_cast<std::size_t>(t.numel()), dtype, op);
        s.commit();
      },
      callOptions(opts));
}

// Sparse COO tensors (e.g. nn.Embedding(sparse=True) gradients under DDP): every rank gathers
// everyone's indices and values (two allgatherv, sizes exchanged first), and torch sums the
// duplicates (coalesce). Bytes on the wire: every rank's nonzeros to every rank, like Gloo's.
c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allreduceSparse(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = tensors[0];
  TORCH_CHECK(t.device().is_cpu(), "braid: all_reduce: a sparse tensor must be on the CPU");
  TORCH_CHECK(static_cast<c10d::ReduceOp::RedOpType>(opts.reduceOp) == c10d::ReduceOp::SUM,
              "braid: all_reduce of a sparse tensor supports ReduceOp.SUM only");
  auto comm = comm_;
  const int size = size_;
  return enqueue(c10d::OpType::ALLREDUCE, "braid:all_reduce", tensors, tensors, [comm, t, size] {
    const at::Tensor in = t.coalesce();
    std::int64_t nnz = in._nnz();
    const at::Tensor idx = in._indices().t().contiguous();  // nnz x sparse_dim
    const at::Tensor val = in._values().contiguous();       // nnz x dense sizes
    std::vector<std::int64_t> nnzs(static_cast<std::size_t>(size));
    comm->allgather(&nnz, nnzs.data(), 1, braid::DataType::Int64);
    const std::int64_t total = std::accumulate(nnzs.begin(), nnzs.end(), std::int64_t{0});
    std::vector<std::int64_t> valShape = val.sizes().vec();
    const std::size_t rowBytes = val.element_size() * static_cast<std::size_t>(std::accumulate(
                                                          valShape.begin() + 1, valShape.end(),
                                                          std::int64_t{1}, std::multiplies<>()));
    const auto sparseDim = static_cast<std::size_t>(in.sparse_dim());
    std::vector<std::size_t> idxCounts, valCounts;
    for (std::int64_t n : nnzs) {
      idxCounts.push_back(static_cast<std::size_t>(n) * sparseDim * sizeof(std::int64_t));
      valCounts.push_back(static_cast<std::size_t>(n) * rowBytes);
    }
    at::Tensor allIdx = at::empty({total, static_cast<std::int64_t>(sparseDim)}, at::kLong);
    valShape[0] = total;
    at::Tensor allVal = at::empty(valShape, val.options());
    auto ptr = [](const at::Tensor& x) { return byteSize(x) ? x.data_ptr() : nullptr; };
    comm->allgatherv(ptr(idx), ptr(allIdx), idxCounts, {}, kByte);
    comm->allgatherv(ptr(val), ptr(allVal), valCounts, {}, kByte);
    at::Tensor sum = at::sparse_coo_tensor(allIdx.t(), allVal, t.sizes()).coalesce();
    t.copy_(sum);
  });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "braid: all_reduce_coalesced needs at least one tensor");
  for (const auto& t : tensors) {
    checkTensor(t, "all_reduce_coalesced", "input");
    checkSameType(tensors[0], t, "all_reduce_coalesced", "a tensor");
  }
  const Reduction red = toReduction(opts.reduceOp, tensors[0], "all_reduce_coalesced");
  const auto dtype = red.dtype;
  const auto op = red.op;
  auto comm = comm_;
  const std::size_t count = totalBytes(tensors) / tensors[0].element_size();
  return enqueue(
      c10d::OpType::ALLREDUCE_COALESCED, "braid:all_reduce", tensors, tensors,
      [comm, tensors, dtype, op, count] {
        Packed p = pack(tensors);
        comm->allreduce(p.base, p.base, count, dtype, op);
        unpack(p, tensors);
      },
      callOptions(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  const at::Tensor& t = checkSingle(tensors, "reduce", "input");
  checkRoot(opts.rootRank, size_, "reduce");
  TORCH_CHECK(opts.rootTensor == 0, "braid: reduce: rootTensor must be 0 (one tensor per process)");
  const Reduction red = toReduction(opts.reduceOp, t, "reduce");
  const auto dtype = red.dtype;
  const auto op = red.op;
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = rank_ == root;
  auto comm = comm_;
  return enqueue(
      c10d::OpType::REDUCE, "braid:reduce", tensors, tensors,
      [comm, t, dtype, op, root, isRoot] {
        const auto n = static_cast<std::size_t>(t.numel());
        if (isRoot) {
          InOutStage s(t);
          comm->reduce(s.ptr(), s.ptr(), n, dtype, op, root);
          s.commit();
        } else {
          at::Tensor in = t.contiguous();
          comm->reduce(n ? in.data_ptr() : nullptr, nullptr, n, dtype, op, root);
        }
      },
      callOptions(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = checkSingle(outputs, "reduce_scatter", "output");
  const auto& in = listPerProcess(inputs, size_, out, "reduce_scatter", "input");
  TORCH_CHECK(in[static_cast<std::size_t>(rank_)].numel() == out.numel(),
              "braid: reduce_scatter: the output has ", out.numel(), " elements but input[", rank_,
              "] (this rank's block) has ", in[static_cast<std::size_t>(rank_)].numel());
  const Reduction red = toReduction(opts.reduceOp, out, "reduce_scatter");
  const auto dtype = red.dtype;
  const auto op = red.op;
  std::vector<std::size_t> counts;
  for (const auto& t : in) counts.push_back(static_cast<std::size_t>(t.numel()));
  auto comm = comm_;
  return enqueue(
      c10d::OpType::REDUCE_SCATTER, "braid:reduce_scatter", in, outputs,
      [comm, out, in, counts, dtype, op] {
        Packed p = pack(in);
        OutStage o(out);
        if (allEqual(counts))
          comm->reduceScatter(p.base, o.ptr(), counts[0], dtype, op);
        else
          comm->reduceScatterv(p.base, o.ptr(), counts, dtype, op);
        o.commit();
      },
      callOptions(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkWholeAndPart(output, input, false, size_, "reduce_scatter_tensor");
  const Reduction red = toReduction(opts.reduceOp, input, "reduce_scatter_tensor");
  const auto dtype = red.dtype;
  const auto op = red.op;
  auto comm = comm_;
  at::Tensor out = output, in = input;
  return enqueue(
      c10d::OpType::_REDUCE_SCATTER_BASE, "braid:reduce_scatter_tensor", {in}, {out},
      [comm, out, in, dtype, op] {
        at::Tensor src = in.contiguous();
        OutStage o(out);
        comm->reduceScatter(src.numel() ? src.data_ptr() : nullptr, o.ptr(),
                            static_cast<std::size_t>(out.numel()), dtype, op);
        o.commit();
      },
      callOptions(opts));
}

// ---------------------------------------------------------------- data movement (any dtype)

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = checkSingle(tensors, "broadcast", "input");
  checkRoot(opts.rootRank, size_, "broadcast");
  TORCH_CHECK(opts.rootTensor == 0,
              "braid: broadcast: rootTensor must be 0 (one tensor per process)");
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = rank_ == root;
  auto comm = comm_;
  return enqueue(
      c10d::OpType::BROADCAST, "braid:broadcast", tensors, tensors,
      [comm, t, root, isRoot] {
        InOutStage s(t);
        comm->broadcast(s.ptr(), byteSize(t), kByte, root);
        if (!isRoot) s.commit();
      },
      callOptions(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const at::Tensor& in = checkSingle(inputs, "all_gather", "input");
  const auto& out = listPerProcess(outputs, size_, in, "all_gather", "output");
  TORCH_CHECK(out[static_cast<std::size_t>(rank_)].numel() == in.numel(),
              "braid: all_gather: the input has ", in.numel(), " elements but output[", rank_,
              "] has ", out[static_cast<std::size_t>(rank_)].numel());
  const auto counts = byteCounts(out);
  auto comm = comm_;
  return enqueue(
      c10d::OpType::ALLGATHER, "braid:all_gather", inputs, out,
      [comm, in, out, counts] {
        at::Tensor src = in.contiguous();
        Packed area = receiveArea(out);
        void* s = byteSize(src) ? src.data_ptr() : nullptr;
        if (allEqual(counts))
          comm->allgather(s, area.base, counts[0], kByte);
        else
          comm->allgatherv(s, area.base, counts, {}, kByte);
        unpack(area, out);
      },
      callOptions(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  checkWholeAndPart(output, input, true, size_, "all_gather_into_tensor");
  auto comm = comm_;
  at::Tensor out = output, in = input;
  return enqueue(
      c10d::OpType::_ALLGATHER_BASE, "braid:all_gather_into_tensor", {in}, {out},
      [comm, out, in] {
        at::Tensor src = in.contiguous();
        OutStage o(out);
        comm->allgather(byteSize(src) ? src.data_ptr() : nullptr, o.ptr(), byteSize(src), kByte);
        o.commit();
      },
      callOptions(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(static_cast<int>(outputLists.size()) == size_,
              "braid: all_gather_coalesced: ", outputLists.size(), " output lists for a group of ",
              size_);
  for (const auto& t : inputs) checkTensor(t, "all_gather_coalesced", "input");
  std::vector<at::Tensor> flatOut;
  for (const auto& list : outputLists) {
    TORCH_CHECK(list.size() == inputs.size(), "braid: all_gather_coalesced: an output list has ",
                list.size(), " tensors for ", inputs.size(), " inputs");
    for (std::size_t j = 0; j < list.size(); ++j) {
      checkTensor(list[j], "all_gather_coalesced", "output");
      checkSameType(inputs[j], list[j], "all_gather_coalesced", "an output");
      TORCH_CHECK(list[j].numel() == inputs[j].numel(), "braid: all_gather_coalesced: output ", j,
                  " has ", list[j].numel(), " elements but input ", j, " has ", inputs[j].numel());
      flatOut.push_back(list[j]);
    }
  }
  auto comm = comm_;
  const std::size_t bytes = totalBytes(inputs);
  return enqueue(
      c10d::OpType::ALLGATHER_COALESCED, "braid:all_gather", inputs, flatOut,
      [comm, inputs, flatOut, bytes] {
        Packed src = pack(inputs);
        Packed area = receiveArea(flatOut);
        comm->allgather(src.base, area.base, bytes, kByte);
        unpack(area, flatOut);
      },
      callOptions(opts));
}

// _coalescing_manager's fast path (FSDP's coalesced all_gather_into_tensor): one Work, one
// braid allgather per tensor, in order.
c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  checkCoalesced(outputs, inputs, true, size_, "all_gather_into_tensor (coalesced)");
  auto comm = comm_;
  return enqueue(
      c10d::OpType::ALLGATHER_INTO_TENSOR_COALESCED, "braid:all_gather_into_tensor_coalesced",
      inputs, outputs,
      [comm, outputs, inputs, size = size_] {
        if (inputs.size() == 1) {
          at::Tensor src = inputs[0].contiguous();
          OutStage o(outputs[0]);
          comm->allgather(byteSize(src) ? src.data_ptr() : nullptr, o.ptr(), byteSize(src), kByte);
          o.commit();
          return;
        }
        // One allgather of the inputs packed back to back (B bytes per rank): rank r's block
        // of the result holds its inputs at the same offsets, copied to row r of each output.
        std::vector<std::int64_t> offsets, bytes;
        std::int64_t total = 0;
        for (const auto& in : inputs) {
          offsets.push_back(total);
          bytes.push_back(static_cast<std::int64_t>(byteSize(in)));
          total += bytes.back();
        }
        if (total == 0) return;
        const auto u8 = at::TensorOptions().dtype(at::kByte);
        at::Tensor send = at::empty({total}, u8);
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          if (!bytes[i]) continue;
          at::Tensor src = inputs[i].contiguous();
          send.narrow(0, offsets[i], bytes[i]).copy_(at::from_blob(src.data_ptr(), {bytes[i]}, u8));
        }
        at::Tensor recv = at::empty({size, total}, u8);
        comm->allgather(send.data_ptr(), recv.data_ptr(), static_cast<std::size_t>(total), kByte);
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          if (!bytes[i]) continue;
          OutStage o(outputs[i]);
          at::from_blob(o.ptr(), {size, bytes[i]}, u8).copy_(recv.narrow(1, offsets[i], bytes[i]));
          o.commit();
        }
      },
      callOptions(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* what = "reduce_scatter_tensor (coalesced)";
  checkCoalesced(outputs, inputs, false, size_, what);
  std::vector<Reduction> reds;
  for (const auto& in : inputs) reds.push_back(toReduction(opts.reduceOp, in, what));
  auto comm = comm_;
  return enqueue(
      c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED, "braid:reduce_scatter_tensor_coalesced",
      inputs, outputs,
      [comm, outputs, inputs, reds, size = size_] {
        bool oneType = inputs.size() > 1;
        for (const auto& in : inputs)
          oneType = oneType && in.scalar_type() == inputs[0].scalar_type();
        if (oneType) {
          // One reduceScatter of the inputs packed rank block by rank block: block r holds
          // block r of every input (C elements in all), so the reduced block this rank gets
          // holds its block of every output at the same offsets.
          std::vector<std::int64_t> offsets, counts;
          std::int64_t total = 0;
          for (const auto& out : outputs) {
            offsets.push_back(total);
            counts.push_back(out.numel());
            total += out.numel();
          }
          if (total == 0) return;
          const auto opts = inputs[0].options();
          at::Tensor send = at::empty({size, total}, opts);
          for (std::size_t i = 0; i < inputs.size(); ++i) {
            if (!counts[i]) continue;
            send.narrow(1, offsets[i], counts[i]).copy_(inputs[i].reshape({size, counts[i]}));
          }
          at::Tensor recv = at::empty({total}, opts);
          comm->reduceScatter(send.data_ptr(), recv.data_ptr(), static_cast<std::size_t>(total),
                              reds[0].dtype, reds[0].op);
          for (std::size_t i = 0; i < outputs.size(); ++i) {
            if (!counts[i]) continue;
            outputs[i].copy_(recv.narrow(0, offsets[i], counts[i]).view(outputs[i].sizes()));
          }
          return;
        }
        for (std::size_t i = 0; i < inputs.size(); ++i) {
          at::Tensor src = inputs[i].contiguous();
          OutStage o(outputs[i]);
          comm->reduceScatter(src.numel() ? src.data_ptr() : nullptr, o.ptr(),
                              static_cast<std::size_t>(outputs[i].numel()), reds[i].dtype,
                              reds[i].op);
          o.commit();
        }
      },
      callOptions(opts));
}

// dist.gather_into_tensor: the root receives every rank's input back to back in one tensor;
// the others pass an empty placeholder.
c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::gather_into_tensor(
    at::Tensor& output, at::Tensor& input, const c10d::GatherOptions& opts) {
  const char* what = "gather_into_tensor";
  checkTensor(input, what, "input");
  checkRoot(opts.rootRank, size_, what);
  const int root = static_cast<int>(opts.rootRank);
  const bool isRoot = rank_ == root;
  if (isRoot) {
    checkTensor(output, what, "output");
    checkSameType(input, output, what, "the output");
    TORCH_CHECK(output.numel() == input.numel() * size_,
                "braid: gather_into_tensor: the output has ", output.numel(),
                " elements; it must have group size (", size_, ") x input (", input.numel(), ")");
  }
  auto comm = comm_;
  at::Tensor out = output, in = input;
  std::vector<at::Tensor> outs;
  if (isRoot) outs.push_back(out);
  return enqueue(
      c10d::OpType::GATHER, "braid:gather_into_tensor", {in}, outs,
      [comm, out, in, root, isRoot] {
        at::Tensor src = in.contiguous();
        void* s = byteSize(src) ? src.data_ptr() : nullptr;
        if (!isRoot) {
          comm->gather(s, nullptr, byteSize(src), kByte, root);
          return;
        }
        OutStage o(out);
        comm->gather(s, o.ptr(), byteSize(src), kByte, root);
        o.commit();
      },
      callOptions(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const at::Tensor& in = checkSingle(inputs, "gather", "input");
  checkRoot(opts.rootRank, size_, "gather");
  const int root = static_cast<int>(opts.rootRank);
  const std::vector<at::Tensor> out =
      rootList(outputs, rank_ == root, root, size_, in, "gather", "output", "input");
  auto comm = comm_;
  return enqueue(
      c10d::OpType::GATHER, "braid:gather", inputs, out,
      [comm, in, out, root] {
        at::Tensor src = in.contiguous();
        void* s = byteSize(src) ? src.data_ptr() : nullptr;
        if (out.empty()) {
          comm->gather(s, nullptr, byteSize(src), kByte, root);
          return;
        }
        Packed area = receiveArea(out);
        comm->gather(s, area.base, byteSize(src), kByte, root);
        unpack(area, out);
      },
      callOptions(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const at::Tensor& out = checkSingle(outputs, "scatter", "output");
  checkRoot(opts.rootRank, size_, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  const std::vector<at::Tensor> in =
      rootList(inputs, rank_ == root, root, size_, out, "scatter", "input", "output");
  auto comm = comm_;
  return enqueue(
      c10d::OpType::SCATTER, "braid:scatter", in, outputs,
      [comm, in, out, root] {
        OutStage o(out);
        Packed src;
        if (!in.empty()) src = pack(in);
        comm->scatter(src.base, o.ptr(), byteSize(out), kByte, root);
        o.commit();
      },
      callOptions(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<std::int64_t>& outputSplits,
    std::vector<std::int64_t>& inputSplits, const c10d::AllToAllOptions& opts) {
  checkTensor(output, "all_to_all_single", "output");
  checkTensor(input, "all_to_all_single", "input");
  checkSameType(input, output, "all_to_all_single", "the output");
  const auto sendCounts = splitBytes(input, inputSplits, size_, "the input");
  const auto recvCounts = splitBytes(output, outputSplits, size_, "the output");
  const bool equal = inputSplits.empty() && outputSplits.empty();
  if (equal)
    TORCH_CHECK(input.numel() == output.numel(), "braid: all_to_all_single: the input has ",
                input.numel(), " elements and the output ", output.numel(),
                " (equal splits need equal sizes)");
  auto comm = comm_;
  at::Tensor out = output, in = input;
  return enqueue(
      c10d::OpType::ALLTOALL_BASE, "braid:all_to_all", {in}, {out},
      [comm, out, in, sendCounts, recvCounts, equal] {
        // braid does not alltoall in place: give it a private copy of the input then.
        at::Tensor src =
            sharesMemory(in, out) ? in.clone(at::MemoryFormat::Contiguous) : in.contiguous();
        OutStage o(out);
        void* s = byteSize(src) ? src.data_ptr() : nullptr;
        if (equal)
          comm->alltoall(s, o.ptr(), sendCounts[0], kByte);
        else
          comm->alltoallv(s, sendCounts, {}, o.ptr(), recvCounts, {}, kByte);
        o.commit();
      },
      callOptions(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "braid: all_to_all needs ", size_, " input and output tensors, got ", inputs.size(),
              " and ", outputs.size());
  for (const auto& t : inputs) {
    checkTensor(t, "all_to_all", "input");
    checkSameType(inputs[0], t, "all_to_all", "an input");
  }
  for (const auto& t : outputs) {
    checkTensor(t, "all_to_all", "output");
    checkSameType(inputs[0], t, "all_to_all", "an output");
  }
  const auto sendCounts = byteCounts(inputs);
  const auto recvCounts = byteCounts(outputs);
  auto comm = comm_;
  return enqueue(
      c10d::OpType::ALLTOALL, "braid:all_to_all", inputs, outputs,
      [comm, inputs, outputs, sendCounts, recvCounts] {
        Packed src = pack(inputs);
        if (!src.storage.defined() && totalBytes(inputs) > 0) {
          // Packed in place: make sure it does not alias the outputs.
          for (const auto& o : outputs)
            if (sharesMemory(inputs[0], o)) {
              src.storage = at::empty({static_cast<std::int64_t>(totalBytes(inputs))}, at::kByte);
              std::memcpy(src.storage.data_ptr(), src.base, totalBytes(inputs));
              src.base = src.storage.data_ptr();
              break;
            }
        }
        Packed area = receiveArea(outputs);
        comm->alltoallv(src.base, sendCounts, {}, area.base, recvCounts, {}, kByte);
        unpack(area, outputs);
      },
      callOptions(opts));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::barrier(const c10d::BarrierOptions& opts) {
  auto comm = comm_;
  return enqueue(
      c10d::OpType::BARRIER, "braid:barrier", {}, {}, [comm] { comm->barrier(); },
      callOptions(opts));
}

// ---------------------------------------------------------------- point-to-point

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::send(std::vector<at::Tensor>& tensors, int dst,
                                                       int tag) {
  checkOpen("send");
  const at::Tensor& t = checkSingle(tensors, "send", "input");
  TORCH_CHECK(dst >= 0 && dst < size_ && dst != rank_, "braid: send: destination rank ", dst,
              " is not another rank of the group [0, ", size_, ")");
  auto work = p2p_->send(queue_, t, dst, tag);
  tracker_->issue(work, ++p2pSeq_, *queue_);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::recv(std::vector<at::Tensor>& tensors, int src,
                                                       int tag) {
  checkOpen("recv");
  const at::Tensor& t = checkSingle(tensors, "recv", "output");
  TORCH_CHECK(src >= 0 && src < size_ && src != rank_, "braid: recv: source rank ", src,
              " is not another rank of the group [0, ", size_, ")");
  auto work = p2p_->recv(queue_, t, src, tag);
  tracker_->issue(work, ++p2pSeq_, *queue_);
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupBraid::recvAnysource(std::vector<at::Tensor>& tensors,
                                                                int tag) {
  checkOpen("recv");
  const at::Tensor& t = checkSingle(tensors, "recv", "output");
  auto work = p2p_->recvAnySource(queue_, t, tag);
  tracker_->issue(work, ++p2pSeq_, *queue_);
  return work;
}

}  // namespace braid_torch
