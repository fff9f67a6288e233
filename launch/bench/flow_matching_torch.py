"""The PyTorch peer of the flow-matching benchmark: the same DiT velocity network and training step.

Mirrors :class:`methods.flow_matching.networks.DiT` (patch embedding, learned
positions, sinusoidal time embedding, adaLN-Zero blocks with multi-head
attention and a tanh-GELU MLP) and :func:`methods.flow_matching.core.train_step`
(linear path, MSE to ``x1 - x0``, global-norm clip 1, Adam, EMA), as a user of
PyTorch would write them (eager, one step per Python iteration).
"""

from __future__ import annotations

import copy
import math
import time

import numpy as np


def _modules():
  import torch  # pylint: disable=g-import-not-at-top
  from torch import nn  # pylint: disable=g-import-not-at-top

  class Block(nn.Module):

    def __init__(self, width, heads, mlp_ratio):
      super().__init__()
      self.mod = nn.Linear(width, 6 * width)
      nn.init.zeros_(self.mod.weight)
      nn.init.zeros_(self.mod.bias)
      self.ln1 = nn.LayerNorm(width, elementwise_affine=False)
      self.ln2 = nn.LayerNorm(width, elementwise_affine=False)
      self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
      self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(approximate="tanh"),
                               nn.Linear(mlp_ratio * width, width))

    def forward(self, x, c):
      s1, sc1, g1, s2, sc2, g2 = self.mod(nn.functional.silu(c)).chunk(6, dim=-1)
      h = self.ln1(x) * (1 + sc1[:, None]) + s1[:, None]
      x = x + g1[:, None] * self.attn(h, h, h, need_weights=False)[0]
      h = self.ln2(x) * (1 + sc2[:, None]) + s2[:, None]
      return x + g2[:, None] * self.mlp(h)

  class DiT(nn.Module):

    def __init__(self, latent_shape, width, depth, heads, patch, mlp_ratio):
      super().__init__()
      h, w, c = latent_shape
      self.p, self.c, self.width = patch, c, width
      self.gh, self.gw = h // patch, w // patch
      self.embed = nn.Linear(patch * patch * c, width)
      self.pos = nn.Parameter(0.02 * torch.randn(self.gh * self.gw, width))
      self.t1, self.t2 = nn.Linear(width, width), nn.Linear(width, width)
      self.blocks = nn.ModuleList([Block(width, heads, mlp_ratio) for _ in range(depth)])
      self.final_mod = nn.Linear(width, 2 * width)
      self.ln = nn.LayerNorm(width, elementwise_affine=False)
      self.out = nn.Linear(width, patch * patch * c)
      for layer in (self.final_mod, self.out):
        nn.init.zeros_(layer.weight)
        nn.init.zeros_(layer.bias)

    def forward(self, x, t):
      b, p, c = x.shape[0], self.p, self.c
      tok = x.reshape(b, self.gh, p, self.gw, p, c).permute(0, 1, 3, 2, 4, 5).reshape(b, self.gh * self.gw, -1)
      z = self.embed(tok) + self.pos[None]
      half = self.width // 2
      freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, dtype=torch.float32) / half)
      args = 1000.0 * t[:, None] * freqs[None]
      cond = self.t2(nn.functional.silu(self.t1(torch.cat([torch.cos(args), torch.sin(args)], -1))))
      for blk in self.blocks:
        z = blk(z, cond)
      shift, scale = self.final_mod(nn.functional.silu(cond)).chunk(2, dim=-1)
      z = self.ln(z) * (1 + scale[:, None]) + shift[:, None]
      out = self.out(z).reshape(b, self.gh, self.gw, p, p, c).permute(0, 1, 3, 2, 4, 5)
      return out.reshape(x.shape)

  return torch, DiT


def steps_per_second(latent_shape, *, width, depth, heads, patch, mlp_ratio, batch_size, steps, lr=1e-3,
                     ema_decay=0.999, threads=None) -> float:
  """Training steps per second of the PyTorch DiT (after 5 warm-up steps)."""
  torch, dit = _modules()
  if threads:
    torch.set_num_threads(threads)
  torch.manual_seed(0)
  model = dit(latent_shape, width, depth, heads, patch, mlp_ratio)
  ema = copy.deepcopy(model)
  opt = torch.optim.Adam(model.parameters(), lr=lr)
  data = torch.tensor(np.random.default_rng(0).standard_normal((2048,) + tuple(latent_shape)), dtype=torch.float32)

  def step():
    x1 = data[torch.randint(0, len(data), (batch_size,))]
    x0 = torch.randn_like(x1)
    t = torch.rand(batch_size)
    tb = t.view(-1, 1, 1, 1)
    loss = torch.mean((model(tb * x1 + (1 - tb) * x0, t) - (x1 - x0)) ** 2)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    with torch.no_grad():
      for e, p in zip(ema.parameters(), model.parameters()):
        e.mul_(ema_decay).add_(p, alpha=1 - ema_decay)

  for _ in range(5):
    step()
  t0 = time.perf_counter()
  for _ in range(steps):
    step()
  return steps / (time.perf_counter() - t0)
