// The safe commit of checkpoint directories: what commit() leaves on disk,
// what a crash at each point leaves and how the readers treat it, corruption
// detection naming the file, keep_last and the removal of unfinished writes.
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/atomic_dir.h"
#include "checkpoint/posix_file.h"
#include "checkpoint_test_util.h"
#include "support/test_support.h"

namespace lattice::checkpoint {
namespace {

namespace fs = std::filesystem;
using test::error_text;

// Commits step `step` under `parent` with a safetensors file, a recorded JSON
// file and a file the writer has to checksum itself.
std::string commit_step(const std::string& parent, int64_t step, uint64_t seed = 1) {
  CheckpointWriter w;
  w.begin(parent + "/" + step_dir_name(step));
  w.write_safetensors("model.safetensors", {{"wte", test::random_tensor({16, 8}, DType::f32, seed + step)}},
                      {{"step", std::to_string(step)}});
  w.write_file("trainer_state.json", nlohmann::json({{"step", step}}).dump());
  test::write_bytes(w.file_path("notes.txt"), "unrecorded " + std::to_string(seed));
  return w.commit();
}

std::string latest_of(const std::string& parent) { return test::read_bytes(parent + "/latest"); }

TEST(StepDirName, FormatsAndParses) {
  EXPECT_EQ(step_dir_name(10), "step_0000010");
  EXPECT_EQ(step_dir_name(12345678), "step_12345678");
  EXPECT_EQ(parse_step_dir_name("step_0000010"), 10);
  EXPECT_EQ(parse_step_dir_name("step_12345678"), 12345678);
  for (const char* bad : {"step_10", "step_0000010.tmp", "xstep_0000010", "step_00000x0", "latest"})
    EXPECT_FALSE(parse_step_dir_name(bad).has_value()) << bad;
}

TEST(CheckpointWriter, CommitWritesDirectoryManifestAndLatest) {
  std::string parent = test::make_temp_dir("ckpt");
  std::string dir = commit_step(parent, 10);
  EXPECT_EQ(dir, parent + "/step_0000010");
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_FALSE(fs::exists(dir + ".tmp"));
  EXPECT_EQ(latest_of(parent), "step_0000010\n");
  EXPECT_FALSE(fs::exists(parent + "/latest.tmp"));

  auto manifest = nlohmann::json::parse(test::read_bytes(dir + "/manifest.json"));
  EXPECT_EQ(manifest["format"], "lattice-checkpoint-manifest");
  EXPECT_EQ(manifest["checksum"], "xxh64");
  ASSERT_EQ(manifest["files"].size(), 3u);
  for (const char* name : {"model.safetensors", "trainer_state.json", "notes.txt"}) {
    FileDigest d = digest_file(dir + "/" + name);
    EXPECT_EQ(manifest["files"][name]["size"], d.size) << name;
    EXPECT_EQ(manifest["files"][name]["xxh64"], checksum_hex(d.checksum)) << name;
  }
  EXPECT_NO_THROW(verify_checkpoint_dir(dir));
  SafetensorsFile model = SafetensorsFile::open(dir + "/model.safetensors");
  EXPECT_EQ(model.metadata().at("step"), "10");

  auto found = find_latest_complete(parent);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->dir, dir);
  EXPECT_EQ(found->step, 10);
  EXPECT_TRUE(found->skipped.empty());
}

TEST(CheckpointWriter, UncommittedTmpIsIgnored) {
  std::string parent = test::make_temp_dir("ckpt");
  commit_step(parent, 10);
  CheckpointWriter crashed;  // a crash after writing the files, before commit()
  crashed.begin(parent + "/" + step_dir_name(20));
  crashed.write_file("trainer_state.json", "{}");
  ASSERT_TRUE(fs::exists(parent + "/step_0000020.tmp/trainer_state.json"));

  auto found = find_latest_complete(parent);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->step, 10);
  EXPECT_TRUE(found->skipped.empty());  // a .tmp directory is never a candidate
  EXPECT_EQ(latest_of(parent), "step_0000010\n");

  // The next attempt at step 20 starts clean and commits.
  commit_step(parent, 20);
  EXPECT_EQ(find_latest_complete(parent)->step, 20);
}

TEST(CheckpointWriter, DirectoryWithoutManifestIsSkippedAndSaysWhy) {
  std::string parent = test::make_temp_dir("ckpt");
  commit_step(parent, 10);
  std::string dir20 = commit_step(parent, 20);
  fs::remove(dir20 + "/manifest.json");
  auto found = find_latest_complete(parent);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->step, 10);
  ASSERT_EQ(found->skipped.size(), 1u);
  EXPECT_HAS(found->skipped[0], dir20 + "/manifest.json: missing");
}

