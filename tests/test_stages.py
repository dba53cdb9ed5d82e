"""engine/ is a pipeline in stages whose imports flow one way (issue "Instant answers
everywhere", item 4): lang (the rule language) below library (the resolved declarations and
what is read from outside) below compile (scenarios, the compiled form and its evaluators)
below answers (estimate, solve, plan, serve, checks, measure) below present (display,
reference, plots), with cli.py on top; errors, paths, lazy and store are the base every stage
may use.  Read from the source with ast, so a new import that reaches up (or a module-level
import hidden inside a function) fails here."""
import ast
from pathlib import Path

import pytest

ENGINE = Path(__file__).resolve().parent.parent / "engine"

#: each top-level module or folder of engine/ and its stage; a module may import from its
#: own stage and below
STAGES = {"errors": 0, "paths": 0, "lazy": 0, "store": 0, "lang": 1, "library": 2, "compile": 3,
          "answers": 4, "present": 5, "cli": 6, "__init__": 6, "__main__": 7, "_build_hook": 7}

#: imports inside functions (or a try) that are allowed, and why: optional extras (torch, transformers,
#: peft for measure; matplotlib for plot; huggingface_hub for a download) and the two notebook
#: display hooks (Jupyter calls _repr_html_ / _repr_latex_ on an answer: the renderer is in
#: present, above it)
ALLOWED_INNER = {
    ("answers/measure.py", "torch"), ("answers/measure.py", "transformers"),
    ("answers/measure.py", "transformers.modeling_layers"), ("answers/measure.py", "torch.utils.checkpoint"),
    ("answers/measure.py", "torch.profiler"), ("answers/measure.py", "peft"),
    ("present/plot.py", "matplotlib.backends.backend_agg"), ("present/plot.py", "matplotlib.figure"),
    ("library/hub.py", "huggingface_hub"),
    ("answers/estimate.py", "..present.docs"), ("answers/search.py", "..present.docs"),
    # hatchling's hook interface: there only while the package is built (the doctests import
    # the module without it)
    ("_build_hook.py", "hatchling.builders.hooks.plugin.interface"),
    # lark's stand-alone generator: run only while the package is built (a lazy binding of a
    # submodule would import lark to find it, in every process)
    ("lang/grammar.py", "lark.tools.standalone"),
}


def _modules():
    # engine/_built holds what the build generates (lark's stand-alone parser), not the engine's code
    return sorted(p for p in ENGINE.rglob("*.py") if "_data" not in p.parts and "_built" not in p.parts)


def _stage(path: Path) -> int:
    rel = path.relative_to(ENGINE)
    return STAGES[rel.parts[0] if len(rel.parts) > 1 else rel.stem]


def _target(path: Path, node: ast.ImportFrom, alias: str | None = None) -> Path:
    """The module or package of engine/ that a relative import names."""
    base = path.parent
    for _ in range(node.level - 1):
        base = base.parent
    parts = (node.module or alias or "").split(".")
    return base.joinpath(*parts)


def test_every_module_has_a_stage():
    for path in _modules():
        _stage(path)  # KeyError: a new top-level module or folder that no stage names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: p.relative_to(ENGINE).as_posix())
def test_imports_flow_one_way(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _stage(path)
    rel = path.relative_to(ENGINE).as_posix()
    top = set(map(id, tree.body))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
            name = ("." * node.level + (node.module or "")) if isinstance(node, ast.ImportFrom) \
                else node.names[0].name
            assert (rel, name) in ALLOWED_INNER, f"{rel}:{node.lineno}: import inside a function: {name}"
            continue  # an allowed one (the notebook hooks reach up by design)
        if isinstance(node, ast.ImportFrom) and node.level:
            for alias in ([None] if node.module else [a.name for a in node.names]):
                target = _target(path, node, alias)
                if not target.exists() and not target.with_suffix(".py").exists():
                    continue  # a name imported from a package's __init__
                assert _stage(target if target.exists() else target.with_suffix(".py")) <= here, \
                    f"{rel}:{node.lineno}: imports up, from {target.relative_to(ENGINE)}"


def test_lazy_bindings_flow_one_way():
    """``lazy("engine.x.y")`` binds a module executed on first use: it too may only reach its
    own stage or below (cli.py reaches all of them)."""
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "lazy" and node.args
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value.startswith("engine.")):
                target = ENGINE.joinpath(*node.args[0].value.split(".")[1:]).with_suffix(".py")
                assert _stage(target) <= _stage(path), f"{path.relative_to(ENGINE)}:{node.lineno}: lazy import up"
