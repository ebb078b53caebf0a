// safetensors reader and writer: round trips for every dtype, the bytes the
// format prescribes, a file written by the reference `safetensors` package
// (data/golden.safetensors, see data/make_golden.py), and one clear error line
// for each kind of malformed file.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "checkpoint_test_util.h"
#include "support/test_support.h"

namespace lattice::checkpoint {
namespace {

using test::error_text;

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

NamedTensors every_dtype() {
  std::vector<uint16_t> u16 = {0, 1, 50256, 65535, 7, 9};
  return {
      {"f64", test::random_tensor({3, 2}, DType::f64, 1)},
      {"f32", test::random_tensor({2, 3, 4}, DType::f32, 2)},
      {"bf16", test::random_tensor({5}, DType::bf16, 3)},
      {"f16", test::random_tensor({4, 1}, DType::f16, 4)},
      {"i32", test::random_tensor({7}, DType::i32, 5, 1e9)},
      {"u16", Tensor::from(u16, {2, 3})},
      {"scalar", Tensor::from(std::vector<float>{3.5f}, {})},
      {"empty_rows", Tensor::empty({0, 3}, DType::f32)},
      {"empty_cols", Tensor::empty({3, 0}, DType::bf16)},
      {"h.0.attn.c_attn.weight", test::random_tensor({8, 3}, DType::f32, 6)},
  };
}

TEST(Safetensors, RoundTripEveryDtypeWithMetadata) {
  std::string path = test::make_temp_dir("st") + "/model.safetensors";
  NamedTensors tensors = every_dtype();
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "ünïcode, \"quotes\""}};
  FileDigest written = write_safetensors(path, tensors, meta);
  EXPECT_EQ(written, digest_file(path));

  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.names().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    // Zero-byte tensors share their offset with a neighbour, so compare the set, not the order.
    EXPECT_TRUE(f.contains(name)) << name;
    EXPECT_EQ(f.info(name).dtype, t.dtype()) << name;
    EXPECT_EQ(f.info(name).shape, t.shape()) << name;
    EXPECT_TRUE(same_bytes(f.read(name), t)) << name;
    Tensor into = Tensor::empty(t.shape(), t.dtype());
    f.read_into(name, into);
    EXPECT_TRUE(same_bytes(into, t)) << name;
  }
  EXPECT_EQ(f.read("scalar").ndim(), 0);
  EXPECT_FLOAT_EQ(f.read("scalar").data<float>()[0], 3.5f);
}

// The streaming writer (one tensor at a time, the header from declarations)
// writes write_safetensors' bytes, and says which tensor broke its promise.
TEST(Safetensors, StreamingWriterWritesTheSameBytes) {
  const std::string dir = test::make_temp_dir("st");
  NamedTensors tensors = every_dtype();
  std::vector<TensorDecl> decls;
  for (const auto& [name, t] : tensors) decls.push_back({name, t.dtype(), t.shape()});
  const std::map<std::string, std::string> meta = {{"format", "pt"}};
  SafetensorsWriter w(dir + "/streamed.safetensors", decls, meta);
  for (const auto& [name, t] : tensors) w.put(name, t.clone());  // each copy gone before the next
  const FileDigest streamed = w.finish();
  const FileDigest whole = write_safetensors(dir + "/whole.safetensors", tensors, meta);
  EXPECT_EQ(streamed, whole);
  EXPECT_EQ(test::read_bytes(dir + "/streamed.safetensors"), test::read_bytes(dir + "/whole.safetensors"));
  EXPECT_HAS(error_text([&] { w.finish(); }), "finish() twice");

  const std::string bad = dir + "/bad.safetensors";
  const Tensor f32 = Tensor::zeros({2, 3}, DType::f32);
  auto two = [&] { return std::vector<TensorDecl>{{"a", DType::f32, {2, 3}}, {"b", DType::f32, {4}}}; };
  {
    SafetensorsWriter x(bad, two());
    EXPECT_HAS(error_text([&] { x.put("b", f32); }), "tensor 0 is 'b' F32 (2, 3), declared as 'a' F32 (2, 3)");
  }
  {
    SafetensorsWriter x(bad, two());
    EXPECT_HAS(error_text([&] { x.put("a", Tensor::zeros({3, 2}, DType::f32)); }), "declared as 'a' F32 (2, 3)");
    EXPECT_HAS(error_text([&] { x.put("a", Tensor::zeros({2, 3}, DType::bf16)); }), "'a' BF16 (2, 3), declared as");
  }
  {
    SafetensorsWriter x(bad, two());
    x.put("a", f32);
    EXPECT_HAS(error_text([&] { x.finish(); }), "1 of 2 declared tensors written (next: 'b')");
  }
  {
    SafetensorsWriter x(bad, {{"a", DType::f32, {2, 3}}});
    x.put("a", f32);
    EXPECT_HAS(error_text([&] { x.put("b", f32); }), "tensor 'b' beyond the 1 declared");
  }
}

