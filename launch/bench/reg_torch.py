"""PyTorch peer of the IQL update (CPU, or CUDA where the machine has a GPU), for ``launch/bench/reg.py``.

The same update as :func:`methods.reg.update` with ``critic="iql",
extraction="awr"`` (ikostrikov/implicit_q_learning's order and losses; CORL's
PyTorch IQL is the usual reference implementation): expectile V on the target
twin Q, AWR actor with a tanh-mean Gaussian and state-independent log std,
twin Q regression on ``r + gamma (1 - done) V(s')``, Polyak targets; Adam
everywhere. Same widths, batch size and dataset shapes as the JAX side.
"""

from __future__ import annotations

import copy
import time

import numpy as np


def _mlp(torch, inp, hidden, out):
  layers, d = [], inp
  for h in hidden:
    layers += [torch.nn.Linear(d, h), torch.nn.ReLU()]
    d = h
  layers.append(torch.nn.Linear(d, out))
  return torch.nn.Sequential(*layers)


class IQL:
  """Networks, optimisers and one ``update(batch)``."""

  def __init__(self, obs_dim, act_dim, hidden=(256, 256), lr=3e-4, tau=0.7, beta=3.0, discount=0.99,
               polyak=0.005, seed=0, device="cpu"):
    import torch  # pylint: disable=g-import-not-at-top

    self.torch = torch
    torch.manual_seed(seed)
    self.q1, self.q2 = (_mlp(torch, obs_dim + act_dim, hidden, 1) for _ in range(2))
    self.q1_t, self.q2_t = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
    self.v = _mlp(torch, obs_dim, hidden, 1)
    self.mu = _mlp(torch, obs_dim, hidden, act_dim)
    for net in (self.q1, self.q2, self.q1_t, self.q2_t, self.v, self.mu):
      net.to(device)
    self.log_std = torch.nn.Parameter(torch.zeros(act_dim, device=device))
    self.opt_q = torch.optim.Adam(list(self.q1.parameters()) + list(self.q2.parameters()), lr=lr)
    self.opt_v = torch.optim.Adam(self.v.parameters(), lr=lr)
    self.opt_pi = torch.optim.Adam(list(self.mu.parameters()) + [self.log_std], lr=lr)
    self.tau, self.beta, self.discount, self.polyak = tau, beta, discount, polyak

  def update(self, obs, act, rew, next_obs, done):
    torch = self.torch
    sa = torch.cat([obs, act], -1)
    with torch.no_grad():
      q_t = torch.minimum(self.q1_t(sa), self.q2_t(sa)).squeeze(-1)
    # Value: expectile regression.
    u = q_t - self.v(obs).squeeze(-1)
    v_loss = (torch.abs(self.tau - (u < 0).float()) * u**2).mean()
    self.opt_v.zero_grad()
    v_loss.backward()
    self.opt_v.step()
    # Actor: advantage-weighted regression.
    with torch.no_grad():
      w = torch.clamp(torch.exp(self.beta * (q_t - self.v(obs).squeeze(-1))), max=100.0)
    mean = torch.tanh(self.mu(obs))
    log_std = self.log_std.clamp(-5.0, 2.0)
    logp = (-0.5 * ((act - mean) / log_std.exp()) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
    pi_loss = -(w * logp).mean()
    self.opt_pi.zero_grad()
    pi_loss.backward()
    self.opt_pi.step()
    # Critic.
    with torch.no_grad():
      y = rew + self.discount * (1.0 - done) * self.v(next_obs).squeeze(-1)
    q_loss = ((self.q1(sa).squeeze(-1) - y) ** 2).mean() + ((self.q2(sa).squeeze(-1) - y) ** 2).mean()
    self.opt_q.zero_grad()
    q_loss.backward()
    self.opt_q.step()
    with torch.no_grad():
      for net, tgt in ((self.q1, self.q1_t), (self.q2, self.q2_t)):
        for p, pt in zip(net.parameters(), tgt.parameters()):
          pt.mul_(1 - self.polyak).add_(self.polyak * p)
    return q_loss.detach()  # a tensor: no host synchronisation per update


def cuda_available() -> bool:
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    return False
  return torch.cuda.is_available()


def updates_per_second(data: dict, num_updates: int, hidden=(256, 256), batch_size=256, threads=None,
                       device="cpu") -> float:
  """Rate of ``num_updates`` IQL updates on minibatches sampled from ``data`` (NumPy arrays).

  On ``device="cuda"`` the data, the networks and the minibatch sampling live
  on the GPU and the clock stops after a ``torch.cuda.synchronize()``.
  """
  import torch  # pylint: disable=g-import-not-at-top

  if threads:
    torch.set_num_threads(threads)
  t = {k: torch.as_tensor(v, device=device) for k, v in data.items()}
  agent = IQL(t["observations"].shape[1], t["actions"].shape[1], hidden, device=device)
  n = t["rewards"].shape[0]
  gen = torch.Generator(device=device).manual_seed(0)
  sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)

  def step():
    idx = torch.randint(0, n, (batch_size,), generator=gen, device=device)
    agent.update(t["observations"][idx], t["actions"][idx], t["rewards"][idx], t["next_observations"][idx],
                 t["terminals"][idx])

  for _ in range(10):  # warm-up
    step()
  sync()
  start = time.perf_counter()
  for _ in range(num_updates):
    step()
  sync()
  return num_updates / (time.perf_counter() - start)
