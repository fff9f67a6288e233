r"""ModelSMC: tempered SMC over ODE model structures, with its baselines.

Tasks (``task=``):
  exact      damped oscillator, a 2-body library: all 81 structures are fitted
             and the SMC frequencies are compared with brute-force p(m | x)
             over ``exact.repeats`` independent runs.
  lv_sim     simulated Lotka-Volterra (the pelts' scale; known truth).
  pelts      Hudson's Bay lynx and hare pelts, fit 1900-1915, held out 1916-1920.
  flu        1978 boarding-school influenza (S, I = in bed, C = convalescent),
             fit days 1-10, held out days 11-14.
  csv        the user's own data: --config.data.path=<file.csv> (first column
             time, the others observed states named by the header; see
             datasets/timeseries.py), a Gaussian observation model and the
             default library built from the state names.
  sim        any simulated system of envs.ode_systems.SYSTEMS (the one table of
             simulated systems): ``:cpu,task=sim,system=<name>`` takes the
             system's states, noise kind, rows and library (default: built
             from the state names) at config time.

Defaults that override another source of truth (each is logged when it
applies): ``sim.noise_scale > 0`` replaces the simulated system's own noise
sd (the exact task sets 0.3 against the oscillator's 0.1); the exact task
simulates ``num_fit`` rows instead of the system's ``num_points``; with
``problem.init="fixed"`` a simulated task fixes the initial states at the
system's true ``x0`` (real data: the first row, or the table's known
values for latent states); latent states of a simulated task centre their
``x0`` prior on the true ``x0``. ``problem.noise`` must equal the simulated
system's noise kind (a config error otherwise) unless
``sim.allow_noise_mismatch=True``. Fitted initial states are on the real
line with Gaussian noise and on the log scale with lognormal noise
(``problem.init_space``; results.json records the one in use as
``init_scale``).

Launch from the repository root:

  python -m launch.main --config=launch/configs/model_smc.py:cpu,task=pelts \
      --workdir=runs/model_smc_pelts
  python -m launch.main --config=launch/configs/model_smc.py:smoke,task=lv_sim --workdir=...
  python -m launch.main --config=launch/configs/model_smc.py:cpu,task=exact --workdir=...
  python -m launch.main --config=launch/configs/model_smc.py:cpu,task=sim,system=damped_oscillator --workdir=...
  # the reference's evidence-weighted scheme with an LLM proposer
  # (endpoint from MODEL_SMC_LLM_BASE_URL / MODEL_SMC_LLM_MODEL / OPENAI_API_KEY):
  python -m launch.main --config=launch/configs/model_smc.py:cpu,task=pelts \
      --config.algorithm=evidence_weighted --config.proposal=llm --workdir=...

The sampler's keys are three sections: ``prior`` (the structure prior and
the grammar's moves, shared by every sampler and hill climbing),
``tempering`` (particles, runs, the tempering steps and their candidate
jumps) and ``final`` (the local search, elite set and sweeps at beta = 1).
Any key can be overridden, e.g. ``--config.tempering.num_particles=128``,
``--config.fit.evidence=bic``, ``--config.library='("a*x", "a*x*y")'``,
``--config.posterior.method=mala`` (the reported structures' 90% parameter
intervals from preconditioned MALA chains instead of Laplace; results.json
records the method as ``parameter_intervals``).
"""

import dataclasses
import math

import ml_collections

from datasets import timeseries
from envs import ode_systems
from launch import llm_client
from launch.configs import common
from methods.common import hparams
from methods.model_smc import fit as fit_lib
from methods.model_smc import model as mdl
from methods.model_smc import posterior
from methods.model_smc import reference
from methods.model_smc import smc
from methods.model_smc import structure as st

