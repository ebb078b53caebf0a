// lattice data prepare --input FILE... --tokenizer gpt2|bytes [--vocab-dir DIR]
//                      --out PREFIX [--val-tokens N] [--shard-tokens N] [--threads N]
#include <fmt/format.h>

#include <limits>
#include <utility>

#include "args.h"
#include "cli.h"
#include "core/error.h"
#include "data/prepare.h"

namespace lattice::cli {

namespace {

data::PrepareOptions parse_prepare(const Args& args) {
  data::PrepareOptions o;
  bool have_tokenizer = false;
  ArgReader r("data prepare",
              "lattice data prepare --input FILE... --tokenizer gpt2|bytes [--vocab-dir DIR] --out PREFIX "
              "[--val-tokens N] [--shard-tokens N] [--threads N]",
              args);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  while (r.next()) {
    if (r.is("--input")) {
      for (std::string& f : r.values()) o.inputs.push_back(std::move(f));
    } else if (r.is("--tokenizer")) {
      o.tokenizer = r.value();
      have_tokenizer = true;
    } else if (r.is("--vocab-dir")) {
      o.vocab_dir = r.path();
    } else if (r.is("--out")) {
      o.out_prefix = r.path();
    } else if (r.is("--val-tokens")) {
      o.val_tokens = r.number<int64_t>(0, kMax, "a non-negative integer");
    } else if (r.is("--shard-tokens")) {
      o.shard_tokens = r.number<int64_t>(0, kMax, "a non-negative integer");
    } else if (r.is("--threads")) {
      o.threads = r.number(0, 1024, "an integer in [0, 1024] (0: every processor)");
    } else {
      r.fail_unknown();
    }
  }
  if (o.inputs.empty()) r.fail("--input FILE... is required");
  if (!have_tokenizer) r.fail("--tokenizer gpt2|bytes is required");
  if (o.out_prefix.empty()) r.fail("--out PREFIX is required");
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
  if (s.replaced > 0 || !s.removed_stale.empty())  // an earlier prepare's shards under the same prefix
    fmt::print(
        "note: {} had shards of an earlier prepare: {} replaced, {} removed (this run wrote no shard of "
        "their numbers); runs that read them read this data now\n",
        o.out_prefix, s.replaced, s.removed_stale.size());
  return 0;
}

}  // namespace lattice::cli
