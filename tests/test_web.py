"""memform web: the calculator page, generated from the rules (issue 17).

The browser tests open the generated page in headless Chromium (Playwright driving Debian's
/usr/bin/chromium, which .ci/run installs), drive configurations through its form and hold
every figure on the page to ``memform estimate --json`` for the same configuration: whole
bytes exactly as the JSON has them, GB and GiB as the command line formats the exact values
(:func:`engine.answers.report.gb`, ``gib``), the fit verdicts, and an error exactly where the
command line refuses the configuration.
"""
from __future__ import annotations

import html
import io
import json
import math
import os
import random
import re
from fractions import Fraction
from pathlib import Path

import pytest
import sympy

from types import SimpleNamespace

from engine.answers import quick
from engine.answers.report import gb, gib, scaled, whole_bytes
from engine.compile.columns import Atom, Polynomials, text as poly_text
from engine.compile.exact import bindings
from engine.compile.outline import ALWAYS_SHOWN_SIZE, OPAQUE_RULES, SHOWN_INPUTS, SIZES, TOTAL_OPAQUE
from engine.present.display import mathml
from engine.cli import main
from engine.compile.exact import Evaluator, _compiled

CHROMIUM = "/usr/bin/chromium"
#: as the machine's notes have it: no sandbox as root, no background connections (refused here)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
#: what the page's formula column says where the command line needs sympy for it
NOT_A_POLYNOMIAL = "(not a polynomial here: memform estimate prints it)"
#: the page's weight limit (issue 17)
MAX_PAGE_BYTES = 300_000


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    code, out, err = run("web", "--out", str(folder))
    assert (code, err) == (0, ""), out
    return folder


def _no_fetch(text: str) -> None:
    text = text.replace("http://www.w3.org/1998/Math/MathML", "")  # MathML's namespace: a name, not a fetch
    assert not re.search(r"https?://|//cdn|fetch\(|XMLHttpRequest|import\(|WebSocket", text)


def _script(folder: Path) -> str:
    html = (folder / "index.html").read_text()
    return html[html.index("<script>\n") + len("<script>\n"):html.rindex("</script>")]


def test_page_is_one_file_within_its_weight_and_fetches_nothing(site):
    assert [p.name for p in site.iterdir()] == ["index.html"]
    weight = (site / "index.html").stat().st_size
    assert weight <= MAX_PAGE_BYTES, f"the page weighs {weight:,} bytes"
    html = (site / "index.html").read_text()
    assert not re.findall(r'(?:src|href)="([^"#]+)"', html)  # its script and style inside it
    _no_fetch(html)


def test_separate_files_show_the_same(tmp_path, site, browser):
    """--separate: the script and the style beside the page (a host that refuses inline
    scripts), the same page."""
    code, _, err = run("web", "--out", str(tmp_path), "--separate")
    assert (code, err) == (0, "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html", "memform.css", "memform.js"]
    html = (tmp_path / "index.html").read_text()
    assert re.findall(r'(?:src|href)="([^"#]+)"', html) == ["memform.css", "memform.js"]
    assert (tmp_path / "memform.js").read_text().strip() == _script(site).strip()
    assert sum((tmp_path / n).stat().st_size for n in ("index.html", "memform.js", "memform.css")) <= MAX_PAGE_BYTES
    for text in (html, (tmp_path / "memform.js").read_text(), (tmp_path / "memform.css").read_text()):
        _no_fetch(text)
    address = "#model=llama2-70b&gpu=h100-80g&zero_stage=3&dp=8"
    pages = [_open(browser, (folder / "index.html").as_uri() + address) for folder in (site, tmp_path)]
    one, other = (_figures(pg) for pg in pages)
    for pg in pages:
        pg.close()
    assert one == other and one["state"] == "ok"


def test_page_program_is_generated_not_written(site):
    """The arithmetic is the compiler's: the hand-written part of the script computes with
    Q (the rationals) only to check domains and format figures, never a rule."""
    script = _script(site)
    generated, page = script.split("const DATA = ", 1)
    assert "function program(" in generated and "function program(" not in page
    page_code = page.split("\n", 1)[1]  # past DATA
    rules = _compiled()["rules"]
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", page_code))
    # the rule names the page mentions are the figures it labels, never one it computes itself
    # (gpu_memory_utilization, a rule since vLLM's default changed, only in serve's message)
    assert words & set(rules) <= {"total", "peak", "gpu_memory_utilization"}