TEST(Safetensors, NoTensorsAndNoMetadata) {
  std::string path = test::make_temp_dir("st") + "/empty.safetensors";
  write_safetensors(path, {});
  EXPECT_EQ(test::read_bytes(path), test::le64(8) + "{}      ");
  SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.names().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST(Safetensors, BytesFollowTheSpec) {
  std::string path = test::make_temp_dir("st") + "/spec.safetensors";
  NamedTensors tensors = every_dtype();
  write_safetensors(path, tensors, {{"k", "v"}});
  std::string bytes = test::read_bytes(path);
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  EXPECT_EQ(n % 8, 0u) << "header padded to a multiple of 8";
  std::string header = bytes.substr(8, n);
  size_t json_end = header.find_last_not_of(' ') + 1;
  EXPECT_LT(header.size() - json_end, 8u) << "at most 7 padding spaces";
  auto j = nlohmann::ordered_json::parse(header.substr(0, json_end));
  ASSERT_EQ(j.size(), tensors.size() + 1);
  EXPECT_EQ(j.begin().key(), "__metadata__");
  EXPECT_EQ(j["__metadata__"], nlohmann::ordered_json({{"k", "v"}}));

  // Tensors in the given order, each right after the previous, data as given.
  uint64_t offset = 0;
  std::string buffer = bytes.substr(8 + n);
  for (const auto& [name, t] : tensors) {
    const auto& info = j[name];
    EXPECT_EQ(info.begin().key(), "dtype");  // the reference's field order
    EXPECT_EQ(info["dtype"], safetensors_dtype_name(t.dtype()));
    EXPECT_EQ(info["shape"].get<Shape>(), t.shape());
    uint64_t begin = info["data_offsets"][0], end = info["data_offsets"][1];
    EXPECT_EQ(begin, offset) << name;
    EXPECT_EQ(end - begin, t.nbytes()) << name;
    EXPECT_EQ(buffer.compare(begin, t.nbytes(), static_cast<const char*>(t.raw()), t.nbytes()), 0) << name;
    offset = end;
  }
  EXPECT_EQ(offset, buffer.size()) << "no trailing bytes";
}

// data/golden.safetensors was written by the reference implementation
// (data/make_golden.py); the values below are the ones that script writes.
const std::string kGolden = std::string(LATTICE_CHECKPOINT_TEST_DATA) + "/golden.safetensors";

TEST(SafetensorsGolden, ReadsTheReferenceFile) {
  SafetensorsFile f = SafetensorsFile::open(kGolden);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
  EXPECT_EQ(f.names(), (std::vector<std::string>{"f64", "empty", "f32", "scalar", "i32", "bf16", "f16", "u16"}));
  auto expect = [&](const std::string& name, const Tensor& want) {
    EXPECT_TRUE(same_bytes(f.read(name), want)) << name;
  };
  expect("f64", Tensor::from(std::vector<double>{1.5, -2.25}, {2}));
  expect("f32", Tensor::from(std::vector<float>{0.5f, -1.0f, 2.0f, 3.25f, -4.5f, 1e-3f}, {2, 3}));
  expect("scalar", Tensor::from(std::vector<float>{7.0f}, {}));
  expect("empty", Tensor::empty({0, 3}, DType::f32));
  expect("i32", Tensor::from(std::vector<int32_t>{0, -1, INT32_MAX, INT32_MIN}, {4}));
  expect("u16", Tensor::from(std::vector<uint16_t>{0, 50256, 65535}, {3}));
  Tensor bf16 = f.read("bf16");
  ASSERT_EQ(bf16.dtype(), DType::bf16);
  const auto* b = static_cast<const uint16_t*>(bf16.raw());
  EXPECT_EQ(bf16_to_f32(b[0]), 1.0f);
  EXPECT_EQ(bf16_to_f32(b[1]), -2.0f);
  EXPECT_EQ(bf16_to_f32(b[2]), 0.15625f);
  Tensor f16 = f.read("f16");
  ASSERT_EQ(f16.dtype(), DType::f16);
  ASSERT_EQ(f16.shape(), (Shape{2, 2}));
  const auto* h = static_cast<const uint16_t*>(f16.raw());
  EXPECT_EQ(f16_to_f32(h[0]), 1.0f);
  EXPECT_EQ(f16_to_f32(h[1]), -0.5f);
  EXPECT_EQ(f16_to_f32(h[2]), 65504.0f);
  EXPECT_EQ(f16_to_f32(h[3]), 0.00006103515625f);  // smallest normal f16
}

TEST(SafetensorsGolden, WriterReproducesTheReferenceBytes) {
  SafetensorsFile f = SafetensorsFile::open(kGolden);
  NamedTensors tensors;
  for (const std::string& name : f.names()) tensors.emplace_back(name, f.read(name));
  std::string path = test::make_temp_dir("st") + "/rewritten.safetensors";
  write_safetensors(path, tensors, f.metadata());
  EXPECT_EQ(test::read_bytes(path), test::read_bytes(kGolden));
}

TEST(Safetensors, ReadsAnUnpaddedHeader) {
  // Older writers did not pad; the reference reader accepts such files.
  std::string path = test::make_temp_dir("st") + "/unpadded.safetensors";
  std::string header = R"({"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  ASSERT_NE(header.size() % 8, 0u);
  test::write_bytes(path, test::le64(header.size()) + header + std::string("\x2a\0\0\0", 4));
  EXPECT_EQ(SafetensorsFile::open(path).read("a").data<int32_t>()[0], 42);
}

// ---------------------------------------------------------------- malformed files

class Malformed : public ::testing::Test {
 protected:
  void SetUp() override { path_ = test::make_temp_dir("st-bad") + "/bad.safetensors"; }
  // A file with `header` (padded to 8 unless told) and `buffer_bytes` zero bytes.
  std::string open_error(const std::string& header, size_t buffer_bytes, bool pad = true) {
    std::string h = header;
    if (pad) h.append((8 - h.size() % 8) % 8, ' ');
    test::write_bytes(path_, test::le64(h.size()) + h + std::string(buffer_bytes, '\0'));
    return error_text([&] { SafetensorsFile::open(path_); });
  }
  std::string path_;
};

TEST_F(Malformed, FileShorterThanTheLengthField) {
  test::write_bytes(path_, "abc");
  std::string msg = error_text([&] { SafetensorsFile::open(path_); });
  EXPECT_HAS(msg, path_);
  EXPECT_HAS(msg, "8-byte header length");
}

TEST_F(Malformed, HeaderLengthPastTheEndOfTheFile) {
  test::write_bytes(path_, test::le64(1000) + "{}      ");
  std::string msg = error_text([&] { SafetensorsFile::open(path_); });
  EXPECT_HAS(msg, path_);
  EXPECT_HAS(msg, "header length 1000 runs past the end of the 16-byte file");
}

TEST_F(Malformed, HeaderLengthAboveTheLimit) {
  test::write_bytes(path_, test::le64(kSafetensorsMaxHeader + 8) + "{}      ");
  std::string msg = error_text([&] { SafetensorsFile::open(path_); });
  EXPECT_HAS(msg, "exceeds the limit of 100000000 bytes");
}

TEST_F(Malformed, HeaderNotJson) {
  std::string msg = open_error(R"({"a": {"dtype": "F32",)", 0);
  EXPECT_HAS(msg, path_);
  EXPECT_HAS(msg, "header is not valid JSON");
  EXPECT_HAS(open_error("{\"a\xff\": 1}", 0), "not valid JSON");                         // ill-formed UTF-8
  EXPECT_HAS(open_error(std::string("{}\0\0\0\0\0\0", 8), 0, false), "not valid JSON");  // NUL padding
}

TEST_F(Malformed, HeaderNotAnObject) {
  EXPECT_HAS(open_error("[1, 2]", 0), "header is a list, expected a JSON object");
}

TEST_F(Malformed, UnknownDtype) {
  std::string msg = open_error(R"({"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,8]}})", 8);
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "dtype 'Q7' is not a safetensors dtype");
  // One of the format's that Lattice has no DType for needs its own size.
  EXPECT_HAS(open_error(R"({"w":{"dtype":"I64","shape":[1],"data_offsets":[0,4]}})", 4), "I64 (1) needs 8");
}

