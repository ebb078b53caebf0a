"""Writes tests/checkpoint/data/hf_gpt2_tiny/: a small random GPT-2 saved by
Hugging Face `transformers` itself, and its logits on fixed tokens.

test_hf_convert.cpp imports the directory with `lattice convert --from-hf`'s
library code, runs Lattice's GPT-2 on `input_ids` and requires its logits to
match `logits` within 1e-4 (fp32). No Python runs at test time; run this only
to regenerate the data (the committed files were written with transformers
4.36.2, safetensors 0.8.0 and torch 1.13):

    /usr/bin/python3 -m pip install --break-system-packages --no-deps \
        transformers==4.36.2 safetensors huggingface_hub==0.20.3 tokenizers==0.15.2 \
        regex tqdm filelock packaging fsspec          # torch: Debian's python3-torch
    /usr/bin/python3 scripts/make_hf_gpt2_golden.py

Every parameter is random, layer-norm weights and all biases included, so a
parameter mapped to the wrong place, or a transposition missed, shows in the
logits.
"""
import json
import os

import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "checkpoint", "data", "hf_gpt2_tiny")
B, T = 2, 16


def main():
    torch.manual_seed(1234)
    cfg = GPT2Config(vocab_size=300, n_positions=T, n_embd=32, n_layer=2, n_head=2,
                     activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name.endswith("ln_f.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.15 * torch.randn_like(p))
    os.makedirs(OUT, exist_ok=True)
    model.save_pretrained(OUT, safe_serialization=True)
    gen = os.path.join(OUT, "generation_config.json")
    if os.path.exists(gen):
        os.remove(gen)  # not part of the model

    ids = torch.randint(0, cfg.vocab_size, (B, T), generator=torch.Generator().manual_seed(99))
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
