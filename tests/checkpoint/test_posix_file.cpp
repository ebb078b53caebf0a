// PosixFile and its helpers: round trips, sizes, and errors that name the file.
#include <gtest/gtest.h>

#include <cerrno>
#include <functional>
#include <utility>

#include "checkpoint/posix_file.h"
#include "checkpoint_test_util.h"
#include "support/test_support.h"

namespace lattice::checkpoint {
namespace {

using test::error_text;

TEST(PosixFile, WriteSyncedThenReadBack) {
  std::string dir = test::make_temp_dir("posix");
  std::string path = dir + "/a.txt";
  write_file_synced(path, "hello\nworld");
  EXPECT_EQ(read_text_file(path, 100), "hello\nworld");
  write_file_synced(path, "x");  // truncates
  EXPECT_EQ(read_text_file(path, 100), "x");
  EXPECT_NO_THROW(fsync_path(dir));  // directories too
}

TEST(PosixFile, LargeWritesAndChunkedReads) {
  std::string path = test::make_temp_dir("posix") + "/big.bin";
  std::string data(size_t(3) << 20, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = char(i * 7);
  PosixFile out = PosixFile::create(path);
  out.write_all(data.data(), data.size());
  out.sync();
  out.close();
  PosixFile in = PosixFile::open_read(path);
  EXPECT_EQ(in.size(), data.size());
  std::string back(data.size(), '\0');
  size_t have = 0;
  while (size_t got = in.read_some(back.data() + have, 100000)) have += got;
  EXPECT_EQ(have, data.size());
  EXPECT_EQ(back, data);
}

TEST(PosixFile, ErrorsNameTheFile) {
  std::string dir = test::make_temp_dir("posix");
  std::string msg = error_text([&] { PosixFile::open_read(dir + "/absent"); });
  EXPECT_HAS(msg, dir + "/absent: cannot open for reading");
  EXPECT_HAS(error_text([&] { PosixFile::create(dir + "/no/such/dir/f"); }), dir + "/no/such/dir/f: cannot create");
  write_file_synced(dir + "/f", "0123456789");
  EXPECT_HAS(error_text([&] { PosixFile::open_dir(dir + "/f"); }), dir + "/f: cannot open as a directory");
  EXPECT_HAS(error_text([&] { read_text_file(dir + "/f", 4); }), dir + "/f: 10 bytes, more than the 4 expected");
}

// Failures to create or write carry the path and errno (WriteError), so the
// caller can name the setting that chose the directory and the fix.
TEST(PosixFile, WriteFailuresCarryThePathAndErrno) {
  auto write_error = [](const std::function<void()>& f) -> std::pair<std::string, int> {
    try {
      f();
    } catch (const WriteError& e) {
      return {e.path(), e.error_number()};
    }
    return {"", 0};
  };
  std::string dir = test::make_temp_dir("posix");
  EXPECT_EQ(write_error([&] { PosixFile::create(dir + "/no/f"); }), std::make_pair(dir + "/no/f", ENOENT));
  PosixFile full = PosixFile::create("/dev/full");  // every write: ENOSPC
  EXPECT_EQ(write_error([&] { full.write_all("x", 1); }), std::make_pair(std::string("/dev/full"), ENOSPC));
  EXPECT_HAS(error_text([&] { full.write_all("x", 1); }), "/dev/full: write failed: No space left on device");
}

TEST(PosixFile, MoveTransfersOwnership) {
  std::string path = test::make_temp_dir("posix") + "/m";
  PosixFile a = PosixFile::create(path);
  int fd = a.fd();
  PosixFile b = std::move(a);
  EXPECT_EQ(b.fd(), fd);
  EXPECT_EQ(a.fd(), -1);  // NOLINT(bugprone-use-after-move): checking the moved-from state
  b.write_all("ok", 2);
  b.close();
  EXPECT_EQ(read_text_file(path, 10), "ok");
}

}  // namespace
}  // namespace lattice::checkpoint
