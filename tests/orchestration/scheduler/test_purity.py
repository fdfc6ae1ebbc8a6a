"""The engine is pure Python: no Django anywhere in the package (the adapter lives elsewhere)."""

import ast
import subprocess
import sys
from pathlib import Path

import apps.orchestration.scheduler as scheduler

PACKAGE = Path(scheduler.__file__).parent
ROOT = PACKAGE.parents[2]


def test_no_module_imports_django():
    offenders = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "django"]
            offenders += [
                f"{path.name}: {n}" for n in names if n.startswith("apps.") and "scheduler" not in n
            ]
    assert offenders == []


def test_package_imports_without_django_loaded():
    code = (
        "import sys\n"
        "import apps.orchestration.scheduler as s\n"
        "from apps.orchestration.scheduler import engine, filters, fragmentation, loam, model\n"
        "from apps.orchestration.scheduler import policies, queue, scoring\n"
        "bad = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
