"""The rule language's LALR parser: lark's, its parse tables kept in the user's cache, and the
stand-alone parser the package is built with, which reads a ``--set`` value without importing
lark."""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import io
import json
import os
import sys
from types import SimpleNamespace

from ..lazy import lazy
from ..paths import LARK_OPTIONS, grammar_path
from .. import store
from ..store import read, source_key, write

lark = lazy("lark")


def lark_parser():
    """A new LALR parser of the rule language.  Building its parse tables takes longer than
    an interactive answer should, so they are kept in the user's cache directory as plain
    data (lark's own serialized form, through :mod:`engine.store`, never a pickle)."""
    key = source_key()
    stored = read("grammar", key) if key else None
    if isinstance(stored, dict) and stored.get("lark") == lark.__version__:
        try:
            parser = lark.Lark._load_from_dict(stored["data"], stored["memo"])
            if all(getattr(parser.options, k) == v for k, v in LARK_OPTIONS.items()):
                return parser
        except Exception:  # not lark's tables after all: built afresh below
            pass
    parser = lark.Lark(grammar_path().read_text(encoding="utf-8"), **LARK_OPTIONS)
    if key:
        data, memo = parser.memo_serialize([lark.lexer.TerminalDef, lark.grammar.Rule])
        write("grammar", key, {"lark": lark.__version__, "data": data, "memo": memo})
    return parser


# ---------------------------------------------------------------- the stand-alone parser
# Importing lark takes half the time an interactive answer should, and a ``--set`` value
# needs only its LALR runtime.  Lark's own generator (``lark.tools.standalone``) writes that
# runtime and the grammar's parse tables as one Python module (the tables as literals); the
# package is built with it (engine/_build_hook.py), in engine/_built/, named for a hash of the
# grammar and the parser's options, so a grammar edited since is never read with it.  Lark's
# runtime can also save and load a parser, and cache one in a temporary file, with pickle: that
# code is taken out before the module is written (:func:`_without_pickle`), so that no file
# anyone could plant is ever unpickled.  It parses exactly as lark does
# (tests/test_value_parser.py holds the trees equal); what it cannot parse is an error the full
# path reports, with lark's.

#: the stand-alone parser's options: lark's for the rule language, with the one start symbol a
#: value is parsed from (its parse tables are half the size, and it builds twice as fast)
STANDALONE_OPTIONS = dict(LARK_OPTIONS, start=["expr"])
#: how the module is trimmed (part of its name: a module trimmed otherwise is not loaded)
STANDALONE_FORMAT = "without pickle, without logging"


def standalone_name() -> str:
    """The file name of the stand-alone parser of the grammar as it is now."""
    digest = hashlib.sha256(grammar_path().read_bytes() + json.dumps(STANDALONE_OPTIONS, sort_keys=True).encode()
                            + STANDALONE_FORMAT.encode()).hexdigest()[:32]
    return f"lalr_{digest}.py"


def write_standalone(folder) -> None:
    """Write the stand-alone parser of the grammar into ``folder`` (while the package is built)."""
    # lark's generator, imported here: only the package's build runs it (a lazy module of a
    # submodule would import lark to find it, in every process)
    from lark.tools.standalone import gen_standalone
    out = io.StringIO()
    gen_standalone(lark.Lark(grammar_path().read_text(encoding="utf-8"), **STANDALONE_OPTIONS), out=out)
    source = _without_pickle(out.getvalue())
    source = source and _without_logging(source)
    if source is None:  # another lark lays its runtime out otherwise: lark itself reads the values
        sys.stderr.write("memform: lark's stand-alone parser was not built (its pickle code has another shape)\n")
        return
    (folder / standalone_name()).write_text(source, encoding="utf-8")


def _cut(lines: list, cuts: list) -> str:
    """``lines`` with each (first line, last line, replacement) of ``cuts`` (1-based) replaced."""
    for first, last, text in sorted(cuts, reverse=True):
        lines[first - 1:last] = [text] if text else []
    return "".join(lines)


