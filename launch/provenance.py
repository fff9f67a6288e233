"""Where a result came from: the commit, the config hash and the code it ran.

A run records :func:`state` in ``provenance.json`` (the commit of the checkout
and any of its files that differ from that commit); ``launch.report`` prints
the commit and config hash in every results block's "Produced by" line, and
``launch.report --check`` lists the blocks whose code -- the project modules
the experiment imports, directly or not (:func:`import_closure`) -- has
changed in code since (:func:`changed_files`; a docstring or comment does not
count).

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


def git(args: list[str], root: str = ROOT) -> Optional[str]:
  """``git ARGS``' standard output in ``root`` (``None`` if git is missing or the command fails)."""
  try:
    out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
  except (OSError, subprocess.SubprocessError):
    return None
  return out.stdout if out.returncode == 0 else None


def state(root: str = ROOT) -> dict:
  """``{"commit": sha or None, "modified": [files differing from it]}`` of the checkout at ``root``."""
  commit = git(["rev-parse", "HEAD"], root)
  if commit is None:
    return {"commit": None, "modified": []}
  modified = git(["status", "--porcelain", "--untracked-files=no"], root) or ""
  return {"commit": commit.strip(), "modified": sorted(line[3:] for line in modified.splitlines() if line.strip())}


def code_of(source: str) -> Optional[str]:
  """What of a module's ``source`` can change a result: its syntax tree without docstrings or comments.

  ``None`` when the source does not parse (then any change counts).
  """
  try:
    tree = ast.parse(source)
  except SyntaxError:
    return None
  for node in ast.walk(tree):
    body = getattr(node, "body", None)
    if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body
        and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)):
      node.body = body[1:] or [ast.Pass()]
  return ast.dump(tree)


def _same_code(commit: str, path: str, root: str) -> bool:
  """Whether ``path`` differs from ``commit`` only in docstrings and comments (a Python file in both)."""
  if not path.endswith(".py"):
    return False
  old = git(["show", f"{commit}:{path}"], root)
  try:
    with open(os.path.join(root, path)) as f:
      new = f.read()
  except OSError:
    return False
  return old is not None and code_of(old) is not None and code_of(old) == code_of(new)


def changed_files(commit: str, files: Iterable[str], root: str = ROOT) -> Optional[list[str]]:
  """Which of ``files`` differ in code between ``commit`` and the working tree (``None``: commit unknown here).

  A file whose docstrings or comments alone changed (:func:`code_of`) does not count: it cannot
  change a result.
  """
  files = list(files)
  if git(["cat-file", "-e", f"{commit}^{{commit}}"], root) is None:
    return None
  out = git(["diff", "--name-only", commit, "--", *files], root)
  if out is None:
    return None
  return sorted(f for f in set(out.split()) if not _same_code(commit, f, root))
