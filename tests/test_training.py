"""Models train on tpu and track the same run on CPU (HIGHEST precision)."""
import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEV


class MLP(nn.Module):
    def __init__(self, d_in=32, d_h=64, n_cls=10):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_in, d_h), nn.ReLU(), nn.Linear(d_h, d_h), nn.GELU(),
                                 nn.Dropout(0.0), nn.Linear(d_h, n_cls))

    def forward(self, x):
        return self.net(x)


class Block(nn.Module):
    """GPT-style pre-LN transformer block with causal attention."""

    def __init__(self, d=32, heads=4, vocab=50):
        super().__init__()
        self.heads = heads
        self.emb = nn.Embedding(vocab, d)
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        b, t = idx.shape
        x = self.emb(idx)
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        hd = x.shape[-1] // self.heads
        q, k, v = (z.view(b, t, self.heads, hd).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.ones(t, t, device=idx.device, dtype=torch.bool).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return self.head(self.lnf(x))


def _train(model, batches, loss_fn, device, steps=50, foreach=None):
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=foreach)
    losses = []
    for i in range(steps):
        x, y = (t.to(device) for t in batches[i % len(batches)])
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "forloop"])
def test_mlp_adamw_tracks_cpu(foreach):
    torch.manual_seed(0)
    model = MLP()
    batches = [(torch.randn(16, 32), torch.randint(0, 10, (16,))) for _ in range(5)]
    ref, ref_model = _train(copy.deepcopy(model), batches, F.cross_entropy, "cpu", foreach=foreach)
    got, got_model = _train(copy.deepcopy(model), batches, F.cross_entropy, DEV, foreach=foreach)
    assert got[-1] < got[0]
    for a, b in zip(got, ref):
        assert abs(a - b) <= 1e-4 * abs(b), (got, ref)
    for p, q in zip(got_model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-5)


def test_transformer_block_adamw_tracks_cpu():
    torch.manual_seed(0)
    model = Block()
    batches = [(torch.randint(0, 50, (4, 16)), torch.randint(0, 50, (4, 16))) for _ in range(5)]
    loss_fn = lambda logits, y: F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    ref, _ = _train(copy.deepcopy(model), batches, loss_fn, "cpu")
    got, _ = _train(copy.deepcopy(model), batches, loss_fn, DEV)
    assert got[-1] < got[0]
    for a, b in zip(got, ref):
        assert abs(a - b) <= 1e-4 * abs(b), (got, ref)


def test_sgd_momentum_and_clip_grad_norm():
    torch.manual_seed(1)
    model = MLP()
    batches = [(torch.randn(8, 32), torch.randint(0, 10, (8,))) for _ in range(3)]

    def run(device):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True)
        out = []
        for i in range(10):
            x, y = (t.to(device) for t in batches[i % 3])
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            opt.step()
            out.append(loss.item())
        return out

    ref, got = run("cpu"), run(DEV)
    for a, b in zip(got, ref):
        assert abs(a - b) <= 1e-4 * abs(b)
