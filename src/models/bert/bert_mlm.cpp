// The masked-LM data path (bert.h mask_lm_batch): window framing and
// BERT's 15% / 80-10-10 masking with layout-independent Philox draws.
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/rng.h"
#include "models/bert/bert.h"

namespace lattice::bert {

namespace {

// RNG sites of one position: whether it is selected, what replaces it, which random token.
enum Site : uint32_t { kSelect = 0, kReplace = 1, kRandomToken = 2 };

RngKey mask_key(const StepCoords& c, uint32_t site) {
  RngKey k;
  k.seed = c.seed;
  k.purpose = RngPurpose::mask_lm;
  k.step = uint32_t(c.step);
  k.site = site;
  return k;
}

// [CLS] w_0 .. w_{T-3} [SEP] in place: the row shifts right by one.
void frame_window(int32_t* row, int64_t T, const SpecialIds& ids) {
  std::memmove(row + 1, row, size_t(T - 2) * sizeof(int32_t));
  row[0] = ids.cls;
  row[T - 1] = ids.sep;
}

}  // namespace

SpecialIds special_ids(const BertConfig& cfg) {
  const int32_t first = cfg.tokenizer_vocab;
  LATTICE_CHECK(first > 0 && first + 4 <= cfg.vocab_size,
                "model.vocab_size: {} has no room for [PAD] [MASK] [CLS] [SEP] after the tokenizer's {} ids — set "
                "vocab_size >= {}",
                cfg.vocab_size, first, first + 4);
  return {first, first + 1, first + 2, first + 3, first};
}

void mask_lm_batch(const BertConfig& cfg, const StepCoords& coords, Tensor& inputs, Tensor& targets) {
  LATTICE_CHECK(inputs.dtype() == DType::i32 && targets.dtype() == DType::i32 && inputs.device().is_cpu() &&
                    targets.device().is_cpu() && inputs.ndim() == 2 && targets.shape() == inputs.shape(),
                "bert: masked-LM batches are (B, T) i32 on the CPU, got inputs {} and targets {}",
                shape_str(inputs.shape()), shape_str(targets.shape()));
  const int64_t B = inputs.dim(0), T = inputs.dim(1);
  LATTICE_CHECK(T >= 3, "train.seq_len: bert needs at least 3 positions ([CLS], a token, [SEP]), got {}", T);
  const SpecialIds ids = special_ids(cfg);
  const RngKey select = mask_key(coords, kSelect), replace = mask_key(coords, kReplace),
               random = mask_key(coords, kRandomToken);
  for (int64_t b = 0; b < B; ++b) {
    int32_t* in = inputs.data<int32_t>() + b * T;
    int32_t* tg = targets.data<int32_t>() + b * T;
    frame_window(in, T, ids);
    const uint64_t sample = uint64_t(coords.sample0 + b);
    for (int64_t t = 0; t < T; ++t) {
      tg[t] = kIgnoreIndex;
      const int32_t tok = in[t];
      if (tok < 0 || tok >= ids.n_regular) continue;  // [PAD], [MASK], [CLS], [SEP]
      if (rng_uniform(select, sample, uint64_t(t)) >= kMaskRate) continue;
      tg[t] = tok;
      const float r = rng_uniform(replace, sample, uint64_t(t));
      if (r < kMaskTokenRate) {
        in[t] = ids.mask;
      } else if (r < kMaskTokenRate + kRandomTokenRate) {
        const float u = rng_uniform(random, sample, uint64_t(t));
        in[t] = std::min(ids.n_regular - 1, int32_t(u * float(ids.n_regular)));
      }
    }
  }
}

}  // namespace lattice::bert
