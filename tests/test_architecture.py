"""The house rules that a reader relies on, checked on the source tree.

* Imports only go down (``launch -> methods, envs, datasets``; ``methods ->
  envs, methods``; ``envs`` and ``datasets`` import no other layer) and the
  import graph has no cycle, counting top-level and function-level imports alike.
* A function-level import of another project module is not used at all.
* ``launch/experiments`` holds one package per method family, no flat module.
* No module over 450 lines and no function over 80 lines in any package.
* Importing the registry loads no experiment (and no JAX).
* JAX's LAPACK-backed decompositions in ``methods/`` and ``envs/`` go through
  ``methods.common.linalg`` (one matrix per kernel call on CPU, so a sharded
  batch cannot stop with idle cores), except at the named call sites that
  never see a batch.
"""

import ast
import os
import subprocess
import sys

import conftest  # this directory's conftest.py, which pytest has imported under that name
import pytest

from launch import provenance
from launch import registry

# What each layer may import from the others.
ALLOWED = {
    "envs": {"envs"},
    "datasets": {"datasets"},
    "methods": {"methods", "envs"},
    "launch": {"launch", "methods", "envs", "datasets"},
}
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80
# jnp.linalg / jax.scipy.linalg / lax.linalg functions that call a LAPACK kernel on CPU.
LAPACK = {"cholesky", "cho_factor", "cho_solve", "det", "eig", "eigh", "eigvals", "eigvalsh", "inv", "lstsq", "lu",
          "lu_factor", "lu_solve", "pinv", "qr", "schur", "slogdet", "solve", "solve_triangular", "svd", "svdvals",
          "tensorsolve", "tensorinv", "triangular_solve", "matrix_power", "matrix_rank", "expm", "sqrtm"}
# (module, function) -> why a direct call is safe there.
DIRECT_LAPACK_OK = {
    ("methods.common.linalg", "<module>"): "the wrappers themselves",
    ("methods.model_smc.evidence", "gaussian_log_evidence"): "one linear-Gaussian model per call (a test reference)",
    ("methods.model_smc.predictive", "draw"): "one Hessian per call, jitted per model (jitted_draw), never vmapped",
    ("envs.mdps", "policy_value"): "one MDP per call (envs cannot import methods; batched callers use "
                                   "methods.varde.bpi.occupancy)",
}


@pytest.fixture(scope="module")
def graph(repo_root):
  return provenance.project_modules(repo_root), provenance.import_graph(repo_root)


def _cycles(edges):
  """Strongly connected components with more than one module (Tarjan)."""
  index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

  def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for imp in edges[v]:
      w = imp.target
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        out.append(sorted(comp))

  limit = sys.getrecursionlimit()
  sys.setrecursionlimit(max(limit, 10_000))
  try:
    for v in edges:
      if v not in index:
        visit(v)
  finally:
    sys.setrecursionlimit(limit)
  return out


def test_no_import_cycles(graph):
  _, edges = graph
  assert _cycles(edges) == []


def test_imports_go_down(graph):
  _, edges = graph
  up = [(i.source, i.target) for imports in edges.values() for i in imports
        if i.target.split(".")[0] not in ALLOWED[i.source.split(".")[0]]]
  assert up == []


def test_no_function_level_project_imports(graph):
  _, edges = graph
  nested = [(i.source, i.target, i.line) for imports in edges.values() for i in imports if i.in_function]
  assert nested == []


def test_experiments_are_grouped_by_method(repo_root):
  root = os.path.join(repo_root, "launch", "experiments")
  flat = [f for f in os.listdir(root) if f.endswith(".py") and f != "__init__.py"]
  assert flat == []
  packages = [d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "__init__.py"))]
  assert sorted(packages) == ["flow_matching", "graphpfn", "model_smc", "reg", "varde"]


def test_module_and_function_sizes(graph):
  modules, _ = graph
  long_modules, long_functions = [], []
  for name, path in modules.items():
    src = open(path).read()
    if src.count("\n") > MAX_MODULE_LINES:
      long_modules.append((name, src.count("\n")))
    for node in ast.walk(ast.parse(src)):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        n = node.end_lineno - node.lineno + 1
        if n > MAX_FUNCTION_LINES:
          long_functions.append((name, node.name, n))
  assert long_modules == [] and long_functions == []


def _lapack_calls(tree):
  """``(function, dotted call)`` of every ``*.linalg.<LAPACK>`` use in a module's AST."""

  def dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
      parts.append(node.attr)
      node = node.value
    return ".".join(([node.id] if isinstance(node, ast.Name) else ["?"]) + parts[::-1])

  out = []

  def visit(node, scope):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      scope = node.name if scope == "<module>" else scope
    if isinstance(node, ast.Attribute) and node.attr in LAPACK:
      name = dotted(node)
      if ".linalg." in name and name.split(".")[0] in {"jnp", "jax", "jsp", "lax"}:
        out.append((scope, name))
    if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("linalg") and \
        (node.module or "").startswith("jax") and any(a.name in LAPACK for a in node.names):
      out.append((scope, f"from {node.module} import ..."))
    for child in ast.iter_child_nodes(node):
      visit(child, scope)

  visit(tree, "<module>")
  return out


def test_lapack_decompositions_go_through_common_linalg(graph):
  modules, _ = graph
  direct, seen = [], set()
  for name, path in modules.items():
    if name.split(".")[0] not in ("methods", "envs"):
      continue
    for scope, call in _lapack_calls(ast.parse(open(path).read())):
      key = (name, "<module>") if name == "methods.common.linalg" else (name, scope)
      seen.add(key)
      if key not in DIRECT_LAPACK_OK:
        direct.append((name, scope, call))
  assert direct == []
  assert set(DIRECT_LAPACK_OK) <= seen, "an exception names a call site that no longer exists"


def test_lapack_scan_finds_direct_calls():
  src = ("import jax\nimport jax.numpy as jnp\nfrom jax.scipy.linalg import cho_solve\n"
         "def f(a, b):\n  return jnp.linalg.solve(a, b) + jax.scipy.linalg.expm(a) + jnp.linalg.norm(a)\n")
  assert sorted(_lapack_calls(ast.parse(src))) == [
      ("<module>", "from jax.scipy.linalg import ..."), ("f", "jax.scipy.linalg.expm"), ("f", "jnp.linalg.solve")]


def test_registry_import_loads_no_experiment(repo_root, python_env):
  code = ("import sys, launch.registry as r; "
          "print(sorted(m for m in sys.modules if m.startswith(('launch.experiments.', 'jax')) ))")
  out = subprocess.run([sys.executable, "-c", code], cwd=repo_root, env=python_env, capture_output=True, text=True,
                       check=True, timeout=120)
  assert out.stdout.strip() == "[]", out.stdout


def test_every_registered_module_defines_its_experiment(repo_root):
  for name, module in registry.MODULES.items():
    path = os.path.join(repo_root, *module.split(".")) + ".py"
    assert os.path.exists(path), (name, module)
    assert registry.get(name).name == name


def test_heavy_first_names_test_files_that_exist(repo_root):
  """Every file that ``make test`` starts first exists, once: a renamed file would fall back to pytest's order."""
  names = conftest.HEAVY_FIRST
  assert len(set(names)) == len(names), names
  missing = [n for n in names if not os.path.isfile(os.path.join(repo_root, "tests", n))]
  assert not missing, f"HEAVY_FIRST names test files that do not exist: {missing}"
