// BERT's masked-LM data path (bert_mlm.cpp): framing, the 15% / 80-10-10
// statistics, masks that depend only on (seed, step, sample index), and a
// short masked-LM run on tiny shakespeare whose loss falls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include "comm/self_communicator.h"
#include "config/config.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "models/bert/bert.h"
#include "optim/optimizer.h"
#include "support/error_text.h"
#include "support/test_support.h"

using namespace lattice;
using namespace lattice::bert;

namespace {

// A loader-like batch: windows of ordinary tokens and their next tokens.
void loader_batch(Tensor& inputs, Tensor& targets, int vocab, int64_t first_window) {
  const int64_t B = inputs.dim(0), T = inputs.dim(1);
  RngKey k;
  k.purpose = RngPurpose::data;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t <= T; ++t) {
      int32_t tok = int32_t(rng_uniform(k, uint64_t(first_window + b), uint64_t(t)) * (vocab - 4));
      if (t < T) inputs.data<int32_t>()[b * T + t] = tok;
      if (t > 0) targets.data<int32_t>()[b * T + t - 1] = tok;
    }
}

BertConfig mlm_config() {
  BertConfig c;
  c.vocab_size = 261;  // bytes + <|endoftext|> + the four BERT specials
  return c;
}

}  // namespace

// The ids are the tokenizer's: make_tokenizer with BERT's special tokens
// (config's arch_traits) numbers them exactly as special_ids() does, also when
// vocab_size pads the table past them.
TEST(BertMlm, SpecialIdsAreTheTokenizersOwn) {
  BertConfig cfg = mlm_config();
  cfg.vocab_size = 320;  // padded: the specials stay right after the tokenizer's ids
  const SpecialIds ids = special_ids(cfg);
  auto tok = data::make_tokenizer("bytes", "", arch_traits(ModelArch::bert).special_tokens);
  EXPECT_EQ(tok->vocab_size(), 261);
  EXPECT_EQ(ids.pad, tok->special_id("[PAD]"));
  EXPECT_EQ(ids.mask, tok->special_id("[MASK]"));
  EXPECT_EQ(ids.cls, tok->special_id("[CLS]"));
  EXPECT_EQ(ids.sep, tok->special_id("[SEP]"));
  EXPECT_EQ(ids.pad, 257);
  EXPECT_EQ(ids.n_regular, 257);
  EXPECT_EQ(ids.n_regular, tok->eot_id() + 1);  // <|endoftext|> is an ordinary input token
  EXPECT_EQ(tok->decode(std::vector<int32_t>{ids.cls, 'h', 'i', ids.mask, ids.sep}), "[CLS]hi[MASK][SEP]");
  // gpt2: 50256 BPE tokens + <|endoftext|>, then the four.
  cfg.tokenizer_vocab = 50257, cfg.vocab_size = 50304;
  EXPECT_EQ(special_ids(cfg).pad, 50257);
  EXPECT_EQ(special_ids(cfg).sep, 50260);
  cfg.vocab_size = 50260;  // one short
  const std::string err = test::error_text([&] { special_ids(cfg); });
  EXPECT_HAS(err, "model.vocab_size: 50260");
  EXPECT_HAS(err, "vocab_size >= 50261");
  // Configs fill tokenizer_vocab from data.tokenizer.
  EXPECT_EQ(tokenizer_own_size(TokenizerName::gpt2), 50257);
  EXPECT_EQ(tokenizer_size(TokenizerName::bytes, ModelArch::bert), 261);
}

TEST(BertMlm, FramesWindowsAndMasksAtBertRates) {
  const BertConfig cfg = mlm_config();
  const SpecialIds ids = special_ids(cfg);
  const int64_t B = 64, T = 128;
  Tensor in = Tensor::empty({B, T}, DType::i32), tg = Tensor::empty({B, T}, DType::i32);
  loader_batch(in, tg, cfg.vocab_size, 0);
  Tensor orig = in.clone();
  mask_lm_batch(cfg, {42, 7, 1000, true}, in, tg);
  int64_t positions = 0, selected = 0, masked = 0, random = 0, kept = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* x = in.data<int32_t>() + b * T;
    const int32_t* y = tg.data<int32_t>() + b * T;
    const int32_t* o = orig.data<int32_t>() + b * T;
    EXPECT_EQ(x[0], ids.cls);
    EXPECT_EQ(x[T - 1], ids.sep);
    EXPECT_EQ(y[0], kIgnoreIndex);
    EXPECT_EQ(y[T - 1], kIgnoreIndex);
    for (int64_t t = 1; t < T - 1; ++t) {
      const int32_t want = o[t - 1];  // [CLS] shifts the window right by one
      ++positions;
      if (y[t] == kIgnoreIndex) {
        EXPECT_EQ(x[t], want);
        continue;
      }
      ++selected;
      EXPECT_EQ(y[t], want);
      if (x[t] == ids.mask)
        ++masked;
      else if (x[t] == want)
        ++kept;  // a random draw equal to the token counts as kept (rare)
      else
        ++random;
      EXPECT_LT(x[t] == ids.mask ? 0 : x[t], ids.n_regular);
    }
  }
  const double sel = double(selected) / double(positions);
  EXPECT_NEAR(sel, 0.15, 0.01) << selected << " of " << positions;
  EXPECT_NEAR(double(masked) / double(selected), 0.8, 0.03);
  EXPECT_NEAR(double(random) / double(selected), 0.1, 0.025);
  EXPECT_NEAR(double(kept) / double(selected), 0.1, 0.025);
}

