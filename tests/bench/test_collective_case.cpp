// bench/collectives/collective_case.h: the nccl-tests bandwidth conventions,
// the case shapes and exact data, and the command line of the collective
// benches, on the CPU. The data test runs each collective's arithmetic by
// hand over n simulated ranks and compares with expected_value.
#include <gtest/gtest.h>

#include "collectives/collective_case.h"

namespace lattice::bench {
namespace {

TEST(CollectiveCase, BusBandwidthFactorsOfNcclTests) {
  // nccl-tests doc/PERFORMANCE.md: all_reduce 2(n-1)/n, all_gather and
  // reduce_scatter (n-1)/n, broadcast 1; sendrecv moves its bytes once.
  for (int n : {1, 2, 3, 4, 8, 16}) {
    EXPECT_DOUBLE_EQ(busbw_factor(Collective::all_reduce, n), 2.0 * (n - 1) / n) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(Collective::all_gather, n), double(n - 1) / n) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(Collective::reduce_scatter, n), double(n - 1) / n) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(Collective::broadcast, n), 1.0) << n;
    EXPECT_DOUBLE_EQ(busbw_factor(Collective::sendrecv, n), 1.0) << n;
  }
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::all_reduce, 8), 1.75);
  EXPECT_DOUBLE_EQ(busbw_factor(Collective::all_gather, 8), 0.875);
}

TEST(CollectiveCase, BandwidthIsBytesOverSecondsInGBPerSecond) {
  // 1 GiB all_reduce over 8 ranks in 10 ms.
  const Bandwidth bw = bandwidth(Collective::all_reduce, 8, int64_t(1) << 30, 0.010);
  EXPECT_DOUBLE_EQ(bw.algbw, 1073741824.0 / 0.010 / 1e9);
  EXPECT_DOUBLE_EQ(bw.busbw, bw.algbw * 1.75);
  EXPECT_DOUBLE_EQ(bandwidth(Collective::reduce_scatter, 1, 1 << 20, 1e-3).busbw, 0.0);
}

TEST(CollectiveCase, ShapesCountTheLargestBuffer) {
  CaseShape s = case_shape(Collective::all_reduce, 1 << 20, 3);
  EXPECT_EQ(s.total, 262144);
  EXPECT_EQ(s.in, s.total);
  EXPECT_EQ(s.out, s.total);
  EXPECT_EQ(s.bytes(), 1 << 20);
  s = case_shape(Collective::all_gather, 1 << 20, 3);  // rounded down to a multiple of 3 elements
  EXPECT_EQ(s.total, 262143);
  EXPECT_EQ(s.block, 87381);
  EXPECT_EQ(s.in, s.block);
  EXPECT_EQ(s.out, s.total);
  s = case_shape(Collective::reduce_scatter, 1 << 20, 4);
  EXPECT_EQ(s.in, 262144);
  EXPECT_EQ(s.out, 65536);
  EXPECT_EQ(case_shape(Collective::all_gather, 8, 4).block, 0);  // too small to split: skipped
}

TEST(CollectiveCase, ExpectedValuesAreTheCollectivesOfTheInputs) {
  for (int n : {1, 2, 3, 5}) {
    for (Collective c : kCollectives) {
      const CaseShape s = case_shape(c, 4 * 4 * 30, n);
      for (int r = 0; r < n; ++r) {
        for (int64_t i = 0; i < s.out; ++i) {
          float want = 0;  // the collective, computed from every rank's input
          switch (c) {
            case Collective::all_reduce:
              for (int q = 0; q < n; ++q) want += input_value(c, q, i);
              break;
            case Collective::all_gather:
              want = input_value(c, int(i / s.block), i % s.block);
              break;
            case Collective::reduce_scatter:
              for (int q = 0; q < n; ++q) want += input_value(c, q, r * s.block + i);
              break;
            case Collective::broadcast:
              want = input_value(c, 0, i);
              break;
            case Collective::sendrecv:
              want = input_value(c, (r + n - 1) % n, i);
              break;
          }
          ASSERT_EQ(expected_value(c, r, n, s.block, i), want) << collective_name(c) << " n " << n << " r " << r;
        }
      }
    }
  }
}

TEST(CollectiveCase, CpuCaseHoldsItsInputAndCountsWrongElements) {
  CollectiveCase k(Collective::all_reduce, 64, 0, 1);
  k.init();
  EXPECT_EQ(k.wrong(), 0);  // one rank: the sum is the input
  k.out.data<float>()[3] = -1;
  EXPECT_EQ(k.wrong(), 1);
}

TEST(CollectiveCase, ParsesSizesAndNames) {
  EXPECT_EQ(parse_bytes("8"), 8);
  EXPECT_EQ(parse_bytes("64K"), 65536);
  EXPECT_EQ(parse_bytes("1M"), 1 << 20);
  EXPECT_EQ(parse_bytes("1G"), int64_t(1) << 30);
  EXPECT_EQ(parse_bytes("1.5k"), 1536);
  EXPECT_EQ(parse_bytes("1T"), std::nullopt);
  EXPECT_EQ(parse_bytes("M"), std::nullopt);
  EXPECT_EQ(parse_collectives("all_reduce,reduce_scatter"),
            (std::vector<Collective>{Collective::all_reduce, Collective::reduce_scatter}));
  EXPECT_EQ(parse_collectives("all_reduce,alltoall"), std::nullopt);
}

TEST(CollectiveCase, SweepsFromMinToMaxInclusive) {
  EXPECT_EQ(size_sweep(1 << 20, 1 << 30, 2).size(), 11u);  // 1 MiB .. 1 GiB
  EXPECT_EQ(size_sweep(8, 100, 4), (std::vector<int64_t>{8, 32, 100}));
  EXPECT_EQ(size_sweep(16, 16, 4), (std::vector<int64_t>{16}));
  EXPECT_TRUE(size_sweep(8, 100, 1).empty());
}

TEST(CollectiveCase, CommandLine) {
  SweepOptions o;
  const char* ok[] = {"b", "--min-bytes", "1M",         "--max-bytes", "1G", "--step",
                      "2", "--ops",       "all_gather", "--iters",     "20"};
  EXPECT_EQ(parse_sweep_options(11, ok, o), std::nullopt);
  EXPECT_EQ(o.min_bytes, 1 << 20);
  EXPECT_EQ(o.max_bytes, int64_t(1) << 30);
  EXPECT_EQ(o.factor, 2);
  EXPECT_EQ(o.ops, std::vector<Collective>{Collective::all_gather});
  EXPECT_EQ(o.iters, 20);
  const char* bad_step[] = {"b", "--step", "1"};
  EXPECT_EQ(parse_sweep_options(3, bad_step, o), "--step expects an integer >= 2, got '1'");
  const char* missing[] = {"b", "--iters"};
  EXPECT_EQ(parse_sweep_options(2, missing, o), "--iters needs a value");
  const char* unknown[] = {"b", "--size", "1M"};
  EXPECT_EQ(parse_sweep_options(3, unknown, o), "unknown argument '--size'");
  const char* inverted[] = {"b", "--min-bytes", "2M", "--max-bytes", "1M"};
  EXPECT_EQ(parse_sweep_options(5, inverted, o), "--min-bytes is above --max-bytes");
}

}  // namespace
}  // namespace lattice::bench
