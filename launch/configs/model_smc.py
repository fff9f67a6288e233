r"""ModelSMC: tempered SMC over ODE model structures, with its baselines.

Tasks (``task=``):
  exact      damped oscillator, a 2-body library: all 81 structures are fitted
             and the SMC frequencies are compared with brute-force p(m | x)
             over ``exact.repeats`` independent runs.
  lv_sim     simulated Lotka-Volterra (the pelts' scale; known truth).
  pelts      Hudson's Bay lynx and hare pelts, fit 1900-1915, held out 1916-1920.
  flu        1978 boarding-school influenza (S, I = in bed, C = convalescent),
             fit days 1-10, held out days 11-14.

Launch from the repository root:

  python -m launch.main --config=launch/configs/model_smc.py:cpu,task=pelts \
      --workdir=runs/model_smc_pelts
  python -m launch.main --config=launch/configs/model_smc.py:smoke,task=lv_sim --workdir=...
  python -m launch.main --config=launch/configs/model_smc.py:cpu,task=exact --workdir=...
  # the reference's evidence-weighted scheme with an LLM proposer
  # (endpoint from MODEL_SMC_LLM_BASE_URL / MODEL_SMC_LLM_MODEL / OPENAI_API_KEY):
  python -m launch.main --config=launch/configs/model_smc.py:cpu,task=pelts \
      --config.algorithm=evidence_weighted --config.proposal=llm --workdir=...

Any key can be overridden, e.g. ``--config.smc.num_particles=128``,
``--config.fit.evidence=bic``, ``--config.library='("a*x", "a*x*y")'``.
"""

import math

import ml_collections

from launch.configs import common

TASKS = ("exact", "lv_sim", "pelts", "flu")
LV_LIBRARY = ("a", "a*{x}", "a*{y}", "a*{x}*{y}", "a*{x}^2", "a*{y}^2")


def _lv_library(x: str, y: str) -> tuple[str, ...]:
  return tuple(b.format(x=x, y=y) for b in LV_LIBRARY)


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
  """Config for ``arg`` = ``"<preset>[,task=exact|lv_sim|pelts|flu]"``."""
  opts = common.parse_arg(arg, task="pelts")
  if opts.task not in TASKS:
    raise ValueError(f"unknown task {opts.task!r}; allowed: {list(TASKS)}")
  config = common.base_config("model_smc", opts.preset)
  config.task = opts.task
  # The candidate term bodies (each term is sign * body); parameters are
  # named freely and fitted in log space.
  config.library = _lv_library("hare", "lynx")
  config.algorithm = "tempered"  # or "evidence_weighted" (the reference's scheme)
  config.proposal = "grammar"  # or "llm" (evidence_weighted only)

  # Observation model and priors (model.ProblemSpec).
  config.problem = ml_collections.ConfigDict()
  config.problem.substeps = 5
  config.problem.noise = "lognormal"
  config.problem.noise_offset = 0.0
  config.problem.init = "fit"
  config.problem.param_prior_loc = math.log(0.1)
  config.problem.param_prior_scale = 2.0
  config.problem.noise_prior_loc = math.log(0.25)
  config.problem.noise_prior_scale = 0.5
  config.problem.init_prior_scale = 0.5
  config.problem.state_bound = 1e4
  # Rows: the first num_fit are fitted, the rest held out.
  config.num_fit = 16

  config.fit = ml_collections.ConfigDict()
  config.fit.evidence = "laplace"  # or "bic", "heldout"
  config.fit.num_val = 3  # validation rows of the "heldout" evidence
  config.fit.restarts = 4
  config.fit.steps = 300
  config.fit.learning_rate = 0.05
  config.fit.jitter = 0.5
  config.fit.newton_steps = 2
  config.fit.batch_size = 16  # structures per compiled call (a multiple of the devices)

  config.smc = ml_collections.ConfigDict()
  config.smc.num_particles = 64
  config.smc.target_ess = 0.5
  config.smc.resample_threshold = 0.5
  # MH sweeps per tempering step, and a cap on each beta increment so that
  # the particles explore at low beta (>= 1 / max_delta steps): with few
  # sweeps and free steps, runs stayed near the best prior draws.
  config.smc.mcmc_steps = 5
  config.smc.max_delta = 0.1
  config.smc.max_iterations = 60
  config.smc.p_include = 0.25
  config.smc.max_terms = 3
  config.smc.move_probs = (0.3, 0.3, 0.2, 0.2)  # add, remove, replace, operator

  # The reference's evidence-weighted scheme (algorithm=evidence_weighted).
  config.reference = ml_collections.ConfigDict()
  config.reference.num_particles = 50
  config.reference.alpha = 0.8
  config.reference.temperature = 1.0
  config.reference.iterations = 15
  config.reference.ancestors = 3

  config.llm = ml_collections.ConfigDict()
  config.llm.base_url = ""  # else MODEL_SMC_LLM_BASE_URL or OPENAI_BASE_URL
  config.llm.model = ""  # else MODEL_SMC_LLM_MODEL
  config.llm.api_key_env = "OPENAI_API_KEY"  # the key is read from this variable
  config.llm.timeout_s = 60.0
  config.llm.temperature = 0.7
  config.llm.max_tokens = 800
  config.llm.max_params = 16

  # Baselines on the same data, scored the same way: PySINDy and N = 1
  # hill climbing with the same number of proposals as the SMC run.
  config.baselines = ("hill_climb", "sindy")
  config.sindy = ml_collections.ConfigDict({"threshold": 0.01, "degree": 2})

  config.predictive = ml_collections.ConfigDict()
  config.predictive.num_samples = 400  # per structure
  config.predictive.top_k = 5  # structures reported and mixed

  config.exact = ml_collections.ConfigDict({"repeats": 20})
  config.sim = ml_collections.ConfigDict({"noise_scale": 0.25, "data_seed": 0})

  if opts.task == "exact":
    config.library = ("a*x", "a*v")
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
    config.smc.p_include = 0.5
    config.smc.max_terms = 2
    config.sim.noise_scale = 0.3
    config.baselines = ("hill_climb",)
  elif opts.task == "lv_sim":
    config.library = _lv_library("x", "y")
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
    config.smc.num_particles = 256
    config.smc.mcmc_steps = 10
    config.smc.max_delta = 0.05
    config.fit.restarts = 8
    config.fit.steps = 600
    config.fit.batch_size = 64
    config.predictive.num_samples = 1000
    config.exact.repeats = 100
  return config
