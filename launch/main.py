r"""The launcher: ``python -m launch.main --config=<file>:<arg> --workdir=DIR``.

  python -m launch.main --config=launch/configs/varde_bai.py:smoke --workdir=runs/smoke

Flags:
  --config      an experiment config file and its argument (preset and options);
                keys are locked: ``--config.num_seeds=100`` overrides, a
                misspelled key is an error.
  --workdir     where ``config.json``, ``metrics.jsonl``, ``results.json``,
                figures and ``checkpoints/`` go; rerunning resumes.
  --cpu_devices number of (simulated) CPU devices, e.g. the number of cores.
  --coordinator_address / --num_processes / --process_id
                multi-host runs (or COORDINATOR_ADDRESS, NUM_PROCESSES,
                PROCESS_ID in the environment).
  --on_input_change  refuse (default) or restart: what a rerun does when an
                input file of the run (an MDP .npz, a D4RL file, a CSV) changed
                since its last checkpoint; ``refuse`` names the file and changes
                nothing, ``restart`` moves the previous run, unmodified, to
                ``<workdir>/superseded/<n>/`` and starts over.
  --verbose     show the traceback of failures that are not bugs (bad config
                or data, unusable workdir, NaN stop, no verifiable checkpoint);
                without it they print one line, ``error: ...``, and exit 1
                (2 for a bad config). ``ICML26_VERBOSE=1`` does the same.
"""

import ast
import collections
import difflib
import os
import re
import sys
from typing import Optional

from absl import app
from absl import flags
from absl import logging
import ml_collections
from ml_collections import config_flags

from launch import config_schema
from launch import distributed
from launch import errors
from launch import runner

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file[:arg].", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (resumes if it holds a run).")
_CPU_DEVICES = flags.DEFINE_integer("cpu_devices", 0, "CPU devices to expose (0: JAX default).")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "Index of this process.")
_VERBOSE = flags.DEFINE_bool("verbose", False, "Show tracebacks of user errors (or ICML26_VERBOSE=1).")
_ON_INPUT_CHANGE = flags.DEFINE_enum(
    "on_input_change", "refuse", runner.ON_INPUT_CHANGE,
    "When an input file (--config.mdp_file, --config.data.hdf5_file, ...) changed since the last checkpoint: "
    "refuse to resume, or restart (the previous run moves, unmodified, to <workdir>/superseded/<n>/).")
flags.mark_flags_as_required(["config", "workdir"])


class FlagsError(Exception):
  """A command line that cannot give a config; the message is one line."""


def _overrides(argv) -> list[str]:
  """The keys of the ``--config.KEY=VALUE`` arguments of ``argv``."""
  return [a[len("--config."):].split("=", 1)[0] for a in argv if a.startswith("--config.")]


def _repeated_keys(argv) -> Optional[str]:
  """Names the ``--config.KEY`` overrides that ``argv`` gives more than once; ``None`` if none is repeated.

  A repeated override is refused, not resolved: for a tuple-valued key the
  config flags append the second value to the first (``--config.budgets='(16,)'
  --config.budgets='(8,)'`` would run both budgets), while a scalar key keeps
  the last, and neither is what a user repeating a key by mistake expects.
  """
  counts = collections.Counter([f"config.{key}" for key in _overrides(argv)]
                               + ["config" for a in argv if a.startswith("--config=")])
  repeated = [f"--{k} is given {n} times" for k, n in counts.items() if n > 1]
  if not repeated:
    return None
  return (f"{'; '.join(repeated)}: give each key once (a tuple is one value, e.g. "
          f"--config.budgets='(8,16)')")


def _unknown_keys(argv) -> Optional[str]:
  """Names the overridden keys that the config does not have, with close matches; ``None`` if all exist."""
  base = [a for a in argv[1:] if a.startswith("--config=")]  # the launcher's other flags are not config_from_args's
  try:
    config = config_from_args(base)
  except FlagsError:
    return None
  flat = config_schema.flatten(config)
  problems = []
  for key in _overrides(argv):
    if key in flat:
      continue
    parent = key.rpartition(".")[0]
    siblings = sorted(k for k in flat if k.rpartition(".")[0] == parent)
    close = difflib.get_close_matches(key, siblings, n=3) or difflib.get_close_matches(key, list(flat), n=3)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    problems.append(f"unknown key '{key}' of experiment {config.get('experiment', '?')!r}{hint}")
  return "; ".join(problems) or None


def _quote_hint(argv, line: str) -> str:
  """How to quote a tuple of strings, when ``line`` is about an override written ``(a,b)`` without quotes.

  The shell takes ``--config.algorithms=(varde,uniform)`` (in quotes) as one string, which then
  fails as a single element; the fix is to quote each string inside the tuple.
  """
  for arg in argv:
    key, _, value = arg[len("--config."):].partition("=") if arg.startswith("--config.") else ("", "", "")
    value = value.strip()
    if not key or f"'{key}'" not in line or value[:1] not in ("(", "[") or value[-1:] not in (")", "]"):
      continue
    try:
      ast.literal_eval(value)
    except (ValueError, SyntaxError):
      words = [w.strip().strip("'\"") for w in value[1:-1].split(",") if w.strip()]
      if re.search(r"expected (float|int)", line):  # a tuple of numbers with a word that is no number literal
        bad = [w for w in words if not _is_number(w)]
        return (f" (--config.{key}={value} is not a tuple of numbers: {', '.join(repr(w) for w in bad)} "
                f"{'is' if len(bad) == 1 else 'are'} not a number literal)")
      quoted = "(" + ",".join(f'"{w}"' for w in words) + ("," if len(words) == 1 else "") + ")"
      return f" (to pass a tuple of strings, quote each one: --config.{key}='{quoted}')"
  return ""


