// lattice convert --to-hf CHECKPOINT OUT_DIR (a step, checkpoint or run directory)
// lattice convert --from-hf HF_DIR OUT_CHECKPOINT_DIR
// Hugging Face GPT-2 and LLaMA interop (checkpoint/hf_gpt2.h, checkpoint/hf_llama.h):
// the arch comes from the checkpoint's config or config.json's model_type.
// One line on success.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <vector>

#include "checkpoint/atomic_dir.h"
#include "checkpoint/hf_gpt2.h"
#include "cli.h"
#include "core/error.h"

namespace lattice::cli {

namespace {

std::string describe(const checkpoint::ConvertSummary& s) {
  const ModelConfig& m = s.model;
  const std::string heads = !arch_traits(m.arch).grouped_query || m.n_kv_head == m.n_head
                                ? fmt::format("{} heads", m.n_head)
                                : fmt::format("{} heads ({} k/v)", m.n_head, m.n_kv_head);
  return fmt::format("{}: {} layers, {}, d_model {}, vocab {}, {} positions, {} head, {} parameters", enum_name(m.arch),
                     m.n_layer, heads, m.d_model, m.vocab_size, m.max_seq_len, m.tie_embeddings ? "tied" : "untied",
                     s.parameters);
}

}  // namespace

std::string step_dir_of(const std::string& command, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  LATTICE_INPUT_CHECK(fs::is_directory(path, ec), "{}: checkpoint {} is not a directory", command, path);
  // A step directory is loaded only when it verifies, as resume loads one:
  // the loaders read the tensors the index names, and a corrupted file would
  // load as whatever bytes it holds.
  if (fs::exists(fs::path(path) / "manifest.json", ec) || checkpoint::step_of_dir(path)) {
    try {
      checkpoint::verify_checkpoint_dir(path);
    } catch (const Error& e) {
      LATTICE_INPUT_FAIL(
          "{}: {} — name another step directory, or its checkpoint or run directory (the newest intact "
          "step)",
          command, e.message());
    }
    return path;
  }
  std::vector<std::string> failures;
  for (const fs::path& parent : {fs::path(path), fs::path(path) / "checkpoints"})
    if (auto latest = checkpoint::find_latest_complete(parent.string(), failures.empty() ? &failures : nullptr)) {
      for (const std::string& s : latest->skipped)  // newer ones that failed to verify, as resume reports them
        fmt::print(stderr, "lattice: {}: using {} instead\n", s, latest->dir);
      return latest->dir;
    }
  if (!failures.empty())  // step directories, none intact: say why for each, as resume does
    LATTICE_INPUT_FAIL("{}: {} holds no intact checkpoint: {}", command, path, fmt::join(failures, "; "));
  LATTICE_INPUT_FAIL(
      "{}: {} holds no complete checkpoint: pass a step directory (with manifest.json), a checkpoint "
      "directory or a run directory with checkpoints/",
      command, path);
}

int convert(const Args& args) {
  const bool to_hf = !args.empty() && args[0] == "--to-hf", from_hf = !args.empty() && args[0] == "--from-hf";
  if (!to_hf && !from_hf)
    LATTICE_INPUT_FAIL("convert: expected --to-hf CHECKPOINT OUT_DIR or --from-hf HF_DIR OUT_CHECKPOINT_DIR, got '{}'",
                       args.empty() ? "" : args[0]);
  if (args.size() != 3)
    LATTICE_INPUT_FAIL("convert {}: expected two directories ({}), got {} argument(s)", args[0],
                       to_hf ? "CHECKPOINT OUT_DIR" : "HF_DIR OUT_CHECKPOINT_DIR", args.size() - 1);
  if (to_hf) {
    // step_dir_of verified the step directory: its files are not read a second time for that.
    checkpoint::ConvertSummary s =
        checkpoint::convert_to_hf(step_dir_of("convert --to-hf", args[1]), args[2], checkpoint::Manifest::verified);
    fmt::print("exported {} -> {} (config.json, model.safetensors; load with {}.from_pretrained)\n", describe(s), s.out,
               s.hf_class);
  } else {
    checkpoint::ConvertSummary s = checkpoint::convert_from_hf(args[1], args[2]);
    fmt::print("imported {} -> {} (model only, step 0; train from it with checkpoint.resume={})\n", describe(s), s.out,
               s.out);
  }
  return 0;
}

}  // namespace lattice::cli
