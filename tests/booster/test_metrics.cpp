#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "booster/metrics.h"
#include "support/test_support.h"

using namespace lattice;

TEST(Metrics, TrainLineRoundTripsTheLoss) {
  TrainRecord r;
  r.step = 12;
  r.loss = 2.718281828459045 / 3.0;  // not representable in few digits
  r.lr = 3e-4;
  r.grad_norm = 0.5;
  r.tokens = 4096;
  r.tokens_per_s = 12345.6;
  r.step_ms = 331.7;
  r.mfu = 0.42;
  r.peak_mem_bytes = 1 << 20;
  r.skipped = 1;
  auto j = nlohmann::json::parse(MetricsWriter::train_json(r));
  EXPECT_EQ(j["step"], 12);
  EXPECT_EQ(float(j["loss"].get<double>()), float(r.loss));  // %.9g round-trips a float
  EXPECT_NEAR(j["loss"].get<double>(), r.loss, 1e-8);
  EXPECT_EQ(j["tokens"], 4096);
  EXPECT_EQ(j["skipped"], 1);
  EXPECT_FALSE(j.contains("val_loss"));
}

// device_pool_peak_bytes is a CUDA run's (the memory pool's high watermark,
// with the backend's scratch): absent from a CPU run's line and its scalars.
TEST(Metrics, DevicePoolPeakOnlyForCudaRuns) {
  TrainRecord r;
  r.peak_mem_bytes = 1000;
  auto cpu = nlohmann::json::parse(MetricsWriter::train_json(r));
  EXPECT_FALSE(cpu.contains("device_pool_peak_bytes"));
  for (const auto& [name, value] : tensorboard_scalars(r)) EXPECT_NE(name, "perf/device_pool_peak_bytes");
  r.device_pool_peak_bytes = (int64_t(1) << 40) + 3;  // past float and int32, exact in JSON
  auto cuda = nlohmann::json::parse(MetricsWriter::train_json(r));
  EXPECT_EQ(cuda["device_pool_peak_bytes"].get<int64_t>(), (int64_t(1) << 40) + 3);
  EXPECT_EQ(cuda["peak_mem_bytes"], 1000);
  int found = 0;
  for (const auto& [name, value] : tensorboard_scalars(r)) found += name == "perf/device_pool_peak_bytes";
  EXPECT_EQ(found, 1);
}

TEST(Metrics, NonFiniteValuesStayValidJson) {
  TrainRecord r;
  r.loss = NAN;
  r.grad_norm = INFINITY;
  auto j = nlohmann::json::parse(MetricsWriter::train_json(r));
  EXPECT_TRUE(j["loss"].is_null());
  EXPECT_TRUE(j["grad_norm"].is_null());
}

TEST(Metrics, WriterAppendsOneLinePerRecord) {
  std::string dir = test::make_temp_dir("metrics");
  {
    MetricsWriter w(dir + "/m.jsonl");
    w.log_train(TrainRecord{.step = 1, .loss = 1.5});
    w.log_eval(1, 1.25);
  }
  std::ifstream f(dir + "/m.jsonl");
  std::string a, b, c;
  std::getline(f, a);
  std::getline(f, b);
  EXPECT_FALSE(std::getline(f, c));
  EXPECT_EQ(nlohmann::json::parse(b)["val_loss"], 1.25);
  EXPECT_FALSE(nlohmann::json::parse(b).contains("loss"));
}

TEST(Metrics, ProgressLineAndDurations) {
  TrainRecord r{.step = 10, .loss = 3.25, .lr = 3e-4, .tokens_per_s = 1000, .step_ms = 45.2};
  std::string line = progress_line(r, 200, 83);
  EXPECT_NE(line.find("step 10/200"), std::string::npos) << line;
  EXPECT_NE(line.find("ETA 1m23s"), std::string::npos) << line;
  // A step with no token to average over has no loss; a skipped fp16 step no norm: "-", not nan or 0.
  r.loss = NAN, r.grad_norm = NAN;
  line = progress_line(r, 200, 83);
  EXPECT_NE(line.find("| loss - | lr 3.000e-04 | norm - |"), std::string::npos) << line;
  EXPECT_EQ(finite_or_dash(2.5, "{:.2f}"), "2.50");
  EXPECT_EQ(finite_or_dash(INFINITY, "{:.2f}"), "-");
  EXPECT_EQ(format_duration(7260), "2h01m");
  EXPECT_EQ(format_duration(9), "9s");
}
