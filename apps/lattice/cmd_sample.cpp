// lattice sample CHECKPOINT [--prompt TEXT | --prompt-file PATH] [--tokens N] [--samples N]
//                [--temperature X] [--top-k K] [--seed S]
//                [--tokenizer gpt2|bytes] [--vocab-dir DIR] [--threads N]
// Continues a prompt with a trained causal model (models/sampling.h), one
// process, no MPI, fp32 on the CPU. CHECKPOINT is a step directory, a
// checkpoint directory (its `latest`) or a run directory (its checkpoints/):
// every layout's checkpoint holds the logical model, so any run's works. The
// tokenizer is the run's (data.tokenizer, data.vocab_dir) unless given; a
// model-only checkpoint (convert --from-hf) needs --tokenizer. Samples go to
// stdout (one sample token by token as it comes; several each after a
// "--- sample k" line once all are done), what was loaded to stderr.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>

#include "args.h"
#include "checkpoint/atomic_dir.h"
#include "checkpoint/model_checkpoint.h"
#include "checkpoint/posix_file.h"
#include "cli.h"
#include "core/error.h"
#include "core/threads.h"
#include "data/tokenizer.h"
#include "models/registry.h"
#include "models/sampling.h"

namespace lattice::cli {

namespace {

namespace fs = std::filesystem;

struct SampleArgs {
  std::string checkpoint, prompt, tokenizer, vocab_dir;
  bool have_prompt = false, have_vocab_dir = false;
  GenerateOptions gen;
  int threads = 0;
};

constexpr size_t kMaxPromptBytes = size_t(64) << 20;

// The text of --prompt-file PATH; a path that is not a readable text file of
// at most kMaxPromptBytes is one line naming the option.
std::string read_prompt_file(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    LATTICE_INPUT_FAIL("sample: --prompt-file {}: {} — pass a text file", path,
                       fs::exists(path, ec) ? "not a regular file" : "no such file");
  const uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > kMaxPromptBytes)
    LATTICE_INPUT_FAIL("sample: --prompt-file {}: {} bytes, more than the {} a prompt may have — pass a shorter text",
                       path, size, kMaxPromptBytes);
  return checkpoint::read_text_file(path, kMaxPromptBytes);
}

SampleArgs parse_sample(const Args& args) {
  SampleArgs a;
  a.gen.tokens = 64;
  ArgReader r("sample",
              "lattice sample CHECKPOINT [--prompt TEXT | --prompt-file PATH] [--tokens N] [--samples N] "
              "[--temperature X] [--top-k K] [--seed S] [--tokenizer gpt2|bytes] [--vocab-dir DIR] [--threads N]",
              args);
  while (r.next()) {
    if (r.is("--prompt") || r.is("--prompt-file")) {
      const bool file = r.is("--prompt-file");
      if (a.have_prompt)
        r.fail(fmt::format("{} after a prompt was given: pass --prompt or --prompt-file, once", r.arg()));
      a.prompt = file ? read_prompt_file(r.path()) : r.value();
      a.have_prompt = true;
    } else if (r.is("--tokens")) {
      a.gen.tokens = r.number<int64_t>(1, 1 << 20, "an integer in [1, 1048576]");
    } else if (r.is("--samples")) {
      a.gen.samples = r.number(1, 256, "an integer in [1, 256]");
    } else if (r.is("--temperature")) {
      a.gen.sampling.temperature = r.number(0.0, 1e6, "a number in [0, 1000000] (0: always the most likely token)");
    } else if (r.is("--top-k")) {
      a.gen.sampling.top_k = r.number(0, std::numeric_limits<int>::max(), "an integer in [0, 2147483647] (0: all ids)");
    } else if (r.is("--seed")) {
      a.gen.sampling.seed =
          r.number<uint64_t>(0, std::numeric_limits<uint64_t>::max(), "a non-negative 64-bit integer");
    } else if (r.is("--tokenizer")) {
      a.tokenizer = r.value();
      if (a.tokenizer != "gpt2" && a.tokenizer != "bytes")
        r.fail(fmt::format("--tokenizer expects gpt2 or bytes, got '{}'", a.tokenizer));
    } else if (r.is("--vocab-dir")) {
      a.vocab_dir = r.path(), a.have_vocab_dir = true;
    } else if (r.is("--threads")) {
      a.threads = r.number(1, 1024, "an integer in [1, 1024]");
    } else if (r.is_option() || !a.checkpoint.empty()) {
      r.fail_unknown();
    } else {
      a.checkpoint = r.arg();
    }
  }
  if (a.checkpoint.empty())
    r.fail("expected a checkpoint (a step directory, a checkpoint directory or a run directory)");
  return a;
}

}  // namespace

