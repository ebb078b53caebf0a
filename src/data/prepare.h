// Data preparation: text files -> token shards (`lattice data prepare`).
//
//   stream  = doc_0 EOT doc_1 EOT ... doc_{n-1}     (each input file is one
//             document; `<|endoftext|>` between documents, none before the
//             first and none after the last)
//   PREFIX_val_000000.bin, _000001.bin ...    the first val_tokens tokens
//   PREFIX_train_000000.bin, _000001.bin ...  the rest, in order
// Each shard holds at most shard_tokens tokens (the last of a split may hold
// fewer); a split with no tokens writes no shard. Numbered shards of the same
// prefix left over from an earlier, larger run are removed, so a glob such as
// PREFIX_train_*.bin sees exactly this run's shards.
//
// Parallelism: documents are cut into chunks of about chunk_bytes at safe
// points (split_for_encoding) and the chunks are encoded on `threads`
// threads; the concatenated ids equal the ids of encoding each document in
// one call, whatever the thread count or chunk size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace lattice::data {

struct PrepareOptions {
  std::vector<std::string> inputs;     // text files; each one is a document
  std::string tokenizer = "gpt2";      // gpt2 | bytes
  std::string vocab_dir;               // gpt2: folder with encoder.json and vocab.bpe
  std::string out_prefix;              // shards are OUT_PREFIX_{val,train}_NNNNNN.bin
  int64_t val_tokens = 0;              // 0: no val split (all tokens are train)
  int64_t shard_tokens = 100'000'000;  // as llm.c's data scripts
  int threads = 0;                     // <= 0: std::thread::hardware_concurrency()
  int64_t chunk_bytes = 1 << 20;       // size of one unit of parallel work
};

struct PrepareSummary {
  std::string tokenizer;
  int32_t vocab_size = 0;
  int64_t documents = 0;
  int64_t input_bytes = 0;
  int64_t val_tokens = 0, train_tokens = 0;
  std::vector<std::string> val_shards, train_shards;  // paths, in order
  std::vector<std::string> removed_stale;             // old shards this run deleted
  int64_t replaced = 0;                               // old shards of the same names this run wrote over
};

// Errors (one line each): a missing input file (named), bad sizes, a token id
// that does not fit uint16, I/O failures (the shard named).
PrepareSummary prepare_data(const PrepareOptions& options);

// Cuts `text` into consecutive pieces of about target_bytes (>= 1), only at
// points where GPT-2 pre-tokenization cannot cross: between "X\n" and "Y" with
// X and Y printable non-space ASCII bytes (0x21..0x7E). Why that is safe:
//  - no pre-token holds both '\n' and a non-space character, so none spans
//    the cut;
//  - the '\n' is a whitespace run of length one: the whole text and the left
//    piece both make it the piece "\n" (`\s+` resp. `\s+(?!\S)`);
//  - the pattern has no look-behind, so matching from Y on sees the same text;
//  - ASCII bytes never sit inside an invalid UTF-8 sequence, so the cut into
//    valid runs is the same.
// (A cut after "\n\n" would not be safe: "\n\nY" pre-tokenizes as "\n" "\n" "Y"
// but "\n\n" alone as one piece.) For `bytes` every cut is safe. Text without
// such a point stays in one piece.
std::vector<std::string_view> split_for_encoding(std::string_view text, int64_t target_bytes);

// Encodes `text` on `threads` threads (chunks from split_for_encoding); equals
// tokenizer.encode(text).
std::vector<int32_t> encode_parallel(const Tokenizer& tokenizer, std::string_view text, int threads,
                                     int64_t chunk_bytes);

}  // namespace lattice::data
