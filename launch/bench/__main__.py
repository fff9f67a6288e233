r"""``make bench``: run every benchmark and write ``bench.md`` / ``bench.json``.

  python -m launch.bench --out=runs/bench [--only=varde_bai] [--quick]
"""

import importlib
import json
import os
import platform
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


def main(argv):
  del argv
  distributed.setup(cpu_devices=FLAGS.cpu_devices)
  benches = BENCHES
  unknown = set(FLAGS.only) - set(benches)
  if unknown:
    raise app.UsageError(f"--only {sorted(unknown)}: benchmarks are {sorted(benches)}")
  os.makedirs(FLAGS.out, exist_ok=True)
  selected = [name for name in benches if not FLAGS.only or name in FLAGS.only]

  regenerate = (
      "`make bench`" if jax.default_backend() == "cpu" else
      f"`python -m launch.bench --out={FLAGS.out}` on a {jax.default_backend().upper()} machine, then "
      f"`python -m launch.report --bench={FLAGS.out} --bench_block=bench_{jax.default_backend()} --only=none`"
  )
  prov = provenance.state()
  rows = []
  for done, name in enumerate(selected, 1):
    print(f"=== {name}", flush=True)
    rows += importlib.import_module(benches[name]).run(FLAGS.quick)
    # Written after every benchmark, so that a run cut short keeps the rows it finished.
    header = (
        f"Measured {time.strftime('%Y-%m-%d')} on {platform.machine()}, {os.cpu_count()} CPU cores, "
        f"JAX {jax.__version__} on {mesh.describe_devices()}"
        f"{' (quick sizes)' if FLAGS.quick else ''}"
        f"{f' (incomplete: {done} of {len(selected)} benchmarks)' if done < len(selected) else ''}"
        f"; regenerate with {regenerate}."
    )
    table = to_markdown(rows, header)
    with open(os.path.join(FLAGS.out, "bench.md"), "w") as f:
      f.write(table)
    with open(os.path.join(FLAGS.out, "bench.json"), "w") as f:
      json.dump({"header": header, "rows": rows, "provenance": prov}, f, indent=2)
  print(table)


if __name__ == "__main__":
  define_flags()
  app.run(main)