TEST(CheckpointWriter, RewritingAStepReplacesIt) {
  std::string parent = test::make_temp_dir("ckpt");
  commit_step(parent, 10, 1);
  std::string dir = commit_step(parent, 10, 2);
  EXPECT_NO_THROW(verify_checkpoint_dir(dir));
  EXPECT_EQ(test::read_bytes(dir + "/notes.txt"), "unrecorded 2");
  EXPECT_FALSE(fs::exists(dir + ".old"));
}

// A directory that cannot be created is a WriteError: the path and errno,
// for save_checkpoint's one line naming checkpoint.dir.
TEST(CheckpointWriter, CreateFailuresAreWriteErrors) {
  std::string parent = test::make_temp_dir("ckpt");
  test::write_bytes(parent + "/file", "x");
  CheckpointWriter w;
  try {
    w.begin(parent + "/file/step_0000001");
    ADD_FAILURE() << "begin() under a file succeeded";
  } catch (const WriteError& e) {
    EXPECT_EQ(e.path(), parent + "/file/step_0000001.tmp");
    EXPECT_EQ(e.error_number(), ENOTDIR);
  }
}

TEST(CheckpointWriter, MisuseIsAnError) {
  std::string parent = test::make_temp_dir("ckpt");
  CheckpointWriter w;
  EXPECT_HAS(error_text([&] { w.commit(); }), "commit() before begin()");
  w.begin(parent + "/step_0000001");
  EXPECT_HAS(error_text([&] { w.file_path("a/b"); }), "not a usable checkpoint file name");
  EXPECT_HAS(error_text([&] { w.file_path("manifest.json"); }), "not a usable checkpoint file name");
  fs::create_directories(w.tmp_dir() + "/sub");
  EXPECT_HAS(error_text([&] { w.commit(); }), "'sub' is not a regular file");
  w.begin(parent + "/step_0000001");  // starts over; the stale .tmp is removed
  EXPECT_FALSE(fs::exists(w.tmp_dir() + "/sub"));
  w.add_file("ghost.bin", {4, 0});
  EXPECT_HAS(error_text([&] { w.commit(); }), "ghost.bin: recorded but not on disk");
}

// ---------------------------------------------------------------- verification

class Damaged : public ::testing::Test {
 protected:
  void SetUp() override {
    parent_ = test::make_temp_dir("ckpt");
    commit_step(parent_, 10);
    dir_ = commit_step(parent_, 20);
    model_ = dir_ + "/model.safetensors";
  }
  // verify's message, and that auto-resume falls back to step 10 saying the same.
  std::string damage_report() {
    std::string msg = error_text([&] { verify_checkpoint_dir(dir_); });
    auto found = find_latest_complete(parent_);
    EXPECT_TRUE(found.has_value());
    if (found) {
      EXPECT_EQ(found->step, 10);
      EXPECT_EQ(found->skipped, std::vector<std::string>{msg});
      EXPECT_EQ(found->damaged, std::vector<std::string>{"step_0000020"});
    }
    return msg;
  }
  std::string parent_, dir_, model_;
};

TEST_F(Damaged, FlippedByte) {
  std::string bytes = test::read_bytes(model_);
  bytes[bytes.size() / 2] ^= 0x10;
  test::write_bytes(model_, bytes);
  std::string msg = damage_report();
  EXPECT_HAS(msg, model_);
  EXPECT_HAS(msg, "does not match the manifest");
}

TEST_F(Damaged, TruncatedFile) {
  std::string bytes = test::read_bytes(model_);
  test::write_bytes(model_, bytes.substr(0, bytes.size() - 100));
  std::string msg = damage_report();
  EXPECT_HAS(msg, model_);
  EXPECT_HAS(msg, fmt::format("truncated: {} bytes, the manifest says {}", bytes.size() - 100, bytes.size()));
}

TEST_F(Damaged, GrownFile) {
  test::write_bytes(dir_ + "/notes.txt", test::read_bytes(dir_ + "/notes.txt") + "!");
  EXPECT_HAS(damage_report(), dir_ + "/notes.txt: ");
}

TEST_F(Damaged, MissingFile) {
  fs::remove(dir_ + "/trainer_state.json");
  std::string msg = damage_report();
  EXPECT_HAS(msg, dir_ + "/trainer_state.json: missing");
}

TEST_F(Damaged, MissingOrCorruptManifest) {
  test::write_bytes(dir_ + "/manifest.json", "{\"format\": ");
  EXPECT_HAS(damage_report(), dir_ + "/manifest.json: not valid JSON");
  test::write_bytes(dir_ + "/manifest.json", "{\"files\": {}}");
  EXPECT_HAS(damage_report(), "not a Lattice manifest");
  fs::remove(dir_ + "/manifest.json");
  EXPECT_HAS(damage_report(), dir_ + "/manifest.json: missing");
}

