// The shape letters used in every buffer comment, defined once (llm.c style).
//
//   B   micro-batch size (sequences)        T   sequence length (tokens)
//   C   model width (d_model)               OC  output channels of a linear layer
//   NH  attention heads                     HS  head size = C / NH
//   V   vocabulary size (rows of the token embedding / logits columns)
//   L   number of transformer blocks        N   rows of a 2-D view, usually B * T
//   F   MLP hidden width (d_ff)
#pragma once
