// TensorBoard event files (booster/tensorboard.h): CRC32C known answers, and a
// reader written here from the format's description (TFRecord framing with
// masked CRC32C, the Event / Summary / Value protobuf fields) that checks every
// CRC and finds every scalar with its step and value — in a file written by the
// writer directly and in one a `lattice train log.tensorboard=true` run wrote.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "booster/tensorboard.h"
#include "cli_runner.h"
#include "support/test_support.h"

namespace fs = std::filesystem;
using namespace lattice;

namespace {

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;
  std::map<std::string, float> scalars;
};

struct Reader {
  const std::string& s;
  size_t i = 0;
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      uint8_t b = uint8_t(s.at(i++));
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  template <typename T>
  T fixed() {
    T v;
    std::memcpy(&v, s.data() + i, sizeof(T));
    i += sizeof(T);
    return v;
  }
  std::string bytes() {
    const size_t n = varint();
    std::string out = s.substr(i, n);
    i += n;
    return out;
  }
};

Event parse_event(const std::string& data) {
  Event e;
  Reader r{data};
  while (r.i < data.size()) {
    const uint64_t key = r.varint();
    const int field = int(key >> 3);
    if (field == 1)
      e.wall_time = r.fixed<double>();
    else if (field == 2)
      e.step = int64_t(r.varint());
    else if (field == 3)
      e.file_version = r.bytes();
    else if (field == 5) {
      const std::string summary = r.bytes();
      Reader sr{summary};
      while (sr.i < summary.size()) {
        EXPECT_EQ(sr.varint(), (1u << 3) | 2u);  // Summary.value
        const std::string value = sr.bytes();
        Reader vr{value};
        std::string tag;
        float v = 0;
        while (vr.i < value.size()) {
          const uint64_t k = vr.varint();
          if (k == ((1u << 3) | 2u))
            tag = vr.bytes();
          else if (k == ((2u << 3) | 5u))
            v = vr.fixed<float>();
          else
            ADD_FAILURE() << "unexpected Value field " << k;
        }
        e.scalars[tag] = v;
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << field;
      break;
    }
  }
  return e;
}

// Every record of the file, with both CRCs checked.
std::vector<Event> read_events(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string s = ss.str();
  std::vector<Event> out;
  size_t i = 0;
  while (i < s.size()) {
    EXPECT_LE(i + 12, s.size()) << "truncated record header";
    uint64_t len;
    uint32_t len_crc, data_crc;
    std::memcpy(&len, s.data() + i, 8);
    std::memcpy(&len_crc, s.data() + i + 8, 4);
    EXPECT_EQ(len_crc, masked_crc32c(s.data() + i, 8)) << "length CRC of record " << out.size();
    const std::string data = s.substr(i + 12, len);
    std::memcpy(&data_crc, s.data() + i + 12 + len, 4);
    EXPECT_EQ(data_crc, masked_crc32c(data.data(), data.size())) << "data CRC of record " << out.size();
    out.push_back(parse_event(data));
    i += 12 + len + 4;
  }
  return out;
}

}  // namespace

TEST(TensorBoard, Crc32cKnownAnswers) {
  EXPECT_EQ(crc32c("", 0), 0u);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the CRC-32C check value
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
}

TEST(TensorBoard, WriterRecordsReadBack) {
  const std::string dir = test::make_temp_dir("tb");
  std::string path;
  {
    TensorBoardWriter w(dir + "/tb");
    path = w.path();
    w.scalars(1, {{"train/loss", 5.5f}, {"train/lr", 1e-3f}});
    w.scalars(2, {{"train/loss", 4.25f}});
    w.scalars(1000000000000LL, {{"val/loss", -0.5f}});
  }
  std::vector<Event> ev = read_events(path);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_GT(ev[0].wall_time, 1.6e9);
  EXPECT_EQ(ev[1].step, 1);
  EXPECT_EQ(ev[1].scalars.at("train/loss"), 5.5f);
  EXPECT_EQ(ev[1].scalars.at("train/lr"), 1e-3f);
  EXPECT_EQ(ev[2].step, 2);
  EXPECT_EQ(ev[2].scalars.at("train/loss"), 4.25f);
  EXPECT_EQ(ev[3].step, 1000000000000LL);
  EXPECT_EQ(ev[3].scalars.at("val/loss"), -0.5f);
  fs::remove_all(dir);
}

