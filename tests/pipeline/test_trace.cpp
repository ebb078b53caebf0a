// The Chrome trace file: valid JSON, one complete ("X") event per span with
// its category, microsecond times, and the rank as pid.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "pipeline/trace.h"
#include "support/test_support.h"

namespace lattice::pipeline {
namespace {

TEST(ChromeTrace, WritesOneCompleteEventPerSpan) {
  const std::vector<TraceSpan> spans = {{ActionKind::forward, 0, 0, 1.0, 1.5},
                                        {ActionKind::send_forward, 0, 0, 1.5, 1.75},
                                        {ActionKind::recv_backward, 0, 1, 1.5, 1.75},
                                        {ActionKind::backward, 0, 1, 2.0, 3.0}};
  const std::string path = test::make_temp_dir("trace") + "/rank3.json";
  write_chrome_trace(path, spans, 3);
  std::ifstream in(path);
  nlohmann::json doc = nlohmann::json::parse(in);
  const auto& events = doc.at("traceEvents");
  ASSERT_EQ(events.size(), spans.size() + 1);  // + the process name
  EXPECT_EQ(events[0].at("ph"), "M");
  const std::vector<std::string> cats = {"forward", "send", "recv", "backward"};
  for (size_t i = 0; i < spans.size(); ++i) {
    const auto& e = events[i + 1];
    EXPECT_EQ(e.at("ph"), "X");
    EXPECT_EQ(e.at("cat"), cats[i]);
    EXPECT_EQ(e.at("pid"), 3);
    EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), spans[i].begin_s * 1e6);
    EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), (spans[i].end_s - spans[i].begin_s) * 1e6);
    EXPECT_EQ(e.at("args").at("chunk"), spans[i].chunk);
  }
  EXPECT_EQ(events[4].at("name"), "B0.c1");
  EXPECT_THROW(write_chrome_trace("/nonexistent-dir/x.json", spans, 0), Error);
}

}  // namespace
}  // namespace lattice::pipeline