// latest is a hint: a crash between a step directory's rename and latest's
// update leaves latest naming an older step, and resuming there would write
// over the newer complete one. The newest step directory that verifies wins,
// and the stale latest is noted.
TEST_F(Damaged, TheNewestCompleteStepWinsOverLatest) {
  test::write_bytes(parent_ + "/latest", "step_0000010\n");
  auto found = find_latest_complete(parent_);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->step, 20);
  EXPECT_TRUE(found->damaged.empty());
  ASSERT_EQ(found->skipped.size(), 1u);
  EXPECT_HAS(found->skipped[0], "latest: names step_0000010, not the newest complete step directory");
  test::write_bytes(parent_ + "/latest", "../elsewhere\n");
  found = find_latest_complete(parent_);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->step, 20);
  ASSERT_EQ(found->skipped.size(), 1u);
  EXPECT_HAS(found->skipped[0], "not a step_NNNNNNN directory");
  // Unreadable (rm latest; mkdir latest): noted like the others, and the next
  // commit replaces it (keep_last reads it too).
  fs::remove(parent_ + "/latest");
  fs::create_directory(parent_ + "/latest");
  found = find_latest_complete(parent_);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->step, 20);
  ASSERT_EQ(found->skipped.size(), 1u);
  EXPECT_HAS(found->skipped[0], "latest: read failed: Is a directory (latest is only a hint)");
  EXPECT_EQ(keep_last(parent_, 1), std::vector<std::string>{parent_ + "/step_0000010"});
  commit_step(parent_, 30);
  EXPECT_EQ(latest_of(parent_), "step_0000030\n");
}

TEST(FindLatestComplete, NothingToResume) {
  std::string parent = test::make_temp_dir("ckpt");
  EXPECT_FALSE(find_latest_complete(parent).has_value());
  EXPECT_FALSE(find_latest_complete(parent + "/absent").has_value());
}

// ---------------------------------------------------------------- keep_last

TEST(KeepLast, DeletesTheOldestCompleteSteps) {
  std::string parent = test::make_temp_dir("ckpt");
  for (int step = 1; step <= 5; ++step) commit_step(parent, step);
  CheckpointWriter stale;  // a crash left step 3's .tmp behind
  stale.begin(parent + "/" + step_dir_name(3));
  CheckpointWriter running;  // a newer write in progress is not touched
  running.begin(parent + "/" + step_dir_name(6));
  // A kill during an earlier removal left a half-deleted step, renamed out of the step names first.
  fs::create_directories(parent + "/step_0000000.deleting");
  test::write_bytes(parent + "/step_0000000.deleting/model.safetensors", "half");

  std::vector<std::string> removed = keep_last(parent, 2);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{parent + "/step_0000000.deleting", parent + "/step_0000001",
                                               parent + "/step_0000002", parent + "/step_0000003",
                                               parent + "/step_0000003.tmp"}));
  for (const auto& e : fs::directory_iterator(parent))
    EXPECT_FALSE(e.path().string().ends_with(".deleting")) << e.path();
  for (int step = 1; step <= 3; ++step) EXPECT_FALSE(fs::exists(parent + "/" + step_dir_name(step)));
  EXPECT_TRUE(fs::exists(parent + "/step_0000004"));
  EXPECT_TRUE(fs::exists(parent + "/step_0000005"));
  EXPECT_TRUE(fs::exists(parent + "/step_0000006.tmp"));
  EXPECT_TRUE(keep_last(parent, 2).empty());
  EXPECT_TRUE(keep_last(parent, 0).empty()) << "0 keeps everything";
}

// At a job's start (it holds the lock), every step's unfinished write goes,
// newer than the newest complete step or not; nothing else is touched.
TEST(RemoveUnfinishedWrites, RemovesEveryTmpStepDirectoryOnly) {
  std::string parent = test::make_temp_dir("ckpt");
  commit_step(parent, 5);
  for (int step : {3, 10}) {
    CheckpointWriter crashed;
    crashed.begin(parent + "/" + step_dir_name(step));
    crashed.write_file("trainer_state.json", "{}");
  }
  fs::create_directories(parent + "/step_0000005.damaged");
  fs::create_directories(parent + "/other.tmp");
  EXPECT_EQ(remove_unfinished_writes(parent),
            (std::vector<std::string>{parent + "/step_0000003.tmp", parent + "/step_0000010.tmp"}));
  for (const char* kept : {"step_0000005", "step_0000005.damaged", "other.tmp", "latest"})
    EXPECT_TRUE(fs::exists(parent + "/" + kept)) << kept;
  EXPECT_TRUE(remove_unfinished_writes(parent).empty());
}

TEST(KeepLast, NeverDeletesTheDirectoryLatestNames) {
  std::string parent = test::make_temp_dir("ckpt");
  for (int step = 1; step <= 3; ++step) commit_step(parent, step);
  test::write_bytes(parent + "/latest", "step_0000001\n");
  keep_last(parent, 1);
  EXPECT_TRUE(fs::exists(parent + "/step_0000001"));
  EXPECT_FALSE(fs::exists(parent + "/step_0000002"));
  EXPECT_TRUE(fs::exists(parent + "/step_0000003"));
}

}  // namespace
}  // namespace lattice::checkpoint
