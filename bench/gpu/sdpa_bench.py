"""PyTorch's side of bench/gpu/flash_bench: causal scaled_dot_product_attention alone, bf16, on
(B, NH, T, hs) tensors, forward and backward timed with CUDA events. Prints one line:
`sdpa batch=... heads=... seq_len=... head_size=... forward_ms=... backward_ms=...
forward_tflops=... backward_tflops=...`, the FLOPs counted as flash_bench counts them (the
causal half; backward 2.5 times forward). Exits 3 when no CUDA device is visible.
"""
import argparse
import sys

import torch
import torch.nn.functional as F


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("sdpa_bench: no CUDA device", file=sys.stderr)
        return 3
    shape = (args.batch, args.heads, args.seq_len, args.head_size)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)

    def timed(fn):
        fn()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            fn()
        stop.record()
        torch.cuda.synchronize()
        return start.elapsed_time(stop) / args.iters

    forward_ms = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    backward_ms = timed(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
    flops = 2 * 2 * args.batch * args.heads * args.seq_len ** 2 * args.head_size / 2
    print(f"sdpa batch={args.batch} heads={args.heads} seq_len={args.seq_len} "
          f"head_size={args.head_size} forward_ms={forward_ms:.3f} backward_ms={backward_ms:.3f} "
          f"forward_tflops={flops / (forward_ms * 1e9):.1f} "
          f"backward_tflops={2.5 * flops / (backward_ms * 1e9):.1f} torch={torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
