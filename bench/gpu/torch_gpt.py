"""PyTorch's side of bench/gpu/run.sh: the same GPT as Tessera's (pre-norm blocks, causal
multi-head attention, tanh-GELU MLP, tied LM head, cross-entropy; GPT-2 124M by default),
written the way a PyTorch user would for speed: fp32 master weights, bf16 autocast,
scaled_dot_product_attention (flash attention), fused AdamW, torch.compile. Trained on random
tokens on one CUDA device. Prints one line:
`pytorch tokens_per_s=... step_ms=... mfu=... loss_first=... loss_last=... compile_s=...`.
Exits 3 when no CUDA device is visible.
"""
import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.fc_proj = nn.Linear(4 * d_model, d_model)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        hs = C // self.heads
        q = q.view(B, T, self.heads, hs).transpose(1, 2)
        k = k.view(B, T, self.heads, hs).transpose(1, 2)
        v = v.view(B, T, self.heads, hs).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        x = x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x


class Gpt(nn.Module):
    def __init__(self, layers, d_model, heads, seq_len, vocab):
        super().__init__()
        self.wte = nn.Embedding(vocab, d_model)
        self.wpe = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d_model)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.view(B * T, -1).float(), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--no-compile", action="store_true", help="eager mode (for a quick check)")
    a = ap.parse_args()

    if not torch.cuda.is_available():
        print("torch_gpt.py: no CUDA device visible to PyTorch", file=sys.stderr)
        sys.exit(3)
    dev = torch.device("cuda")
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = Gpt(a.layers, a.d_model, a.heads, a.seq_len, a.vocab).to(dev)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
    step_model = model if a.no_compile else torch.compile(model)
    gen = torch.Generator(device=dev).manual_seed(42)
    T = a.seq_len
    timed = 0.0
    first = last = float("nan")
    compile_s = 0.0
    for s in range(a.warmup + a.steps):
        data = torch.randint(0, a.vocab, (a.batch * T + 1,), generator=gen, device=dev)
        x = data[:-1].view(a.batch, T)
        y = data[1:].view(a.batch, T)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
            loss = step_model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        value = loss.item()  # the step's one read-back, as Tessera's
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        if s == 0:
            first = value
            compile_s = t1 - t0
        last = value
        if s >= a.warmup:
            timed += t1 - t0
    params = sum(p.numel() for p in model.parameters())
    flops_per_token = 6 * (params - a.seq_len * a.d_model) + 12 * a.layers * a.d_model * T
    tokens_per_s = a.batch * T * a.steps / timed
    mfu = tokens_per_s * flops_per_token / (a.peak_tflops * 1e12)
    print(f"pytorch tokens_per_s={tokens_per_s:.1f} step_ms={1e3 * timed / a.steps:.2f} "
          f"mfu={mfu:.4f} batch={a.batch} seq_len={T} params={params} "
          f"loss_first={first:.4f} loss_last={last:.4f} compile_s={compile_s:.1f} "
          f"torch={torch.__version__} compiled={not a.no_compile}", flush=True)


if __name__ == "__main__":
    main()
