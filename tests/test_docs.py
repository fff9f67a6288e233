"""The documentation site builds in strict mode: a broken link, a missing page or a bad docstring fails."""

import subprocess
import sys


def test_docs_build_strict(tmp_path, repo_root, python_env):
  out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                       cwd=repo_root, env=python_env, capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, out.stderr[-4000:]
  assert (tmp_path / "site" / "index.html").exists()
