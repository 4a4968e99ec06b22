"""Train a small MLP classifier on the tpu device.

The only tpu-specific line is the device: the same script runs on "cpu" or
"cuda". Data is a synthetic 4-class spiral made on the host.
"""
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def spirals(n_per_class=512, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    for c in range(classes):
        r = torch.linspace(0.05, 1.0, n_per_class)
        theta = c * 2 * math.pi / classes + r * 4.0 + torch.randn(n_per_class, generator=g) * 0.15
        xs.append(torch.stack([r * torch.cos(theta), r * torch.sin(theta)], 1))
        ys.append(torch.full((n_per_class,), c))
    return torch.cat(xs), torch.cat(ys)


def main(device="tpu", steps=300):
    torch.manual_seed(0)
    x, y = spirals()
    x, y = x.to(device), y.to(device)  # <- the one line that moves data to the TPU
    model = nn.Sequential(nn.Linear(2, 128), nn.GELU(), nn.Linear(128, 128), nn.GELU(),
                          nn.Linear(128, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    print(f"training on {x.device} ({torch.tpu.get_device_name() if x.is_tpu else device})")
    t0 = time.time()
    for step in range(steps + 1):
        idx = torch.randint(0, x.shape[0], (256,), device=device)
        logits = model(x[idx])
        loss = F.cross_entropy(logits, y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            with torch.no_grad():
                acc = (model(x).argmax(1) == y).float().mean().item()
            print(f"step {step:4d}  loss {loss.item():.4f}  accuracy {acc:.3f}")
    print(f"done in {time.time() - t0:.1f}s on {next(model.parameters()).device}; "
          f"ops that fell back to CPU: {torch.tpu.fallback_counts() or 'none'}")


if __name__ == "__main__":
    main()
