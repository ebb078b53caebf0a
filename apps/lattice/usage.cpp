#include "cli.h"

namespace lattice::cli {

std::string usage() {
  return R"(usage: lattice COMMAND ...

  lattice train CONFIG.yaml [key=value ...] [--print-config]
      Train as the config says; overrides use dotted keys (train.steps=50).
      --print-config prints the effective config and exits.
  lattice verify-layout CONFIG.yaml [key=value ...] [--tolerance X]
      Under mpirun: train the configured layout and the single-rank reference
      on the same data and seeds for train.steps steps; print the per-step loss
      and grad-norm differences; exit 1 if a relative loss difference exceeds X
      (default 1e-5 under fp32, 1e-3 under bf16/fp16).
  lattice eval CONFIG.yaml [key=value ...] [--checkpoint PATH] [--batches N]
      The loss and perplexity of a checkpoint on data.val, alone or under
      mpirun in any layout: PATH (a step, checkpoint or run directory) or the
      newest checkpoint in checkpoint.dir, whose model.* and data.tokenizer
      must be the config's; N batches of train.global_batch (default
      train.eval_steps; 0: the whole set, each window once). Reads data.val
      only; writes nothing.
  lattice plan CONFIG.yaml [--world N] [key=value ...]
      Dry run without MPI or allocation: rank map, groups, layer-to-stage map,
      tie groups, schedule table and predicted memory per rank.
  lattice data prepare --input FILE... --tokenizer gpt2|bytes [--vocab-dir DIR]
                       --out PREFIX [--val-tokens N] [--shard-tokens N] [--threads N]
      Tokenize text files (one document each) into llm.c-format token shards.
  lattice convert --to-hf CHECKPOINT OUT_DIR
  lattice convert --from-hf HF_DIR OUT_CHECKPOINT_DIR
      GPT-2 and LLaMA to / from Hugging Face: --to-hf writes config.json and
      model.safetensors that GPT2LMHeadModel / LlamaForCausalLM.from_pretrained
      load (CHECKPOINT: a step, checkpoint or run directory, as for sample);
      --from-hf writes a model-only checkpoint OUT_CHECKPOINT_DIR/step_0000000.
  lattice sample CHECKPOINT [--prompt TEXT | --prompt-file PATH] [--tokens N]
                 [--samples N] [--temperature X] [--top-k K] [--seed S]
                 [--tokenizer gpt2|bytes] [--vocab-dir DIR] [--threads N]
      Continue the prompt with a trained )" +
         causal_archs() + R"( model
      (one process, fp32, CPU). CHECKPOINT: a step directory, a checkpoint
      directory or a run directory (its latest checkpoint). Defaults: 64
      tokens, 1 sample, temperature 1, top-k 0 (all ids), seed 1; temperature
      0 takes the most likely token. The tokenizer is the run's unless given.
  lattice --version

An option's value follows it (--tokens 50) or an '=' (--tokens=50; a value
that starts with -- needs the '=': --prompt=--x).
Configs: configs/*.yaml; every key is documented in docs/config.md.
)";
}

}  // namespace lattice::cli