// The format's other dtypes (the BOOL or U8 causal-mask buffers of GPT-2
// files that transformers 4.x saved) made the whole file unreadable at open;
// now such a tensor is listed and only reading it is refused.
TEST_F(Malformed, AForeignDtypeIsListedButNotRead) {
  std::string h = R"({"mask":{"dtype":"BOOL","shape":[2,2],"data_offsets":[0,4]},)"
                  R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  h.append((8 - h.size() % 8) % 8, ' ');
  test::write_bytes(path_, test::le64(h.size()) + h + std::string(8, '\0'));
  SafetensorsFile f = SafetensorsFile::open(path_);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"mask", "w"}));
  EXPECT_EQ(f.info("mask").dtype_name(), "BOOL");
  EXPECT_FALSE(f.info("mask").is(DType::f32));
  EXPECT_TRUE(f.info("w").is(DType::f32));
  EXPECT_EQ(f.read("w").data<float>()[0], 0.0f);
  EXPECT_HAS(error_text([&] { f.read("mask"); }), "tensor 'mask' is BOOL, which Lattice does not read");
}

TEST_F(Malformed, NegativeOrFractionalShape) {
  std::string msg = open_error(R"({"w":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]}})", 8);
  EXPECT_HAS(msg, "tensor 'w'");
  EXPECT_HAS(msg, "shape [-1,2] has an entry that is a negative number");
  EXPECT_HAS(open_error(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4), "non-integer");
  EXPECT_HAS(open_error(R"({"w":{"dtype":"F32","shape":3,"data_offsets":[0,12]}})", 12), "shape is a number");
}