F = hparams.field
TASKS = ("exact", "lv_sim", "pelts", "flu", "sim", "csv")
REAL = ("pelts", "flu", "csv")  # tasks without a simulated system
# Named simulated tasks -> their system in envs.ode_systems.SYSTEMS (task=sim: config.sim.system).
SIMULATED = {"exact": "damped_oscillator", "lv_sim": "lotka_volterra"}
ALGORITHMS = ("tempered", "evidence_weighted")
PROPOSALS = ("grammar", "llm")
BASELINES = ("hill_climb", "sindy")


def _float32_problems(name: str, values, labels):
  """``(name, message)`` for each value that is finite in float64 but not in float32, the data's precision.

  (Values of config fields are checked by their declaration; these come from inside a text field.)
  """
  for v, label in zip(values, labels):
    if math.isfinite(v) and abs(v) > hparams.FLOAT32_MAX:
      yield name, (f" {label!r} = {v:g} is not finite in float32, the precision of the fit "
                   f"(largest {hparams.FLOAT32_MAX:.4g})")



@dataclasses.dataclass(frozen=True)
class Run(hparams.Hyperparameters):
  """The experiment's own keys (the method's are the sections problem, fit, prior, tempering, final, reference)."""

  task: str = F("pelts", "Task: exact | lv_sim | pelts | flu | sim | csv.", choices=TASKS)
  library: tuple[str, ...] = F(st.default_bodies(("hare", "lynx")),
                               "Candidate term bodies (each term is sign * body; parameters fitted in log space); "
                               "empty: a constant, each state, each pairwise product and each square.")
  library_extra: tuple[str, ...] = F((), "Bodies appended to the library (e.g. to the default one).")
  algorithm: str = F("tempered", "tempered SMC, or evidence_weighted (the reference's scheme).", choices=ALGORITHMS)
  proposal: str = F("grammar", "grammar, or llm (evidence_weighted only).", choices=PROPOSALS)
  num_fit: int = F(16, "Rows fitted; the rest are held out.", low=3)
  baselines: tuple[str, ...] = F(BASELINES, "Baselines scored the same way.", choices=BASELINES, unique=True)
  checkpoint_s: float = F(60.0, "The sampler checkpoints at most this often, in seconds, besides the end of "
                          "every phase (0: after every step); a killed run repeats at most this much work.", low=0)

  def checks(self):
    if self.proposal == "llm" and self.algorithm != "evidence_weighted":
      yield "proposal", ("the LLM proposal has no known density, so it runs only with "
                         "algorithm='evidence_weighted' (the tempered sampler needs the grammar's exact q)")
    if self.task == "exact" and self.algorithm != "tempered":
      yield "algorithm", "the exact check tests the tempered sampler; use algorithm='tempered'"
    if self.task == "exact" and "sindy" in self.baselines:
      yield "baselines", "the exact task has no held-out rows to score SINDy on"


@dataclasses.dataclass(frozen=True)
class Sindy(hparams.Hyperparameters):
  """PySINDy baseline (config section ``sindy``)."""

  threshold: float = F(0.01, "STLSQ threshold.", low=0)
  degree: int = F(2, "Polynomial library degree.", low=1, high=4)


@dataclasses.dataclass(frozen=True)
class Predictive(hparams.Hyperparameters):
  """Held-out scoring (config section ``predictive``)."""

  num_samples: int = F(400, "Posterior predictive samples per structure.", low=2)
  top_k: int = F(5, "Structures reported and mixed.", low=1)


@dataclasses.dataclass(frozen=True)
class Exact(hparams.Hyperparameters):
  """The exact-posterior check (config section ``exact``)."""

  repeats: int = F(20, "Independent SMC runs compared with the brute-force posterior.", low=2)


