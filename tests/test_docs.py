"""The generated formula reference (Markdown, LaTeX, HTML), plots and notebook display.

Expected figures come from outside memform: the worked examples' ``expected`` values are
seed-cases.md's independent recomputations, and the closed forms checked by hand are the
textbook ones (4d^2 attention, Kaplan's 12Ld^2 + 2Vd).  The LaTeX is compiled by pdflatex
where it is installed and its formulas are parsed back by sympy's lark LaTeX parser; the
HTML is rendered by headless Chromium.
"""
from __future__ import annotations

import io
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import sympy

import engine
from engine.cli import main
from engine.present.display import DISPLAY
from engine.present.docs import DOCS_DIR, TOPIC_ORDER, RuleView, load_examples, render, topics
from engine.errors import UsageError
from engine.answers.estimate import formula
from engine.compile.model import Scenario

CHROMIUM = "/usr/bin/chromium"


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def markdown(lib):
    return render(lib, "md")


def section(markdown: str, anchor: str) -> str:
    """The Markdown between ``<a id="anchor">`` and the next anchor."""
    start = markdown.index(f'<a id="{anchor}"></a>')
    end = markdown.find('<a id="', start + 1)
    return markdown[start:end if end > 0 else None]


def unescape(md: str) -> str:
    return re.sub(r"\\(.)", r"\1", md).replace("&lt;", "<")


# ---------------------------------------------------------------------------- Markdown
def test_every_rule_appears_with_doc_source_text_and_closed_form(lib, markdown):
    scenario = Scenario.create(lib)
    for name, rule in lib.rules.items():
        part = section(markdown, f"rule-{name}")
        assert f"### `{name}`" in part
        assert rule.doc in unescape(part), name
        assert f"```text\n{rule.text}\n```" in part, name
        if rule.source:
            assert rule.source in unescape(part), name
        # the closed form as the issue defines it: every input symbolic, default options
        closed = formula(scenario, name, keep=tuple(lib.inputs), opaque=())
        lhs = DISPLAY.get(name) or r"\mathrm{%s}" % name.replace("_", r"\_")
        assert f"$$\n{lhs} = {engine.present.display.latex(closed)}\n$$" in part, name


def test_every_input_option_and_dtype_is_listed(lib, markdown):
    rows = set(re.findall(r"^\| `([a-z0-9_]+)` \|", markdown, re.M))
    assert set(lib.inputs) | set(lib.options) | set(lib.dtypes) <= rows
    for name, decl in lib.inputs.items():
        if name in DISPLAY:  # the paper's symbol beside the plain name
            assert f"| `{name}` | ${DISPLAY[name]}$ |" in markdown


def test_textbook_closed_forms(markdown):
    # Vaswani et al. 2017: q, k, v, o projections of d x d (MHA, no biases, the default)
    assert "$$\n\\mathrm{attention\\_params} = 4 d^{2}\n$$" in markdown
    # Kaplan et al. 2020 / the seed documents: 12 L d^2 + 2 V d
    assert "$$\n\\mathrm{n\\_params\\_approx} = 12 d^{2} L + 2 d V\n$$" in markdown


def test_topics_in_fixed_order_titled_from_the_first_comment(lib, markdown):
    files = [t.file for t in topics(lib)]
    core = ["dtypes.mem", "model.mem", "training.mem", "activations.mem", "inference.mem",
            "parallel.mem", "overhead.mem", "total.mem"]
    assert [f for f in files if f in core] == [f for f in core if f in files]
    assert files[:2] == ["dtypes.mem", "model.mem"]
    assert "checks.mem" not in files and "presets.mem" not in files  # nothing to document
    headings = re.findall(r"^## (.*) \(([a-z_]+\.mem)\)$", markdown, re.M)
    assert [f for _, f in headings] == files
    first_line = (Path(engine.paths.data_path("formulas")) / "total.mem").read_text().splitlines()[0]
    assert dict((f, t) for t, f in headings)["total.mem"].lower() in first_line.lower()


