"""Where a result came from: the commit, the config hash and the code it ran.

A run records :func:`state` in ``provenance.json`` (the commit of the checkout
and any of its files that differ from that commit); ``launch.report`` prints
the commit and config hash in every results block's "Produced by" line, and
``launch.report --check`` lists the blocks whose code -- the project modules
the experiment imports, directly or not (:func:`import_closure`) -- has
changed since (:func:`changed_files`).

The import graph is read from the source (``ast``), so computing it imports
nothing. The architecture test uses the same graph.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import subprocess
from typing import Iterable, Iterator, Optional

PACKAGES = ("envs", "datasets", "methods", "launch")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclasses.dataclass(frozen=True)
class Import:
  """One import of a project module: the importing and imported modules, where, and whether in a function."""

  source: str
  target: str
  line: int
  in_function: bool


def project_modules(root: str = ROOT) -> dict[str, str]:
  """``{dotted module name: file path}`` of every module of the project's packages."""
  out = {}
  for pkg in PACKAGES:
    for d, _, files in os.walk(os.path.join(root, pkg)):
      for f in sorted(files):
        if f.endswith(".py"):
          path = os.path.join(d, f)
          name = os.path.relpath(path, root)[:-3].replace(os.sep, ".")
          out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
  return out


def _resolve(name: str, modules: dict[str, str]) -> Optional[str]:
  while name and name not in modules:
    name = name.rpartition(".")[0]
  return name or None


def _targets(node: ast.AST, module: str, is_package: bool, modules: dict[str, str]) -> list[str]:
  if isinstance(node, ast.Import):
    return [a.name for a in node.names]
  if not isinstance(node, ast.ImportFrom):
    return []
  base = node.module or ""
  if node.level:
    parts = module.split(".")
    parts = parts[: len(parts) - (0 if is_package else 1)]
    parts = parts[: len(parts) - (node.level - 1)]
    base = ".".join(parts + ([base] if base else []))
  return [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]


def imports_of(module: str, modules: dict[str, str]) -> Iterator[Import]:
  """Every import of another project module by ``module`` (top-level and in functions)."""
  path = modules[module]
  with open(path) as f:
    tree = ast.parse(f.read(), filename=path)
  in_function = set()
  for node in ast.walk(tree):
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      in_function.update(id(n) for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom)))
  for node in ast.walk(tree):
    for t in _targets(node, module, path.endswith("__init__.py"), modules):
      target = _resolve(t, modules)
      if target and target != module:
        yield Import(module, target, node.lineno, id(node) in in_function)


def import_graph(root: str = ROOT) -> dict[str, list[Import]]:
  """``{module: its imports}`` of every project module."""
  modules = project_modules(root)
  return {m: list(imports_of(m, modules)) for m in modules}


def import_closure(start: Iterable[str], root: str = ROOT,
                   graph: Optional[dict[str, list[Import]]] = None) -> list[str]:
  """Files (relative to ``root``) of ``start`` and every project module they import, directly or not.

  ``graph`` is :func:`import_graph` of ``root`` when a caller asks for several closures.
  """
  modules = project_modules(root)
  graph = import_graph(root) if graph is None else graph
  seen, todo = set(), [m for m in start]
  while todo:
    m = todo.pop()
    if m in seen or m not in modules:
      continue
    seen.add(m)
    parts = m.split(".")
    todo.extend(".".join(parts[:k]) for k in range(1, len(parts)))  # a module runs its packages' __init__
    todo.extend(i.target for i in graph[m])
  return sorted(os.path.relpath(modules[m], root) for m in seen)


def _git(args: list[str], root: str) -> Optional[str]:
  try:
    out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
  except (OSError, subprocess.SubprocessError):
    return None
  return out.stdout if out.returncode == 0 else None


def state(root: str = ROOT) -> dict:
  """``{"commit": sha or None, "modified": [files differing from it]}`` of the checkout at ``root``."""
  commit = _git(["rev-parse", "HEAD"], root)
  if commit is None:
    return {"commit": None, "modified": []}
  modified = _git(["status", "--porcelain", "--untracked-files=no"], root) or ""
  return {"commit": commit.strip(), "modified": sorted(line[3:] for line in modified.splitlines() if line.strip())}


def changed_files(commit: str, files: Iterable[str], root: str = ROOT) -> Optional[list[str]]:
  """Which of ``files`` differ between ``commit`` and the working tree (``None``: commit unknown here)."""
  files = list(files)
  if _git(["cat-file", "-e", f"{commit}^{{commit}}"], root) is None:
    return None
  out = _git(["diff", "--name-only", commit, "--", *files], root)
  return None if out is None else sorted(set(out.split()))