@dataclasses.dataclass(frozen=True)
class Sim(hparams.Hyperparameters):
  """Simulated data (config section ``sim``)."""

  system: str = F("lotka_volterra", "The simulated system (a key of envs.ode_systems.SYSTEMS); set by the task.",
                  nonempty=True)
  noise_scale: float = F(0.0, "Observation noise sd; 0 keeps the system's own, > 0 overrides it (logged).", low=0)
  data_seed: int = F(0, "Seed of the simulated data.", low=0)
  allow_noise_mismatch: bool = F(False, "Allow problem.noise to differ from the system's noise kind.")
  equations: tuple[str, ...] = F((), "task=sim from text: 'x = rhs' per state (safe parser); empty: sim.system.")
  params: tuple[str, ...] = F((), "True parameters of sim.equations, as 'name=value'.")
  x0: tuple[float, ...] = F((), "Initial states of sim.equations (one per equation).")
  observed: tuple[str, ...] = F((), "Observed states of sim.equations (default: all).")
  dt: float = F(1.0, "Observation spacing of sim.equations.", low=0, low_open=True)
  num_points: int = F(20, "Rows simulated from sim.equations.", low=4)

  def checks(self):
    if self.equations:
      try:
        states, _, values = st.parse_system(self.equations, self.params)
      except (st.StructureError, ValueError) as e:  # UnsafeExpression is a ValueError
        yield "equations", str(e)
        return
      if len(self.x0) != len(states):
        yield "x0", f"{len(self.x0)} initial values for the {len(states)} states {list(states)}"
      yield from _float32_problems("params", list(values.values()), list(values))
      if any(o not in states for o in self.observed):
        yield "observed", f"{list(self.observed)} must name states of sim.equations {list(states)}"
      if self.noise_scale <= 0:
        yield "noise_scale", "a system from sim.equations has no noise scale of its own: set sim.noise_scale > 0"
      return
    if self.system not in ode_systems.SYSTEMS:
      yield "system", f"unknown simulated system {self.system!r}; the table envs.ode_systems.SYSTEMS has " \
                      f"{sorted(ode_systems.SYSTEMS)}"


@dataclasses.dataclass(frozen=True)
class CsvData(hparams.Hyperparameters):
  """The user's data file of task=csv (config section ``data``)."""

  path: str = F("", "CSV file: a header row, then one row per time (empty or NA cells are missing).")
  time_column: str = F("", "Name of the time column (default: the first column).")
  states: tuple[str, ...] = F((), "Observed state columns, in equation order (default: every other column).")
  latent: tuple[str, ...] = F((), "Unobserved states, after the observed ones in equation order.")
  latent_x0: tuple[float, ...] = F((), "Initial values of the latent states (one each).")
  max_grid_points: int = F(timeseries.MAX_GRID_POINTS,
                           "Most rows of the file's regular time grid (skipped grid points count); every fit "
                           "integrates over all of them.", low=3)

  def checks(self):
    if len(self.latent_x0) != len(self.latent):
      yield "latent_x0", f"{len(self.latent_x0)} values for the {len(self.latent)} latent states {list(self.latent)}"



def fit_config(config: ml_collections.ConfigDict) -> fit_lib.FitConfig:
  """The fit's settings: section ``fit`` and the run's ``num_fit`` rows."""
  return hparams.from_config(fit_lib.FitConfig, config.fit, num_fit=config.num_fit)


def _simulation_checks(config):
  """The simulated system agrees with the task and the observation model (each yields ``(key, message)``)."""
  if config.sim.equations and config.task != "sim":
    yield "sim.equations", f"simulated equations run with task=sim (task is {config.task!r})"
  if config.task in REAL or (config.task == "sim" and config.sim.equations):
    return
  if config.sim.system not in ode_systems.SYSTEMS:
    return  # named by the sim section's own check
  expected = SIMULATED.get(config.task)
  if expected is not None and config.sim.system != expected:
    yield "sim.system", f"task {config.task!r} simulates {expected!r}; use task=sim,system={config.sim.system}"
    return
  system = ode_systems.SYSTEMS[config.sim.system]
  if config.problem.noise != system.noise and not config.sim.allow_noise_mismatch:
    yield "problem.noise", (f"{config.problem.noise!r} observation model, but {system.name!r} is simulated with "
                            f"{system.noise} noise; set problem.noise={system.noise!r} (or "
                            "sim.allow_noise_mismatch=True to fit the wrong model on purpose)")


