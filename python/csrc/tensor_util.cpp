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
    case at::kShort:
      return braid::DataType::Int16;
    case at::kInt:
      return braid::DataType::Int32;
    case at::kLong:
      return braid::DataType::Int64;
    case at::kUInt16:
      return braid::DataType::Uint16;
    case at::kUInt32:
      return braid::DataType::Uint32;
    case at::kUInt64:
      return braid::DataType::Uint64;
    case at::kBool:
      return braid::DataType::Bool;
    case at::kFloat8_e4m3fn:
      return braid::DataType::Float8E4M3Fn;
    case at::kFloat8_e5m2:
      return braid::DataType::Float8E5M2;
    case at::kComplexFloat:
      return braid::DataType::Complex64;
    case at::kComplexDouble:
      return braid::DataType::Complex128;
    default:
      return std::nullopt;
  }
}

namespace {

constexpr const char* kReducible =
    "braid reduces bool, uint8, int8, int16, int32, int64, uint16, uint32, uint64, float16, "
    "bfloat16, float32, float64, float8_e4m3fn, float8_e5m2, complex64 and complex128";

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

// PREMUL_SUM's factor: torch keeps it in the op's supplement, a double or a one-element tensor
// (read here, on the calling thread, so the factor is the one of the call).
double premulFactor(const c10d::ReduceOp& op, const char* what) {
  const auto* s = dynamic_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(s != nullptr, "braid: ", what,
              ": ReduceOp.PREMUL_SUM without a factor (make it "
              "with torch.distributed._make_nccl_premul_sum)");
  if (s->tensor_factor.defined()) {
    TORCH_CHECK(s->tensor_factor.numel() == 1, "braid: ", what,
                ": PREMUL_SUM's factor tensor must have one element, got ",
                s->tensor_factor.numel());
    return s->tensor_factor.to(at::kCPU).to(at::kDouble).item<double>();
  }
  return s->double_factor;
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
              "; collectives that only move data accept any dtype)");
  braid::ReduceOp mapped = braid::ReduceOp::Sum;
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
    case c10d::ReduceOp::BAND:
      mapped = braid::ReduceOp::BAnd;
      break;
    case c10d::ReduceOp::BOR:
      mapped = braid::ReduceOp::BOr;
      break;
    case c10d::ReduceOp::BXOR:
      mapped = braid::ReduceOp::BXor;
      break;
    case c10d::ReduceOp::PREMUL_SUM:
      mapped = braid::ReduceOp::PremulSum;
      break;
    default:
      break;
  }
  // Raised here, on the calling thread, with torch's names (braid would raise the same on
  // every rank, naming its own).
  TORCH_CHECK(braid::isSupported(*dtype, mapped), "braid: ", what, " does not support ReduceOp.",
              name, " on dtype ", t.scalar_type(),
              " (bitwise ops need an integer or bool dtype; MIN and MAX are not defined on "
              "complex; AVG and PREMUL_SUM not on bool)");
  if (mapped == braid::ReduceOp::PremulSum)
    return {*dtype, braid::premulSum(premulFactor(op, what))};
  return {*dtype, mapped};
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