TEST_F(Malformed, DataOffsetsNotBeginEnd) {
  EXPECT_HAS(open_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", 4),
             "tensor 'w': data_offsets is [4], expected [begin, end]");
  EXPECT_HAS(open_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,-4]}})", 4), "expected [begin, end]");
  EXPECT_HAS(open_error(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", 4),
             "tensor 'w': data_offsets [4, 0] end before they begin");
}

TEST_F(Malformed, SizeDoesNotMatchDtypeTimesShape) {
  std::string msg = open_error(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 12);
  EXPECT_HAS(msg, path_);
  EXPECT_HAS(msg, "tensor 'w': data_offsets [0, 12] hold 12 bytes, but F32 (2, 2) needs 16");
}

TEST_F(Malformed, OverlappingOffsets) {
  std::string msg = open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                               12);
  EXPECT_HAS(msg, "tensor 'b' at [4, 12] overlaps tensor 'a', which ends at 8");
}

TEST_F(Malformed, GapBetweenTensors) {
  std::string msg = open_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                               16);
  EXPECT_HAS(msg, "gap of 4 bytes between tensor 'a' (ends at 8) and tensor 'b' (begins at 12)");
  EXPECT_HAS(open_error(R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
             "the first tensor 'b' begins at byte 4");
}

TEST_F(Malformed, TruncatedFile) {
  write_safetensors(path_, every_dtype());
  std::string bytes = test::read_bytes(path_);
  test::write_bytes(path_, bytes.substr(0, bytes.size() - 3));
  std::string msg = error_text([&] { SafetensorsFile::open(path_); });
  EXPECT_HAS(msg, path_);
  EXPECT_HAS(msg, "tensor 'h.0.attn.c_attn.weight'");  // the last one
  EXPECT_HAS(msg, "the file is truncated");
  test::write_bytes(path_, bytes.substr(0, 20));  // cut inside the header
  EXPECT_HAS(error_text([&] { SafetensorsFile::open(path_); }), "runs past the end");
}

