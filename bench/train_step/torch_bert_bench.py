#!/usr/bin/env python3
"""torch_bert_bench.py - the PyTorch CPU reference for bench_train_step
--arch bert: the BERT encoder with the masked-LM head of src/models/bert (HF
BertForMaskedLM's computation) written with plain torch (no transformers), fp32.

Model: word + learned position + token-type (all segment 0) embeddings ->
LayerNorm; L post-LN blocks (x -> LN(x + out(attn(x))) -> LN(h + down(gelu(up(h)))))
with bidirectional attention (an additive mask on [PAD] keys, built from the
ids as Lattice does; the batches hold no [PAD]) and erf GELU; the MLM head:
transform dense + erf GELU + LayerNorm, then the decoder tied to the word
embeddings (untied with --untie) plus a per-token bias. Dropout 0. The word
table and decoder bias have --vocab-rows rows (Lattice pads the vocabulary to
a multiple of model.vocab_multiple); the padding logits are computed and then
dropped, as Lattice's cross-entropy skips them. Loss: cross-entropy at the
selected positions only.
Masked-LM batches (bert.h mask_lm_batch's scheme, torch's RNG): the last four
ids of --vocab are [PAD] [MASK] [CLS] [SEP]; a window of T uniform random
ordinary tokens becomes [CLS] x_0 .. x_{T-3} [SEP]; 15% of the ordinary
positions are selected, of those 80% -> [MASK], 10% -> a random ordinary
token, 10% kept. Batches are prepared before the timed loop.
Optimizer: AdamW (lr 3e-4, betas (0.9, 0.95), weight decay 0.1), as the
Lattice side.

Usage (the defaults are configs/bert-tiny.yaml with its vocabulary padded to
320 rows; bench_train_step passes the shapes of the config it runs):
  python3 torch_bert_bench.py --config tiny --threads 1 --steps 5 --warmup 2
Prints one line per step and a summary line starting with "RESULT", in the
format of shared/reference/torch_gpt2_bench.py (bench/train_step/torch_ref.cpp
parses it), plus flops_per_step.

FLOP model (Bert::flops_per_token): flops/token = 6 N + 12 L C T with N =
parameters without the position and token-type embeddings and the padding
rows (a tied decoder counts once); every position is computed, so tokens =
B T, not the masked count.
"""
import argparse
import math
import os
import statistics
import sys
import time


def parse_args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="tiny", help="label printed in the output")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--blas-threads", type=int, default=0,
                    help="OPENBLAS_NUM_THREADS (default: --threads)")
    ap.add_argument("--profile", action="store_true",
                    help="after timing, profile one more step (top ops)")
    ap.add_argument("--peak-gflops", type=float, default=0.0,
                    help="sgemm peak (GFLOP/s) for the MFU column")
    # Shapes (configs/bert-tiny.yaml by default).
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--d-ff", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=261)
    ap.add_argument("--vocab-rows", type=int, default=320, help="padded rows (0: --vocab)")
    ap.add_argument("--max-seq-len", type=int, default=128)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--norm-eps", type=float, default=1e-12)
    ap.add_argument("--untie", action="store_true", help="a separate decoder weight")
    return ap.parse_args()


def mask_lm_batches(torch, n, B, T, V, seed):
    """n masked-LM batches (inputs, targets), each (B, T) int64."""
    pad, mask, cls, sep = V - 4, V - 3, V - 2, V - 1
    regular = V - 4
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, regular, (n, B, T), generator=g)
    x[..., 1:] = x[..., :-1].clone()
    x[..., 0], x[..., -1] = cls, sep
    ordinary = x < regular
    selected = (torch.rand(x.shape, generator=g) < 0.15) & ordinary
    targets = torch.where(selected, x, torch.full_like(x, -1))
    r = torch.rand(x.shape, generator=g)
    rand_tok = torch.randint(0, regular, x.shape, generator=g)
    inputs = torch.where(selected & (r < 0.8), torch.full_like(x, mask), x)
    inputs = torch.where(selected & (r >= 0.8) & (r < 0.9), rand_tok, inputs)
    assert not (inputs == pad).any()
    return inputs, targets


