r"""Calibration of ModelSMC's parameter intervals on simulated systems.

For each system of ``envs.ode_systems.SYSTEMS`` named in ``systems``, the
*true* structure (built from the system's equations, as the ``sim`` task's
truth) is fitted to ``num_datasets`` simulated datasets -- the same true
parameters, different observation noise -- with the observation model,
priors and fit settings of the ``model_smc`` experiment
(``launch/configs/model_smc.py:<model_preset>,task=sim,system=<name>``).
Each fit gets central credible intervals at ``levels`` by two methods of
:mod:`methods.model_smc.posterior` (Laplace at the MAP; preconditioned MALA
chains), and the study reports, per system, method and level, the share of
true parameters inside their intervals with its standard error.

The parameters of one dataset share its noise, so their coverage indicators
are correlated: the standard error is taken over datasets (the sd of the
per-dataset coverage fraction over ``sqrt(num_datasets)``), floored at the
independent-binomial value ``sqrt(q (1 - q) / (datasets x parameters))``. A
coverage is *calibrated* when it lies within ``num_se`` standard errors of
the nominal level. A parameter without an interval (failed fit, or a
Hessian that is not positive definite) counts as not covered.

  python -m launch.main --config=launch/configs/model_smc_calibration.py:cpu \
      --workdir=runs/model_smc_calibration
"""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from typing import NamedTuple

from absl import logging
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from envs import ode_systems
from launch import tables
from launch.configs import model_smc as smc_config
from launch.configs import model_smc_calibration as cal_config
from launch.configs.model_smc_calibration import RunConfig
from launch.experiments.model_smc import tasks
from launch.runtime import Context
from launch.runtime import Experiment
from methods.model_smc import expr as ex
from methods.model_smc import fit as fit_lib
from methods.model_smc import model as mdl
from methods.model_smc import posterior as post
from methods.model_smc import structure as st

GROUPS = ("rates", "noise", "initial")


class Progress(NamedTuple):
  """Checkpointed run state: systems done (their results ride in the checkpoint's metadata)."""

  systems_done: jax.Array


# ----------------------------------------------------------------------------
# One system.


class TruthIndex(NamedTuple):
  """Where the true parameters sit in ``phi`` and their natural-scale values."""

  truth: np.ndarray  # [D] natural-scale true value (NaN where none)
  groups: dict  # group -> np.ndarray of phi indices
  names: list  # [D] display name ("" where none)


def true_structure(task: tasks.Task) -> tuple[st.Library, st.Structure]:
  """A library of exactly the true bodies, and the true structure over it."""
  library = st.Library(task.states)
  return library, st.from_equations(task.truth["equations"], library)


def truth_index(task: tasks.Task, system: ode_systems.OdeSystem, library: st.Library, model: mdl.StructuredModel,
                noise_scale: float) -> TruthIndex:
  """Maps every true value onto its coordinate of ``phi`` (by canonical body and parameter order)."""
  lay = model.layout
  truth = np.full((lay.dim,), np.nan)
  names = [""] * lay.dim
  rates, slot_state = [], {}
  for s, state in enumerate(library.states):
    tree = ex.parse(task.truth["equations"][state], states=library.states)
    for _, body in ex.split_terms(tree):
      canon = ex.canonical(body)
      if isinstance(canon, ex.Call) and canon.fn == "neg":  # (-k)*x is the term -(k*x), as in from_equations
        canon = canon.arg
      k = library.add(canon)
      if k >= len(lay.slot_index):
        raise ValueError(f"{system.name}: true term {ex.to_text(body)!r} of d{state}/dt is not a body of the true "
                         f"structure's library {library.keys}")
      # canonical() renames parameters c0, c1, ... in order of appearance in
      # the normalised body; the same order maps the true names onto slots.
      order = ex.params_of(ex._normalize(body))  # pylint: disable=protected-access
      for j, name in enumerate(order):
        i = int(lay.slot_index[k][s, j])
        truth[i] = float(task.truth["params"][name])
        names[i] = name
        slot_state[i] = state
        rates.append(i)
  shared = {n for n in names if n and names.count(n) > 1}
  for i in rates:  # a parameter shared by several equations has one slot per equation
    if names[i] in shared:
      names[i] = f"{names[i]} (d{slot_state[i]})"
  for o, i in enumerate(lay.noise_index):
    truth[i] = noise_scale
    names[i] = f"sigma_{library.states[task.observed[o]]}"
  for s, i in enumerate(lay.init_index):
    truth[i] = float(system.x0[s])
    names[i] = f"{library.states[s]}0"
  # A true initial state of 0 has no value on the log scale (phi = log x0): no interval can cover it.
  log_init = model.spec.init_scale == "log"
  initial = [int(i) for i in lay.init_index if not (log_init and truth[i] <= 0)]
  groups = {"rates": np.asarray(sorted(rates), np.int32), "noise": np.asarray(lay.noise_index, np.int32),
            "initial": np.asarray(initial, np.int32)}
  return TruthIndex(truth, groups, names)