def test_unknown_files_follow_alphabetically(tmp_path):
    # the two files beside the shipped library (a copy of formulas/ elsewhere would make every
    # rule a user's, each written out within a user rule's CPU budget: the serving rules come
    # near it on a loaded machine)
    (tmp_path / "zeta.mem").write_text('# zeta.mem: an extra topic.  More words.\n'
                                       'rule zeta_bytes : bytes = 3 * fp16 "three halves"\n')
    (tmp_path / "lora_extra.mem").write_text('rule lora_extra : count = 2 "no header comment"\n')
    lib = engine.load(extra=[tmp_path / "zeta.mem", tmp_path / "lora_extra.mem"])
    files = [t.file for t in topics(lib)]
    extras = [f for f in files if Path(f).stem not in TOPIC_ORDER]
    assert {"lora_extra.mem", "zeta.mem"} <= set(extras) and extras == sorted(extras)
    assert files.index("total.mem") < min(files.index(f) for f in extras)
    text = render(lib, "md", examples=None)
    assert "## An extra topic (zeta.mem)\n\nMore words." in text
    assert "## lora_extra (lora_extra.mem)" in text
    assert "$$\n\\mathrm{zeta\\_bytes} = 6\n$$" in text


def test_generation_is_deterministic(lib):
    code = ("import engine; from engine.present.docs import render; "
            "import sys; sys.stdout.write(render(engine.load(), 'md'))")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"},
                           cwd=Path(__file__).parents[1]).stdout for seed in ("1", "2")}
    assert len(outs) == 1


# ---------------------------------------------------------------------------- worked examples
def test_examples_match_the_independent_recomputation(lib, markdown):
    examples = load_examples(lib)
    assert len(examples) >= 10
    for ex in examples:
        assert ex.value == ex.expected, ex.case  # seed-cases.md's correct figure
        part = section(markdown, f"example-{ex.case}")
        assert f"{int(ex.value):,}" in part
        assert ex.claim in unescape(part)
        if ex.verdict == "wrong":
            assert "**Why:**" in part


def test_example_case_ids_exist_in_the_seed_analysis(lib):
    seeds = Path(__file__).resolve().parents[2] / "shared" / "reference" / "seed-cases.md"
    if not seeds.is_file():
        pytest.skip("shared/reference/seed-cases.md is not beside the repository")
    text = seeds.read_text(encoding="utf-8")
    for ex in load_examples(lib):
        assert re.search(rf"\| {re.escape(ex.case)} \||\*\*{re.escape(ex.case)}\*\*", text), ex.case


@pytest.mark.parametrize("body, message", [
    ('[[example]]\ncase = "X"\ntitle = "t"\nrule = "weights"\nclaim = "c"\n', "missing verdict"),
    ('[[example]]\ncase = "X"\ntitle = "t"\nrule = "weigths"\nclaim = "c"\nverdict = "correct"\n'
     'model = "llama2-7b"\n', "unknown name 'weigths'"),
    ('[[example]]\ncase = "X"\ntitle = "t"\nrule = "weights"\nclaim = "c"\nverdict = "wrong"\n', "needs 'why'"),
    ('[[example]]\ncase = "X"\ntitle = "t"\nrule = "weights"\nclaim = "c"\nverdict = "correct"\n'
     'model = "llama2-7b"\nset = { zero_stage = 7 }\n', "'7' is not a choice of option 'zero_stage'"),
    ("[[example]\n", "examples.toml"),
])
def test_bad_examples_file_is_a_clear_error(lib, tmp_path, body, message):
    path = tmp_path / "examples.toml"
    path.write_text(body)
    with pytest.raises(UsageError) as info:
        load_examples(lib, path)
    assert message in str(info.value)


