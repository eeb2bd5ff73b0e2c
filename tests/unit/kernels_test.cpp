// Reduction kernels against a plain double-arithmetic reference, for every dtype x op, at
// lengths that exercise vector bodies and scalar tails, aliasing dst == a.
#include <gtest/gtest.h>

#include "harness/data.hpp"
#include "kernels/reduce.hpp"

#include <cmath>

namespace braid::test {
namespace {

TEST(Kernels, EveryDtypeAndOpMatchesReference) {
  for (DataType t : kAllDataTypes) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max}) {
      for (std::size_t n : {0, 1, 3, 15, 16, 17, 63, 64, 65, 1000, 4099}) {
        Buffer a(t, n), b(t, n), d(t, n);
        for (std::size_t i = 0; i < n; ++i) {
          a.set(i, testValue(t, op, 1, i));
          b.set(i, testValue(t, op, 2, i));
        }
        kernels::reduce3(t, op, d.data(), a.data(), b.data(), n);
        kernels::reduceInto(t, op, a.data(), b.data(), n);  // aliasing form
        for (std::size_t i = 0; i < n; ++i) {
          double e = expectedReduce(t, op, {roundTrip(t, testValue(t, op, 1, i)),
                                            roundTrip(t, testValue(t, op, 2, i))});
          ASSERT_EQ(d.get(i), e) << toString(t) << " " << toString(op) << " n=" << n << " i=" << i;
          ASSERT_EQ(a.get(i), e) << toString(t) << " " << toString(op) << " in place";
        }
      }
    }
  }
}

TEST(Kernels, IntegerSumsWrapLikeTwosComplement) {
  std::int8_t a[3] = {127, -128, 100}, b[3] = {1, -1, 100};
  kernels::reduceInto(DataType::Int8, ReduceOp::Sum, a, b, 3);
  EXPECT_EQ(a[0], -128);
  EXPECT_EQ(a[1], 127);
  EXPECT_EQ(a[2], static_cast<std::int8_t>(200));
}

TEST(Kernels, HalfPrecisionAccumulatesInFloat) {
  // 2048 + 1 is not representable in fp16 (rounds to 2048); the kernel rounds once per step.
  std::uint16_t a = kernels::floatToHalf(2048.0f), b = kernels::floatToHalf(1.0f);
  kernels::reduceInto(DataType::Float16, ReduceOp::Sum, &a, &b, 1);
  EXPECT_EQ(kernels::halfToFloat(a), 2048.0f);
  std::uint16_t x = kernels::floatToBf16(1.5f), y = kernels::floatToBf16(2.25f);
  kernels::reduceInto(DataType::BFloat16, ReduceOp::Prod, &x, &y, 1);
  EXPECT_EQ(kernels::bf16ToFloat(x), 3.375f);
  EXPECT_TRUE(std::isnan(kernels::bf16ToFloat(kernels::floatToBf16(NAN))));
}

TEST(Kernels, DivideCompletesAverage) {
  std::int32_t i[2] = {7, -7};
  kernels::divideBy(DataType::Int32, i, 2, 2);
  EXPECT_EQ(i[0], 3);
  EXPECT_EQ(i[1], -3);
  float f[1] = {7.0f};
  kernels::divideBy(DataType::Float32, f, 1, 2);
  EXPECT_EQ(f[0], 3.5f);
}

TEST(Kernels, ReportsTheIsaItDispatchesTo) {
  EXPECT_NE(std::string(kernels::selectedIsa()).size(), 0u);
}

}  // namespace
}  // namespace braid::test