def simulate_datasets(key: jax.Array, task: tasks.Task, system: ode_systems.OdeSystem, num: int,
                      noise_scale: float) -> mdl.Data:
  """``num`` datasets with ``[num]`` leading axes, built as the ``sim`` task builds its one dataset.

  Observed initial states are centred on the first row (``problem.init="fit"``),
  latent ones on the true ``x0``; ``problem.init="fixed"`` uses the true ``x0``.
  """
  y = jax.vmap(lambda k: ode_systems.simulate(k, system, num_points=task.num_points, noise_scale=noise_scale)[0])(
      jax.random.split(key, num))
  y = np.asarray(y, np.float64)
  x0 = np.tile(np.asarray(system.x0, np.float64), (num, 1))
  if task.spec.init != "fixed":
    x0[:, list(system.observed)] = y[:, 0]
  return mdl.Data(jnp.asarray(y, jnp.float32), jnp.asarray(x0, jnp.float32))


def coverage_stats(inside: np.ndarray, level: float, num_se: float) -> dict:
  """Coverage, its standard error over datasets and the calibration verdict of ``inside [B, P]``."""
  b, p = inside.shape
  per = inside.mean(axis=1)
  cov = float(per.mean())
  se_data = float(per.std(ddof=1) / math.sqrt(b)) if b > 1 else float("inf")
  se = max(se_data, math.sqrt(level * (1 - level) / (b * p)))
  return {"coverage": cov, "se": se, "se_datasets": se_data, "nominal": level, "z": (cov - level) / se,
          "calibrated": bool(abs(cov - level) <= num_se * se), "num_datasets": b, "num_params": p}


class Setup(NamedTuple):
  """One system's study: the true structure, its model and fit settings, the datasets and the truth."""

  name: str
  task: tasks.Task
  system: ode_systems.OdeSystem
  library: st.Library
  model: mdl.StructuredModel
  fit_config: fit_lib.FitConfig
  fit_optimizer: str
  noise_scale: float
  index: TruthIndex
  signs: jax.Array  # [B, S, K]
  data: mdl.Data  # [B, ...]
  fit_keys: jax.Array  # [B]
  mala_keys: jax.Array  # [B]