TEST_F(Malformed, TrailingBytes) {
  write_safetensors(path_, every_dtype());
  test::write_bytes(path_, test::read_bytes(path_) + "junk");
  std::string msg = error_text([&] { SafetensorsFile::open(path_); });
  EXPECT_HAS(msg, "4 trailing bytes after the last tensor 'h.0.attn.c_attn.weight'");
  EXPECT_HAS(open_error("{}", 4), "4 trailing bytes");
}

TEST_F(Malformed, DuplicateNames) {
  std::string msg = open_error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                               R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                               8);
  EXPECT_HAS(msg, "'a' appears twice");
  EXPECT_HAS(open_error(R"({"a":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4),
             "'a' has the key 'dtype' twice");
}

TEST_F(Malformed, MetadataNotStrings) {
  EXPECT_HAS(open_error(R"({"__metadata__":{"format":"pt","step":10}})", 0),
             "__metadata__['step'] is a number, expected a string");
  EXPECT_HAS(open_error(R"({"__metadata__":["pt"]})", 0), "__metadata__ is a list, expected an object");
}

TEST_F(Malformed, TensorEntryFields) {
  EXPECT_HAS(open_error(R"({"w":{"dtype":"F32","shape":[1]}})", 0), "tensor 'w': the field 'data_offsets' is missing");
  EXPECT_HAS(open_error(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4),
             "tensor 'w': unknown field 'x'");
  EXPECT_HAS(open_error(R"({"w":[1]})", 0), "tensor 'w': is a list");
}

// ---------------------------------------------------------------- API misuse

TEST(Safetensors, ReadErrorsNameTheFileAndTensor) {
  std::string path = test::make_temp_dir("st") + "/m.safetensors";
  write_safetensors(path, {{"w", Tensor::zeros({2, 3}, DType::f32)}});
  SafetensorsFile f = SafetensorsFile::open(path);
  std::string msg = error_text([&] { f.info("v"); });
  EXPECT_HAS(msg, path);
  EXPECT_HAS(msg, "no tensor named 'v'");
  Tensor wrong = Tensor::empty({3, 2}, DType::f32);
  EXPECT_HAS(error_text([&] { f.read_into("w", wrong); }),
             "tensor 'w' is F32 (2, 3) in the file, but the destination is F32 (3, 2)");
  EXPECT_HAS(error_text([&] { SafetensorsFile::open(path + ".absent"); }), path + ".absent");
}

TEST(Safetensors, WriterRejectsBadNames) {
  std::string path = test::make_temp_dir("st") + "/w.safetensors";
  Tensor t = Tensor::zeros({1}, DType::f32);
  EXPECT_HAS(error_text([&] { write_safetensors(path, {{"a", t}, {"a", t}}); }), "tensor 'a' is given twice");
  EXPECT_HAS(error_text([&] { write_safetensors(path, {{"__metadata__", t}}); }), "not a usable tensor name");
  EXPECT_HAS(error_text([&] { write_safetensors(path, {{"u", Tensor()}}); }), "tensor 'u' is undefined");
}

}  // namespace
}  // namespace lattice::checkpoint