def test_title_is_text_not_markup(tmp_path):
    code, _, err = run("web", "--out", str(tmp_path), "--title", '<script>alert("x")</script> & co')
    assert (code, err) == (0, "")
    html = (tmp_path / "index.html").read_text()
    assert "<script>alert" not in html and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; co" in html


def test_bad_out_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, out, err = run("web", "--out", str(blocker / "site"))
    assert code == 2 and "cannot write" in err and "Traceback" not in err


# ---------------------------------------------------------------------------- in the browser
def _browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("Chromium (/usr/bin/chromium) is not installed")
    sync = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    return sync


@pytest.fixture(scope="module")
def browser():
    sync = _browser()
    with sync.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def _open(browser, url: str):
    pg = browser.new_page()
    errors = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(url)
    try:
        pg.wait_for_selector("body[data-ready=true]", timeout=30_000)
    except Exception:
        raise AssertionError(f"the page did not start: {errors}") from None
    pg.errors = errors
    return pg


@pytest.fixture(scope="module")
def page(site, browser):
    pg = _open(browser, (site / "index.html").as_uri())
    yield pg
    pg.close()


def _figures(pg) -> dict:
    """Every figure the page shows: {json path: text}, and the GB and GiB cells."""
    return pg.evaluate("""() => {
        const out = {json: {}, gb: {}, gib: {}, state: document.body.dataset.state,
                     error: document.getElementById('error').textContent};
        if (out.state !== 'ok') return out;
        for (const e of document.querySelectorAll('[data-json]'))
            for (const path of e.dataset.json.split(' ')) out.json[path] = e.dataset.value ?? e.textContent;
        for (const e of document.querySelectorAll('[data-gb]')) out.gb[e.dataset.gb] = e.textContent;
        for (const e of document.querySelectorAll('[data-gib]')) out.gib[e.dataset.gib] = e.textContent;
        return out;
    }""")


def _as_json(shown: dict) -> dict:
    """The page's figures as ``estimate --json`` writes them: whole bytes without separators,
    the verdicts as they are."""
    return {k: (v.replace(",", "") if k not in ("fits", "fits_at_peak") else v) for k, v in shown["json"].items()}


def _expected(data: dict) -> dict:
    """The figures of ``estimate --json`` as the page labels them."""
    out = {}

    def shown(value):  # a byte figure of 10^15 or more in scientific notation, as the table prints it
        big = isinstance(value, (int, float)) and abs(value) >= 10**15
        return scaled(math.ceil(value), 1, 0) if big else str(value)

    for key in ("total_bytes", "capacity_bytes", "usable_bytes"):
        if data[key] is not None:
            out[key] = shown(data[key])
    for group in ("components", "rules"):
        for name, value in data[group].items():
            out[f"{group}.{name}"] = shown(value)
    for key in ("fits", "fits_at_peak"):
        if data[key] is not None:
            out[key] = "true" if data[key] else "false"
    return out


def _drive(pg, model: str, gpu: str | None, sets: list[tuple[str, str]]) -> None:
    """Set a configuration through the form, as a user would: the selects and text fields."""
    pg.click("#reset")
    pg.select_option("#model", model)
    pg.select_option("#gpu", gpu or "")
    for name, value in sets:
        field = f"#c-{name}"
        group = f'details[data-controls~="{name}"]'
        if pg.evaluate("(sel) => { const d = document.querySelector(sel); return !!d && !d.open; }", group):
            pg.click(f"{group} > summary")  # open the group, as a user would
        if pg.evaluate("(id) => document.querySelector(id).tagName", field) == "SELECT":
            pg.select_option(field, value)
        else:
            pg.fill(field, value)


def _set_args(sets) -> list[str]:
    """The command line's --set arguments of the (name, value) pairs the form was given."""
    return [arg for name, value in sets for arg in ("--set", f"{name}={value}")]


