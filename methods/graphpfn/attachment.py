"""Preferential attachment onto the largest component, vectorised over the new nodes.

Barabasi & Albert (1999) as the GraphPFN reference runs it
(``preferential_attachment.py``): new node ``t`` draws
``min(randint(1, m), nodes so far)`` distinct targets, with probability
proportional to the current degrees, without replacement (NumPy's
``choice(..., replace=False, p=degrees / sum)``), then the degrees grow.

Vectorised form (this project's): a draw proportional to degree is a
uniform entry of the list of edge endpoints (the core's, then two per PA
link in order), whose length when node ``t`` draws is fixed once every
node's number of links is drawn. Node ``t`` draws ``C = m + extra``
candidate entries; its targets are the first ``links`` distinct candidates
(successive sampling without replacement, the same distribution as
NumPy's). An entry inside the core's part is the node whose degree range
holds it; an entry appended by an earlier node is that node or its
``j``-th target, i.e. the candidate it chose: resolved by pointer jumping,
and the choices are iterated to their fixed point (rarely more than two
rounds: a duplicate among a node's candidates is rare).

Departure: a node whose ``C`` candidates hold fewer than ``links`` distinct
nodes (probability about ``p_max^(extra + 1)`` for the largest degree share
``p_max``) gets fewer links.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from methods.graphpfn import rng

EXTRA_CANDIDATES = 6


def _first_distinct(val: jax.Array, m: int):
  """``(choice [T, m], found [T, m])``: the candidate index of each node's ``j``-th distinct value."""
  c = val.shape[1]
  earlier = jnp.tri(c, k=-1, dtype=bool)[None]
  first = ~jnp.any((val[:, :, None] == val[:, None, :]) & earlier, axis=-1)  # [T, C]
  rank = jnp.cumsum(first, axis=1) - 1
  hit = first[:, None, :] & (rank[:, None, :] == jnp.arange(m)[None, :, None])  # [T, m, C]
  return jnp.argmax(hit, axis=-1).astype(jnp.int32), jnp.any(hit, axis=-1)


def attach(key: jax.Array, deg: jax.Array, core: jax.Array, n_sbm: jax.Array, n_pa: jax.Array, *,
           max_degree: int, t_max: int):
  """PA node ``t`` (id ``n_sbm + t``) links to ``min(randint(1, m), n_core + t)`` distinct degree-weighted nodes.

  Args:
    key: the links' and candidates' uniforms.
    deg: ``[N]`` int32 degrees of the core (0 outside it).
    core: ``[N]`` bool, the largest component.
    n_sbm: ids ``n_sbm, ..., n_sbm + n_pa - 1`` are the PA nodes.
    n_pa: number of PA nodes (``<= t_max``).
    max_degree: ``m``, the most links of a PA node.
    t_max: static bound on ``n_pa``.

  Returns:
    ``(targets, new, keep) [T * m]`` (PA edges; a new node to an older one,
    each target once) and ``is_pa [N]``.
  """
  m = max_degree
  c = m + EXTRA_CANDIDATES
  cumdeg = jnp.cumsum(deg)
  core_ends = cumdeg[-1]
  (u,) = rng.uniforms(key, (t_max, c + 1))
  t = jnp.arange(t_max, dtype=jnp.int32)
  links = jnp.where(t < n_pa, jnp.minimum(rng.randint(u[:, 0], 1, m), jnp.sum(core) + t), 0)
  done_links = jnp.cumsum(links)
  before = done_links - links
  count = core_ends + 2 * before  # length of the endpoint list when node t draws
  pos = jnp.minimum(jnp.floor(u[:, 1:] * count[:, None].astype(jnp.float32)).astype(jnp.int32),
                    jnp.maximum(count - 1, 0)[:, None])
  in_core = pos < core_ends
  q = jnp.maximum(pos - core_ends, 0)
  k = q // 2  # the k-th PA link (in order of nodes, then links)
  owner = jnp.minimum(jnp.searchsorted(done_links, k, side="right"), t_max - 1).astype(jnp.int32)
  j = jnp.clip(k - before[owner], 0, m - 1)
  fixed = (count[:, None] == 0) | in_core | (q % 2 == 0)
  core_node = jnp.searchsorted(cumdeg, pos, side="right").astype(jnp.int32)
  fallback = jnp.argmax(core).astype(jnp.int32)
  val0 = jnp.where(count[:, None] == 0, fallback, jnp.where(in_core, core_node, n_sbm + owner)).reshape(-1)
  own = jnp.arange(t_max * c, dtype=jnp.int32)

  def resolve(choice):
    """Candidate values when every node takes ``choice``: pointer jumping to the resolved entries."""
    ptr = jnp.where(fixed, own.reshape(t_max, c), owner * c + choice[owner, j]).reshape(-1)

    def jump(s):
      val, done, ptr = s
      return (jnp.where(~done & done[ptr], val[ptr], val), done | done[ptr],
              jnp.where(done | done[ptr], ptr, ptr[ptr]))

    val, _, _ = jax.lax.while_loop(lambda s: ~jnp.all(s[1]), jump, (val0, fixed.reshape(-1), ptr))
    return val.reshape(t_max, c)

  def step(s):
    choice = s[0]
    val = resolve(choice)
    new, found = _first_distinct(val, m)
    return new, val, found, jnp.any(new != choice)

  start = jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), (t_max, m))
  init = (start, jnp.zeros((t_max, c), jnp.int32), jnp.ones((t_max, m), bool), jnp.bool_(True))
  choice, val, found, _ = jax.lax.while_loop(lambda s: s[3], step, init)
  target = jnp.take_along_axis(val, choice, axis=1)
  keep = (jnp.arange(m)[None, :] < links[:, None]) & found
  new = jnp.broadcast_to((n_sbm + t)[:, None], (t_max, m)).astype(jnp.int32)
  idx = jnp.arange(core.shape[0])
  is_pa = (idx >= n_sbm) & (idx < n_sbm + n_pa)
  return target.reshape(-1).astype(jnp.int32), new.reshape(-1), keep.reshape(-1), is_pa