// The same global batch split into microbatches (or dp slices) of any size
// gets the same masks: they depend on (seed, step, global sample index) only.
TEST(BertMlm, MasksDependOnlyOnSeedStepAndSampleIndex) {
  const BertConfig cfg = mlm_config();
  const int64_t GB = 8, T = 32;
  auto masked = [&](int64_t split, uint64_t seed, int64_t step) {
    Tensor in = Tensor::empty({GB, T}, DType::i32), tg = Tensor::empty({GB, T}, DType::i32);
    for (int64_t first = 0; first < GB; first += split) {
      Tensor mi = in.view(first * T, {split, T}), mt = tg.view(first * T, {split, T});
      loader_batch(mi, mt, cfg.vocab_size, first);
      mask_lm_batch(cfg, {seed, step, first, true}, mi, mt);
    }
    return std::make_pair(in, tg);
  };
  auto [in8, tg8] = masked(8, 1, 3);
  for (int64_t split : {1, 2, 4}) {
    auto [in, tg] = masked(split, 1, 3);
    EXPECT_TRUE(std::equal(in.data<int32_t>(), in.data<int32_t>() + GB * T, in8.data<int32_t>())) << split;
    EXPECT_TRUE(std::equal(tg.data<int32_t>(), tg.data<int32_t>() + GB * T, tg8.data<int32_t>())) << split;
  }
  auto [in_step, tg_step] = masked(8, 1, 4);
  auto [in_seed, tg_seed] = masked(8, 2, 3);
  EXPECT_FALSE(std::equal(tg8.data<int32_t>(), tg8.data<int32_t>() + GB * T, tg_step.data<int32_t>()));
  EXPECT_FALSE(std::equal(tg8.data<int32_t>(), tg8.data<int32_t>() + GB * T, tg_seed.data<int32_t>()));
  // Different samples of one batch get different masks.
  EXPECT_FALSE(std::equal(tg8.data<int32_t>(), tg8.data<int32_t>() + T, tg8.data<int32_t>() + T) &&
               std::equal(tg8.data<int32_t>() + T, tg8.data<int32_t>() + 2 * T, tg8.data<int32_t>() + 2 * T));
}

TEST(BertMlm, RejectsWindowsTooShortToFrame) {
  Tensor in = Tensor::zeros({2, 2}, DType::i32), tg = Tensor::zeros({2, 2}, DType::i32);
  EXPECT_THROW(mask_lm_batch(mlm_config(), {1, 1, 0, true}, in, tg), Error);
}

// A tiny BERT trained with the masked-LM objective on tiny shakespeare
// (bytes, 400 steps, about 20 s on 2 cores): the held-out masked-LM loss
// falls from ln(261) to below what byte frequencies alone can reach.
TEST(BertMlm, LossFallsOnTinyShakespeare) {
  LATTICE_REQUIRE_SHARED("data/tinyshakespeare/input.txt");
  std::ifstream f(test::shared_dir() + "/data/tinyshakespeare/input.txt", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(text.size(), 100000u);
  BertConfig cfg = mlm_config();
  cfg.n_layer = 2, cfg.n_head = 4, cfg.d_model = 64, cfg.d_ff = 256, cfg.max_seq_len = 64;
  const int64_t B = 16, T = 64, split = int64_t(text.size()) * 9 / 10;
  auto batch = [&](Tensor& in, Tensor& tg, int64_t step, bool train) {
    RngKey k;
    k.purpose = RngPurpose::data;
    k.step = uint32_t(step);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t span = train ? split - T - 1 : int64_t(text.size()) - split - T - 1;
      const int64_t at = (train ? 0 : split) + int64_t(rng_uniform(k, uint64_t(b), 0) * float(span));
      for (int64_t t = 0; t < T; ++t) {
        in.data<int32_t>()[b * T + t] = int32_t(uint8_t(text[size_t(at + t)]));
        tg.data<int32_t>()[b * T + t] = int32_t(uint8_t(text[size_t(at + t + 1)]));
      }
    }
    mask_lm_batch(cfg, {5, train ? step : 0, step * B, train}, in, tg);
  };
  auto valid = [](const Tensor& tg) {
    return std::count_if(tg.data<int32_t>(), tg.data<int32_t>() + tg.numel(), [](int32_t v) { return v >= 0; });
  };
  comm::Group tp = comm::self_group("tp");
  FlatParams params(param_specs(cfg), DType::f32);
  params.init(3);
  Bert model(cfg, params, tp);
  auto ctx = model.make_context(B, T);
  Tensor ein = Tensor::empty({B, T}, DType::i32), etg = Tensor::empty({B, T}, DType::i32);
  auto eval = [&] {  // 8 held-out batches: about 1200 masked tokens
    double loss = 0, count = 0;
    for (int64_t k = 0; k < 8; ++k) {
      batch(ein, etg, k, false);
      loss += model.forward(*ctx, ein, etg, {5, 0, k * B, false});
      count += double(valid(etg));
    }
    return loss / count;
  };
  const double before = eval();
  auto opt = optim::make_optimizer({.name = "adamw", .weight_decay = 0.01}, params);
  Tensor in = Tensor::empty({B, T}, DType::i32), tg = Tensor::empty({B, T}, DType::i32);
  for (int64_t step = 1; step <= 400; ++step) {
    batch(in, tg, step, true);
    params.zero_grad();
    model.forward(*ctx, in, tg, {5, step, step * B, true});
    model.backward(*ctx, 1.0f / float(valid(tg)));
    opt->step(params, 1e-3 * std::min(1.0, double(step) / 20), step, 1.0f);
  }
  const double after = eval();
  RecordProperty("loss_before", std::to_string(before));
  RecordProperty("loss_after", std::to_string(after));
  EXPECT_NEAR(before, std::log(261.0), 0.3);
  // 3.06 after 400 steps: below 3.31, the entropy of the text's byte
  // frequencies, so the model predicts from the context, not from counts alone.
  EXPECT_LT(after, 3.2);
}
