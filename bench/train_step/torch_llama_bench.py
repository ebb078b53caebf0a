#!/usr/bin/env python3
"""torch_llama_bench.py - the PyTorch CPU reference for bench_train_step
--arch llama: the LLaMA-style decoder of src/models/llama (HF LlamaForCausalLM's
computation) written with plain torch (no transformers), fp32.

Model: token embedding; L pre-norm blocks (RMSNorm -> causal grouped-query
self-attention with HF rotate-half rotary embeddings (rope_theta) -> residual,
RMSNorm -> SwiGLU MLP down(silu(gate(x)) * up(x)) of width d_ff -> residual);
final RMSNorm; LM head (untied unless --tie). No biases anywhere. The
embedding and head tables have --vocab-rows rows (Lattice pads the vocabulary
to a multiple of model.vocab_multiple); the logits of the padding rows are
computed and then dropped, as Lattice's cross-entropy skips them.
Optimizer: AdamW (lr 3e-4, betas (0.9, 0.95), weight decay 0.1), as the
Lattice side. Data: uniform random token ids in [0, --vocab), next-token
targets; drawn before the timed loop.

Usage (the defaults are configs/llama-tiny.yaml; bench_train_step passes the
shapes of the config it runs explicitly):
  python3 torch_llama_bench.py --config tiny --threads 1 --steps 5 --warmup 2
Prints one line per step and a summary line starting with "RESULT", in the
format of shared/reference/torch_gpt2_bench.py (bench/train_step/torch_ref.cpp
parses it), plus flops_per_step.

Threads: as torch_gpt2_bench.py (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS set
before torch is imported, then torch.set_num_threads).

FLOP model (Llama::flops_per_token): flops/token = 6 N + 12 L C T with N =
every parameter without the padding rows (a tied head counts once).
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
    # Shapes (configs/llama-tiny.yaml by default).
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--d-ff", type=int, default=352)
    ap.add_argument("--vocab", type=int, default=257)
    ap.add_argument("--vocab-rows", type=int, default=320, help="padded rows, as Lattice pads --vocab (0: --vocab)")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--norm-eps", type=float, default=1e-5)
    ap.add_argument("--rope-theta", type=float, default=10000.0)
    ap.add_argument("--tie", action="store_true", help="tie the LM head to the embedding")
    return ap.parse_args()


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
    L, C, H, KV, FF = args.layers, args.d_model, args.heads, args.kv_heads, args.d_ff
    V, T, B = args.vocab, args.seq, args.batch
    VR = args.vocab_rows or V
    HS = C // H
    assert C % H == 0 and H % KV == 0 and VR >= V, "bad shapes"
    eps = args.norm_eps

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(C))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * self.weight

    # HF rotate-half RoPE tables (T, HS), position t, frequency i: theta^(-2i/HS).
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, HS, 2, dtype=torch.float32) / HS))
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    def rotate_half(x):
        x1, x2 = x[..., : HS // 2], x[..., HS // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def rope(x):  # (B, heads, T, HS)
        return x * cos + rotate_half(x) * sin

    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.q_proj = nn.Linear(C, C, bias=False)
            self.k_proj = nn.Linear(C, KV * HS, bias=False)
            self.v_proj = nn.Linear(C, KV * HS, bias=False)
            self.o_proj = nn.Linear(C, C, bias=False)
            self.post_attention_layernorm = RMSNorm()
            self.gate_proj = nn.Linear(C, FF, bias=False)
            self.up_proj = nn.Linear(C, FF, bias=False)
            self.down_proj = nn.Linear(FF, C, bias=False)

        def attn(self, x):
            b, t, _ = x.shape
            q = self.q_proj(x).view(b, t, H, HS).transpose(1, 2)
            k = self.k_proj(x).view(b, t, KV, HS).transpose(1, 2)
            v = self.v_proj(x).view(b, t, KV, HS).transpose(1, 2)
            q, k = rope(q), rope(k)
            if KV != H:  # HF repeat_kv: query head h reads k/v head h // (H / KV)
                k = k.repeat_interleave(H // KV, dim=1)
                v = v.repeat_interleave(H // KV, dim=1)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
            att = att.masked_fill(~causal[:t, :t], float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(b, t, C)
            return self.o_proj(y)

        def forward(self, x):
            x = x + self.attn(self.input_layernorm(x))
            h = self.post_attention_layernorm(x)
            return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(VR, C)
            self.layers = nn.ModuleList([Block() for _ in range(L)])
            self.norm = RMSNorm()
            self.lm_head = nn.Linear(C, VR, bias=False)
            if args.tie:
                self.lm_head.weight = self.embed_tokens.weight
            self.apply(self._init)

        @staticmethod
        def _init(m):
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)

        def forward(self, idx, targets):
            x = self.embed_tokens(idx)
            for blk in self.layers:
                x = blk(x)
            logits = self.lm_head(self.norm(x))[..., :V]  # padding columns never enter the softmax
            return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))

    model = Llama()
    n_all = sum(p.numel() for p in model.parameters())
    n_flop = n_all - (VR - V) * C * (1 if args.tie else 2)
    kvc = KV * HS
    n_formula = V * C + L * (2 * C * C + 2 * C * kvc + 3 * C * FF + 2 * C) + C + (0 if args.tie else V * C)
    assert n_flop == n_formula, f"N from the modules {n_flop} != Llama::flops_per_token's N {n_formula}"
    tokens = B * T
    flops_per_step = tokens * (6 * n_flop + 12 * L * C * T)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, V, (args.warmup + args.steps, B, T + 1), generator=g)

    print(f"torch {torch.__version__} threads={torch.get_num_threads()} "
          f"blas_threads={blas_threads} "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')} "
          f"arch=llama config={args.config} L={L} C={C} H={H} KV={KV} F={FF} V={V} (rows {VR}) "
          f"T={T} B={B} tied={int(args.tie)} "
          f"params={n_all} (N for flops={n_flop}) "
          f"GFLOP/step={flops_per_step / 1e9:.2f}", flush=True)

    def train_step(xy):
        x, y = xy[:, :-1].contiguous(), xy[:, 1:].contiguous()
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    times = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = train_step(data[i])
        dt = time.perf_counter() - t0
        tag = "warmup" if i < args.warmup else "step"
        print(f"{tag} {i}: loss {loss.item():.4f} {dt * 1e3:.1f} ms", flush=True)
        if i >= args.warmup:
            times.append(dt)
    med = statistics.median(times)
    gflops = flops_per_step / med / 1e9
    mfu = f" MFU={100 * gflops / args.peak_gflops:.1f}%" if args.peak_gflops else ""
    print(f"RESULT system=pytorch arch=llama config={args.config} threads={args.threads} "
          f"blas_threads={blas_threads} "
          f"median_ms={med * 1e3:.1f} min_ms={min(times) * 1e3:.1f} "
          f"max_ms={max(times) * 1e3:.1f} tokens_per_s={tokens / med:.0f} "
          f"achieved_GFLOPs={gflops:.1f}{mfu} flops_per_step={flops_per_step}", flush=True)
    if args.profile:
        with torch.autograd.profiler.profile() as prof:
            train_step(data[0])
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    sys.exit(main())