def _jump_checks(config):
  """The tempering's candidate jumps and the final phase's prior draws leave room for grammar moves."""
  tempering, final = SECTIONS.build(config, smc.TemperingConfig), SECTIONS.build(config, smc.FinalConfig)
  for name, message in smc.jump_problems(tempering, final):
    yield f"tempering.{name}", message


SECTIONS = common.declare(
    "model_smc",
    ("", Run),
    common.Section("problem", mdl.ProblemSpec, build=lambda c: []),  # built with the task's data
    common.Section("fit", fit_lib.FitConfig, build=lambda c: [fit_config(c)]),
    ("prior", st.PriorConfig),
    ("tempering", smc.TemperingConfig),
    ("final", smc.FinalConfig),
    ("reference", reference.ReferenceConfig),
    ("llm", llm_client.LLMConfig),
    ("sindy", Sindy),
    ("predictive", Predictive),
    ("exact", Exact),
    ("sim", Sim),
    ("data", CsvData),
    ("posterior", posterior.PosteriorConfig),
    checks=(_simulation_checks, _jump_checks),
)


def _set(node: ml_collections.ConfigDict, **values) -> None:
  for key, value in values.items():
    node[key] = value


def _sampler(config: ml_collections.ConfigDict, preset: str, exact: bool) -> None:
  """The tempering and the final phase at each preset (the exact task runs one run per repeat)."""
  # Particles and pooled runs (their spread is the multi-run check of mixing); the exact task's
  # independent runs are its exact.repeats.
  _set(config.tempering,
       num_particles={"smoke": (16, 32), "cpu": (32, 100), "paper": (128, 256)}[preset][exact],
       num_runs=1 if exact else {"smoke": 2, "cpu": 5, "paper": 5}[preset],
       # MH sweeps per tempering step, and a cap on each beta increment, so that the particles
       # explore at low beta (at least 1 / max_delta steps).
       mcmc_steps={"smoke": (1, 1), "cpu": (2, 5), "paper": (10, 10)}[preset][exact],
       max_delta={"smoke": 1.0, "cpu": 0.1, "paper": 0.05}[preset],
       # Gradient-matching candidates: 10% of the tempering moves jump to one of them.
       candidates=4 if preset == "smoke" else 16,
       candidate_prob=0.1)
  # At beta = 1: local searches from the run's best structures (particles and candidates), then
  # sweeps with jumps among its 12 elites (60% of the moves, in proportion to p(m) Z(m)) until 20
  # acceptance-weighted moves per particle; the run's estimate averages the second half of those
  # sweeps. Fresh prior draws (10%) make an elite or candidate jump reversible from any structure.
  _set(config.final,
       local_search={"smoke": 1, "cpu": 3, "paper": 2}[preset],
       local_search_steps=1 if preset == "smoke" else 10,
       num_elites=12, elite_prob=0.6, moves=20.0,
       max_sweeps={"smoke": 2, "cpu": 40, "paper": 50}[preset],
       prior_prob=0.1)


def _fit(config: ml_collections.ConfigDict, preset: str, exact: bool) -> None:
  """The fit at each preset: restarts, Adam steps, Newton polishing, batch size."""
  _set(config.fit, newton_steps=1 if preset == "smoke" else 2,
       num_val=3)  # validation rows of the "heldout" evidence
  if preset == "smoke":
    _set(config.fit, restarts=2, steps=60, batch_size=16)
  elif preset == "paper":
    _set(config.fit, restarts=8, steps=600, batch_size=64)
  elif exact:
    _set(config.fit, restarts=2, steps=200, batch_size=32)


