"""Writes tests/checkpoint/data/hf_llama_tiny/: a small random LLaMA saved by
Hugging Face `transformers` itself (LlamaForCausalLM), and its logits on fixed
tokens.

test_hf_convert.cpp imports the directory with `lattice convert --from-hf`'s
library code, runs Lattice's LLaMA on `input_ids` and requires its logits to
match `logits` within 1e-4 (fp32). No Python runs at test time; run this only
to regenerate the data (the committed files were written with transformers
4.36.2, safetensors 0.8.0 and torch 1.13; the install is the one
scripts/make_hf_gpt2_golden.py describes):

    /usr/bin/python3 scripts/make_hf_llama_golden.py

The model has grouped-query attention (4 query heads, 2 k/v heads), an untied
head and a rope_theta other than the default, and every parameter is random,
RMSNorm weights included, so a parameter mapped to the wrong place, a k/v head
grouped wrongly or a rotary convention mismatch shows in the logits.
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "checkpoint", "data", "hf_llama_tiny")
B, T = 2, 16


def main():
    torch.manual_seed(4321)
    cfg = LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T,
                      rms_norm_eps=1e-6, rope_theta=500.0, tie_word_embeddings=False,
                      hidden_act="silu", attention_bias=False, attention_dropout=0.0)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)
    gen = os.path.join(OUT, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)  # not part of the model

    ids = torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(77))
    ids[0, 0], ids[1, -1] = 0, cfg.vocab_size - 1  # the first and last vocabulary rows
    with torch.no_grad():
        logits = model(ids).logits.float().contiguous()
    save_file({"input_ids": ids.to(torch.int32).contiguous(), "logits": logits},
              os.path.join(OUT, "golden_logits.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(OUT, "config.json")) as f:
        saved = json.load(f)
    print(f"wrote {OUT}: transformers {saved.get('transformers_version')}, logits {tuple(logits.shape)}, "
          f"|logits| max {logits.abs().max().item():.3f}")


if __name__ == "__main__":
    main()
