"""The core and the script API never import Qt (they run in scripts and under torchrun)."""

import subprocess
import sys


def test_import_workbench_and_core_without_qt():
    code = (
        "import sys, pkgutil, importlib, workbench, workbench.core\n"
        "import workbench.core as c\n"
        "for m in pkgutil.iter_modules(c.__path__):\n"
        "    importlib.import_module('workbench.core.' + m.name)\n"
        "import workbench.cli\n"
        "bad = sorted(k for k in sys.modules if k.split('.')[0] in ('PySide6', 'pyqtgraph', 'shiboken6'))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
