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
             launch/experiments/model_smc_csv.py), a Gaussian observation
             model and the default library built from the state names.
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

Any key can be overridden, e.g. ``--config.smc.num_particles=128``,
``--config.fit.evidence=bic``, ``--config.library='("a*x", "a*x*y")'``,
``--config.posterior.method=mala`` (the reported structures' 90% parameter
intervals from preconditioned MALA chains instead of Laplace; results.json
records the method as ``parameter_intervals``).
"""

import dataclasses
import math

import ml_collections

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
# Named simulated tasks -> their system in envs.ode_systems.SYSTEMS (task=sim: config.sim.system).
SIMULATED = {"exact": "damped_oscillator", "lv_sim": "lotka_volterra"}
ALGORITHMS = ("tempered", "evidence_weighted")
PROPOSALS = ("grammar", "llm")
BASELINES = ("hill_climb", "sindy")


@dataclasses.dataclass(frozen=True)
class Run(hparams.Hyperparameters):
  """The experiment's own keys (the method's are the sections fit, smc, reference, problem)."""

  task: str = F("pelts", "Task: exact | lv_sim | pelts | flu | sim | csv.", choices=TASKS)
  library: tuple[str, ...] = F(st.default_bodies(("hare", "lynx")),
                               "Candidate term bodies (each term is sign * body; parameters fitted in log space); "
                               "empty: a constant, each state, each pairwise product and each square.")
  library_extra: tuple[str, ...] = F((), "Bodies appended to the library (e.g. to the default one).")
  algorithm: str = F("tempered", "tempered SMC, or evidence_weighted (the reference's scheme).", choices=ALGORITHMS)
  proposal: str = F("grammar", "grammar, or llm (evidence_weighted only).", choices=PROPOSALS)
  num_fit: int = F(16, "Rows fitted; the rest are held out.", low=3)
  baselines: tuple[str, ...] = F(BASELINES, "Baselines scored the same way.", choices=BASELINES, unique=True)

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
        states, _, _ = st.parse_system(self.equations, self.params)
      except (st.StructureError, ValueError) as e:  # UnsafeExpression is a ValueError
        yield "equations", str(e)
        return
      if len(self.x0) != len(states):
        yield "x0", f"{len(self.x0)} initial values for the {len(states)} states {list(states)}"
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

  def checks(self):
    if len(self.latent_x0) != len(self.latent):
      yield "latent_x0", f"{len(self.latent_x0)} values for the {len(self.latent)} latent states {list(self.latent)}"


# (config prefix, declaration) of every section.
SECTIONS = (
    ("", Run), ("problem", mdl.ProblemSpec), ("fit", fit_lib.FitConfig), ("smc", smc.SMCConfig),
    ("reference", reference.ReferenceConfig), ("llm", llm_client.LLMConfig), ("sindy", Sindy),
    ("predictive", Predictive), ("exact", Exact), ("sim", Sim), ("data", CsvData),
    ("posterior", posterior.PosteriorConfig),
)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,task=exact|lv_sim|pelts|flu|sim][,system=<name>][,runs=<n>]"``.

  ``runs=n`` (n > 0) sets ``smc.num_runs`` after the preset (``make demo``
  runs 2 of the ``cpu`` preset's 5 pooled runs).
  """
  opts = common.parse_arg(arg, task="pelts", system="lotka_volterra", runs=0)
  if opts.task not in TASKS:
    raise ValueError(f"unknown task {opts.task!r}; allowed: {list(TASKS)}")
  if opts.system not in ode_systems.SYSTEMS:
    raise ValueError(f"unknown system {opts.system!r}; envs.ode_systems.SYSTEMS has {sorted(ode_systems.SYSTEMS)}")
  config = common.base_config("model_smc", opts.preset)
  for prefix, cls in SECTIONS:
    common.add_section(config, cls, prefix)
  config.task = opts.task
  # cpu-scale values of the observation model and priors.
  config.problem.substeps = 5
  config.problem.noise_prior_loc = math.log(0.25)
  config.problem.noise_prior_scale = 0.5
  config.problem.state_bound = 1e4
  config.fit.newton_steps = 2
  config.fit.num_val = 3  # validation rows of the "heldout" evidence
  # MH sweeps per tempering step, and a cap on each beta increment so that
  # the particles explore at low beta (>= 1 / max_delta steps): with few
  # sweeps and free steps, runs stayed near the best prior draws.
  config.smc.mcmc_steps = 5
  config.smc.max_delta = 0.1
  # Mixing: 5 independent runs of 32 particles (pooled; their spread is the
  # multi-run check). Each run jumps to 16 gradient-matching candidates while
  # tempering (10% of its moves), ends with local searches from its 3 best
  # structures (particles and candidates), then sweeps at beta = 1 with jumps
  # among its 12 elites (60% of the moves, in proportion to p(m) Z(m)) until
  # 20 acceptance-weighted moves per particle (at most 40 sweeps); its
  # estimate is the average over the second half of those sweeps (with a
  # target of 8 moves, ~20 sweeps, the 5 runs' estimates still disagreed). With one run of 64 particles and no final
  # phase, the pelts' particle masses disagreed with p(m) Z(m) over the
  # visited structures; with a local search from 1 particle, 8 elites at 20%
  # and no candidates, 4 of 5 runs never reached the best basin.
  config.smc.num_runs = 5
  config.smc.num_particles = 32
  config.smc.mcmc_steps = 2
  config.smc.candidates = 16
  config.smc.candidate_prob = 0.1
  config.smc.local_search = 3
  config.smc.local_search_steps = 10
  config.smc.num_elites = 12
  config.smc.elite_prob = 0.6
  config.smc.final_moves = 20.0
  config.smc.final_max_sweeps = 40
  config.smc.prior_prob = 0.1  # elite and candidate jumps reversible from any structure
  # Parameter intervals of the reported structures: Laplace at smoke and cpu
  # scale (free: the fit's Hessian); MALA (--config.posterior.method=mala)
  # compiles its chains once per library (~15 s on 2 cores for the pelts)
  # and runs ~1.6 s per structure with these chain lengths. The paper preset
  # uses MALA, calibrated on the simulated systems (model_smc_calibration).
  config.posterior.method = "laplace"

  if opts.task in SIMULATED or opts.task == "sim":  # the system's states, noise, rows and library
    system = ode_systems.SYSTEMS[SIMULATED.get(opts.task, opts.system)]
    config.sim.system = system.name
    # task=sim: empty means the default library of the simulated states (also those of sim.equations).
    config.library = system.library or (() if opts.task == "sim" else st.default_bodies(system.states))
    config.problem.noise = system.noise
    config.num_fit = system.num_points - max(1, system.num_points // 4)
  if opts.task == "exact":
    config.problem.substeps = 4
    config.problem.noise = "gaussian"
    config.problem.init = "fixed"
    config.problem.param_prior_loc = 0.0
    config.problem.param_prior_scale = 1.0
    config.problem.noise_prior_loc = math.log(0.1)
    config.problem.noise_prior_scale = 0.5
    config.problem.state_bound = 1e3
    config.num_fit = 12
    config.fit.restarts = 2
    config.fit.steps = 200
    config.fit.batch_size = 32
    config.smc.num_particles = 100
    config.smc.num_runs = 1  # exact.repeats are the independent runs
    config.smc.mcmc_steps = 5
    config.smc.p_include = 0.5
    config.smc.max_terms = 2
    config.sim.noise_scale = 0.3  # overrides the oscillator's own 0.1 (logged)
    config.baselines = ("hill_climb",)
  elif opts.task == "csv":
    config.library = ()  # the default library from the file's state names
    config.problem.noise = "gaussian"  # signed measurements; lognormal needs positive ones
  elif opts.task == "flu":
    config.library = ("a*S*I", "a*S", "a*I", "a*C")
    config.problem.noise_offset = 0.01  # one boy, in hundreds
    config.problem.init = "fixed"
    config.problem.param_prior_loc = math.log(0.3)
    config.problem.param_prior_scale = 1.5
    config.problem.state_bound = 100.0
    config.num_fit = 11  # t = 0 (no data) and days 1-10
    config.smc.max_terms = 2
    config.sindy.threshold = 0.05

  if opts.preset == "smoke":
    config.smc.num_particles = 16
    config.smc.num_runs = 2 if opts.task != "exact" else 1
    config.smc.local_search = 1
    config.smc.local_search_steps = 1
    config.smc.candidates = 4
    config.smc.final_max_sweeps = 2
    config.smc.mcmc_steps = 1
    config.smc.max_delta = 1.0
    config.fit.restarts = 2
    config.fit.steps = 60
    config.fit.newton_steps = 1
    config.fit.batch_size = 16
    config.reference.num_particles = 8
    config.reference.iterations = 2
    config.predictive.num_samples = 64
    config.predictive.top_k = 3
    config.exact.repeats = 2
    if opts.task == "exact":
      config.smc.num_particles = 32
  elif opts.preset == "paper":
    config.smc.num_particles = 128 if opts.task != "exact" else 256
    config.smc.local_search = 2
    config.smc.local_search_steps = 10
    config.smc.final_max_sweeps = 50
    config.smc.mcmc_steps = 10
    config.smc.max_delta = 0.05
    config.fit.restarts = 8
    config.fit.steps = 600
    config.fit.batch_size = 64
    config.predictive.num_samples = 1000
    config.exact.repeats = 100
    config.posterior.method = "mala"
    config.posterior.num_chains = 4
    config.posterior.num_warmup = 1000
    config.posterior.num_samples = 2000
  if opts.runs > 0:
    config.smc.num_runs = opts.runs
  return config