def _is_number(word: str) -> bool:
  try:
    return isinstance(ast.literal_eval(word), (int, float))
  except (ValueError, SyntaxError):
    return False


def _explain(argv, error: Exception) -> str:
  """One line saying why the ``--config`` flags of ``argv`` did not give a config."""
  if isinstance(error, (OSError, SyntaxError, ImportError)):  # the config file cannot be read or run
    return f"--config: {_config_file_problem(argv, error)}"
  if isinstance(error, flags.IllegalFlagValueError):  # an override's value does not parse as the key's type
    text = " ".join(str(error).split())
    m = re.match(r"flag --config\.(\S+?)=(.*?): (.*)", text)
    if m:
      return f"bad --config override: '{m[1]}' = {m[2]!r}: {m[3]}"
  if isinstance(error, flags.Error):
    text = str(error)
    if "Error whilst parsing config file" in text:  # get_config(arg) refused its argument
      last = [line for line in text.splitlines() if line.strip()][-1]
      return f"--config: {last.partition(': ')[2] or last}"
    return f"{text.splitlines()[0]} (pass --helpshort or --helpfull to see help on flags)"
  unknown = _unknown_keys(argv)
  if unknown:
    return f"bad --config override: {unknown}"
  reason = " ".join(str(error).replace("\\n", " ").replace("\\'", "'").split())
  if reason.startswith("''") and reason.endswith("'"):  # a quoted KeyError inside
    reason = reason[1:-1]
  return f"bad --config override: {reason}"


_PARSE_ERRORS = (OSError, SyntaxError, ImportError, flags.Error, AttributeError, KeyError, TypeError, ValueError)


def _parse(argv, flag_values) -> list:
  repeated = _repeated_keys(argv)
  if repeated:
    raise FlagsError(repeated)
  try:
    rest = flag_values(argv)
    _ = "experiment" in flag_values.config  # a config file that failed to load raises here
    return rest
  except _PARSE_ERRORS as e:
    raise FlagsError(_explain(argv, e)) from e


def config_from_args(args) -> ml_collections.ConfigDict:
  """The config that ``--config=FILE:ARG --config.key=value ...`` gives, parsed in this process.

  Raises:
    FlagsError: with the one line the launcher prints for these arguments.
  """
  argv = ["launch.main", *args]
  flag_values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=flag_values, lock_config=True, sys_argv=argv)
  _parse(argv, flag_values)
  return flag_values.config


def _apply_cpu_devices(argv) -> None:
  """Sets ``--cpu_devices`` before the config file loads: a config's imports may start JAX's backends."""
  early = flags.FlagValues()
  flags.DEFINE_integer("cpu_devices", 0, "", flag_values=early)
  picked = [argv[0]]
  for i, arg in enumerate(argv[1:], start=1):
    if arg.startswith("--cpu_devices="):
      picked.append(arg)
    elif arg == "--cpu_devices":  # its value is the next argument
      picked += argv[i:i + 2]
  try:
    early(picked)
  except flags.Error:
    return  # the full parse below reports the bad value
  distributed.set_cpu_devices(early.cpu_devices)


def parse_flags(argv):
  """Parses flags; a bad ``--config.*`` override exits with a one-line reason."""
  _apply_cpu_devices(argv)
  try:
    return _parse(argv, flags.FLAGS)
  except FlagsError as e:
    print(f"error: {e}", file=sys.stderr)
    raise SystemExit(2) from e


def _config_file_problem(argv, error: Exception) -> str:
  """One line naming the config file that could not be read and the ones that exist."""
  path = next((a.split("=", 1)[1].split(":", 1)[0] for a in argv if a.startswith("--config=")), "")
  here = os.path.dirname(os.path.abspath(__file__))
  configs = sorted(f"launch/configs/{n}" for n in os.listdir(os.path.join(here, "configs"))
                   if n.endswith(".py") and n not in ("__init__.py", "common.py"))
  if path and not os.path.exists(path):
    return f"no config file {path!r}; the experiments' configs are {configs}"
  return f"cannot load {path!r} ({' '.join(str(error).split())[:200]}); the experiments' configs are {configs}"


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  distributed.setup(
      coordinator_address=_COORDINATOR.value,
      num_processes=_NUM_PROCESSES.value,
      process_id=_PROCESS_ID.value,
      cpu_devices=_CPU_DEVICES.value,
  )
  try:
    runner.run(_CONFIG.value, _WORKDIR.value, on_input_change=_ON_INPUT_CHANGE.value)
  except errors.user_error_types() as e:
    if _VERBOSE.value or os.environ.get(errors.VERBOSE_ENV, "") not in ("", "0"):
      logging.exception("%s", type(e).__name__)
    else:
      logging.flush()
    line = errors.one_line(e)
    print(f"error: {line}{_quote_hint(sys.argv, line)}", file=sys.stderr)
    raise SystemExit(errors.exit_code(e)) from None


if __name__ == "__main__":
  app.run(main, flags_parser=parse_flags)
