#include <braid/types.hpp>
#include <string>

namespace braid {

const char* toString(DataType t) noexcept {
  switch (t) {
    case DataType::Int8:
      return "int8";
    case DataType::Uint8:
      return "uint8";
    case DataType::Int32:
      return "int32";
    case DataType::Int64:
      return "int64";
    case DataType::Float16:
      return "fp16";
    case DataType::BFloat16:
      return "bf16";
    case DataType::Float32:
      return "fp32";
    case DataType::Float64:
      return "fp64";
    case DataType::Bool:
      return "bool";
    case DataType::Int16:
      return "int16";
    case DataType::Uint16:
      return "uint16";
    case DataType::Uint32:
      return "uint32";
    case DataType::Uint64:
      return "uint64";
    case DataType::Float8E4M3Fn:
      return "fp8e4m3";
    case DataType::Float8E5M2:
      return "fp8e5m2";
    case DataType::Complex64:
      return "complex64";
    case DataType::Complex128:
      return "complex128";
  }
  return "invalid-dtype";
}

const char* toString(ReduceOp op) noexcept {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Prod:
      return "prod";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::BAnd:
      return "band";
    case ReduceOp::BOr:
      return "bor";
    case ReduceOp::BXor:
      return "bxor";
    case ReduceOp::PremulSum:
      return "premul_sum";
  }
  return "invalid-op";
}

const char* toString(Collective c) noexcept {
  switch (c) {
    case Collective::Allreduce:
      return "allreduce";
    case Collective::Reduce:
      return "reduce";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::Allgather:
      return "allgather";
    case Collective::Allgatherv:
      return "allgatherv";
    case Collective::ReduceScatter:
      return "reducescatter";
    case Collective::ReduceScatterv:
      return "reducescatterv";
    case Collective::Gather:
      return "gather";
    case Collective::Scatter:
      return "scatter";
    case Collective::Alltoall:
      return "alltoall";
    case Collective::Alltoallv:
      return "alltoallv";
    case Collective::Barrier:
      return "barrier";
    case Collective::Send:
      return "send";
    case Collective::Recv:
      return "recv";
  }
  return "invalid-collective";
}

std::optional<DataType> parseDataType(std::string_view s) noexcept {
  if (s == "int8" || s == "char") return DataType::Int8;
  if (s == "uint8") return DataType::Uint8;
  if (s == "int32" || s == "int") return DataType::Int32;
  if (s == "int64") return DataType::Int64;
  if (s == "fp16" || s == "half" || s == "float16") return DataType::Float16;
  if (s == "bf16" || s == "bfloat16") return DataType::BFloat16;
  if (s == "fp32" || s == "float" || s == "float32" || s == "f32") return DataType::Float32;
  if (s == "fp64" || s == "double" || s == "float64") return DataType::Float64;
  if (s == "bool") return DataType::Bool;
  if (s == "int16" || s == "short") return DataType::Int16;
  if (s == "uint16") return DataType::Uint16;
  if (s == "uint32") return DataType::Uint32;
  if (s == "uint64") return DataType::Uint64;
  if (s == "fp8e4m3" || s == "float8_e4m3fn" || s == "e4m3") return DataType::Float8E4M3Fn;
  if (s == "fp8e5m2" || s == "float8_e5m2" || s == "e5m2") return DataType::Float8E5M2;
  if (s == "complex64" || s == "c64" || s == "cfloat") return DataType::Complex64;
  if (s == "complex128" || s == "c128" || s == "cdouble") return DataType::Complex128;
  return std::nullopt;
}

std::optional<ReduceOp> parseReduceOp(std::string_view s) noexcept {
  for (int i = 0; i < kNumReduceOps; ++i) {
    auto op = static_cast<ReduceOp>(i);
    if (s == toString(op)) return op;
  }
  if (s == "product") return ReduceOp::Prod;
  if (s == "premulsum" || s == "premul") return ReduceOp::PremulSum;
  return std::nullopt;
}

std::optional<Collective> parseCollective(std::string_view s) noexcept {
  for (int i = 0; i <= static_cast<int>(Collective::Recv); ++i) {
    auto c = static_cast<Collective>(i);
    if (s == toString(c)) return c;
  }
  if (s == "reduce_scatter") return Collective::ReduceScatter;
  if (s == "reduce_scatterv") return Collective::ReduceScatterv;
  if (s == "bcast") return Collective::Broadcast;
  return std::nullopt;
}

}  // namespace braid