def setup_system(name: str, rc: RunConfig, seed: int) -> Setup:
  """The true structure of ``name`` and ``rc.num_datasets`` simulated datasets (deterministic in ``seed``)."""
  mcfg = smc_config.get_config(f"{rc.model_preset},task=sim,system={name}")
  task = tasks.build(mcfg)
  system = tasks.system_of(mcfg)
  noise_scale = float(mcfg.sim.noise_scale or system.noise_scale)
  library, m = true_structure(task)
  model = mdl.StructuredModel(library.bodies, task.spec)
  fcfg = smc_config.fit_config(mcfg)
  index = truth_index(task, system, library, model, noise_scale)
  n = rc.num_datasets
  key = jax.random.fold_in(jax.random.key(seed), zlib.crc32(name.encode()) & 0x7FFFFFFF)
  k_data, k_fit, k_mala = jax.random.split(key, 3)
  data = simulate_datasets(k_data, task, system, n, noise_scale)
  signs = jnp.tile(jnp.asarray(m.signs(len(library)))[None], (n, 1, 1))
  return Setup(name, task, system, library, model, fcfg, str(mcfg.fit.get("optimizer", "adam")), noise_scale, index,
               signs, data, jax.random.split(k_fit, n), jax.random.split(k_mala, n))


def fit_and_intervals(su: Setup, hp: post.PosteriorConfig, levels, chunk_size: int
                      ) -> tuple[fit_lib.Fit, post.BatchIntervals]:
  """Fits the true structure to every dataset, then both methods' intervals (host arrays, ``[B]`` leading)."""
  fit = fit_lib.make_batch_fit(su.model, su.fit_config)
  intervals = post.make_batch_intervals(su.model, su.fit_config, hp, levels)
  n = su.signs.shape[0]
  size = min(chunk_size, n)
  parts = []
  for lo in range(0, n, size):
    idx = np.minimum(np.arange(lo, lo + size), n - 1)  # the last chunk repeats the last dataset
    take = lambda x: x[idx]  # pylint: disable=cell-var-from-loop
    signs, data, fkeys, mkeys = take(su.signs), jax.tree.map(take, su.data), take(su.fit_keys), take(su.mala_keys)
    fits = fit(signs, fkeys, data)
    out = intervals(mkeys, signs, data, fits)
    keep = min(size, n - lo)
    parts.append(jax.tree.map(lambda x: np.asarray(x)[:keep], (fits, out)))  # pylint: disable=cell-var-from-loop
    logging.info("[calibration %s] datasets %d-%d done", su.name, lo, lo + keep - 1)
  return jax.tree.map(lambda *xs: np.concatenate(xs), *parts)


def summarize(su: Setup, fits: fit_lib.Fit, out: post.BatchIntervals, rc: RunConfig) -> dict:
  """Coverage per method, parameter group and level; fit and chain diagnostics."""
  index, truth = su.index, su.index.truth
  ok_fit = np.isfinite(fits.log_evidence)
  methods = {}
  for method in ("laplace", "mala"):
    iv = getattr(out, method)
    inside = (iv.lo <= truth) & (truth <= iv.hi) & iv.ok[:, None, None] & ok_fit[:, None, None]  # [B, L, D]
    rows = {}
    for g, idx in index.groups.items():
      if len(idx):
        rows[g] = {str(q): coverage_stats(inside[:, li][:, idx], q, rc.num_se) for li, q in enumerate(rc.levels)}
    rows["per_parameter"] = {index.names[i]: {str(q): float(inside[:, li, i].mean()) for li, q in enumerate(rc.levels)}
                             for i in np.concatenate(list(index.groups.values()))}
    rows["no_interval"] = int(np.sum(~(iv.ok & ok_fit)))
    methods[method] = rows
  # Width of the rates' widest-level intervals on the log scale: MALA over Laplace.
  rates = index.groups["rates"]
  both = out.laplace.ok & out.mala.ok
  width = {m_: np.log(getattr(out, m_).hi[:, -1][:, rates]) - np.log(getattr(out, m_).lo[:, -1][:, rates])
           for m_ in ("laplace", "mala")}
  ratio = float(np.median(width["mala"][both] / width["laplace"][both])) if both.any() else float("nan")
  system = su.system
  return {
      "system": su.name, "equations": dict(zip(system.states, system.equations)),
      "true_params": {k: float(v) for k, v in su.task.truth["params"].items()},
      "noise": su.task.spec.noise, "noise_scale": su.noise_scale, "rows_fitted": su.fit_config.fit_rows,
      "observed": list(su.task.observed_names), "num_datasets": int(su.signs.shape[0]),
      "params": {g: [index.names[i] for i in idx] for g, idx in index.groups.items()},
      "not_coverable": [index.names[i] for i in su.model.layout.init_index if i not in set(index.groups["initial"])],
      "methods": methods,
      "fits": {"failed": int(np.sum(~ok_fit)), "not_positive_definite": int(np.sum(~fits.positive_definite)),
               "grad_norm_median": float(np.median(fits.grad_norm)),
               "grad_norm_max": float(np.max(fits.grad_norm)), "optimizer": su.fit_optimizer},
      "mala": {"accept_median": float(np.median(out.accept)), "step_size_median": float(np.median(out.step_size)),
               "rhat_max": float(np.max(out.rhat)), "rhat_over_1_05": int(np.sum(out.rhat > 1.05)),
               "rate_width_ratio_median": ratio},
  }


