// lattice data prepare --input FILE... --tokenizer gpt2|bytes [--vocab-dir DIR]
//                      --out PREFIX [--val-tokens N] [--shard-tokens N] [--threads N]
#include <fmt/format.h>

#include <charconv>

#include "cli.h"
#include "core/error.h"
#include "data/prepare.h"

namespace lattice::cli {

namespace {

int64_t parse_count(const std::string& flag, const std::string& v) {
  int64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || n < 0)
    LATTICE_INPUT_FAIL("data prepare: {} expects a non-negative integer, got '{}'", flag, v);
  return n;
}

data::PrepareOptions parse_prepare(const Args& args) {
  data::PrepareOptions o;
  bool have_tokenizer = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)
        LATTICE_INPUT_FAIL("data prepare: {} needs a value", a);
      return args[++i];
    };
    if (a == "--input") {
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) o.inputs.push_back(args[++i]);
    } else if (a == "--tokenizer") {
      o.tokenizer = value();
      have_tokenizer = true;
    } else if (a == "--vocab-dir") {
      o.vocab_dir = value();
    } else if (a == "--out") {
      o.out_prefix = value();
    } else if (a == "--val-tokens") {
      o.val_tokens = parse_count(a, value());
    } else if (a == "--shard-tokens") {
      o.shard_tokens = parse_count(a, value());
    } else if (a == "--threads") {
      o.threads = int(parse_count(a, value()));
    } else {
      LATTICE_INPUT_FAIL("data prepare: unknown argument '{}' (see lattice --help)", a);
    }
  }
  if (o.inputs.empty()) LATTICE_INPUT_FAIL("data prepare: --input FILE... is required");
  if (!have_tokenizer) LATTICE_INPUT_FAIL("data prepare: --tokenizer gpt2|bytes is required");
  if (o.out_prefix.empty()) LATTICE_INPUT_FAIL("data prepare: --out PREFIX is required");
  return o;
}

}  // namespace

int data(const Args& args) {
  if (args.empty() || args[0] != "prepare")
    LATTICE_INPUT_FAIL("data: unknown subcommand '{}' (expected: lattice data prepare ...)",
                       args.empty() ? "" : args[0]);
  data::PrepareOptions o = parse_prepare(Args(args.begin() + 1, args.end()));
  data::PrepareSummary s = data::prepare_data(o);
  fmt::print(
      "prepared {} documents ({} bytes) with the {} tokenizer (vocab {}): {} val tokens in {} shard(s), "
      "{} train tokens in {} shard(s) -> {}_{{val,train}}_*.bin\n",
      s.documents, s.input_bytes, s.tokenizer, s.vocab_size, s.val_tokens, s.val_shards.size(), s.train_tokens,
      s.train_shards.size(), o.out_prefix);
  return 0;
}

}  // namespace lattice::cli