def _answer(argv: list[str], shown: dict, refuses=lambda code: code != 0):
    """The command line's JSON answer and exit code for ``argv``; (None, code) where it
    refuses, which the page (``shown``) must do too, and where it answers, the page too."""
    code, out, _ = run(*argv)
    where = " ".join(argv)
    if refuses(code):
        assert shown["state"] == "error", f"{where}: the command line refuses ({out.strip()[:300]}), the page answers"
        return None, code
    assert shown["state"] == "ok", f"{where}: the page refuses: {shown.get('error', '')!r}"
    return json.loads(out), code


def _compare(pg, model, gpu, sets):
    argv = ["estimate", model, *(["--gpu", gpu] if gpu else []), "--json"]
    argv += _set_args(sets)
    shown = _figures(pg)
    where = " ".join(argv)
    data, _ = _answer(argv, shown)
    if data is None:
        return "error"
    assert _as_json(shown) == _expected(data), where
    # the formula column: the command line's, written out from the same trees (None where it
    # is not a polynomial and sympy writes it)
    pg.wait_for_selector("body[data-formulas=done]")
    page_column = pg.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll('[data-formula]'))
        .map(e => [e.dataset.formula, e.dataset.text ?? e.textContent]))""")
    compiled = _compiled()
    values = quick._values(compiled, SimpleNamespace(model=model, gpu=gpu, capacity=None,
                                                     sets=[f"{n}={v}" for n, v in sets]))
    column = quick._column(compiled, values, {n: None for n in compiled["components"]}, atoms=True)
    if column is None:
        assert set(page_column.values()) == {NOT_A_POLYNOMIAL}, f"{where}: the page writes {page_column}"
    else:
        assert page_column == column, where
        shown["formulas"] = True
        # typeset as the reference typesets the same polynomials (display.mathml, sympy's printer)
        page_math = pg.evaluate("""() => Object.fromEntries(Array.from(document.querySelectorAll('[data-formula]'))
            .map(e => [e.dataset.formula, e.innerHTML]))""")
        assert page_math == _column_mathml(compiled, values), where
    # GB and GiB as the command line formats the exact values
    rules = [r for r in shown["gb"] if r != "capacity"]
    exact = Evaluator(model, rules, gpu=gpu, values={n: _typed(n, v) for n, v in sets})()
    if "capacity" in shown["gb"]:
        exact["capacity"] = Fraction(data["capacity_bytes"])
    for rule in shown["gb"]:
        assert (shown["gb"][rule], shown["gib"][rule]) == (gb(exact[rule]), gib(exact[rule])), f"{where}: {rule}"
    # the sizes under the table, as estimate prints them (the one always, the rest where a formula names them)
    if column is not None:
        sizes = Evaluator(model, [n for n in SIZES if n in compiled["rules"]], gpu=gpu,
                          values={n: _typed(n, v) for n, v in sets})()
        expected = [f"{n} = {scaled(whole_bytes(v), 1, 0)}" for n, v in sizes.items()
                    if n == ALWAYS_SHOWN_SIZE or any(re.search(rf"\b{n}\b", f) for f in column.values())]
        assert pg.evaluate("() => Array.from(document.querySelectorAll('[data-size]')).map(e => e.textContent)") == expected
    return "ok" if shown.get("formulas") else "ok (formulas by sympy)"


def _column_mathml(compiled: dict, values: dict) -> dict:
    """Each component's formula (and the total's) as presentation MathML, through the
    reference's printer, from the polynomials the command line's column is written from."""
    fixed, pins = bindings(compiled, values)
    out = {}
    for name, opaque in [*((n, OPAQUE_RULES) for n in compiled["components"]), ("total", TOTAL_OPAQUE)]:
        poly = Polynomials(compiled, fixed, pins, SHOWN_INPUTS, opaque, atoms=True).rule(name)
        if any(isinstance(n, Atom) for m in poly for n, _ in m):
            out[name] = poly_text(poly)  # a ceil, Max or Min in it: the page shows the column's text
            continue
        expr = sympy.Add(*[sympy.Rational(c.numerator, c.denominator) * sympy.Mul(*[sympy.Symbol(n) ** e for n, e in m])
                           for m, c in poly.items()])
        out[name] = html.unescape(mathml(expr, display="inline"))
    return out


def _typed(name: str, text: str):
    """A value as the exact evaluator takes it: a choice name, or an exact number."""
    compiled = _compiled()
    if name in compiled["options"]:
        return text
    return Fraction(text)


#: values a user would try for the workload and layout (whole numbers in their domains, and
#: some outside them, which both must refuse)
POOLS = {
    "micro_batch": ["1", "2", "4", "8", "16", "0"],
    "seq_len": ["512", "1024", "2048", "4096", "8192", "32768", "3000"],
    "dp": ["1", "2", "4", "8", "64", "0"],
    "tp": ["1", "2", "4", "8", "3"],
    "pp": ["1", "2", "4", "8"],
    "cp": ["1", "2"],
    "ep": ["1", "2", "8"],
    "lora_rank": ["8", "16", "64"],
}


def _random_value(rng, name, compiled):
    if name in compiled["options"]:
        return rng.choice(compiled["options"][name][0])
    if name in POOLS:
        return rng.choice(POOLS[name])
    _, integer, lower, strict, upper = compiled["inputs"][name]
    low = Fraction(0) if lower is None else Fraction(lower)
    if upper is not None and upper <= 1:
        return rng.choice(["0", "0.05", "0.1", "0.5", "1"])
    if integer:
        return str(rng.choice([int(low) + (1 if strict else 0), int(low) + 1, 2, 8, 128, 4096]))
    return rng.choice(["0", "0.5", "1", "2", "1.25"])


def _configurations(n: int, seed: int):
    compiled = _compiled()
    rng = random.Random(seed)
    models = sorted(name for kind, name in compiled["presets"] if kind == "model")
    gpus = sorted(name for kind, name in compiled["presets"] if kind == "gpu")
    primary = ["mode", "finetune", "stack", "precision", "optimizer", "zero_stage", "recompute", "micro_batch",
               "seq_len", "dp", "tp", "pp", "cp", "ep", "lora_rank", "weight_dtype", "kv_dtype", "attention"]
    others = sorted(n for n in (*compiled["options"], *compiled["inputs"])
                    if n not in primary and n != "capacity" and n not in dict(_compiled()["presets"][("gpu", gpus[0])]))
    for _ in range(n):
        names = rng.sample(primary, rng.randint(0, 5)) + rng.sample(others, rng.randint(0, 3))
        gpu = rng.choice(gpus) if rng.random() < 0.9 else None
        yield rng.choice(models), gpu, [(name, _random_value(rng, name, compiled)) for name in names]


def test_two_hundred_configurations_match_estimate_json(page, browser, site):
    """Issue 17's acceptance: 200 random configurations through the form, every figure on the
    page equal to ``memform estimate --json``'s (and the page refusing what it refuses)."""
    outcomes = []
    for model, gpu, sets in _configurations(200, seed=1717):
        _drive(page, model, gpu, sets)
        outcomes.append(_compare(page, model, gpu, sets))
    assert not page.errors
    print("outcomes", {o: outcomes.count(o) for o in set(outcomes)})
    # the draw covers answers with the formula column written out, answers whose column
    # sympy writes, and refusals
    assert outcomes.count("ok") >= 100 and outcomes.count("error") >= 10, outcomes
    timings = page.evaluate("window.memformTimings")
    updates = sorted(timings["updates"])
    firsts, own = [], []
    for _ in range(5):  # the first render of a fresh load, from the start of navigation
        fresh = _open(browser, (site / "index.html").as_uri() + "#model=llama2-7b&gpu=h100-80g")
        first, start = fresh.evaluate("[window.memformTimings.firstRender, window.memformTimings.scriptStart]")
        firsts.append(first)
        own.append(first - start)  # the page's own work: from its script's start
        fresh.close()
    report = {"first_render_ms": round(sorted(firsts)[2], 1), "own_work_ms": round(sorted(own)[2], 1),
              "update_median_ms": round(updates[len(updates) // 2], 2),
              "update_p95_ms": round(updates[int(len(updates) * 0.95)], 2), "updates": len(updates),
              "formula_column_median_ms": round(sorted(timings["formulas"])[len(timings["formulas"]) // 2], 2),
              "formula_columns": len(timings["formulas"])}
    print("memform web timings:", json.dumps(report))
    if os.environ.get("MEMFORM_WEB_TIMINGS"):
        Path(os.environ["MEMFORM_WEB_TIMINGS"]).write_text(json.dumps(report) + "\n")


def test_formula_column_decides_a_max_of_one_term_as_the_command_line(page):
    """max(c m, c' m + c0) with m in whole positive names (micro_batch * seq_len >= 1) is
    decided where c - c' + c0 >= 0, on the page as in columns.Polynomials (CI's seed 1717 drew
    it: the page declined a column the command line writes)."""
    model, sets = "qwen3-next-80b-a3b", [("attention_type", "gqa"), ("deltanet_chunk_size", "2"), ("mamba_dt_rank", "1")]
    _drive(page, model, None, sets)
    assert _compare(page, model, None, sets) == "ok"
    assert "micro_batch*seq_len" in page.evaluate("document.querySelector('[data-formula=activations]').dataset.text")


def test_link_reproduces_the_answer(site, page):
    """The whole state is in the address: opening it again shows the same figures."""
    _drive(page, "llama2-70b", "h100-80g", [("zero_stage", "3"), ("dp", "8"), ("seq_len", "4096")])
    before = _figures(page)
    url = page.url
    assert "zero_stage=3" in url and "model=llama2-70b" in url
    page.goto("about:blank")
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]")
    assert _figures(page) == before
    code, out, _ = run("estimate", "llama2-70b", "--gpu", "h100-80g", "--set", "zero_stage=3", "--set", "dp=8",
                       "--set", "seq_len=4096", "--json")
    assert _as_json(before) == _expected(json.loads(out))


def test_a_rule_file_of_ones_own_makes_the_page(tmp_path, browser):
    """``--rules`` compiles a user's override into the page: its figures are the command
    line's with the same file."""
    rules = tmp_path / "mine.mem"
    rules.write_text('override rule overhead : bytes = 3 GiB "a flat 3 GiB for the framework"\n')
    folder = tmp_path / "site"
    code, out, err = run("web", "--out", str(folder), "--rules", str(rules))
    assert (code, err) == (0, ""), out
    pg = _open(browser, (folder / "index.html").as_uri() + "#model=llama2-7b&gpu=a100-80g&micro_batch=2")
    shown = _figures(pg)
    pg.close()
    assert shown["json"]["components.overhead"] == f"{3 * 2**30:,}"
    code, out, _ = run("estimate", "llama2-7b", "--gpu", "a100-80g", "--rules", str(rules), "--set", "micro_batch=2", "--json")
    assert code == 0
    assert _as_json(shown) == _expected(json.loads(out))


def _solved(pg) -> dict:
    return pg.evaluate("""() => {
        const box = document.getElementById('solved');
        const out = {state: box.dataset.state};
        for (const e of box.querySelectorAll('[data-solve]')) out[e.dataset.solve] = e.textContent;
        return out;
    }""")


SOLVES = (("max", "micro_batch"), ("max", "seq_len"), ("min", "dp"), ("min", "tp"))


def test_solve_buttons_match_memform_solve(page):
    """The page's solve buttons give what ``memform solve ... --json`` gives: the value, the
    one beyond it and the bytes at both (or a refusal where it refuses)."""
    rng = random.Random(2024)
    compiled = _compiled()
    models = ["llama2-7b", "llama2-70b", "mistral-7b", "qwen2.5-7b", "llama3.1-8b", "mixtral-8x7b"]
    models = [m for m in models if ("model", m) in compiled["presets"]]
    outcomes = []
    for _ in range(10):
        model, gpu = rng.choice(models), rng.choice(["h100-80g", "a100-40g", "rtx4090", "h200"])
        if ("gpu", gpu) not in compiled["presets"]:
            continue
        sets = [("zero_stage", rng.choice(["0", "1", "3"])), ("dp", rng.choice(["1", "8", "32"])),
                ("recompute", rng.choice(["none", "full"])), ("seq_len", rng.choice(["2048", "4096"]))]
        _drive(page, model, gpu, sets)
        for direction, unknown in SOLVES:
            page.click(f"button[data-direction={direction}][data-unknown={unknown}]")
            shown = _solved(page)
            argv = ["solve", direction, unknown, model, "--gpu", gpu, "--json"]
            argv += _set_args((name, value) for name, value in sets if name != unknown)
            # the page solves with every other setting as it is, the unknown's own setting aside
            where = " ".join(argv)
            data, _ = _answer(argv, shown)
            if data is None:
                outcomes.append("error")
                continue
            expected = {"value": str(data["value"]), "at_value": str(data["value"]),
                        "at_bytes": f"{data['bytes_at_value']:,}"}
            if data["next_value"] is not None:
                expected.update(next_value=str(data["next_value"]), next_bytes=f"{data['bytes_at_next']:,}")
            assert {k: v for k, v in shown.items() if k != "state"} == expected, where
            outcomes.append("ok")
    assert outcomes.count("ok") >= 20, outcomes


@pytest.mark.parametrize("model, gpu, sets", [
    ("llama2-7b", "h100-80g", []),
    ("llama2-7b", "h100-80g", [("zero_stage", "3"), ("dp", "8")]),
    ("llama2-7b", None, [("capacity", "80GB")]),
    ("llama2-70b", "h100-80g", [("capacity", "80GB"), ("mode", "infer")]),
    ("mistral-7b", "a100-80g", [("finetune", "qlora"), ("micro_batch", "4")]),
])
def test_verdict_is_the_command_lines(page, model, gpu, sets):
    """The fit verdict reads as the last line of ``memform estimate`` does."""
    _drive(page, model, gpu, sets)
    argv = ["estimate", model, *(["--gpu", gpu] if gpu else [])]
    argv += _set_args(sets)
    code, out, _ = run(*argv)
    assert code == 0
    line = next(ln for ln in out.splitlines() if ln.startswith(("fits ", "does not fit ")))
    assert page.inner_text("#verdict") == line


def _served(pg) -> dict:
    return pg.evaluate("""() => {
        const out = {state: document.body.dataset.state};
        for (const e of document.querySelectorAll('#serving [data-serve]')) out[e.dataset.serve] = e.dataset.value ?? e.textContent;
        return out;
    }""")


#: the engines' own knobs, as a user of each would set them (and some values they refuse)
SERVE_POOLS = {
    "vllm": {"gpu_memory_utilization": ["0.8", "0.9", "0.95", "1.5"], "max_num_seqs": ["64", "256"],
             "block_size": ["16", "32"], "enforce_eager": ["true", "false"], "kv_dtype": ["auto", "fp8_e4m3"]},
    "sglang": {"mem_fraction_static": ["0.8", "0.88"], "page_size": ["1", "16"], "kv_dtype": ["auto", "fp8_e4m3"]},
    "trtllm": {"free_gpu_memory_fraction": ["0.85", "0.9"], "tokens_per_block": ["32", "64"],
               "kv_dtype": ["auto", "fp8_e4m3"]},
}


def test_serve_matches_memform_serve_json(page):
    """The serving workload: every figure of ``memform serve --engine E --json`` (the engine's
    breakdown, blocks, tokens, concurrency and the rest, as JSON numbers), whether one request
    fits, and a refusal exactly where the command line refuses."""
    rng = random.Random(4242)
    compiled = _compiled()
    models = sorted(name for kind, name in compiled["presets"] if kind == "model")
    gpus = ["h100-80g", "a100-80g", "h200", "l40s", "rtx4090"]
    outcomes = []
    for _ in range(40):
        engine = rng.choice(sorted(SERVE_POOLS))
        model, gpu = rng.choice(models), rng.choice([g for g in gpus if ("gpu", g) in compiled["presets"]])
        knobs = SERVE_POOLS[engine]
        sets = [(n, rng.choice(knobs[n])) for n in rng.sample(sorted(knobs), rng.randint(0, 2))]
        sets += [("tp", rng.choice(["1", "2", "4", "8"]))] if rng.random() < 0.6 else []
        sets += [("seq_len", rng.choice(["4096", "8192", "32768"]))] if rng.random() < 0.5 else []
        sets = [(n, v) for n, v in sets if n in compiled["inputs"] or n in compiled["options"]]
        _drive(page, model, gpu, sets)
        page.select_option("#workload", engine)
        shown = _served(page)
        argv = ["serve", model, "--engine", engine, "--gpu", gpu, "--json"]
        argv += _set_args(sets)
        where = " ".join(argv)
        data, code = _answer(argv, shown, refuses=lambda code: code == 2)  # 1: the answer, one request not served
        if data is None:
            outcomes.append("error")
            continue
        expected = {"max_model_len": json.dumps(data["max_model_len"]),
                    **{f"rules.{n}": json.dumps(v) for n, v in data["rules"].items()},
                    "fits": "true" if code == 0 else "false"}
        assert {k: v for k, v in shown.items() if k != "state"} == expected, where
        outcomes.append("ok" if code == 0 else "does not fit")
    assert outcomes.count("ok") >= 15 and outcomes.count("error") >= 2, outcomes
    page.select_option("#workload", "")


def test_serve_replicates_kv_heads_as_memform_serve(page):
    """Where tp exceeds the key/value heads the engines replicate them: the page serves
    Qwen3-30B-A3B (4 KV heads) at tp 8 as ``memform serve`` does, and refuses tp 3 with its
    words."""
    compiled = _compiled()
    if ("model", "qwen3-30b-a3b") not in compiled["presets"]:
        pytest.skip("no qwen3-30b-a3b preset")
    for tp, refused in (("8", False), ("3", True)):
        sets = [("tp", tp)]
        _drive(page, "qwen3-30b-a3b", "h100-80g", sets)
        page.select_option("#workload", "vllm")
        shown = _served(page)
        argv = ["serve", "qwen3-30b-a3b", "--engine", "vllm", "--gpu", "h100-80g", "--json", *_set_args(sets)]
        data, code = _answer(argv, shown, refuses=lambda code: code == 2)
        assert (data is None) == refused, tp
        if data is not None:
            expected = {"max_model_len": json.dumps(data["max_model_len"]),
                        **{f"rules.{n}": json.dumps(v) for n, v in data["rules"].items()},
                        "fits": "true" if code == 0 else "false"}
            assert {k: v for k, v in shown.items() if k != "state"} == expected, tp
    page.select_option("#workload", "")


def test_serving_solves_match_memform_serve(page):
    """The serving solves: the smallest tp and the longest max_model_len for C requests, and
    the values tried with their concurrency, as ``memform serve --min-tp-for C`` and
    ``--max-len-for C`` give them (or a refusal where they refuse)."""
    rng = random.Random(77)
    cases = [("llama3.1-70b", "h100-80g", "vllm"), ("llama3.1-8b", "a100-40g", "sglang"),
             ("mistral-7b", "l40s", "trtllm"), ("qwen2.5-72b", "h200", "vllm"), ("llama2-7b", "rtx4090", "vllm")]
    compiled = _compiled()
    outcomes = []
    for model, gpu, engine in cases:
        if ("model", model) not in compiled["presets"] or ("gpu", gpu) not in compiled["presets"]:
            continue
        for question, flag in (("min-tp", "--min-tp-for"), ("max-len", "--max-len-for")):
            requests = rng.choice(["1", "8", "32", "200"])
            sets = [("seq_len", rng.choice(["4096", "16384"]))] if question == "min-tp" else [("tp", rng.choice(["1", "2", "4"]))]
            _drive(page, model, gpu, sets)
            page.select_option("#workload", engine)
            page.fill("#requests", requests)
            page.click(f"button[data-serve-question={question}]")
            shown = page.evaluate("""() => ({state: document.getElementById('serve-solved').dataset.state,
                value: document.querySelector('[data-serve-solve=value]')?.textContent,
                tried: Array.from(document.querySelectorAll('[data-serve-tried]')).map(e => e.dataset.serveTried)})""")
            argv = ["serve", model, "--engine", engine, "--gpu", gpu, flag, requests, "--json"]
            argv += _set_args(sets)
            where = " ".join(argv)
            data, _ = _answer(argv, shown)
            if data is None:
                outcomes.append("error")
                continue
            solve = data["solve"]
            assert shown["value"] == str(solve["value"]), where
            assert shown["tried"] == [f"{v} {json.dumps(c)}" for v, c in solve["tried"]], where
            outcomes.append("ok")
    page.select_option("#workload", "")
    assert outcomes.count("ok") >= 5, outcomes


CONFIGS = Path(__file__).resolve().parent / "configs"


def test_config_json_models(tmp_path, browser):
    """``--config`` makes a config.json a model of the page, read by the same reader as
    ``memform estimate CONFIG``: the page's figures are that command's, pins of rules (a
    config's head_dim, sliding_window_layers) included."""
    files = [CONFIGS / n for n in ("llama-2-7b.json", "gemma-2-9b-it.json", "deepseek-v2-lite.json",
                                   "granite-4.0-h-tiny.json")]
    folder = tmp_path / "site"
    argv = ["web", "--out", str(folder)]
    for f in files:
        argv += ["--config", str(f)]
    code, out, err = run(*argv)
    assert code == 0, err
    pg = _open(browser, (folder / "index.html").as_uri())
    compared = 0
    for f in files:
        for sets in ([], [("micro_batch", "4"), ("seq_len", "4096")], [("zero_stage", "3"), ("dp", "8")],
                     [("mode", "infer"), ("micro_batch", "8")]):
            _drive(pg, str(f), "h100-80g", sets)
            shown = _figures(pg)
            argv = ["estimate", str(f), "--gpu", "h100-80g", "--json"]
            argv += _set_args(sets)
            data, _ = _answer(argv, shown)
            if data is None:
                continue
            assert _as_json(shown) == _expected(data), " ".join(argv)
            compared += 1
    pg.close()
    assert compared >= 12


def test_keyboard_alone_reaches_every_part(site, browser):
    """Keyboard access: a select changed with the arrow keys, a group of settings opened with
    Enter on its summary and a field typed into, a solve button pressed with Space; each
    updates the answer."""
    pg = _open(browser, (site / "index.html").as_uri() + "#model=llama2-7b&gpu=h100-80g")
    before = _figures(pg)["json"]["total_bytes"]
    pg.focus("#c-zero_stage")
    pg.keyboard.press("ArrowDown")  # 0 -> 1
    assert pg.evaluate("document.getElementById('c-zero_stage').value") == "1"
    pg.focus("#c-dp")
    pg.keyboard.press("Control+A")
    pg.keyboard.type("8")
    after = _figures(pg)["json"]["total_bytes"]
    assert after != before and "zero_stage=1" in pg.url and "dp=8" in pg.url
    group = pg.locator("details[data-controls~=alloc_margin] > summary")
    group.focus()
    pg.keyboard.press("Enter")
    assert pg.evaluate("document.querySelector('details[data-controls~=alloc_margin]').open")
    pg.focus("#c-alloc_margin")
    pg.keyboard.press("Control+A")
    pg.keyboard.type("0")
    assert _figures(pg)["json"]["total_bytes"] != after and "alloc_margin=0" in pg.url
    pg.focus("button[data-unknown=micro_batch]")
    pg.keyboard.press("Space")
    assert pg.evaluate("document.getElementById('solved').dataset.state") == "ok"
    pg.close()


def test_page_code_is_shipped_line_by_line():
    # memform web ships page.js without its comment lines and indentation (engine/present/web.py):
    # sound while no string or template literal of it spans lines
    from engine.present.web import ASSETS
    for number, line in enumerate((ASSETS / "page.js").read_text(encoding="utf-8").splitlines(), 1):
        code = line.replace("\\\\", "").replace("\\`", "")
        assert code.count("`") % 2 == 0, f"page.js:{number}: a template literal spans lines"
        assert not code.rstrip().endswith("\\"), f"page.js:{number}: a string continues on the next line"
