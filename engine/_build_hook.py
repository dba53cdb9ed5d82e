"""Building the package builds what a first run would: hatchling runs this hook for
``pip install`` (editable or not) and ``python -m build``.  It resolves the shipped library
in a new process and keeps its snapshot, its compiled form, lark's parse tables, the
grammar's stand-alone parser (:func:`engine.lang.grammar.write_standalone`) and the formula
reference (:data:`BUILD`) in ``engine/_built/`` (see :mod:`engine.store`), so that the first ``memform`` command after
installing answers as fast as a later one.  A failure here is reported and the package is
built without them: the first run then builds them, as before."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # imported outside a build (the doctests collect every module)
    BuildHookInterface = object


#: the build, run in a new process (the sources' own engine, not an installed one): what a first
#: run would build (the library's snapshot and compiled form, lark's parse tables), the
#: stand-alone parser of ``--set`` values and the formula reference in every format of
#: ``memform docs`` (rendering it takes sympy half a minute)
BUILD = ("import sys\nfrom pathlib import Path\nfrom engine.cli import _reference\nfrom engine.compile import cache\n"
         "from engine.lang.grammar import lark_parser, write_standalone\nfrom engine.paths import DOC_FILES\n"
         "from engine.store import building\n"
         "with building(Path(sys.argv[1])) as folder:\n"
         "    lark_parser()\n    cache.load()\n    write_standalone(folder)\n"
         "    for fmt in DOC_FILES:\n        _reference(fmt)\n")


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        if self.target_name != "wheel":  # an sdist carries the sources; its wheel builds them
            return
        root = Path(self.root)
        folder = root / "engine" / "_built"
        env = {k: v for k, v in os.environ.items() if k not in ("MEMFORM_NO_CACHE", "MEMFORM_BUILT")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
        proc = subprocess.run([sys.executable, "-c", BUILD, str(folder)], cwd=root, env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write("memform: the library was not built with the package (the first run will build "
                             f"it):\n{proc.stderr[-2000:]}\n")
            return
        if version != "editable":  # an editable install reads them where they are
            for path in sorted([*folder.glob("*.json"), *folder.glob("lalr_*.py")]):
                build_data["force_include"][str(path)] = f"engine/_built/{path.name}"
