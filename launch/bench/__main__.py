r"""``make bench``: run every benchmark and write ``bench.md`` / ``bench.json``.

  python -m launch.bench --out=runs/bench [--only=varde_bai] [--quick] [--noisolate]

Each benchmark runs in a process of its own (``--isolate``, the default): a
benchmark's timings then do not depend on what ran before it (compiled
programs, live buffers, the allocator's and the thread pools' state). The
process of each writes its rows under ``<out>/parts/<name>``; this one
gathers them into the table.
"""

import importlib
import json
import os
import platform
import subprocess
import sys
import time

from absl import app
from absl import flags
import jax

from launch import distributed
from launch import mesh
from launch import provenance

FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the flags (only when run as a script: the module stays importable)."""
  flags.DEFINE_string("out", "runs/bench", "Output directory.")
  flags.DEFINE_list("only", [], "Run only these benchmarks.")
  flags.DEFINE_bool("quick", False, "Smaller sizes (a smoke test of the scripts).")
  flags.DEFINE_integer("cpu_devices", os.cpu_count() or 1, "CPU devices for JAX.")
  flags.DEFINE_bool("isolate", True, "Run each benchmark in a process of its own.")


# Name -> the module whose ``run(quick)`` returns its rows; fastest first, so that a run cut short
# keeps the most rows. A table of names, imported after the devices are set up: some benchmarks'
# imports (blackjax, through ModelSMC's intervals) start JAX's backends, after which
# ``--cpu_devices`` can no longer be applied.
BENCHES = {
    "varde_bai": "launch.bench.varde_bai",
    "varde_mcts": "launch.bench.varde_mcts",
    "graphpfn": "launch.bench.graphpfn",
    "reg": "launch.bench.reg",
    "flow_matching": "launch.bench.flow_matching",
    "model_smc": "launch.bench.model_smc",
}


def to_markdown(rows: list[dict], header: str) -> str:
  out = [header, "", "| benchmark | this project | peer | peer is | ratio | notes |", "|---|---:|---:|---|---:|---|"]
  for r in rows:
    out.append(
        f"| {r['benchmark']} | {r['ours']:,.4g} {r['unit']} | {r['peer']:,.4g} {r['unit']} | "
        f"{r['peer_name']} | **{r['ratio']:,.3g}x** | {r['notes']} |"
    )
  return "\n".join(out) + "\n"


def isolated(name: str) -> dict:
  """``bench.json`` of benchmark ``name``, run by ``python -m launch.bench --noisolate --only=name`` in a new process."""
  out = os.path.join(FLAGS.out, "parts", name)
  command = [sys.executable, "-m", "launch.bench", "--noisolate", f"--only={name}", f"--out={out}",
             f"--cpu_devices={FLAGS.cpu_devices}", f"--quick={FLAGS.quick}"]
  done = subprocess.run(command, check=False)
  if done.returncode != 0:
    raise RuntimeError(f"benchmark {name!r} failed (exit status {done.returncode}); its output is above. "
                       f"Rerun it alone with: python {' '.join(command[1:])}")
  with open(os.path.join(out, "bench.json")) as f:
    return json.load(f)


def in_process(name: str) -> dict:
  """``bench.json``'s content for benchmark ``name``, run in this process."""
  rows = importlib.import_module(BENCHES[name]).run(FLAGS.quick)
  return {"rows": rows, "backend": jax.default_backend(), "devices": mesh.describe_devices()}


def header(part: dict, done: int, total: int) -> str:
  """The table's first line: where and when it was measured, and how to regenerate it."""
  backend = part["backend"]
  regenerate = (
      "`make bench`" if backend == "cpu" else
      f"`python -m launch.bench --out={FLAGS.out}` on a {backend.upper()} machine, then "
      f"`python -m launch.report --bench={FLAGS.out} --bench_block=bench_{backend} --only=none`"
  )
  return (
      f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, {os.cpu_count()} CPU cores, "
      f"JAX {jax.__version__} on {part['devices']}"
      f"{' (quick sizes)' if FLAGS.quick else ''}"
      f"{f' (incomplete: {done} of {total} benchmarks)' if done < total else ''}"
      f"; regenerate with {regenerate}."
  )


def main(argv):
  del argv
  unknown = set(FLAGS.only) - set(BENCHES)
  if unknown:
    raise app.UsageError(f"--only {sorted(unknown)}: benchmarks are {sorted(BENCHES)}")
  if not FLAGS.isolate:  # this process runs JAX; with --isolate, only the benchmarks' own processes do
    distributed.setup(cpu_devices=FLAGS.cpu_devices)
  os.makedirs(FLAGS.out, exist_ok=True)
  selected = [name for name in BENCHES if not FLAGS.only or name in FLAGS.only]
  prov = provenance.state()
  rows = []
  for done, name in enumerate(selected, 1):
    print(f"=== {name}", flush=True)
    part = isolated(name) if FLAGS.isolate else in_process(name)
    rows += part["rows"]
    # Written after every benchmark, so that a run cut short keeps the rows it finished.
    head = header(part, done, len(selected))
    table = to_markdown(rows, head)
    with open(os.path.join(FLAGS.out, "bench.md"), "w") as f:
      f.write(table)
    with open(os.path.join(FLAGS.out, "bench.json"), "w") as f:
      json.dump({"header": head, "rows": rows, "provenance": prov,
                 "backend": part["backend"], "devices": part["devices"]}, f, indent=2)
  print(table)


if __name__ == "__main__":
  define_flags()
  app.run(main)