# ---------------------------------------------------------------------------- docs --check
def test_committed_reference_is_up_to_date():
    code, out, err = run("docs", "--check")
    assert (code, err) == (0, ""), f"regenerate with: python -m engine docs --out docs\n{err}"
    assert out == "docs/reference.md is up to date\n" or out.endswith("reference.md is up to date\n")


def test_check_detects_a_stale_copy(tmp_path):
    shutil.copy(DOCS_DIR / "reference.md", tmp_path / "reference.md")
    assert run("docs", "--check", "--out", str(tmp_path))[0] == 0
    with open(tmp_path / "reference.md", "a", encoding="utf-8") as f:
        f.write("edited by hand\n")
    code, out, err = run("docs", "--check", "--out", str(tmp_path))
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "reference.md is stale" in err and str(tmp_path) in err
    # the command that regenerates this folder's copy (not the repository's docs/)
    assert f"regenerate it with 'memform docs --out {tmp_path}'" in err
    (tmp_path / "reference.md").unlink()
    code, _, err = run("docs", "--check", "--out", str(tmp_path))
    assert code == 2 and "does not exist" in err and f"generate it with 'memform docs --out {tmp_path}'" in err


def test_check_in_an_installed_package_needs_out(monkeypatch):
    # an installed wheel has no docs/ folder with a committed reference (tests/test_wheel.py runs one)
    monkeypatch.setattr("engine.present.docs.IN_CHECKOUT", False)
    code, out, err = run("docs", "--check")
    assert (code, out) == (2, "")
    assert "memform is installed as a package" in err and "memform docs --check --out DIR" in err
    assert "_data" not in err and "python -m engine" not in err


def test_docs_writes_each_format(tmp_path):
    for fmt, name in (("md", "reference.md"), ("latex", "reference.tex"), ("html", "reference.html")):
        code, out, err = run("docs", "--format", fmt, "--out", str(tmp_path))
        assert (code, err) == (0, "") and out == f"wrote {tmp_path / name}\n"
        assert (tmp_path / name).stat().st_size > 10_000