def calibrate_system(name: str, rc: RunConfig, hp: post.PosteriorConfig, seed: int) -> dict:
  """Fits the true structure of ``name`` to ``rc.num_datasets`` datasets; both methods' coverage."""
  t0 = time.perf_counter()
  su = setup_system(name, rc, seed)
  fits, out = fit_and_intervals(su, hp, rc.levels, rc.chunk_size)
  row = summarize(su, fits, out, rc)
  row["wall_time_s"] = {"total": time.perf_counter() - t0}
  logging.info("[calibration %s] %d datasets: %.0f s", name, rc.num_datasets, row["wall_time_s"]["total"])
  return row


# ----------------------------------------------------------------------------
# The experiment.


def run(config: ml_collections.ConfigDict, ctx: Context) -> dict:
  """Runs every system (resuming after the last finished one); returns ``results.json``'s content."""
  rc = cal_config.SECTIONS.build(config, RunConfig)
  hp = cal_config.SECTIONS.build(config, post.PosteriorConfig)
  _, _, meta = ctx.restore_or(Progress(jnp.zeros((), jnp.int32)))
  done = list(meta["systems"]) if meta else []
  for i, name in enumerate(rc.systems):
    if i < len(done):
      continue
    done.append(calibrate_system(name, rc, hp, config.seed))
    ctx.writer.log(i + 1, wall_time_s=done[-1]["wall_time_s"]["total"])
    ctx.save(i + 1, Progress(jnp.asarray(i + 1, jnp.int32)), {"systems": done}, force=True)
  return {"experiment": "model_smc_calibration", "levels": list(rc.levels), "num_se": rc.num_se,
          "model_preset": rc.model_preset, "posterior": dataclasses.asdict(hp), "systems": done}


def _verdict(row: dict) -> str:
  return "yes" if row["calibrated"] else "**no**"


def _coverage_rows(sys_: dict):
  """``(method, parameter group, {level: cell})`` of one system's results, in table order."""
  for method, rows in sys_["methods"].items():
    for g in GROUPS:
      if g in rows:
        yield method, g, rows[g]