def main():
    args = parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    blas_threads = args.blas_threads or args.threads
    os.environ["OPENBLAS_NUM_THREADS"] = str(blas_threads)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    L, C, H, FF = args.layers, args.d_model, args.heads, args.d_ff
    V, T, B, P = args.vocab, args.seq, args.batch, args.max_seq_len
    VR = args.vocab_rows or V
    HS = C // H
    assert C % H == 0 and VR >= V and T <= P and V > 4, "bad shapes"
    eps = args.norm_eps
    pad_id = V - 4
    tied = not args.untie

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query = nn.Linear(C, C)
            self.key = nn.Linear(C, C)
            self.value = nn.Linear(C, C)
            self.attn_out = nn.Linear(C, C)
            self.attn_ln = nn.LayerNorm(C, eps=eps)
            self.intermediate = nn.Linear(C, FF)
            self.output = nn.Linear(FF, C)
            self.out_ln = nn.LayerNorm(C, eps=eps)

        def attn(self, x, key_bias):
            b, t, _ = x.shape
            q = self.query(x).view(b, t, H, HS).transpose(1, 2)
            k = self.key(x).view(b, t, H, HS).transpose(1, 2)
            v = self.value(x).view(b, t, H, HS).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS)) + key_bias
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(b, t, C)
            return self.attn_out(y)

        def forward(self, x, key_bias):
            h = self.attn_ln(x + self.attn(x, key_bias))
            return self.out_ln(h + self.output(F.gelu(self.intermediate(h))))

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(VR, C)
            self.position = nn.Embedding(P, C)
            self.token_type = nn.Embedding(2, C)
            self.emb_ln = nn.LayerNorm(C, eps=eps)
            self.layers = nn.ModuleList([Layer() for _ in range(L)])
            self.transform = nn.Linear(C, C)
            self.transform_ln = nn.LayerNorm(C, eps=eps)
            self.decoder = nn.Linear(C, VR, bias=False)
            self.decoder_bias = nn.Parameter(torch.zeros(VR))
            if tied:
                self.decoder.weight = self.word.weight
            self.apply(self._init)

        @staticmethod
        def _init(m):
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

        def forward(self, idx, targets):
            b, t = idx.shape
            pos = torch.arange(t, dtype=torch.long)
            types = torch.zeros_like(idx)
            x = self.emb_ln(self.word(idx) + self.position(pos) + self.token_type(types))
            key_bias = torch.zeros(b, 1, 1, t).masked_fill((idx == pad_id).view(b, 1, 1, t), float("-inf"))
            for layer in self.layers:
                x = layer(x, key_bias)
            h = self.transform_ln(F.gelu(self.transform(x)))
            logits = (self.decoder(h) + self.decoder_bias)[..., :V]  # padding columns never enter the softmax
            return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1)

    model = Bert()
    n_all = sum(p.numel() for p in model.parameters())
    n_flop = (n_all - model.position.weight.numel() - model.token_type.weight.numel()
              - (VR - V) * C * (1 if tied else 2) - (VR - V))
    per_layer = 4 * C * C + 2 * C * FF + 9 * C + FF
    n_formula = V * C + 2 * C + L * per_layer + C * C + 3 * C + V + (0 if tied else V * C)
    assert n_flop == n_formula, f"N from the modules {n_flop} != Bert::flops_per_token's N {n_formula}"
    tokens = B * T
    flops_per_step = tokens * (6 * n_flop + 12 * L * C * T)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    inputs, targets = mask_lm_batches(torch, args.warmup + args.steps, B, T, V, seed=1)
    masked = (targets != -1).sum().item() / targets.shape[0]

    print(f"torch {torch.__version__} threads={torch.get_num_threads()} "
          f"blas_threads={blas_threads} "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')} "
          f"arch=bert config={args.config} L={L} C={C} H={H} F={FF} V={V} (rows {VR}) "
          f"T={T} B={B} tied={int(tied)} masked/step={masked:.0f} "
          f"params={n_all} (N for flops={n_flop}) "
          f"GFLOP/step={flops_per_step / 1e9:.2f}", flush=True)

    def train_step(x, y):
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    times = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = train_step(inputs[i], targets[i])
        dt = time.perf_counter() - t0
        tag = "warmup" if i < args.warmup else "step"
        print(f"{tag} {i}: loss {loss.item():.4f} {dt * 1e3:.1f} ms", flush=True)
        if i >= args.warmup:
            times.append(dt)
    med = statistics.median(times)
    gflops = flops_per_step / med / 1e9
    mfu = f" MFU={100 * gflops / args.peak_gflops:.1f}%" if args.peak_gflops else ""
    print(f"RESULT system=pytorch arch=bert config={args.config} threads={args.threads} "
          f"blas_threads={blas_threads} "
          f"median_ms={med * 1e3:.1f} min_ms={min(times) * 1e3:.1f} "
          f"max_ms={max(times) * 1e3:.1f} tokens_per_s={tokens / med:.0f} "
          f"achieved_GFLOPs={gflops:.1f}{mfu} flops_per_step={flops_per_step}", flush=True)
    if args.profile:
        with torch.autograd.profiler.profile() as prof:
            train_step(inputs[0], targets[0])
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    sys.exit(main())