// A directory with data and t.yaml: a 6-step run logging TensorBoard in run/,
// evaluating at steps 3 and 6, checkpointing every `checkpoint_every` steps.
std::string tiny_run_dir(const std::string& name, int checkpoint_every = 0) {
  const std::string dir = test::make_temp_dir(name);
  std::string text;
  for (int i = 0; i < 300; ++i) text += "a tensorboard test line " + std::to_string(i % 9) + "\n";
  std::ofstream(dir + "/a.txt") << text;
  auto prep = test::run_lattice("data prepare --input a.txt --tokenizer bytes --out d/t --val-tokens 1000", dir);
  EXPECT_EQ(prep.status, 0) << prep.out;
  std::ofstream(dir + "/t.yaml")
      << R"(model: { arch: gpt2, n_layer: 1, n_head: 2, d_model: 16, vocab_size: 260, max_seq_len: 16 }
train: { steps: 6, global_batch: 4, micro_batch: 2, seq_len: 16, eval_every: 3, eval_steps: 1 }
optimizer: { lr: 0.01 }
data: { train: "d/t_train_*.bin", val: "d/t_val_*.bin", tokenizer: bytes }
log: { dir: run, tensorboard: true }
checkpoint: { every: )"
      << checkpoint_every << R"( }
runtime: { threads: 1 }
)";
  return dir;
}

// Resume cuts the event files back to the checkpoint's step, as it cuts
// metrics.jsonl: the steps a killed run logged after its last checkpoint,
// and a record the kill cut short, are dropped; the rest stays as written.
TEST(TensorBoard, TruncateDropsLaterStepsAndATornRecord) {
  const std::string dir = test::make_temp_dir("tb_cut");
  std::string path;
  {
    TensorBoardWriter w(dir + "/tb");
    path = w.path();
    for (int64_t step = 1; step <= 7; ++step) w.scalars(step, {{"train/loss", float(step)}});
  }
  const auto whole = fs::file_size(path);
  std::ofstream(path, std::ios::binary | std::ios::app) << std::string("\x2a\0\0\0\0\0\0\0\x01\x02", 10);
  EXPECT_EQ(truncate_event_files(dir + "/tb", 4), 4);  // steps 5, 6, 7 and the torn record
  std::vector<Event> ev = read_events(path);
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  for (int64_t step = 1; step <= 4; ++step) EXPECT_EQ(ev[size_t(step)].step, step);
  EXPECT_LT(fs::file_size(path), whole);
  // Nothing past the step: the file is left alone.
  const auto size = fs::file_size(path);
  EXPECT_EQ(truncate_event_files(dir + "/tb", 4), 0);
  EXPECT_EQ(fs::file_size(path), size);
  fs::remove_all(dir);
}

// A run that lost its last checkpoint resumes from the one before; its
// TensorBoard data then holds each step once, as metrics.jsonl does.
TEST(TensorBoard, AResumedRunLogsEachStepOnce) {
  const std::string dir = tiny_run_dir("tb_resume", 3);
  auto r = test::run_lattice("train t.yaml", dir);
  ASSERT_EQ(r.status, 0) << r.out;
  fs::remove_all(dir + "/run/checkpoints/step_0000006");  // as if killed after step 6's events, before its checkpoint
  r = test::run_lattice("train t.yaml", dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("resuming from"), std::string::npos) << r.out;
  std::map<int64_t, int> seen;
  for (const auto& e : fs::directory_iterator(dir + "/run/tb"))
    for (const Event& ev : read_events(e.path().string()))
      if (ev.scalars.count("train/loss")) ++seen[ev.step];
  ASSERT_EQ(seen.size(), 6u);
  for (const auto& [step, n] : seen) EXPECT_EQ(n, 1) << "step " << step;
  fs::remove_all(dir);
}

TEST(TensorBoard, TrainingRunWritesEveryLoggedStep) {
  const std::string dir = tiny_run_dir("tb_run");
  auto r = test::run_lattice("train t.yaml", dir);
  ASSERT_EQ(r.status, 0) << r.out;
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir + "/run/tb")) files.push_back(e.path().string());
  ASSERT_EQ(files.size(), 1u);
  std::vector<Event> ev = read_events(files[0]);
  // metrics.jsonl and the event file carry the same steps and values.
  std::ifstream m(dir + "/run/metrics.jsonl");
  std::map<int64_t, float> loss, val;
  for (std::string line; std::getline(m, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) loss[j["step"].get<int64_t>()] = float(j["loss"].get<double>());
    if (j.contains("val_loss")) val[j["step"].get<int64_t>()] = float(j["val_loss"].get<double>());
  }
  std::map<int64_t, float> tb_loss, tb_val;
  for (const Event& e : ev) {
    if (e.scalars.count("train/loss")) tb_loss[e.step] = e.scalars.at("train/loss");
    if (e.scalars.count("val/loss")) tb_val[e.step] = e.scalars.at("val/loss");
  }
  EXPECT_EQ(loss.size(), 6u);
  EXPECT_EQ(tb_loss, loss);
  // val_loss is a double: metrics.jsonl's 9 digits of it, read back and
  // narrowed, may sit one float ulp from the event file's float(val).
  EXPECT_EQ(val.size(), 2u);
  ASSERT_EQ(tb_val.size(), val.size());
  for (const auto& [step, v] : val) {
    ASSERT_TRUE(tb_val.count(step)) << "step " << step;
    EXPECT_FLOAT_EQ(tb_val[step], v) << "step " << step;
  }
  fs::remove_all(dir);
}