std::string causal_archs() {
  std::vector<std::string> names;
  for (const ModelEntry& e : model_registry())
    if (arch_traits(e.arch).causal) names.emplace_back(enum_name(e.arch));
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

int sample(const Args& args) {
  if (const LaunchedAs job = launched_as(); job.size > 1) {
    if (job.rank > 0) return 1;  // one line for the job: rank 0's
    LATTICE_INPUT_FAIL(
        "sample: runs as one process, but the launcher started {}; run lattice sample without mpirun or srun",
        job.size);
  }
  SampleArgs a = parse_sample(args);
  const std::string step_dir = step_dir_of("sample", a.checkpoint);
  // step_dir_of verified it (every file against the manifest): not read twice more.
  checkpoint::LogicalModel m = checkpoint::read_logical_model(step_dir, checkpoint::Manifest::verified);
  const ModelConfig& mc = m.config;
  if (!arch_traits(mc.arch).causal)
    LATTICE_INPUT_FAIL(
        "sample: the model in {} is {}, which is not a left-to-right language model; sample continues text with "
        "{} models",
        step_dir, enum_name(mc.arch), causal_archs());
  if (!a.tokenizer.empty() && m.data && a.tokenizer != enum_name(m.data->tokenizer))
    LATTICE_INPUT_FAIL(
        "sample: --tokenizer {}, but the model in {} was trained on {} tokens (its run's data.tokenizer): its ids "
        "mean other text under {} — omit --tokenizer",
        a.tokenizer, step_dir, enum_name(m.data->tokenizer), a.tokenizer);
  if (a.tokenizer.empty()) {
    if (!m.data)
      LATTICE_INPUT_FAIL("sample: {} is a model-only checkpoint with no run config: pass --tokenizer gpt2|bytes",
                         step_dir);
    a.tokenizer = std::string(enum_name(m.data->tokenizer));
  }
  if (!a.have_vocab_dir && m.data) a.vocab_dir = m.data->vocab_dir;
  std::unique_ptr<data::Tokenizer> tok =
      data::make_tokenizer(a.tokenizer, a.vocab_dir, arch_traits(mc.arch).special_tokens);
  if (tok->vocab_size() > mc.vocab_size)
    LATTICE_INPUT_FAIL(
        "sample: the {} tokenizer has {} ids but the model in {} only {} (model.vocab_size): pass the "
        "tokenizer it was trained with (--tokenizer)",
        a.tokenizer, tok->vocab_size(), step_dir, mc.vocab_size);
  std::vector<int32_t> prompt = tok->encode(a.prompt);
  const bool from_eot = prompt.empty();  // no prompt: start from <|endoftext|>, as GPT-2 does
  if (from_eot) prompt.push_back(tok->eot_id());
  a.gen.vocab = tok->vocab_size();

  if (a.threads > 0) set_num_threads(a.threads);
  const TpShard shard{.vocab_multiple = mc.vocab_multiple};
  FlatParams params(model_param_specs(mc), DType::f32, Device::cpu(), shard);
  checkpoint::load_logical_model(m, params);
  const int64_t parameters = m.numel();
  m.tensors.clear();  // loaded: the params hold the model now, so it is not kept twice
  fmt::print(stderr,
             "sampling {} x {} tokens from {} ({}, {} layers, d_model {}, {} parameters; tokenizer {}), "
             "temperature {}, top_k {}, seed {}\n",
             a.gen.samples, a.gen.tokens, step_dir, enum_name(mc.arch), mc.n_layer, mc.d_model, parameters, a.tokenizer,
             a.gen.sampling.temperature, a.gen.sampling.top_k, a.gen.sampling.seed);
  const std::span<const int32_t> shown = std::span<const int32_t>(prompt).subspan(from_eot ? 1 : 0);
  if (a.gen.samples == 1) {  // one sample: each token as it comes (byte-level tokens concatenate)
    fmt::print("{}", tok->decode(shown));
    std::fflush(stdout);
    generate(mc, params, prompt, a.gen, [&](int64_t, const std::vector<std::vector<int32_t>>& seqs) {
      fmt::print("{}", tok->decode(std::span<const int32_t>(&seqs[0].back(), 1)));
      std::fflush(stdout);
    });
    fmt::print("\n");
  } else {
    const std::vector<std::vector<int32_t>> out = generate(mc, params, prompt, a.gen);
    for (size_t s = 0; s < out.size(); ++s) {
      const std::span<const int32_t> ids(out[s]);
      fmt::print("--- sample {}\n{}\n", s + 1, tok->decode(ids.subspan(from_eot ? 1 : 0)));
    }
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace lattice::cli