# The observation model and priors at cpu scale, then each task's own values.
_PROBLEM = dict(substeps=5, noise_prior_loc=math.log(0.25), noise_prior_scale=0.5, state_bound=1e4)
_TASK_PROBLEM = {
    "exact": dict(substeps=4, noise="gaussian", init="fixed", param_prior_loc=0.0, param_prior_scale=1.0,
                  noise_prior_loc=math.log(0.1), noise_prior_scale=0.5, state_bound=1e3),
    "csv": dict(noise="gaussian"),  # signed measurements; lognormal needs positive ones
    "flu": dict(noise_offset=0.01,  # one boy, in hundreds
                init="fixed", param_prior_loc=math.log(0.3), param_prior_scale=1.5, state_bound=100.0),
}


def _task(config: ml_collections.ConfigDict, task: str, system_name: str) -> None:
  """The task's data, library, rows and observation model."""
  _set(config.problem, **_PROBLEM)
  if task in SIMULATED or task == "sim":  # the system's states, noise, rows and library
    system = ode_systems.SYSTEMS[SIMULATED.get(task, system_name)]
    config.sim.system = system.name
    # task=sim: empty means the default library of the simulated states (also those of sim.equations).
    config.library = system.library or (() if task == "sim" else st.default_bodies(system.states))
    config.problem.noise = system.noise
    config.num_fit = system.num_points - max(1, system.num_points // 4)
  _set(config.problem, **_TASK_PROBLEM.get(task, {}))
  if task == "exact":
    config.num_fit = 12
    _set(config.prior, p_include=0.5, max_terms=2)
    config.sim.noise_scale = 0.3  # overrides the oscillator's own 0.1 (logged)
    config.baselines = ("hill_climb",)
  elif task == "csv":
    config.library = ()  # the default library from the file's state names
  elif task == "flu":
    config.library = ("a*S*I", "a*S", "a*I", "a*C")
    config.num_fit = 11  # t = 0 (no data) and days 1-10
    config.prior.max_terms = 2
    config.sindy.threshold = 0.05


def _scale(config: ml_collections.ConfigDict, preset: str) -> None:
  """What else differs by preset: the reference's scheme, scoring, the exact check, parameter intervals."""
  if preset == "smoke":
    _set(config.reference, num_particles=8, iterations=2)
    _set(config.predictive, num_samples=64, top_k=3)
    config.exact.repeats = 2
  elif preset == "paper":
    config.predictive.num_samples = 1000
    config.exact.repeats = 100
  # Parameter intervals: Laplace at smoke and cpu scale (free: the fit's Hessian); MALA
  # (--config.posterior.method=mala) compiles its chains once per library and runs ~1.6 s per
  # structure on 2 cores with these chain lengths. The paper preset uses MALA, calibrated on the
  # simulated systems (model_smc_calibration).
  config.posterior.method = "mala" if preset == "paper" else "laplace"
  if preset == "paper":
    _set(config.posterior, num_chains=4, num_warmup=1000, num_samples=2000)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,task=exact|lv_sim|pelts|flu|sim|csv][,system=<name>][,runs=<n>]"``.

  ``runs=n`` (n > 0) sets ``tempering.num_runs`` after the preset (``make demo``
  runs 2 of the ``cpu`` preset's 5 pooled runs).
  """
  opts = common.parse_arg(arg, task="pelts", system="lotka_volterra", runs=0)
  if opts.task not in TASKS:
    raise ValueError(f"unknown task {opts.task!r}; allowed: {list(TASKS)}")
  if opts.system not in ode_systems.SYSTEMS:
    raise ValueError(f"unknown system {opts.system!r}; envs.ode_systems.SYSTEMS has {sorted(ode_systems.SYSTEMS)}")
  config = SECTIONS.defaults(opts.preset)
  config.task = opts.task
  _task(config, opts.task, opts.system)
  _sampler(config, opts.preset, opts.task == "exact")
  _fit(config, opts.preset, opts.task == "exact")
  _scale(config, opts.preset)
  if opts.runs > 0:
    config.tempering.num_runs = opts.runs
  return config