# ---------------------------------------------------------------------------- LaTeX
@pytest.fixture(scope="module")
def latex_doc(lib):
    return render(lib, "latex")


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_latex_compiles(latex_doc, tmp_path):
    (tmp_path / "reference.tex").write_text(latex_doc, encoding="utf-8")
    proc = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "-no-shell-escape",
                           "reference.tex"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    pdf = (tmp_path / "reference.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and len(pdf) > 50_000
    assert "Undefined control sequence" not in proc.stdout


#: sympy's LaTeX tokens: names (\mathrm{...} or a letter with a subscript), commands, spaces
_TOKEN = re.compile(r"\\mathrm\{(?:[^{}\\]|\\_)*\}|\\[A-Za-z]+|[A-Za-z](?:_\{[A-Za-z]+\})?|\s+|.")
_ENDS_OPERAND = re.compile(r"[A-Za-z](_\{[a-z]+\})?|\d|[})]|\\rceil|\\rfloor")
_STARTS_OPERAND = re.compile(r"[A-Za-z](_\{[a-z]+\})?|\d|\(|\\(frac|left|lceil|lfloor|min|max|sqrt|log)")


def _placeholder(i: int) -> str:
    letters = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        letters = chr(97 + r) + letters
    return f"x_{{{letters}}}"


def _parseable(tex: str, names: list[str]) -> str:
    """Our LaTeX in the subset sympy's lark parser reads: each name becomes ``x_{..}``
    (it takes ``d`` for a differential and has no multi-letter names), sizing commands
    go, and a product written by juxtaposition gets an explicit ``\\cdot``."""
    place = {(DISPLAY.get(n) or r"\mathrm{%s}" % n.replace("_", r"\_")): _placeholder(i)
             for i, n in enumerate(names)}
    tex = tex.replace(r"\big/", "/").replace(r"\bigl", "").replace(r"\bigr", "")
    out, prev, space = [], None, False
    for tok in _TOKEN.findall(tex):
        tok = place.get(tok, tok)
        if tok.isspace():
            space = True
            continue
        if space:
            out.append(r" \cdot " if prev and _ENDS_OPERAND.fullmatch(prev) and _STARTS_OPERAND.match(tok) else " ")
        out.append(tok)
        prev, space = tok, False
    return "".join(out)


def test_latex_formulas_parse_back_to_the_rules(lib, latex_doc):
    parse_latex_lark = pytest.importorskip("sympy.parsing.latex").parse_latex_lark
    from lark import Tree
    # (a long equation's source is cut into lines at spaces: one space to TeX)
    equations = [eq.replace("\n", " ") for eq in
                 re.findall(r"^\{\\raggedright\\small \$\\displaystyle (.*?)\$\\par\}$", latex_doc, re.M | re.S)]
    rules = [(rule, expr) for topic in topics(lib) for rule, expr in topic.rules]
    assert len(equations) == len(rules)
    checked = 0
    for (rule, expr), eq in zip(rules, equations):
        lhs, rhs = eq.split(" = ", 1)
        assert lhs == (DISPLAY.get(rule.name) or r"\mathrm{%s}" % rule.name.replace("_", r"\_"))
        if r"\text" in rhs:  # a Piecewise as cases: the parser has no conditionals
            continue
        names = sorted(s.name for s in expr.free_symbols)
        parsed = parse_latex_lark(_parseable(rhs, names))
        while isinstance(parsed, Tree):  # an ambiguous parse: the alternatives are equal
            parsed = parsed.children[0]
        want = expr.xreplace({s: sympy.Symbol(_placeholder(names.index(s.name))) for s in expr.free_symbols})
        assert sympy.simplify(parsed - want) == 0, (rule.name, rhs)
        checked += 1
    assert checked >= 0.4 * len(rules)


# ---------------------------------------------------------------------------- HTML
_PROBE = """<script>
(() => {
  const maths = [...document.querySelectorAll('math')];
  const sized = maths.filter(m => { const r = m.getBoundingClientRect(); return r.width > 0 && r.height > 0; });
  const fracs = [...document.querySelectorAll('mfrac')];
  const stacked = fracs.filter(f => f.children.length === 2 && f.children[0].getBoundingClientRect().bottom
                                    <= f.children[1].getBoundingClientRect().top + 1);
  const out = document.createElement('output');
  out.id = 'probe';
  out.textContent = [maths.length, sized.length, fracs.length, stacked.length,
                     maths.every(m => m instanceof MathMLElement)].join(' ');
  document.body.appendChild(out);
})();
</script>"""

_CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                   "--disable-component-update", "--disable-sync", "--no-first-run"]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_html_is_self_contained_with_a_table_of_contents(lib):
    page = render(lib, "html")
    assert page.startswith("<!DOCTYPE html>") and "<nav" in page
    assert not re.search(r"<script|<link|src=|https?://(?!www\.w3\.org/1998/Math/MathML)", page)
    for name in lib.rules:
        assert f'<a href="#rule-{name}">' in page and f'id="rule-{name}"' in page


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Chromium (/usr/bin/chromium) is not installed")
def test_html_formulas_render_in_chromium(lib, tmp_path):
    page = render(lib, "html")
    probe = tmp_path / "probe.html"
    probe.write_text(page.replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    proc = subprocess.run([CHROMIUM, *_CHROMIUM_FLAGS, "--virtual-time-budget=5000", "--dump-dom",
                           probe.as_uri()], capture_output=True, text=True, timeout=120)
    found = re.search(r'<output id="probe">(\d+) (\d+) (\d+) (\d+) (true|false)</output>', proc.stdout)
    assert found, proc.stderr[-2000:]
    maths, sized, fracs, stacked, mathml = found.groups()
    assert int(maths) == page.count("<math ") and int(maths) > len(lib.rules)
    assert sized == maths                # every formula has a box on the page
    assert int(fracs) > 0 and stacked == fracs  # numerators laid out above denominators: real MathML
    assert mathml == "true"
    shot = tmp_path / "page.png"
    subprocess.run([CHROMIUM, *_CHROMIUM_FLAGS, "--window-size=1200,1600", f"--screenshot={shot}",
                    (tmp_path / "probe.html").as_uri()], capture_output=True, timeout=120)
    data = shot.read_bytes()
    assert png_size(data) == (1200, 1600)
    assert len(data) > 30_000  # text and formulas, not a blank page (a blank one is a few kB)


# ---------------------------------------------------------------------------- plots
def test_plot_renders_a_png(tmp_path):
    image = pytest.importorskip("matplotlib.image")
    out = tmp_path / "plot.png"
    code, text, err = run("plot", "llama2-7b", "--x", "seq_len", "--range", "512:131072", "--gpu", "h100-80g",
                          "--set", "zero_stage=3", "--set", "dp=8", "--set", "attention=eager", "--out", str(out))
    assert (code, err) == (0, "")
    # the marked value is memform solve's answer
    _, solved, _ = run("solve", "max", "seq_len", "llama2-7b", "--gpu", "h100-80g", "--set", "zero_stage=3",
                       "--set", "dp=8", "--set", "attention=eager", "--json")
    value = int(re.search(r'"value": (\d+)', solved).group(1))
    assert text == f"wrote {out}\nmax seq_len = {value:,}   (llama2-7b on h100-80g, total <= usable_memory)\n"
    assert png_size(out.read_bytes()) == (1000, 600)
    pixels = image.imread(out)
    assert pixels.std() > 0.05  # areas, lines and text, not one colour


def test_plot_breakdown_matches_the_exact_path(lib):
    import numpy as np
    from engine.present.plot import breakdown
    s = Scenario.create(lib, "llama2-7b", "h100-80g", values={"zero_stage": 3, "dp": 8})
    data = breakdown(s, "micro_batch", 1, 40)
    for x in (1, 7, 40):
        exact = s.with_values(micro_batch=x).evaluate("total")
        assert data.total[list(data.xs).index(x)] == pytest.approx(float(exact), rel=1e-12)
    assert data.best == engine.solve(s, "max", "micro_batch").value
    assert np.all(np.diff(data.total) > 0)


def test_plot_without_matplotlib_says_how_to_install(monkeypatch, tmp_path):
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    code, out, err = run("plot", "llama2-7b", "--x", "micro_batch", "--range", "1:8", "--out",
                         str(tmp_path / "x.png"))
    assert code == 2 and out == ""
    assert "needs matplotlib" in err and "pip install 'memform[plot]'" in err
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("argv, message", [
    (["--range", "512"], "--range takes LOW:HIGH"),
    (["--range", "9:3"], "1 <= LOW < HIGH"),
    (["--range", "1:8", "--set", "micro_bach=2"], "unknown name 'micro_bach'"),
    # ASCII digits only: str.isdigit accepts a superscript two, int() then refuses it
    (["--range", "\u00b2:9"], "--range takes LOW:HIGH in whole numbers"),
    (["--range", "\u07c3:9"], "--range takes LOW:HIGH in whole numbers"),  # NKo digit three
    (["--range", "0:5"], "1 <= LOW < HIGH"),
    (["--range", "1:1e30"], "--range takes LOW:HIGH in whole numbers"),
    (["--range", "a:b"], "--range takes LOW:HIGH in whole numbers"),
    (["--range", f"1:{2**41}"], "--range goes up to 1,099,511,627,776"),
    (["--range", "1:" + "9" * 5000], "--range goes up to"),  # past int()'s 4,300-digit limit
])
def test_plot_usage_errors(argv, message, tmp_path):
    code, out, err = run("plot", "llama2-7b", "--x", "micro_batch", *argv, "--out", str(tmp_path / "x.png"))
    assert code == 2 and out == "" and message in err and "Traceback" not in err
    assert len(err) < 400 and not (tmp_path / "x.png").exists()


def test_plot_title_fits_the_figure(lib, tmp_path):
    # a long preset name (rule files may define one) with dollar signs, and an error note:
    # Llama-2-70B does not fit one H100 for training at micro_batch 1 (16 B per parameter alone)
    pytest.importorskip("matplotlib")
    import dataclasses
    from engine.present.plot import plot
    s = Scenario.create(lib, "llama2-70b", "h100-80g")
    s = dataclasses.replace(s, model="my_preset_" * 20 + "$cost_$")
    fig, data = plot(s, "micro_batch", 1, 8, tmp_path / "p.png")
    assert data.best is None and data.note.startswith("does not fit")
    title = fig.axes[0].title
    box, page = title.get_window_extent(fig.canvas.get_renderer()), fig.bbox
    assert page.x0 <= box.x0 < box.x1 <= page.x1 and page.y0 <= box.y0 < box.y1 <= page.y1
    shown = title.get_text()
    assert shown.count("\n") >= 3  # the name and the note are wrapped
    assert re.sub(r"\s", "", shown).startswith("my_preset_" * 20 + "$cost_$:train,")  # literally, not mathtext
    assert re.sub(r"\s", "", shown).endswith(re.sub(r"\s", "", data.note))


# ---------------------------------------------------------------------------- notebook display
def test_rule_view_typesets_with_display_names(lib):
    view = RuleView.of(lib, "kv_heads_per_gpu")
    assert view._repr_latex_().startswith("$\\displaystyle \\mathrm{kv\\_heads\\_per\\_gpu} = ")
    assert view._repr_latex_().endswith(r"\left\lceil{\frac{a}{t}}\right\rceil$")  # heads over tp ranks
    s = Scenario.create(lib, "llama2-70b", values={"tp": 8})
    assert RuleView.of(s, "kv_heads_per_gpu").expr == 1  # 8 KV heads over 8 ranks
    assert str(RuleView.of(lib, "attention_params")) == "attention_params = 4*hidden_size**2"


def test_estimate_html_table(lib):
    est = engine.estimate(Scenario.create(lib, "llama2-7b", "h100-80g", values={"zero_stage": 3, "dp": 8}))
    page = est._repr_html_()
    assert page.startswith("<table>") and page.endswith("</table>")
    for name, value in est.components.items():
        assert f"<td><code>{name}</code></td><td>{int(sympy.ceiling(value)):,}</td>" in page
    assert "<td><code>total</code></td>" in page and "fits" in page
    assert page.count("<math ") == len(est.components) + 1


def test_solve_result_latex(lib):
    s = Scenario.create(lib, "llama2-70b", values={"n_params": 70 * 10**9, "zero_stage": 3,
                                                   "capacity": 80 * 10**9, "optimizer_step_bytes": 0})
    tex = engine.solve(s, "min", "dp", target="model_states")._repr_latex_()
    assert tex.startswith("$$\\begin{array}{l}") and tex.endswith("\\end{array}$$")
    assert "\\min N = 14" in tex                         # LIT-03: 1120 GB / 80 GB -> 14
    # Rajbhandari et al. 2020: ZeRO-3 keeps 16 P / N bytes of model states per rank, so N >= 16 P / C,
    # typeset as math (sympy's LaTeX), not as monospace text
    assert "\\text{closed form: } N \\geq \\frac{16 P}{C} \\\\" in tex and "\\mathtt" not in tex


def test_an_output_folder_that_cannot_be_made_is_refused_before_rendering(tmp_path, monkeypatch):
    # the fuzzer (test_fuzz, command lines): `docs --out /proc/x` rendered the whole reference
    # (seconds on a loaded machine) before finding it could not write there
    import engine.present.docs
    monkeypatch.setattr(engine.present.docs, "render", lambda *a, **k: pytest.fail("rendered before the folder was made"))
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, out, err = run("docs", "--out", str(blocker / "sub"))
    assert code == 2 and out == "" and "cannot write" in err
