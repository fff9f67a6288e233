"""Tables of ``varde_backups``: evaluation against the tuned UCT, the tuning grid, the scale check.

Differences are paired (same instances, same search keys) and their standard
errors clustered by instance; ``d +- 1.96 s.e.`` is a 95% interval, and a
negative ``d`` means a lower regret than UCT's.
"""

from __future__ import annotations


def _cell(r: dict, diff: bool = True) -> str:
  out = f"{r['mean']:.4f} ({r['se']:.4f})"
  return out + (f"; {r['diff']:+.4f} +- {1.96 * r['diff_se']:.4f}" if diff else "")


def evaluation_table(res: dict) -> list[str]:
  """One Markdown table per environment: every rule at every budget, paired difference to UCT."""
  out = []
  budgets = [str(b) for b in res["budgets"]]
  for env, ev in res["evaluation"].items():
    c = res["tuning"]["uct_c"][env]
    out.append(f"**{env}** ({ev['runs']:,} runs in {ev['clusters']:,} clusters): mean regret (clustered s.e.); "
               f"paired difference to UCT (c = {c:g}, tuned) +- 1.96 s.e., by simulations.\n")
    out.append("| rule | " + " | ".join(f"{b} sims" for b in budgets) + " |")
    out.append("|---|" + "---:|" * len(budgets))
    for name, rows in ev["rules"].items():
      label = _label(res, name)
      out.append(f"| {label} | " + " | ".join(_cell(rows[b], name != "uct") for b in budgets) + " |")
    out.append("")
  return out


def _label(res: dict, name: str) -> str:
  if name == "uct":
    return "UCT (tuned c)"
  if name == "varde":
    d = res["default"]
    return f"**VarDE default** ({d['backup']}, tau {d['tau']:g} x {d['tau_scale']}, floor_c {d['floor_c']:g})"
  backup = name[len("varde_"):]
  scale, tau, floor = res["tuning"]["chosen"][backup]
  return f"VarDE `{backup}` (tuned: tau {tau:g} x {scale}, floor_c {floor:g})"


def tuning_table(res: dict) -> list[str]:
  """UCT's regret for every ``c`` (the grid) and VarDE's best relative regret per backup."""
  t = res["tuning"]
  g = res["grid"]
  out = [f"Tuning on separate instances at {res['tune_budget']} simulations. UCT's mean regret by c (the chosen c "
         "in bold):\n", "| environment | " + " | ".join(f"c = {c:g}" for c in g["uct_cs"]) + " |",
         "|---|" + "---:|" * len(g["uct_cs"])]
  for env, by_c in t["uct_regret"].items():
    cells = [f"**{by_c[str(c)]:.4f}**" if c == t["uct_c"][env] else f"{by_c[str(c)]:.4f}" for c in g["uct_cs"]]
    out.append(f"| {env} | " + " | ".join(cells) + " |")
  out += ["", f"VarDE per backup: the best of tau in {g['taus']} x value scale in {g['tau_scales']} x floor_c in "
          f"{g['floors']} by the regret relative to the tuned UCT, averaged over the environments (1 = UCT):\n",
          "| backup | chosen setting | relative regret | worst setting |", "|---|---|---:|---:|"]
  for backup, (scale, tau, floor) in t["chosen"].items():
    vals = {k: v for k, v in t["varde_relative_regret"].items() if k.startswith(backup + "/")}
    best = vals[f"{backup}/{scale}/{tau}/{floor}"]
    out.append(f"| `{backup}` | tau {tau:g} x {scale}, floor_c {floor:g} | {best:.3f} | {max(vals.values()):.3f} |")
  out.append("")
  return out


def scale_table(res: dict) -> list[str]:
  """The gridworld and its rescaled copy: regret x1, x factor / factor, and their paired difference."""
  sc = res.get("scale_check") or {}
  if not sc:
    return []
  f = sc["factor"]
  out = [f"Scale check: the default rule ({sc['backup']}, tau {sc['tau']:g}, floor_c {sc['floor_c']:g}) on the "
         f"gridworld and on a copy with rewards x{f:g} (regret / {f:g}), same keys, {sc['runs']:,} runs:\n",
         "| tau relative to | sims | rewards x1 | rewards x" + f"{f:g} / {f:g} | difference +- 1.96 s.e. |",
         "|---|---:|---:|---:|---:|"]
  for scale, rows in sc["scales"].items():
    label = f"`{scale}` (value units)" if scale == "none" else f"`{scale}` (scale-free)"
    for b, r in rows.items():
      out.append(f"| {label} | {b} | {r['x1'][0]:.4f} ({r['x1'][1]:.4f}) | {r['xf'][0]:.4f} ({r['xf'][1]:.4f}) | "
                 f"{r['diff'][0]:+.4f} +- {1.96 * r['diff'][1]:.4f} |")
  out.append("")
  return out


def markdown(res: dict) -> str:
  """The whole block: evaluation, tuning grid, scale check."""
  return "\n".join(evaluation_table(res) + tuning_table(res) + scale_table(res))


def headline(res: dict) -> str:
  """README: the default rule against the tuned UCT at the largest budget, per environment."""
  b = str(max(res["budgets"]))
  out = [f"Root simple regret at {b} simulations (clustered s.e.), VarDE's default rule against UCT with c tuned on "
         "separate instances; paired difference +- 1.96 s.e. (negative: VarDE lower):\n",
         "| environment | UCT (tuned c) | VarDE default | difference |", "|---|---:|---:|---:|"]
  for env, ev in res["evaluation"].items():
    u, v = ev["rules"]["uct"][b], ev["rules"]["varde"][b]
    out.append(f"| {env} | {u['mean']:.4f} ({u['se']:.4f}) | {v['mean']:.4f} ({v['se']:.4f}) | "
               f"{v['diff']:+.4f} +- {1.96 * v['diff_se']:.4f} |")
  return "\n".join(out) + "\n"


def summary(res: dict) -> str:
  """Plain text (the Markdown tables)."""
  return markdown(res)
