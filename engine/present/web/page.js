// ---------------------------------------------------------------------------------------
// The page (hand-written, part of memform's package): reads DATA, checks each value as
// `memform estimate` does, calls program() and writes the figures as the command line
// prints them.  No formula is written here: every byte count comes from program().
(() => {
  const D = DATA;
  // the declarations come as rows of D.fields (the page's weight is a budget): objects from here on
  for (const kind of ["inputs", "options"]) {
    for (const name of Object.keys(D[kind])) {
      D[kind][name] = Object.fromEntries(D.fields[kind].map((field, i) => [field, D[kind][name][i]]));
    }
  }
  // a preset's values come as [index in D.presetNames, value, ...]
  for (const kind of ["models", "gpus"]) {
    for (const [name, row] of Object.entries(D[kind])) {
      const values = {};
      for (let i = 0; i < row.length; i += 2) values[D.presetNames[row[i]]] = row[i + 1];
      D[kind][name] = values;
    }
  }
  const timings = { scriptStart: performance.now(), firstRender: null, updates: [], solves: [], formulas: [] };
  window.memformTimings = timings;

  // ------------------------------------------------------------------ exact numbers
  const exact = (text) => {  // "n" or "n/d", as the generator writes numbers
    const i = text.indexOf("/");
    return i < 0 ? Q.int(BigInt(text)) : Q.frac(BigInt(text.slice(0, i)), BigInt(text.slice(i + 1)));
  };
  const MAX_VALUE = BigInt(D.maxValue);
  const MAX_FIGURE = exact(D.maxFigure);
  const ZERO = Q.int(0n);
  const abs = (q) => (q.n < 0n ? { n: -q.n, d: q.d } : q);
  const bits = (x) => (x < 0n ? -x : x).toString(2).length;

  class ValueError extends Error {}

  // a number as written in a form field: decimal, optional exponent, optional byte unit
  const NUMBER = /^\s*(-)?\s*(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?\s*([A-Za-z]+)?\s*$/;
  function readNumber(name, text) {
    const m = NUMBER.exec(text);
    if (!m) throw new ValueError(`'${name}' = '${text}': not a number`);
    const [whole, frac = ""] = m[2].split(".");
    let n = BigInt((whole || "0") + frac);
    let d = 10n ** BigInt(frac.length);
    const e = m[3] ? parseInt(m[3], 10) : 0;
    if (n !== 0n && Math.abs(e) > 200) throw new ValueError(`'${name}' = '${text}': out of range`);
    if (n !== 0n) { if (e >= 0) n *= 10n ** BigInt(e); else d *= 10n ** BigInt(-e); }
    let q = Q.frac(m[1] ? -n : n, d);
    let dim = 0;
    if (m[4] !== undefined) {
      if (!Object.prototype.hasOwnProperty.call(D.units, m[4])) {
        throw new ValueError(`'${name}' = '${text}': unknown unit '${m[4]}' (${Object.keys(D.units).join(", ")})`);
      }
      q = Q.mul(q, exact(D.units[m[4]]));
      dim = 1;
    }
    return { q, dim };
  }

  const domainText = (decl) => {
    const parts = decl.integer ? ["a whole number"] : [];
    if (decl.lower !== null) parts.push(`${decl.strict ? ">" : ">="} ${decl.lower}`);
    if (decl.upper !== null) parts.push(`<= ${decl.upper}`);
    return parts.join(" and ");
  };

  // a value for `name` as engine/compile/trees.py's validate accepts it, else a ValueError
  function validate(name, text) {
    const option = D.options[name];
    if (option) {
      if (option.numeric && !option.choices.includes(text) && NUMBER.test(text)) {
        // a numeric option (zero_stage) takes a number that is one of its choices: 3.0 is 3
        const { q, dim } = readNumber(name, text);
        if (dim === 0 && q.d === 1n && option.choices.includes(q.n.toString())) return q.n.toString();
      }
      if (!option.choices.includes(text)) {
        throw new ValueError(`'${name}' cannot be '${text}': choices are ${option.choices.join(", ")}`);
      }
      return text;
    }
    const decl = D.inputs[name];
    if (!decl) throw new ValueError(`unknown name '${name}'`);
    const { q, dim } = readNumber(name, text);
    if (bits(q.n) > 0 && (abs(q).n > MAX_VALUE * q.d || q.d > MAX_VALUE)) {
      throw new ValueError(`'${name}' = '${text}': too large`);
    }
    if (dim !== decl.dim && !(decl.dim === 1 && dim === 0)) {
      throw new ValueError(`'${name}' takes ${decl.dim === 1 ? "bytes" : "a plain number"}, not '${text}'`);
    }
    const bad = () => new ValueError(`'${name}' cannot be ${text.trim()}: ${domainText(decl)}`);
    if (decl.integer && q.d !== 1n) throw bad();
    if (decl.lower !== null && !(decl.strict ? Q.gt(q, exact(decl.lower)) : Q.ge(q, exact(decl.lower)))) throw bad();
    if (decl.upper !== null && !Q.le(q, exact(decl.upper))) throw bad();
    return q;
  }

  // ------------------------------------------------------------------ formatting
  // as engine/answers/report.py: whole bytes rounded up; GB and GiB through a float64 with
  // Python's rounding (half to even on the double's exact value)
  const ceilBig = (q) => Q.ceil(q).n;
  const commas = (digits) => digits.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  const grouped = (big) => (big < 0n ? "-" + commas((-big).toString()) : commas(big.toString()));

  function toDouble(q) {  // correctly rounded, as Python's float(Fraction)
    let n = q.n;
    const d = q.d;
    const neg = n < 0n;
    if (neg) n = -n;
    if (n === 0n) return 0;
    const LIMIT = 1n << 53n;
    if (n < LIMIT && d < LIMIT) return (neg ? -1 : 1) * (Number(n) / Number(d));
    let shift = bits(n) - bits(d) - 55;
    let num = n, den = d;
    if (shift > 0) den <<= BigInt(shift); else num <<= BigInt(-shift);
    let quo = num / den;
    const rem = num % den;
    const extra = bits(quo) - 53;
    const low = quo & ((1n << BigInt(extra)) - 1n);
    const half = 1n << BigInt(extra - 1);
    quo >>= BigInt(extra);
    shift += extra;
    if (low > half || (low === half && (rem !== 0n || (quo & 1n) === 1n))) quo += 1n;
    return (neg ? -1 : 1) * Number(quo) * Math.pow(2, shift);
  }

  const view = new DataView(new ArrayBuffer(8));
  function fixed(x, places) {  // Python's f"{x:,.{places}f}" for a finite double
    view.setFloat64(0, x);
    const hi = view.getUint32(0), lo = view.getUint32(4);
    const neg = hi >>> 31 === 1;
    const biased = (hi >>> 20) & 0x7ff;
    let mant = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
    let e;
    if (biased === 0) e = -1074; else { mant |= 1n << 52n; e = biased - 1075; }
    let num = mant * 10n ** BigInt(places), den = 1n;
    if (e >= 0) num <<= BigInt(e); else den <<= BigInt(-e);
    let q = num / den;
    const r2 = 2n * (num % den);
    if (r2 > den || (r2 === den && (q & 1n) === 1n)) q += 1n;
    let digits = q.toString().padStart(places + 1, "0");
    const int = digits.slice(0, digits.length - places), frac = digits.slice(digits.length - places);
    return (neg ? "-" : "") + commas(int) + (places ? "." + frac : "");
  }

  const TEN15 = Q.int(10n ** 15n);
  function scaled(value, unit, places) {  // report.scaled
    const x = Q.mul(value, Q.pow(Q.int(unit), -1));
    if (Q.lt(abs(x), TEN15)) return fixed(toDouble(x), places);
    const sign = x.n < 0n ? "-" : "";
    const a = abs(x);
    let exp = Math.trunc((bits(a.n) - bits(a.d)) * 0.30103);
    let mantissa = Q.mul(a, Q.pow(Q.int(10n), -exp));
    while (Q.ge(mantissa, Q.int(10n))) { mantissa = Q.mul(mantissa, Q.frac(1n, 10n)); exp += 1; }
    while (Q.lt(mantissa, Q.int(1n))) { mantissa = Q.mul(mantissa, Q.int(10n)); exp -= 1; }
    return `${sign}${fixed(toDouble(mantissa), places)}e${exp < 0 ? "-" : "+"}${Math.abs(exp)}`;
  }
  function pyRepr(x) {  // Python's repr of a float (json.dumps): the shortest digits, its exponent rule
    const [mant, expText] = x.toExponential().split("e");
    const exp = parseInt(expText, 10);
    const digits = mant.replace("-", "").replace(".", "");
    const sign = x < 0 ? "-" : "";
    if (exp < -4 || exp >= 16) {
      return `${sign}${digits[0]}${digits.length > 1 ? "." + digits.slice(1) : ""}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
    }
    if (exp >= digits.length - 1) return sign + digits + "0".repeat(exp - digits.length + 1) + ".0";
    if (exp >= 0) return sign + digits.slice(0, exp + 1) + "." + digits.slice(exp + 1);
    return sign + "0." + "0".repeat(-exp - 1) + digits;
  }
  // report.json_number: an int when whole, else a float
  const jsonNumber = (q) => (Math.max(bits(q.n), bits(q.d)) > 256 ? scaled(q, 1n, 6)
    : q.d === 1n ? q.n.toString() : pyRepr(toDouble(q)));
  const gb = (q) => scaled(q, 10n ** 9n, 2);
  const gib = (q) => scaled(q, 1n << 30n, 2);
  const bytesText = (q) => scaled(Q.int(ceilBig(q)), 1n, 0);

  // ------------------------------------------------------------------ the formula column
  // engine/compile/columns.py's polynomials, as a runtime of the same program: each value a
  // polynomial in the workload's names (micro_batch, seq_len) and the rules kept as names,
  // with exact coefficients, a ceil, floor, max or min of the workload's names that no value
  // decides kept as a name of the polynomial (an atom), as there; anything else (a condition on
  // a kept name, a division by a sum, a max whose order sympy could decide) declines
  class Declined extends Error {}
  const poly = (() => {
    const key = (mono) => mono.map(([n, e]) => `${n}^${e}`).join("*");
    const make = (terms) => {  // terms: Map key -> [mono, coefficient]
      if (terms.size > D.formula.maxTerms) throw new Declined("a polynomial too large to print");
      for (const [mono, c] of terms.values()) {
        if (mono.reduce((s, [, e]) => s + e, 0) > D.formula.maxDegree) throw new Declined("a polynomial too large to print");
        if (bits(c.n) + bits(c.d) > D.formula.maxBits) throw new Declined("a coefficient too large");
      }
      return { terms };
    };
    const constant = (c) => make(Q.eq(c, ZERO) ? new Map() : new Map([["", [[], c]]]));
    const value = (p) => {  // the number of a polynomial without names
      for (const [mono] of p.terms.values()) if (mono.length) throw new Declined("a kept name where a number is needed");
      const t = p.terms.get("");
      return t ? t[1] : ZERO;
    };
    const add = (p, q) => {
      const out = new Map(p.terms);
      for (const [k, [mono, c]] of q.terms) {
        const sum = out.has(k) ? Q.add(out.get(k)[1], c) : c;
        if (Q.eq(sum, ZERO)) out.delete(k); else out.set(k, [mono, sum]);
      }
      return make(out);
    };
    const monomial = (a, b) => {
      const exps = new Map(a);
      for (const [n, e] of b) exps.set(n, (exps.get(n) || 0) + e);
      return [...exps].filter(([, e]) => e !== 0).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0));
    };
    const mul = (p, q) => {
      const out = new Map();
      for (const [m, c] of p.terms.values()) {
        for (const [n, d] of q.terms.values()) {
          const mono = monomial(m, n), k = key(mono);
          const sum = out.has(k) ? Q.add(out.get(k)[1], Q.mul(c, d)) : Q.mul(c, d);
          if (Q.eq(sum, ZERO)) out.delete(k); else out.set(k, [mono, sum]);
        }
      }
      return make(out);
    };
    const neg = (p) => make(new Map([...p.terms].map(([k, [m, c]]) => [k, [m, Q.mul(c, Q.int(-1n))]])));
    const symbol = (name) => make(new Map([[`${name}^1`, [[[name, 1]], Q.int(1n)]]]));
    const nonnegative = new Set(D.formula.nonnegative);
    const wholePositive = new Set(D.formula.wholePositive);
    const integer = new Set(D.formula.integer);
    // atoms (columns.Atom): a ceil, floor, Max or Min of the workload's names that no value
    // decides, kept as a name of the polynomial, named by its text; columns.Forms's canonical form
    const ATOMS = new Map();  // text -> { op, args }, of the column being written
    const isAtom = (n) => ATOMS.has(n);
    const byName = (a, b) => (isAtom(a) !== isAtom(b) ? (isAtom(a) ? 1 : -1) : a < b ? -1 : a > b ? 1 : 0);
    const atomPoly = (op, args) => {
      const t = `${op}(${args.map((a) => text(a)).join(", ")})`;
      if (!ATOMS.has(t)) ATOMS.set(t, { op, args });
      return make(new Map([[`${t}^1`, [[[t, 1]], Q.int(1n)]]]));
    };
    const sum = (ps) => ps.reduce((acc, p) => add(acc, p), constant(ZERO));
    const ofKeptNames = (p) => {  // Forms._of_kept_names
      for (const [mono] of p.terms.values()) {
        for (const [n, e] of mono) if (e < 0 || (!isAtom(n) && !wholePositive.has(n))) throw new Declined(`a rounding, max or min of '${n}'`);
      }
    };
    const wholeName = (n) => {  // Forms._whole
      if (!isAtom(n)) return integer.has(n);
      const a = ATOMS.get(n);
      return a.op === "ceiling" || a.op === "floor"
        || a.args.every((p) => [...p.terms.values()].every(([mono, c]) => c.d === 1n && mono.every(([m]) => wholeName(m))));
    };
    const neverNegative = (n) => (isAtom(n) ? ATOMS.get(n).args.every((p) => plainlyNonnegative(p)) : nonnegative.has(n));
    const plainlyNonnegative = (d) => [...d.terms.values()].every(([mono, c]) => Q.ge(c, ZERO) && mono.every(([n]) => neverNegative(n)));
    const isNonnegative = (d) => {  // Forms._nonnegative
      if (plainlyNonnegative(d)) return true;
      // one term in whole positive names (at least 1) and a negative number: c m + c0 >= 0 where c + c0 >= 0
      const named = [...d.terms.values()].filter(([mono]) => mono.length);
      const c0 = d.terms.has("") ? d.terms.get("")[1] : ZERO;
      if (named.length !== 1 || Q.ge(c0, ZERO)) return false;
      const [[mono, c]] = named;
      return Q.gt(c, ZERO) && mono.every(([n, e]) => wholePositive.has(n) && e > 0) && Q.ge(Q.add(c, c0), ZERO);
    };
    const lowerBounds = (d) => {  // Forms._lower_bounds
      const choices = [];
      for (const [mono, c] of d.terms.values()) {
        const atoms = mono.filter(([n]) => isAtom(n)), others = mono.filter(([n]) => !isAtom(n));
        const options = [make(new Map([[key(mono), [mono, c]]]))];
        if (atoms.length === 1 && atoms[0][1] === 1 && others.every(([n]) => neverNegative(n))) {
          const a = ATOMS.get(atoms[0][0]), scale = make(new Map([[key(others), [others, c]]]));
          const negative = Q.lt(c, ZERO), positive = Q.gt(c, ZERO);
          if ((a.op === "Min" && negative) || ((a.op === "Max" || a.op === "ceiling") && positive) || (a.op === "floor" && negative)) {
            for (const arg of a.args) options.push(mul(scale, arg));
          } else if ((a.op === "Max" || a.op === "Min") && a.args.every((arg) => plainlyNonnegative(arg))) {
            options.push(negative ? mul(scale, sum(a.args)) : constant(ZERO));
          }
        }
        choices.push(options);
      }
      let out = [constant(ZERO)];
      for (const options of choices) {
        out = out.flatMap((b) => options.map((o) => add(b, o)));
        if (out.length > D.formula.maxBounds) return [];
      }
      return out;
    };
    const hasAtom = (p) => [...p.terms.values()].some(([mono]) => mono.some(([n]) => isAtom(n)));
    const atLeast = (p, q) => {  // Forms._at_least
      const d = add(p, neg(q));
      if (isNonnegative(d)) return true;
      return hasAtom(d) && lowerBounds(d).some(isNonnegative);
    };
    const valueAt = (p, point) => {  // columns.value_at
      let total = ZERO;
      for (const [mono, c] of p.terms.values()) {
        let v = c;
        for (const [n, e] of mono) v = Q.mul(v, Q.pow(isAtom(n) ? atomValue(ATOMS.get(n), point) : point[n], e));
        total = Q.add(total, v);
      }
      return total;
    };
    const atomValue = (a, point) => {
      const values = a.args.map((p) => valueAt(p, point));
      if (a.op === "Max" || a.op === "Min") return values.reduce((x, y) => (a.op === "Max" ? Q.max(x, y) : Q.min(x, y)));
      return a.op === "ceiling" ? Q.ceil(values[0]) : Q.floor(values[0]);
    };
    const namesOf = (p, out = new Set()) => {
      for (const [mono] of p.terms.values()) {
        for (const [n] of mono) { if (isAtom(n)) ATOMS.get(n).args.forEach((a) => namesOf(a, out)); else out.add(n); }
      }
      return out;
    };
    const SAMPLES = D.formula.samples.map((x) => Q.int(BigInt(x)));
    const cross = (p, q) => {  // Forms._cross: each the larger at some whole positive values
      const d = add(p, neg(q)), names = [...namesOf(d)].sort();
      if (names.length > 3) return false;
      let above = false, below = false;
      const visit = (i, point) => {
        if (i === names.length) {
          const v = valueAt(d, point);
          above = above || Q.gt(v, ZERO);
          below = below || Q.lt(v, ZERO);
          return above && below;
        }
        for (const x of SAMPLES) if (visit(i + 1, { ...point, [names[i]]: x })) return true;
        return false;
      };
      return visit(0, {});
    };
    const singleAtom = (p) => {
      if (p.terms.size !== 1) return null;
      const [[mono, c]] = p.terms.values();
      return Q.eq(c, Q.int(1n)) && mono.length === 1 && mono[0][1] === 1 && isAtom(mono[0][0]) ? mono[0][0] : null;
    };
    const beyond = (kind, p, q) => (kind === "Max" ? atLeast(p, q) : atLeast(q, p));
    const extremeAtom = (kind, args) => {  // Forms._extreme_atom
      const flat = new Map();
      for (const a of args) {
        const inner = singleAtom(a);
        for (const b of (inner !== null && ATOMS.get(inner).op === kind ? ATOMS.get(inner).args : [a])) {
          ofKeptNames(b);
          const t = text(b);
          if (!flat.has(t)) flat.set(t, b);
        }
      }
      let kept = [];
      for (const t of [...flat.keys()].sort()) {
        const q = flat.get(t);
        if (kept.some((p) => beyond(kind, p, q))) continue;
        kept = kept.filter((r) => !beyond(kind, q, r));
        kept.push(q);
      }
      if (kept.length === 1) return kept[0];
      for (let i = 0; i < kept.length; i++) {
        for (let j = i + 1; j < kept.length; j++) if (!cross(kept[i], kept[j])) throw new Declined(`a ${kind} whose arguments may be ordered`);
      }
      const argKey = (p) => [[...p.terms.values()].some(([mono]) => mono.length) ? 1 : 0, text(p)];
      const order = (a, b) => { const x = argKey(a), y = argKey(b); return x[0] - y[0] || (x[1] < y[1] ? -1 : x[1] > y[1] ? 1 : 0); };
      return atomPoly(kind, [...kept].sort(order));
    };
    const extreme = (op) => (...args) => {  // Forms._extreme
      for (const p of args) if (args.every((q) => q === p || (op === "max" ? atLeast(p, q) : atLeast(q, p)))) return p;
      return extremeAtom(op === "max" ? "Max" : "Min", args);
    };
    const rounding = (op) => (p) => {  // Forms._round
      const round = op === "ceil" ? Q.ceil : Q.floor;
      if ([...p.terms.values()].every(([mono]) => !mono.length)) return constant(round(value(p)));
      ofKeptNames(p);
      if (p.terms.size === 1) {  // c Max(a, b) with c > 0 rounds as Max(round(c a), round(c b))
        const [[mono, c]] = p.terms.values();
        if (Q.gt(c, ZERO) && mono.length === 1 && mono[0][1] === 1 && isAtom(mono[0][0])) {
          const a = ATOMS.get(mono[0][0]);
          if (a.op === "Max" || a.op === "Min") {
            return extreme(a.op.toLowerCase())(...a.args.map((arg) => rounding(op)(mul(constant(c), arg))));
          }
        }
      }
      const whole = new Map(), rest = new Map();
      for (const [k, [mono, c]] of p.terms) (c.d === 1n && mono.every(([n]) => wholeName(n)) ? whole : rest).set(k, [mono, c]);
      if ([...rest.values()].every(([mono]) => !mono.length)) {
        return add(make(whole), constant(round(rest.has("") ? rest.get("")[1] : ZERO)));
      }
      return add(make(whole), atomPoly(op === "ceil" ? "ceiling" : "floor", [make(rest)]));
    };
    const relation = (f) => (a, b) => f(value(a), value(b));
    let opaque = new Set(), top = null;
    const runtime = {
      int: (n) => constant(Q.int(n)),
      frac: (n, d) => constant(Q.frac(n, d)),
      add, mul,
      pow: (a, e) => {
        if (e < 0) {  // a division: by a number, or by one term (a size kept as a name), which may cancel
          if (a.terms.size !== 1) throw new Declined("a division by zero or by a sum");
          const [[mono, c]] = a.terms.values();
          const m = mono.map(([n, k]) => [n, k * e]);
          return make(new Map([[key(m), [m, Q.pow(c, e)]]]));
        }
        let out = constant(Q.int(1n));
        for (let i = 0; i < e; i++) out = mul(out, a);
        return out;
      },
      max: extreme("max"), min: extreme("min"),
      eq: relation(Q.eq), ne: relation(Q.ne), lt: relation(Q.lt), le: relation(Q.le), gt: relation(Q.gt), ge: relation(Q.ge),
      floor: rounding("floor"), ceil: rounding("ceil"),
      fail: (message) => { throw new Declined(message); },
      once: (f, rule) => {
        const computed = Q.once(f);
        if (rule === undefined) return computed;
        const name = D.stepRules[rule];
        return () => (opaque.has(name) && name !== top ? symbol(name) : computed());
      },
    };
    // a polynomial as sympy.sstr(expr, order="grlex") prints it (columns.text)
    const term = (mono, c) => {
      const factors = [...mono].sort(([a], [b]) => byName(a, b)).map(([n, e]) => (e !== 1 ? `${n}**${e}` : n));
      const num = c.n < 0n ? -c.n : c.n;
      if (num !== 1n || !factors.length) factors.unshift(num.toString());
      return (c.n < 0n ? "-" : "") + factors.join("*") + (c.d !== 1n ? `/${c.d}` : "");
    };
    const text = (p) => {
      if (!p.terms.size) return "0";
      if ([...p.terms.values()].some(([mono]) => mono.some(([, e]) => e < 0))) throw new Declined("not a polynomial");
      const names = [...new Set([...p.terms.values()].flatMap(([mono]) => mono.map(([n]) => n)))].sort(byName);
      const vector = (mono) => { const m = new Map(mono); return names.map((n) => m.get(n) || 0); };
      const rank = ([mono]) => { const v = vector(mono); return [v.reduce((a, b) => a + b, 0), ...v]; };
      const order = [...p.terms.values()].sort((a, b) => {
        const x = rank(a), y = rank(b);
        for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return y[i] - x[i];
        return 0;
      });
      let out = "";
      order.forEach(([mono, c], i) => {
        const t = term(mono, c);
        out = i === 0 ? t : out + (t.startsWith("-") ? ` - ${t.slice(1)}` : ` + ${t}`);
      });
      return out;
    };
    // the same polynomial as presentation MathML, as the reference (engine/present/display.py's
    // printer, sympy's) typesets it: terms in sympy's lex order of the names, fractions as
    // mfrac, the papers' symbols (D.formula.symbols: the parameter count as P ...)
    const IT = "<mo>&InvisibleTimes;</mo>";
    const symbolMath = (name) => D.formula.symbols[name] || `<mi>${name}</mi>`;
    const factorMath = ([n, e]) => (e === 1 ? symbolMath(n) : `<msup>${symbolMath(n)}<mn>${e}</mn></msup>`);
    const termMath = (mono, c) => {  // sympy's _print_Mul (or Symbol, Pow, Rational) of c * mono
      const neg = c.n < 0n, p = neg ? -c.n : c.n, q = c.d;
      if (!mono.length) {
        if (q === 1n) return `<mn>${c.n}</mn>`;
        const frac = `<mfrac><mn>${p}</mn><mn>${q}</mn></mfrac>`;
        return neg ? `<mrow><mo>-</mo>${frac}</mrow>` : frac;
      }
      const factors = mono.map(factorMath);
      if (!neg && p === 1n && q === 1n && mono.length === 1) return factors[0];
      let inner;
      if (q !== 1n) {
        const numer = p === 1n ? (factors.length === 1 ? factors[0] : `<mrow>${factors.join(IT)}</mrow>`)
          : `<mrow><mn>${p}</mn>${IT}${factors.join(IT)}</mrow>`;
        inner = `<mfrac>${numer}<mn>${q}</mn></mfrac>`;
      } else {
        inner = (p === 1n ? "" : `<mn>${p}</mn>${IT}`) + factors.join(IT);
      }
      return `<mrow>${neg ? "<mo>-</mo>" : ""}${inner}</mrow>`;
    };
    const mathml = (poly) => {  // null where an atom is in it: the column shows its text
      if (hasAtom(poly)) return null;
      const terms = [...poly.terms.values()];
      let body;
      if (!terms.length) body = "<mn>0</mn>";
      else {
        const names = [...new Set(terms.flatMap(([mono]) => mono.map(([n]) => n)))].sort();
        const vector = (mono) => { const m = new Map(mono); return names.map((n) => m.get(n) || 0); };
        terms.sort((a, b) => {
          const x = vector(a[0]), y = vector(b[0]);
          for (let i = 0; i < x.length; i++) if (x[i] !== y[i]) return y[i] - x[i];
          return 0;
        });
        // sympy's one exception: a positive number and a negative multiple of one factor, the number first
        if (terms.length === 2 && !terms[1][0].length && terms[1][1].n > 0n && terms[0][0].length === 1
            && terms[0][1].n < 0n) terms.reverse();
        if (terms.length === 1) body = termMath(...terms[0]);
        else {
          body = "<mrow>" + termMath(...terms[0]) + terms.slice(1).map(([mono, c]) => (c.n < 0n
            ? "<mo>-</mo>" + termMath(mono, Q.mul(c, Q.int(-1n))) : "<mo>+</mo>" + termMath(mono, c))).join("") + "</mrow>";
        }
      }
      return `<math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">${body}</math>`;
    };
    const formulaProgram = makeProgram(runtime);
    // the column: each component with the kept rules as names, the total with fewer
    function column(values, components) {
      ATOMS.clear();  // the atoms of this column alone: the page keeps none between columns
      const exactArgs = argsOf(values);
      const args = D.varying.map((name, i) => (D.formula.keep.includes(name) ? symbol(name) : constant(exactArgs[i])));
      const out = {};
      const one = (name, kept) => {
        opaque = new Set(kept);
        top = name;
        try {
          const p = formulaProgram(...args)[OUT_INDEX[name]]();
          return { text: text(p), math: mathml(p) };
        } finally { opaque = new Set(); top = null; }
      };
      for (const name of components) out[name] = one(name, D.formula.opaque);
      out.total = one("total", D.formula.totalOpaque);
      return out;
    }
    return { column };
  })();

  // ------------------------------------------------------------------ the estimate
  const isInput = (n) => Object.prototype.hasOwnProperty.call(D.inputs, n);
  const isOption = (n) => Object.prototype.hasOwnProperty.call(D.options, n);
  // the rules a preset may pin: each takes a flag parameter of the program
  const PINNABLE = new Set(D.varying.filter((n) => n.startsWith(D.pinFlag)).map((n) => n.slice(D.pinFlag.length)));

  // the scenario's values, in the order the command line merges them: defaults, the model
  // preset, the GPU preset, then the settings
  function scenario(state) {
    const values = {};
    const take = (source) => {
      for (const [name, v] of Object.entries(source)) values[name] = isOption(name) ? v : exact(v);
    };
    take(D.defaults);
    take(D.models[state.model]);
    if (state.gpu) take(D.gpus[state.gpu]);
    const errors = [];
    for (const [name, text] of Object.entries(state.sets)) {
      try { values[name] = validate(name, text); } catch (err) {
        if (!(err instanceof ValueError)) throw err;
        errors.push(err.message);
      }
    }
    return { values, errors };
  }

  const code = (name, choice) => {
    const o = D.options[name];
    return BigInt(o.numeric ? parseInt(choice, 10) : o.choices.indexOf(choice));
  };

  function extraRules(values, ruleNames) {  // engine/compile/outline.py's extra_rules, from its data
    return D.extra.filter(([, needs, when]) => needs.every((n) => ruleNames.has(n)) && when.every(
      ([option, unset, op, choice]) => ((option in values ? values[option] : unset) === choice) === (op === "==")))
      .map(([name]) => name);
  }

  function uneven(values) {  // engine/library/layout.py's _uneven
    const n = (name) => (values[name] === undefined ? 0n : values[name].n);
    return D.uneven.map(n);
  }

  function brokenSplit(values, layers) {  // engine/library/layout.py's broken_split
    const pp = values.pp === undefined ? 1n : values.pp.n;
    const [first, last, embedding, loss] = uneven(values);
    if (pp === 1n || !(first || last || embedding || loss)) return [];
    if ((first || last) && (embedding || loss)) {
      return ["uneven first or last stages cannot be combined with the embedding or the loss counted in " +
              "the pipeline split (Megatron-LM refuses it)"];
    }
    if (first || last) {
      const ends = (first > 0n ? 1n : 0n) + (last > 0n ? 1n : 0n);
      const rest = layers - first - last;
      const given = [[D.uneven[0], first], [D.uneven[1], last]].filter(([, v]) => v).map(([n, v]) => `${n}=${v}`).join(", ");
      if (rest < 0n) return [`${given} give more layers than num_hidden_layers (${layers})`];
      if (rest && pp === ends) return [`pp=${pp} with ${given} leaves ${rest} layers and no stage between to take them`];
      if (pp > ends && rest % (pp - ends)) {
        return [`pp=${pp} with ${given} leaves ${rest} layers to ${pp - ends} stages, which they do not share evenly`];
      }
      return [];
    }
    const units = layers + embedding + loss;
    return units % pp ? [`pp=${pp} does not divide the ${units} layers the split counts ` +
                         "(num_hidden_layers, the embedding and the loss)"] : [];
  }

  function broken(values, size) {  // engine/library/layout.py's broken
    const out = [];
    const isUneven = uneven(values).some((x) => x !== 0n);
    for (const [degree, sizes] of Object.entries(D.divides)) {
      const x = values[degree];
      if (x === undefined || Q.eq(x, Q.int(1n))) continue;
      if (degree === "pp" && isUneven) {
        const n = size("num_hidden_layers");
        if (n !== undefined && n.d === 1n) out.push(...brokenSplit(values, n.n));
        continue;
      }
      const multiples = values.mode === "infer" ? (D.servingMultiples[degree] || []) : [];
      for (const name of sizes) {
        const n = size(name);
        if (n === undefined || n.d !== 1n) continue;
        if (n.n === 0n) out.push(`${degree}=${Q.text(x)} needs ${name} > 0 (this model has none)`);
        else if (multiples.includes(name)) {
          if (n.n % x.n !== 0n && x.n % n.n !== 0n) out.push(`${degree}=${Q.text(x)} neither divides nor is a multiple of ${name} (${n.n})`);
        } else if (n.n % x.n !== 0n) out.push(`${degree}=${Q.text(x)} does not divide ${name} (${n.n})`);
      }
    }
    return out;
  }

  const OUT_INDEX = Object.fromEntries(D.outputs.map((n, i) => [n, i]));
  const ruleNames = new Set(D.extraPresent);

  function argsOf(values) {  // the program's parameters: inputs, option codes, pin flags and values
    return D.varying.map((name) => {
      if (name.startsWith(D.pinFlag)) return Q.int(name.slice(D.pinFlag.length) in values ? 1n : 0n);
      if (name.startsWith(D.pinValue)) return values[name.slice(D.pinValue.length)] || ZERO;
      if (isOption(name)) return Q.int(code(name, values[name]));
      return values[name] || ZERO;
    });
  }

  const failure = (err) => (err.message.startsWith("division by zero") ? "a rule divides by zero for these values" : err.message);
  // what the exact arithmetic refuses (a division by zero, a branch no condition selects, a
  // number too large for BigInt) is the answer's error; anything else is the page's own bug
  const refused = (err) => err instanceof RangeError || /^(division by zero|cannot evaluate exactly)/.test(err.message);
  const guarded = (fn) => (...a) => {
    try { return fn(...a); } catch (err) { if (!refused(err)) throw err; return { error: failure(err) }; }
  };
  // the program's outputs by name, each computed when first read (and only then)
  function run(values) {
    const out = program(...argsOf(values));
    return (n) => out[OUT_INDEX[n]]();
  }

  function layoutSize(values, out) {
    return (n) => (n in values && !PINNABLE.has(n) ? values[n] : n in OUT_INDEX ? out(n) : undefined);
  }

  // ------------------------------------------------------------------ solve
  // engine/answers/search.py's candidates, grid and bisection, over the generated program's
  // target (total) as engine/answers/quick.py's solve searches the compiled one
  function grid(lo, hi) {
    const a = Math.max(lo, 1), b = Math.max(hi, 1);
    const xs = new Set([a, b]);
    for (let i = 1; i < 399; i++) xs.add(Math.min(b, Math.max(a, Math.floor(a * Math.pow(b / a, i / 399)))));
    for (let x = lo; x <= Math.min(hi, lo + 64); x++) xs.add(x);
    return [...xs].sort((x, y) => x - y);
  }

  function bisect(fits, direction, iLo, iHi) {
    let a = iLo, b = iHi;
    if (direction === "max") {
      while (a < b) { const mid = Math.floor((a + b + 1) / 2); if (fits(mid)) a = mid; else b = mid - 1; }
      return [a, a < iHi ? a + 1 : null];
    }
    while (a < b) { const mid = Math.floor((a + b) / 2); if (fits(mid)) b = mid; else a = mid + 1; }
    return [b, b > iLo ? b - 1 : null];
  }

  const solve = guarded((state, direction, unknown, target = "total") => {
    const { values, errors } = scenario(state);
    if (errors.length) return { error: errors.join("\n") };
    if (!("capacity" in values)) return { error: "solve needs a capacity: choose a GPU preset, or give capacity" };
    const decl = D.inputs[unknown];
    const base = run(values);
    const problems = broken(values, layoutSize(values, base));
    if (problems.length) return { error: "impossible layout: " + problems.join("; ") };
    const usable = base(D.fitRule);
    if (Q.le(usable, ZERO)) return { error: `'${D.fitRule}' is not above zero: the capacity is not above what the driver reserves` };
    const memo = new Map();
    const at = (x) => {
      if (!memo.has(x)) memo.set(x, run({ ...values, [unknown]: Q.int(BigInt(x)) })(target));
      return memo.get(x);
    };
    const lo = decl.lower === null ? 1 : Math.max(1, Number(Q.ceil(exact(decl.lower)).n));
    const iLo = lo, iHi = Math.max(lo, D.searchUpper);
    const fits = (x) => Q.le(at(x), usable);
    let value, next;
    {
      const divisors = (D.divides[unknown] || []).map((n) => [n, layoutSize(values, base)(n)]);
      // serving, tp may also be a multiple of the key/value heads (the engines replicate them)
      const multiples = values.mode === "infer" ? (D.servingMultiples[unknown] || []) : [];
      if (divisors.length) {  // finitely many candidates, each evaluated
        let limit = D.searchUpper;
        for (const [n, d] of divisors) if (!multiples.includes(n)) limit = Math.min(limit, Number(d.n / d.d));
        const xs = [];
        for (let x = iLo; x <= Math.min(iHi, limit); x++) {
          if (divisors.every(([n, d]) => d.d === 1n && (d.n % BigInt(x) === 0n
              || (multiples.includes(n) && BigInt(x) % d.n === 0n)))) xs.push(x);
        }
        if (!xs.length) return { error: `no value of '${unknown}' meets the constraints` };
        const ok = xs.filter(fits);
        if (!ok.length) return { error: `does not fit ${direction === "max" ? "even at " + unknown + "=" + xs[0] : "for any " + unknown + " up to " + xs[xs.length - 1]}` };
        value = direction === "max" ? Math.max(...ok) : Math.min(...ok);
        const pos = xs.indexOf(value);
        const others = direction === "max" ? xs.slice(pos + 1) : xs.slice(0, pos).reverse();
        next = others.length ? others[0] : null;
      } else {
        const increasing = direction === "max";
        const points = grid(iLo, iHi);
        const ys = points.map(at);
        if (ys.some((y, i) => i > 0 && (increasing ? Q.lt(y, ys[i - 1]) : Q.gt(y, ys[i - 1])))) {
          // as the full path: in float64, with its tolerance
          const fs = ys.map(toDouble);
          const turns = fs.findIndex((y, i) => i > 0 && (increasing ? y - fs[i - 1] : fs[i - 1] - y) < -1e-9 * Math.max(Math.abs(y), 1));
          if (turns > 0) {
            return { error: `the target is not ${increasing ? "non-decreasing" : "non-increasing"} in '${unknown}' (it turns near ${unknown}=${points[turns]}), so no search can be trusted` };
          }
        }
        const edge = increasing ? iLo : iHi;
        if (!fits(edge)) return { error: `does not fit ${increasing ? "even at " + unknown + "=" + edge : "for any " + unknown + " up to " + edge}: ${target} needs ${gb(at(edge))} GB > usable memory ${gb(usable)} GB` };
        [value, next] = bisect(fits, direction, iLo, iHi);
      }
    }
    return { unknown, direction, value, next, bytesAt: at(value), bytesNext: next === null ? null : at(next), usable,
             capacity: values.capacity };
  });

  // ------------------------------------------------------------------ serve
  // engine/answers/serve.py: the scenario as the engine runs it, then its figures
  const serving = guarded((state) => {
    const E = state.serve, spec = D.engines[E];
    const { values, errors } = scenario(state);
    if (errors.length) return { error: errors.join("\n") };
    if (!("capacity" in values)) return { error: "serve needs the device's memory: choose a GPU preset, or give capacity" };
    let out = run(values);
    // the layout as the engines shard it (the command line's check with mode=infer): heads and
    // layers whole, the key/value heads replicated where tp is a multiple of them
    const problems = broken({ ...values, mode: "infer" }, layoutSize(values, out));
    if (problems.length) return { error: "impossible layout: " + problems.join("; ") };
    if (values.mode === "train" && "mode" in state.sets) return { error: "memform serve models inference: mode=train does not apply" };
    for (const [engine, rule, op, value, message] of D.refused) {
      if (engine !== null && engine !== E) continue;
      const x = out(rule), v = Q.int(BigInt(value));
      if (op === "==" ? Q.eq(x, v) : Q.gt(x, v)) return { error: message.replaceAll("{engine}", E) };
    }
    const served = { ...values, mode: "infer", serving_engine: E };
    if (!("seq_len" in state.sets)) served.seq_len = values.max_position_embeddings;
    out = run(served);
    const names = [...new Set([...spec.breakdown.map(([n]) => n), ...spec.counts.map(([n]) => n),
      ...spec.header.map(([, n]) => n).filter((n) => n in OUT_INDEX), ...spec.extra])];
    // an engine's figures are rules, and a few inputs (block_size) read as the scenario has them
    const rules = Object.fromEntries(names.map((n) => [n, n in OUT_INDEX ? out(n) : served[n]]));
    const starts = !spec.startup.length || Q.le(rules[spec.startup[0]], rules[spec.startup[1]]);
    let fits;
    if (spec.servesOne.length) {
      const [memory, need] = spec.servesOne.map((n) => rules[n]);
      fits = starts && Q.gt(memory, ZERO) && Q.le(need, memory);
    } else {
      fits = starts && Q.ge(rules[spec.longest || spec.tokens], served.seq_len);
    }
    return { engine: E, spec, values: served, rules, starts, fits };
  });

  // engine/answers/serve.py's min_tp_for and max_len_for: the smallest tp, or the longest
  // max_model_len, at which `requests` requests of max_model_len tokens fit the KV cache at once
  const serveSolve = guarded((state, question, text) => {
    const S = D.serveSolve;
    if (!/^\s*\d{1,7}\s*$/.test(text) || Number(text) < 1 || Number(text) > S.maxRequests) {
      return { error: `the concurrency takes a whole number from 1 to ${S.maxRequests.toLocaleString("en-US")}, not ${text}` };
    }
    const requests = Q.int(BigInt(text.trim()));
    const concurrency = (r) => r.rules[r.spec.concurrency];
    const tried = [];
    if (question === "min-tp" && "tp" in state.sets) return { error: "the smallest tp is searched: clear tp" };
    if (question === "max-len" && "seq_len" in state.sets) return { error: "the longest max_model_len is searched: clear seq_len" };
    const base = serving(state);
    if (base.error) return base;
    const served = (sets) => {
      const r = serving({ ...state, sets: { ...state.sets, ...sets } });
      if (r.error && !r.error.startsWith("impossible layout")) throw new ServeStop(r.error);
      return r;
    };
    try {
      if (question === "min-tp") {
        for (const tp of S.tpSizes) {
          const r = served({ tp: String(tp) });
          if (r.error) continue;  // tp does not divide the heads
          tried.push([tp, concurrency(r)]);
          if (r.starts && Q.ge(concurrency(r), requests)) return { question, value: tp, tried, result: r };
        }
        return { error: `${text} requests do not fit at any tp up to ${S.tpSizes[S.tpSizes.length - 1]} (` +
          (tried.map(([t, c]) => `tp=${t}: ${fixed(toDouble(c), 2)}x`).join(", ") || "no tp divides the model's heads") + ")" };
      }
      // the engine's block (or page) size: max_model_len is a whole number of them, at most
      // the model's context (max_position_embeddings, the same in the served scenario)
      const step = Q.floor(base.values[S.lengthStep[state.serve]]).n;
      const top = Number(base.values.max_position_embeddings.n / base.values.max_position_embeddings.d / step);
      const at = (blocks) => served({ seq_len: (BigInt(blocks) * step).toString() });
      const low = at(1);
      if (low.error) return low;
      tried.push([Number(step), concurrency(low)]);
      if (!low.starts) return { error: "the engine does not start: its budget is more than the memory free at startup" };
      if (Q.lt(concurrency(low), requests)) return { error: `fewer than ${text} requests fit even at max_model_len=${step}` };
      let lo = 1, hi = top, best = low;
      while (lo < hi) {
        const mid = Math.floor((lo + hi + 1) / 2);
        const r = at(mid);
        if (r.error) return r;
        tried.push([mid * Number(step), concurrency(r)]);
        if (Q.ge(concurrency(r), requests)) { lo = mid; best = r; } else hi = mid - 1;
      }
      tried.sort((a, b) => a[0] - b[0]);
      return { question, value: lo * Number(step), tried, result: best };
    } catch (err) {
      if (err instanceof ServeStop) return { error: err.message };
      throw err;
    }
  });
  class ServeStop extends Error {}

  function showServeSolve(question) {
    const r = serveSolve(state, question, $("requests").value);
    const box = $("serve-solved");
    box.dataset.state = r.error ? "error" : "ok";
    if (r.error) { box.replaceChildren(el("p", { role: "alert", text: r.error })); return; }
    const what = question === "min-tp" ? "smallest tp" : "longest max_model_len";
    box.replaceChildren(
      el("p", {}, el("strong", { text: `${what} for ${$("requests").value.trim()} requests: ` }),
        el("strong", { "data-serve-solve": "value", text: String(r.value) })),
      el("p", { text: "tried: " }, ...r.tried.map(([v, c], i) => el("span", { "data-serve-tried": `${v} ${jsonNumber(c)}`,
        text: `${i ? ", " : ""}${v}: ${fixed(toDouble(c), 2)}x` }))));
  }

  function renderServe(result) {
    const { spec, rules, values } = result;
    const rows = spec.breakdown.map(([name, label]) => el("tr", {},
      el("th", { scope: "row", title: name, text: label }),
      el("td", { class: "num", text: bytesText(rules[name]) }), el("td", { class: "num", text: gb(rules[name]) }),
      el("td", { class: "num", text: gib(rules[name]) })));
    const counts = spec.counts.map(([name, label]) => el("tr", {},
      el("th", { scope: "row", title: name, text: label }),
      el("td", { class: "num", colspan: "3", text: name === spec.concurrency ? fixed(toDouble(rules[name]), 2) + "x" : scaled(rules[name], 1n, 0) })));
    const json = [["max_model_len", values.seq_len], ...Object.entries(rules)].map(([name, q]) => el("tr", {},
      el("th", { scope: "row" }, el("code", { text: name })),
      el("td", { class: "num", "data-serve": name === "max_model_len" ? name : "rules." + name, text: jsonNumber(q) })));
    const lines = [`GPU KV cache size: ${scaled(rules[spec.tokens], 1n, 0)} tokens; maximum concurrency for ` +
      `${scaled(values.seq_len, 1n, 0)} tokens per request: ${fixed(toDouble(rules[spec.concurrency]), 2)}x`];
    if (!result.starts) lines.push(`does not start: its budget ${gib(rules[spec.startup[0]])} GiB is more than the ${gib(rules[spec.startup[1]])} GiB free at startup; gpu_memory_utilization can be at most ${fixed(toDouble(rules[spec.startup[2]]), 3)}`);
    else if (!result.fits) lines.push(`does not serve one request of ${scaled(values.seq_len, 1n, 0)} tokens: ${spec.advice}`);
    $("serving").replaceChildren(
      el("p", { id: "serve-verdict", "data-serve": "fits", "data-value": String(result.fits), class: result.fits ? "fits" : "over", text: lines.join("\n") }),
      el("table", {}, el("caption", { text: `${result.engine}: the startup breakdown per GPU, as its log prints it` }),
        el("thead", {}, el("tr", {}, ...["per GPU", "bytes", "GB", "GiB"].map((h) => el("th", { scope: "col", text: h })))),
        el("tbody", {}, ...rows, ...counts)),
      el("details", {}, el("summary", { text: "every figure, as memform serve --json gives it" }),
        el("table", {}, el("tbody", {}, ...json))));
  }

  const estimate = guarded((state) => {
    const { values, errors } = scenario(state);
    if (errors.length) return { error: errors.join("\n") };
    const fit = "capacity" in values && D.fitRule in OUT_INDEX;
    const names = [...D.topLevel, ...extraRules(values, ruleNames)];
    const wanted = [...names, ...D.components, ...(fit ? [D.fitRule] : [])];
    for (const name of wanted) {
      const missing = (D.needs[name] || []).filter((n) => !(n in values));
      if (missing.length) return { error: `'${missing[0]}' has no value: give one, or a GPU preset that sets it` };
    }
    const value = run(values);
    for (const n of [...wanted, ...D.sizes.filter((n) => n in OUT_INDEX)]) value(n);  // as the command line computes them
    const problems = broken(values, layoutSize(values, value));
    if (problems.length) return { error: "impossible layout: " + problems.join("; ") };
    const rules = Object.fromEntries(names.map((n) => [n, value(n)]));
    const components = Object.fromEntries(D.components.map((n) => [n, value(n)]));
    for (const [name, v] of Object.entries({ ...components, ...rules })) {
      if (v.n < 0n) return { error: `'${name}' comes out negative (${bytesText(v)} bytes) with these values` };
      if (Q.gt(v, MAX_FIGURE)) return { error: `'${name}' comes out beyond any machine (more than 2^128)` };
    }
    for (const [name, v] of Object.entries(components)) {
      if (Q.gt(v, rules.total)) return { error: `component '${name}' exceeds the total` };
    }
    const usable = fit ? value(D.fitRule) : ("capacity" in values ? values.capacity : null);
    if (usable !== null && Q.le(usable, ZERO)) {
      return { error: `'${D.fitRule}' comes out at ${bytesText(usable)} bytes: the capacity is not above what the driver reserves (driver_reserved)` };
    }
    const sizes = Object.fromEntries(D.sizes.filter((n) => n in OUT_INDEX).map((n) => [n, value(n)]));
    return { values, rules, components, usable, sizes };
  });

  // ------------------------------------------------------------------ the page
  const $ = (id) => document.getElementById(id);
  function el(tag, attrs, ...kids) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") node.textContent = v; else node.setAttribute(k, v);
    }
    for (const kid of kids) node.append(kid);
    return node;
  }

  const state = { model: Object.keys(D.models)[0], gpu: "", serve: "", sets: {} };
  const controls = {};

  function readHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    const sets = {};
    state.model = Object.keys(D.models)[0];
    state.gpu = "";
    state.serve = "";
    for (const [k, v] of params) {
      if (k === "model") state.model = v;
      else if (k === "gpu") state.gpu = v;
      else if (k === "serve") state.serve = v in D.engines ? v : "";
      else sets[k] = v;
    }
    state.sets = sets;
  }
  let currentHash = "";
  function writeHash() {
    const params = new URLSearchParams();
    params.set("model", state.model);
    if (state.gpu) params.set("gpu", state.gpu);
    if (state.serve) params.set("serve", state.serve);
    for (const [k, v] of Object.entries(state.sets)) params.set(k, v);
    currentHash = params.toString();
    history.replaceState(null, "", "#" + currentHash);
  }

  const shownValue = (name, values) => {
    const v = values[name];
    if (v === undefined) return "";
    return typeof v === "string" ? v : Q.text(v);
  };

  function control(name) {
    const id = "c-" + name;
    const option = D.options[name], decl = D.inputs[name];
    const doc = (option || decl).doc;
    const help = el("small", { class: "help", id: id + "-help",
      text: doc + (decl ? ` (${decl.unit}${domainText(decl) ? "; " + domainText(decl) : ""})` : "") });
    let field;
    if (option) {
      field = el("select", { id, name, "aria-describedby": id + "-help" });
      for (const c of option.choices) field.append(el("option", { value: c, text: c }));
    } else {
      field = el("input", { id, name, type: "text", inputmode: "decimal", spellcheck: "false",
        "aria-describedby": id + "-help" });
    }
    field.addEventListener(option ? "change" : "input", () => {
      state.sets[name] = field.value;
      label.classList.add("set");
      update();
    });
    const label = el("label", { for: id, text: name });
    controls[name] = { field, label };
    return [label, field, help];
  }

  function build() {
    const model = $("model"), gpu = $("gpu");
    for (const name of Object.keys(D.models)) model.append(el("option", { value: name, text: name }));
    gpu.append(el("option", { value: "", text: "(none)" }));
    for (const name of Object.keys(D.gpus)) gpu.append(el("option", { value: name, text: name }));
    model.addEventListener("change", () => { state.model = model.value; update(true); });
    const workload = $("workload");
    workload.append(el("option", { value: "", text: "one step: memform estimate" }));
    for (const name of Object.keys(D.engines)) workload.append(el("option", { value: name, text: `serve with ${name}: memform serve` }));
    workload.addEventListener("change", () => { state.serve = workload.value; update(true); });
    gpu.addEventListener("change", () => { state.gpu = gpu.value; update(true); });
    $("reset").addEventListener("click", () => { state.sets = {}; update(true); });
    for (const button of document.querySelectorAll("button[data-serve-question]")) {
      button.addEventListener("click", () => showServeSolve(button.dataset.serveQuestion));
    }
    for (const button of document.querySelectorAll("button[data-direction]")) {
      button.addEventListener("click", () => showSolve(button.dataset.direction, button.dataset.unknown));
    }
    const primary = new Set(D.primary);
    for (const name of D.primary) $("primary").append(...control(name));
    const groups = {};
    for (const name of [...Object.keys(D.options), ...Object.keys(D.inputs)].sort()) {
      if (primary.has(name)) continue;
      const g = (D.options[name] || D.inputs[name]).group;
      (groups[g] = groups[g] || []).push(name);
    }
    for (const g of Object.keys(groups).sort()) {
      // a group's controls are made when it is first opened (the page starts sooner)
      const details = el("details", { "data-controls": groups[g].join(" ") },
        el("summary", { text: `${g}: ${groups[g].length} settings` }));
      const open = () => {
        if (details.childElementCount > 1) return;
        const set = el("fieldset", {}, el("legend", { text: `${g} (${groups[g].length})` }));
        for (const name of groups[g]) set.append(...control(name));
        details.append(set);
        syncControls(groups[g]);
      };
      details.firstChild.addEventListener("click", open);  // before it opens (a click or the keyboard)
      details.addEventListener("toggle", () => { if (details.open) open(); });
      $("groups").append(details);
    }
  }

  function syncControls(names) {
    $("model").value = state.model;
    $("gpu").value = state.gpu;
    $("workload").value = state.serve;
    const { values } = scenario({ ...state, sets: {} });
    for (const name of names || Object.keys(controls)) {
      const { field, label } = controls[name];
      const set = Object.prototype.hasOwnProperty.call(state.sets, name);
      field.value = set ? state.sets[name] : shownValue(name, values);
      label.classList.toggle("set", set);
    }
  }

  const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac"];
  function figureRow(name, v, jsonPath, extra) {
    return el("tr", { "data-rule": name },
      el("th", { scope: "row" }, el("code", { text: name })),
      el("td", { class: "num", "data-json": jsonPath, "data-unit": "bytes", text: bytesText(v) }),
      el("td", { class: "num", "data-gb": name, text: gb(v) }),
      el("td", { class: "num", "data-gib": name, text: gib(v) }),
      el("td", { class: extra.cls || "", text: extra.text }));
  }

  const FORMULAS = new Map();  // formula key -> the column (null: not a polynomial there)
  let formulaTicket = 0;
  const NOT_A_POLYNOMIAL = "(not a polynomial here: memform estimate prints it)";
  function fillFormula(cell, column) {  // the formula typeset, its text (as the terminal's) kept beside
    const name = cell.dataset.formula;
    if (column === undefined || column === null) {
      cell.textContent = column === undefined ? "…" : NOT_A_POLYNOMIAL;
      delete cell.dataset.text;
      return;
    }
    if (column[name].math === null) cell.textContent = column[name].text;
    else cell.innerHTML = column[name].math;
    cell.dataset.text = column[name].text;
    cell.title = column[name].text;
  }
  // the sizes the formulas name, with their values (one always), as the command line prints them
  function showSizes(sizes, column) {
    $("sizes").replaceChildren(...Object.entries(sizes).filter(([name]) => name === D.alwaysShownSize
      || (column && Object.values(column).some((f) => new RegExp(`\\b${name}\\b`).test(f.text))))
      .map(([name, x]) => el("li", { "data-size": name, text: `${name} = ${bytesText(x)}` })));
  }

  function render() {
    const serve = !!state.serve;
    $("serving").hidden = !serve;
    $("serve-solve").hidden = !serve;
    $("estimate").hidden = serve;
    const result = serve ? serving(state) : estimate(state);
    const v = result.values;
    $("title").textContent = `${state.model}${state.gpu ? " on " + state.gpu : ""}${serve ? ", served with " + state.serve : ""}`;
    const error = $("error"), answer = $("answer");
    if (result.error) {
      error.textContent = result.error;
      error.hidden = false;
      answer.hidden = true;
      for (const node of answer.querySelectorAll("[data-json]")) node.removeAttribute("data-json");
      $("serving").replaceChildren();
      document.body.dataset.state = "error";
      return;
    }
    error.hidden = true;
    error.textContent = "";
    answer.hidden = false;
    document.body.dataset.state = "ok";
    if (serve) { renderServe(result); return; }
    const total = result.rules.total;
    // the formula column comes a moment after the figures (a task of its own), and is kept
    // for the values it depends on: all but the workload's (micro_batch and seq_len)
    const formulaKey = JSON.stringify(Object.keys(v).filter((n) => !D.formula.keep.includes(n)).sort()
      .map((n) => [n, typeof v[n] === "string" ? v[n] : Q.text(v[n])]));
    let formulas = FORMULAS.get(formulaKey);
    const formulaCell = (name) => { const cell = el("td", { class: "formula", "data-formula": name }); fillFormula(cell, formulas); return cell; };
    document.body.dataset.formulas = formulas === undefined ? "pending" : "done";
    if (formulas === undefined) {
      const ticket = ++formulaTicket;
      setTimeout(() => {
        if (ticket !== formulaTicket) return;  // the form changed again: that render fills them
        const start = performance.now();
        let column = null;
        try { column = poly.column(v, D.components); } catch (err) { if (!(err instanceof Declined || refused(err))) throw err; }
        if (FORMULAS.size >= 500) FORMULAS.delete(FORMULAS.keys().next().value);
        FORMULAS.set(formulaKey, column);
        for (const cell of document.querySelectorAll("[data-formula]")) fillFormula(cell, column);
        showSizes(result.sizes, column);
        document.body.dataset.formulas = "done";
        timings.formulas.push(performance.now() - start);
      }, 0);
    }
    const share = (x) => (total.n === 0n ? "-" : fixed(100 * toDouble(Q.mul(x, Q.pow(total, -1))), 1) + " %");
    const body = $("breakdown").tBodies[0], foot = $("breakdown").tFoot;
    body.replaceChildren(...D.components.map((name, i) => {
      const paths = "components." + name + (name in result.rules ? " rules." + name : "");
      const row = figureRow(name, result.components[name], paths, { cls: "num", text: share(result.components[name]) });
      row.firstChild.prepend(el("span", { class: "swatch", style: `background:${PALETTE[i % PALETTE.length]}` }));
      row.firstChild.title = D.docs[name] || "";
      row.append(formulaCell(name));
      return row;
    }));
    const totalRow = figureRow("total", total, "total_bytes rules.total", { cls: "num", text: "100.0 %" });
    totalRow.append(formulaCell("total"));
    foot.replaceChildren(totalRow);
    showSizes(result.sizes, formulas);
    const figures = Object.keys(result.rules).filter((n) => !D.components.includes(n) && n !== "total");
    const rows = figures.map((name) => figureRow(name, result.rules[name], "rules." + name,
      { text: D.statistic[name] || D.docs[name] || "" }));
    const usable = result.usable;
    if (usable !== null) {
      if ("capacity" in v) rows.push(figureRow("capacity", v.capacity, "capacity_bytes", { text: "the GPU's memory (input capacity)" }));
      rows.push(figureRow(D.fitRule, usable, "usable_bytes", { text: "what the total must fit in" }));
    }
    $("figures").tBodies[0].replaceChildren(...rows);
    const verdict = $("verdict");
    if (usable === null) {
      verdict.textContent = "no GPU chosen: choose a GPU preset, or give capacity, for the fit";
      verdict.className = "";
      verdict.removeAttribute("data-json");
    } else {
      // the command line's verdict (engine/answers/report.py's print_table)
      const fits = Q.le(total, usable);
      const peak = result.rules.peak;
      const fitsAtPeak = peak === undefined ? null : Q.le(peak, usable);
      const minus = (a, b) => Q.add(a, Q.mul(b, Q.int(-1n)));
      const both = (x) => `${gb(x)} GB (${gib(x)} GiB)`;
      const marked = "capacity" in v && !Q.eq(usable, v.capacity) ? " usable" : "";
      const where = state.gpu ? `${state.gpu} (${gib(usable)} GiB${marked})` : `${gb(usable)} GB${marked}`;
      let atPeak = "";
      if (peak !== undefined && Q.gt(peak, total)) {
        atPeak = fitsAtPeak ? `; at the step's peak ${both(minus(usable, peak))} to spare`
          : `; but not at the step's peak, which needs ${both(minus(peak, usable))} more`;
      }
      verdict.className = fits && fitsAtPeak !== false ? "fits" : "over";
      verdict.replaceChildren(
        el("span", { "data-json": "fits", "data-value": String(fits),
          text: fits ? `fits ${where}: ${both(minus(usable, total))} to spare` : `does not fit ${where}: needs ${both(minus(total, usable))} more` }),
        fitsAtPeak === null ? "" : el("span", { "data-json": "fits_at_peak", "data-value": String(fitsAtPeak),
          text: fits ? atPeak : "" }));
    }
    const bar = $("bar");
    const scale = usable !== null && Q.gt(usable, total) ? usable : total;
    const width = (x) => (scale.n === 0n ? 0 : 100 * toDouble(Q.mul(x, Q.pow(scale, -1))));
    bar.replaceChildren(...D.components.map((name, i) => el("span", {
      style: `width:${width(result.components[name]).toFixed(3)}%;background:${PALETTE[i % PALETTE.length]}`,
      title: `${name}: ${gib(result.components[name])} GiB` })));
    if (usable !== null) bar.append(el("span", { class: "cap", style: `left:calc(${width(usable).toFixed(3)}% - 1px)`, title: `usable: ${gib(usable)} GiB` }));
  }

  function showSolve(direction, unknown) {
    const start = performance.now();
    const r = solve(state, direction, unknown);
    const box = $("solved");
    box.dataset.state = r.error ? "error" : "ok";
    box.dataset.unknown = unknown;
    if (r.error) {
      box.replaceChildren(el("p", { role: "alert", text: `${direction} ${unknown}: ${r.error}` }));
    } else {
      const line = (x, bytes, rel, key) => el("li", {}, `at ${unknown}=`, el("span", { "data-solve": key + "_value", text: String(x) }),
        `: `, el("span", { "data-solve": key + "_bytes", text: bytesText(bytes) }), ` bytes (${gb(bytes)} GB, ${gib(bytes)} GiB) ${rel} usable memory ${gib(r.usable)} GiB`);
      box.replaceChildren(
        el("p", {}, el("strong", { text: `${direction} ${unknown} = ` }), el("strong", { "data-solve": "value", text: String(r.value) }),
          ` (total <= ${D.fitRule}; exact search over the same program)`),
        el("ul", {}, line(r.value, r.bytesAt, "<=", "at"), ...(r.next === null ? [] : [line(r.next, r.bytesNext, ">", "next")])));
    }
    timings.solves.push(performance.now() - start);
  }

  function update(resync) {
    const start = performance.now();
    if (resync) syncControls();
    writeHash();
    render();
    timings.updates.push(performance.now() - start);
  }

  function legend() {  // the papers' symbols the formulas use, with the names they stand for
    const shown = Object.entries(D.formula.symbols).filter(([name, markup]) => markup !== `<mi>${name}</mi>`);
    $("symbols").innerHTML = "In the formulas: " + shown.map(([name, markup]) =>
      `<math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">${markup}</math> = <code>${name}</code>`).join(", ");
  }

  function start() {
    legend();
    readHash();
    if (!(state.model in D.models)) state.model = Object.keys(D.models)[0];
    if (state.gpu && !(state.gpu in D.gpus)) state.gpu = "";
    build();
    syncControls();
    render();
    timings.firstRender = performance.now();
    window.addEventListener("hashchange", () => {
      if (location.hash === "#" + currentHash) return;  // the page's own writing
      readHash();
      if (!(state.model in D.models)) state.model = Object.keys(D.models)[0];
      if (state.gpu && !(state.gpu in D.gpus)) state.gpu = "";
      syncControls();
      render();
    });
    document.body.dataset.ready = "true";
  }

  window.memform = { estimate, solve, validate, scaled, state, poly, scenario };
  start();
})();
