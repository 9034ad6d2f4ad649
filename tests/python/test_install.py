"""`pip install ./python` works: the package is installed into a fresh virtual environment
(offline: --no-index, with the system's setuptools), imported from there (not from the
checkout) and generates the reference text through $TOKENLOOM_LIB."""

import ast
import os
import shutil
import subprocess
import sys

from conftest import ROOT, shared


def test_pip_install_into_venv(tmp_path, reference):
    src = tmp_path / "src"
    shutil.copytree(os.path.join(ROOT, "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    r = subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation",
                        str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    code = (
        "import tokenloom, sys\n"
        "print(tokenloom.__file__)\n"
        "m = tokenloom.Model(sys.argv[1])\n"
        "e = tokenloom.Engine(m, max_batch_size=2)\n"
        "print(repr(e.generate('Once upon a time', max_tokens=9, temperature=0)))\n"
    )
    env = dict(os.environ, TOKENLOOM_LIB=os.path.join(ROOT, os.environ.get("BUILD", "build"),
                                                      "libtokenloom.so"))
    env.pop("PYTHONPATH", None)
    r = subprocess.run([py, "-c", code, shared("models/stories260K.gguf")], cwd=str(tmp_path),
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    where, text = r.stdout.splitlines()
    assert where.startswith(str(venv)), where
    # 9 greedy tokens: a prefix of the reference continuation.
    assert text.startswith("'") and len(text) > 12
    assert reference["text"].startswith(ast.literal_eval(text))
