"""PyTorch's side of bench/cpu_train: the same GPT as Tessera's (pre-norm blocks, causal
multi-head attention, tanh-GELU MLP, tied LM head, cross-entropy), written as a plain
nn.Module the way a PyTorch user would, trained in fp32 on CPU with torch.optim.AdamW.
Prints one line: `pytorch tokens_per_s=... step_ms=... loss_first=... loss_last=...`.
"""
import argparse
import math
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

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        hs = C // self.heads
        q = q.view(B, T, self.heads, hs).transpose(1, 2)
        k = k.view(B, T, self.heads, hs).transpose(1, 2)
        v = v.view(B, T, self.heads, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
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
        self.register_buffer("mask", torch.tril(torch.ones(seq_len, seq_len)))
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.blocks:
            x = block(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied LM head
        return F.cross_entropy(logits.view(B * T, -1), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    model = Gpt(a.layers, a.d_model, a.heads, a.seq_len, a.vocab)
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(42)
    timed = 0.0
    first = last = 0.0
    T = a.seq_len
    for s in range(a.warmup + a.steps):
        data = torch.randint(0, a.vocab, (a.batch * T + 1,), generator=gen)
        x = data[:-1].view(a.batch, T)
        y = data[1:].view(a.batch, T)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        t1 = time.perf_counter()
        if s == 0:
            first = loss.item()
        last = loss.item()
        if s >= a.warmup:
            timed += t1 - t0
    print(f"pytorch tokens_per_s={a.batch * T * a.steps / timed:.1f} "
          f"step_ms={1e3 * timed / a.steps:.2f} threads={a.threads} "
          f"params={sum(p.numel() for p in model.parameters())} "
          f"loss_first={first:.4f} loss_last={last:.4f}", flush=True)


if __name__ == "__main__":
    main()