def _without_pickle(source: str) -> str | None:
    """Lark's stand-alone runtime without the code that pickles: the ``pickle`` import,
    ``Lark.__init__`` (which builds a parser from grammar text and caches it; the stand-alone
    parser is made from its tables by ``Lark._load_from_dict``), ``Lark.save`` and ``Lark.load``,
    and ``Lark._load``'s reading of a file (it is given the tables as a dict).  Lines are cut
    where :mod:`ast` places those nodes, so the rest, its licence notice included, is kept as
    lark wrote it; None where any pickle is left."""
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}  # names read (an import is none)
    cuts = []  # (first line, last line, replacement), 1-based
    for node in tree.body:
        if isinstance(node, ast.Import) and any(a.name == "pickle" for a in node.names):
            others = [a.name for a in node.names if a.name != "pickle" and a.name in used]
            cuts.append((node.lineno, node.end_lineno, "import " + ", ".join(others) + "\n" if others else ""))
        if isinstance(node, ast.ClassDef) and node.name == "Lark":
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name in ("__init__", "save", "load"):
                    cuts.append((min([f.lineno] + [d.lineno for d in f.decorator_list]), f.end_lineno, ""))
                elif isinstance(f, ast.FunctionDef) and f.name == "_load":
                    for n in ast.walk(f):
                        if isinstance(n, ast.Assign) and "pickle" in ast.unparse(n.value):
                            indent = lines[n.lineno - 1][:n.col_offset]
                            cuts.append((n.lineno, n.end_lineno,
                                         f"{indent}raise TypeError('only the parse tables built in are loaded')\n"))
    out = _cut(lines, cuts)
    if "pickle" in out:
        return None
    ast.parse(out)  # still Python
    return out


def _without_logging(source: str) -> str:
    """Lark's stand-alone runtime with a silent logger in place of ``logging``'s (importing
    ``logging`` is half the module's start): lark sets its logger to CRITICAL, and the runtime
    only logs debug messages and lexer warnings below that, so nothing it would print is lost.
    The source as it is where ``logging`` is used otherwise."""
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    cuts = []
    for node in tree.body:
        if isinstance(node, ast.Import) and [a.name for a in node.names] == ["logging"]:
            cuts.append((node.lineno, node.end_lineno, ""))
        elif isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "logger":
            cuts.append((node.lineno, node.end_lineno, "class _Silent:\n    def _nothing(self, *args, **kwargs):\n"
                         "        pass\n    debug = info = warning = error = critical = _nothing\n\n\n"
                         "logger = _Silent()\n"))
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and ast.unparse(node.value.func) in ("logger.addHandler", "logger.setLevel")):
            cuts.append((node.lineno, node.end_lineno, ""))
    out = _cut(lines, cuts)
    if len(cuts) != 4 or any(isinstance(n, ast.Name) and n.id == "logging" for n in ast.walk(ast.parse(out))):
        return source
    return out


def _lark_runtime():
    return SimpleNamespace(Transformer=lark.Transformer, v_args=lark.v_args,
                           VisitError=lark.exceptions.VisitError, LarkError=lark.exceptions.LarkError)


def value_parser():
    """``(runtime, parser)`` for constant values: the stand-alone parser the package was built
    with where it is the current grammar's, else lark's (``runtime`` gives the Transformer,
    ``v_args``, ``VisitError`` and ``LarkError`` classes that go with the parser)."""
    if not os.environ.get("MEMFORM_NO_CACHE"):
        path = store.BUILT / standalone_name()
        if path.is_file():
            try:
                spec = importlib.util.spec_from_file_location("engine._built_lalr", path)
                module = importlib.util.module_from_spec(spec)
                # lark takes the optional `regex` module where it is installed, for Unicode
                # categories, which the grammar has none of: not importing it saves a third of
                # the parser's start (a module already imported is used as it is)
                blocked = "regex" not in sys.modules
                if blocked:
                    sys.modules["regex"] = None
                try:
                    spec.loader.exec_module(module)
                finally:
                    if blocked:
                        del sys.modules["regex"]
                return module, module.Lark_StandAlone()
            except Exception:  # noqa: BLE001 -- not a parser after all: lark's below
                pass
    return _lark_runtime(), lark_parser()
