#include "tensor_util.hpp"

#include <c10/util/Exception.h>

#include <cstring>

namespace braid_torch {

std::optional<braid::DataType> reducibleType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return braid::DataType::Float32;
    case at::kDouble:
      return braid::DataType::Float64;
    case at::kHalf:
      return braid::DataType::Float16;
    case at::kBFloat16:
      return braid::DataType::BFloat16;
    case at::kChar:
      return braid::DataType::Int8;
    case at::kByte:
      return braid::DataType::Uint8;
    case at::kInt:
      return braid::DataType::Int32;
    case at::kLong:
      return braid::DataType::Int64;
    default:
      return std::nullopt;
  }
}

namespace {

constexpr const char* kReducible =
    "braid reduces float32, float64, float16, bfloat16, int8, uint8, int32 and int64";
constexpr const char* kOps = "with SUM, AVG, PRODUCT, MIN and MAX";

const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return nullptr;
  }
}

}  // namespace

braid::DataType requireReducible(const at::Tensor& t, const char* op) {
  auto d = reducibleType(t.scalar_type());
  TORCH_CHECK(d.has_value(), "braid: ", op, " cannot reduce dtype ", t.scalar_type(), " (",
              kReducible, "; collectives that only move data accept any dtype)");
  return *d;
}

Reduction toReduction(const c10d::ReduceOp& op, const at::Tensor& t, const char* what) {
  const auto type = static_cast<c10d::ReduceOp::RedOpType>(op);
  const char* name = opName(type);
  TORCH_CHECK(name != nullptr, "braid: ", what, " got an unknown ReduceOp (",
              static_cast<int>(op.op_), ") on dtype ", t.scalar_type());
  const auto dtype = reducibleType(t.scalar_type());
  // Both names in every message: which of the two is the problem, and the combination.
  TORCH_CHECK(dtype.has_value(), "braid: ", what, " cannot reduce dtype ", t.scalar_type(),
              " (ReduceOp.", name, " on dtype ", t.scalar_type(), " is not supported: ", kReducible,
              " ", kOps, "; collectives that only move data accept any dtype)");
  std::optional<braid::ReduceOp> mapped;
  switch (type) {
    case c10d::ReduceOp::SUM:
      mapped = braid::ReduceOp::Sum;
      break;
    case c10d::ReduceOp::AVG:
      mapped = braid::ReduceOp::Avg;
      break;
    case c10d::ReduceOp::PRODUCT:
      mapped = braid::ReduceOp::Prod;
      break;
    case c10d::ReduceOp::MIN:
      mapped = braid::ReduceOp::Min;
      break;
    case c10d::ReduceOp::MAX:
      mapped = braid::ReduceOp::Max;
      break;
    default:
      break;  // BAND, BOR, BXOR, PREMUL_SUM
  }
  TORCH_CHECK(mapped.has_value(), "braid: ", what, " does not support ReduceOp.", name,
              " (ReduceOp.", name, " on dtype ", t.scalar_type(), " is not supported: ", kReducible,
              " ", kOps, ")");
  return {*dtype, *mapped};
}

void checkTensor(const at::Tensor& t, const char* op, const char* what) {
  TORCH_CHECK(t.defined(), "braid: ", op, ": ", what, " is an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "braid: ", op, ": ", what,
              " must be a CPU tensor (braid is a CPU backend), got one on ", t.device());
  TORCH_CHECK(t.layout() == at::kStrided, "braid: ", op, ": ", what,
              " must be a dense tensor, got layout ", t.layout());
}

const at::Tensor& checkSingle(const std::vector<at::Tensor>& ts, const char* op, const char* what) {
  TORCH_CHECK(ts.size() == 1, "braid: ", op, " takes one ", what, " tensor per process, got ",
              ts.size());
  checkTensor(ts[0], op, what);
  return ts[0];
}

void checkRoot(std::int64_t root, int size, const char* op) {
  TORCH_CHECK(root >= 0 && root < size, "braid: ", op, ": root rank ", root,
              " is outside the group [0, ", size, ")");
}

void checkSameType(const at::Tensor& a, const at::Tensor& b, const char* op, const char* what) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "braid: ", op, ": ", what, " has dtype ",
              b.scalar_type(), " but the input has dtype ", a.scalar_type());
}

std::size_t totalBytes(const std::vector<at::Tensor>& ts) {
  std::size_t n = 0;
  for (const auto& t : ts) n += byteSize(t);
  return n;
}

void* packedBase(const std::vector<at::Tensor>& ts) {
  if (ts.empty()) return nullptr;
  auto* next = static_cast<char*>(ts[0].data_ptr());
  for (const auto& t : ts) {
    if (!t.is_contiguous() || static_cast<char*>(t.data_ptr()) != next) return nullptr;
    next += byteSize(t);
  }
  return ts[0].data_ptr();
}

Packed pack(const std::vector<at::Tensor>& ts) {
  Packed p;
  if (void* base = packedBase(ts)) {
    p.base = base;
    return p;
  }
  p.storage = at::empty({static_cast<std::int64_t>(totalBytes(ts))}, at::kByte);
  auto* dst = static_cast<char*>(p.storage.data_ptr());
  for (const auto& t : ts) {
    const std::size_t n = byteSize(t);
    if (n == 0) continue;
    at::Tensor c = t.contiguous();
    std::memcpy(dst, c.data_ptr(), n);
    dst += n;
  }
  p.base = p.storage.numel() ? p.storage.data_ptr() : nullptr;
  return p;
}

Packed receiveArea(const std::vector<at::Tensor>& ts) {
  Packed p;
  if (void* base = packedBase(ts)) {
    p.base = base;
    return p;
  }
  p.storage = at::empty({static_cast<std::int64_t>(totalBytes(ts))}, at::kByte);
  p.base = p.storage.numel() ? p.storage.data_ptr() : nullptr;
  return p;
}

void unpack(const Packed& p, const std::vector<at::Tensor>& ts) {
  if (!p.storage.defined()) return;  // received in place
  const auto* src = static_cast<const char*>(p.base);
  for (const auto& t : ts) {
    const std::size_t n = byteSize(t);
    if (n == 0) continue;
    OutStage out(t);
    std::memcpy(out.ptr(), src, n);
    out.commit();
    src += n;
  }
}

}  // namespace braid_torch