def format_table(results: dict) -> str:
  """Plain-text summary: coverage per system, method and level."""
  levels = [str(q) for q in results["levels"]]
  lines = [f"Interval calibration (true structure fixed), {results['systems'][0]['num_datasets']} datasets per "
           f"system; calibrated = within {results['num_se']:g} SE of nominal"]
  head = ["system", "method", "params"] + [c for q in levels for c in ("cov" + q, "ok")]
  per_system = [[[sys_["system"], method, g] + [c for q in levels for c in (
      f"{row[q]['coverage']:.3f} ± {row[q]['se']:.3f}", "y" if row[q]["calibrated"] else "N")]
                  for method, g, row in _coverage_rows(sys_)] for sys_ in results["systems"]]
  head_line, *body = tables.text(head, [r for rows in per_system for r in rows], align="<<<" + ">>" * len(levels))
  lines.append(head_line)
  body = iter(body)
  for sys_, rows in zip(results["systems"], per_system):
    lines += [next(body) for _ in rows]
    f, mc = sys_["fits"], sys_["mala"]
    lines.append(f"  fits: {f['failed']} failed, {f['not_positive_definite']} Hessians not PD, median |grad| "
                 f"{f['grad_norm_median']:.2g}; MALA: acceptance {mc['accept_median']:.2f}, max R-hat "
                 f"{mc['rhat_max']:.3f}, rate interval width MALA/Laplace {mc['rate_width_ratio_median']:.2f}; "
                 f"{sys_.get('wall_time_s', {}).get('total', float('nan')):.0f} s")
  return "\n".join(lines)


def markdown_table(results: dict) -> str:
  """Markdown for the README (via ``launch.report``)."""
  levels = [str(q) for q in results["levels"]]
  sys0 = results["systems"][0]
  hp = results["posterior"]
  out = [f"{sys0['num_datasets']} simulated datasets per system (true parameters fixed, noise redrawn), the true "
         f"structure fitted with the `model_smc` `{results['model_preset']}` settings; coverage of the true values "
         f"by central intervals, ± one standard error over datasets; ✓ = within {results['num_se']:g} SE of "
         f"nominal. MALA: {hp['num_chains']} chains x {hp['num_samples']} draws after {hp['num_warmup']} warm-up "
         "steps, from the MAP, preconditioned by the Laplace covariance.\n"]
  out.append("| system | method | parameters | " + " | ".join(f"{float(q):.0%} coverage" for q in levels) + " |")
  out.append("|---|---|---|" + "---:|" * len(levels))
  for sys_ in results["systems"]:
    for method, g, row in _coverage_rows(sys_):
      cells = " | ".join(f"{row[q]['coverage']:.3f} ± {row[q]['se']:.3f} "
                         f"{'✓' if row[q]['calibrated'] else '✗'}" for q in levels)
      label = f"{g} ({', '.join(sys_['params'][g])})" if g == "rates" else g
      out.append(f"| {sys_['system']} | {method} | {label} | {cells} |")
  out.append("")
  for method in ("laplace", "mala"):
    cells = [sys_["methods"][method][g][q] for sys_ in results["systems"] for g in GROUPS
             if g in sys_["methods"][method] for q in levels]
    rate_cells = [sys_["methods"][method]["rates"][q] for sys_ in results["systems"] for q in levels]
    worst = min(cells, key=lambda c: c["z"])
    out.append(f"- {method}: rates calibrated in {sum(c['calibrated'] for c in rate_cells)} of {len(rate_cells)} "
               f"(system, level) cells, all parameters in {sum(c['calibrated'] for c in cells)} of {len(cells)}; "
               f"largest shortfall {worst['z']:+.1f} SE.")
  for sys_ in results["systems"]:
    f, mc = sys_["fits"], sys_["mala"]
    out.append(f"- {sys_['system']}: fits ({f['optimizer']}) {f['failed']} failed, {f['not_positive_definite']} "
               f"Hessians not positive definite, median gradient norm {f['grad_norm_median']:.2g}; MALA median "
               f"acceptance {mc['accept_median']:.2f}, largest split-R-hat {mc['rhat_max']:.3f}; 90% rate "
               f"intervals MALA/Laplace width ratio (log scale, median) {mc['rate_width_ratio_median']:.2f}; "
               f"{sys_.get('wall_time_s', {}).get('total', float('nan')):.0f} s.")
  return "\n".join(out) + "\n"


EXPERIMENT = Experiment(
    declaration=cal_config.SECTIONS,
    get_config=cal_config.get_config,
    run=run,
    summary=format_table,
    markdown=markdown_table,
)
