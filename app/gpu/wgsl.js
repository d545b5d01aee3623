// wgsl.js — the one WGSL expander. A kernel file (shaders/NAME.wgsl) may include shared fragments (shaders/lib/) and
// choose variants by define; every loader (kernels.js: the page, Node, the tests and benches) compiles the EXPANDED
// text, and signature.js reads the bindings and parameters from it. Directives are whole lines starting `// #`
// (WGSL comments), so a file that uses none is plain WGSL and expands to itself:
//   // #include NAME [KEY=VALUE ...]  the expanded text of shaders/lib/NAME.wgsl, with these variables set for it
//                                     (VALUE: a word, or "words in quotes")
//   // #param NAME [= DEFAULT]         a fragment's variable: DEFAULT unless its includer sets it (none: required)
//   // #let NAME = WORD ...            a variable; several words make a list, read as ${NAME[I]}
//   // #if COND / #else / #endif       keep the lines while COND holds: NAME (set and not 0, false or empty), !NAME,
//                                     NAME == WORD, NAME != WORD
//   // #for VAR in A..B / #end         the lines in between once for each VAR = A, A + 1, ..., B - 1
//   ${TERM}                           in any other line: a variable's value. TERM: NAME, NAME[INDEX], NAME + N,
//                                     NAME - N, N (integers); also the bounds A, B of #for
// Variables: the kernel's defines (createKernels), then what each #include, #for, #let and #param sets; an included
// fragment sees its includer's variables (the innermost wins). An unknown name in ${} is an error; in #if, unset.
//
//   expandWgsl(name, load, defines) -> Promise<{text, origin}>   load: async (name) -> the text of shaders/NAME.wgsl
//     ('lib/step' for a fragment); origin[i]: 'file:line' of line i + 1 of text (for compiler messages)
//   cachedLoader(load) -> load reading each file once

const DIRECTIVE = /^\s*\/\/ #(\w+)\b\s*(.*?)\s*$/;
const MAX_DEPTH = 16;

/** A loader that reads each file once (the kernels share their fragments). */
export function cachedLoader(load) {
  const seen = new Map();
  return (name) => {
    if (!seen.has(name)) seen.set(name, Promise.resolve(load(name)));
    return seen.get(name);
  };
}

/** The expanded text of kernel file `name` with `defines` set, and each output line's origin. */
export async function expandWgsl(name, load, defines = {}) {
  const out = { lines: [], origin: [] };
  await run(await parseFile(name, load), Object.assign(Object.create(null), defines), load, out, 0);
  return { text: out.lines.join('\n'), origin: out.origin };
}

async function parseFile(name, load) {
  const text = await load(name);
  if (typeof text !== 'string') throw new Error(`WGSL ${name}: the loader gave no text`);
  return parse(text, `${name}.wgsl`);
}

/** The file as a tree: text lines, and directives with their bodies. */
function parse(text, file) {
  const root = { kind: 'root', body: [] };
  const stack = [root];
  const fail = (at, msg) => { throw new Error(`${at}: ${msg}`); };
  text.split('\n').forEach((line, k) => {
    const at = `${file}:${k + 1}`;
    const top = stack[stack.length - 1];
    const into = top.inElse ? top.else : top.body;
    const m = DIRECTIVE.exec(line);
    if (!m) { into.push({ kind: 'text', line, at }); return; }
    const [, d, rest] = m;
    if (d === 'include') {
      const im = /^([\w/]+)\s*(.*)$/.exec(rest) ?? fail(at, `#include needs a fragment name`);
      const args = {};
      const argText = im[2].replace(/(\w+)=(?:"([^"]*)"|(\S+))/g, (_, key, quoted, word) => {
        args[key] = quoted ?? word;
        return '';
      });
      if (argText.trim()) fail(at, `cannot read #include arguments "${argText.trim()}" (KEY=VALUE or KEY="a b")`);
      into.push({ kind: 'include', name: im[1], args, at });
    } else if (d === 'param' || d === 'let') {
      const pm = /^(\w+)\s*(?:=\s*(.*))?$/.exec(rest) ?? fail(at, `#${d} NAME [= VALUE]`);
      if (d === 'let' && pm[2] === undefined) fail(at, '#let needs a value');
      into.push({ kind: d, name: pm[1], value: pm[2], at });
    } else if (d === 'if') {
      const node = { kind: 'if', cond: rest, body: [], else: [], inElse: false, at };
      into.push(node);
      stack.push(node);
    } else if (d === 'else') {
      if (top.kind !== 'if' || top.inElse) fail(at, '#else without #if');
      top.inElse = true;
    } else if (d === 'endif') {
      if (top.kind !== 'if') fail(at, '#endif without #if');
      stack.pop();
    } else if (d === 'for') {
      const fm = /^(\w+)\s+in\s+(.+?)\s*\.\.\s*(.+)$/.exec(rest) ?? fail(at, '#for VAR in A..B');
      const node = { kind: 'for', name: fm[1], from: fm[2], to: fm[3], body: [], at };
      into.push(node);
      stack.push(node);
    } else if (d === 'end') {
      if (top.kind !== 'for') fail(at, '#end without #for');
      stack.pop();
    } else {
      fail(at, `unknown directive #${d}`);
    }
  });
  if (stack.length > 1) fail(stack[stack.length - 1].at, `#${stack[stack.length - 1].kind} is never closed`);
  return root.body;
}

/** The value of a term (NAME, NAME[INDEX], NAME + N, NAME - N, N) as a string. */
function term(t, vars, at) {
  const m = /^\s*(?:(-?\d+)|(\w+)(?:\[\s*(\w+)\s*\])?(?:\s*([+-])\s*(\d+))?)\s*$/.exec(t);
  if (!m) throw new Error(`${at}: cannot read \${${t}} (NAME, NAME[I], NAME + N, NAME - N or N)`);
  if (m[1] !== undefined) return m[1];
  if (!(m[2] in vars)) throw new Error(`${at}: ${m[2]} is not set`);
  let v = vars[m[2]];
  if (m[3] !== undefined) {
    const i = /^\d+$/.test(m[3]) ? Number(m[3]) : Number(term(m[3], vars, at));
    if (!Array.isArray(v) || !(i >= 0 && i < v.length)) throw new Error(`${at}: ${m[2]}[${i}] is outside the list`);
    v = v[i];
  } else if (Array.isArray(v)) throw new Error(`${at}: ${m[2]} is a list: index it`);
  if (m[4] !== undefined) {
    if (!/^-?\d+$/.test(String(v))) throw new Error(`${at}: ${m[2]} = ${v} is not an integer`);
    v = Number(v) + (m[4] === '+' ? 1 : -1) * Number(m[5]);
  }
  return String(v);
}

function holds(cond, vars, at) {
  const m = /^(!?)\s*(\w+)\s*(?:(==|!=)\s*(\S+))?$/.exec(cond);
  if (!m) throw new Error(`${at}: cannot read #if ${cond} (NAME, !NAME, NAME == WORD, NAME != WORD)`);
  const v = vars[m[2]];
  if (m[3]) {
    if (m[1]) throw new Error(`${at}: #if !NAME == WORD: write NAME != WORD`);
    return (String(v) === m[4]) === (m[3] === '==');
  }
  const set = v !== undefined && v !== false && v !== 0 && v !== '0' && v !== 'false' && v !== '';
  return m[1] ? !set : set;
}

async function run(nodes, vars, load, out, depth) {
  for (const n of nodes) {
    if (n.kind === 'text') {
      out.lines.push(n.line.replace(/\$\{([^}]*)\}/g, (_, t) => term(t, vars, n.at)));
      out.origin.push(n.at);
    } else if (n.kind === 'let') {
      const words = n.value.split(/\s+/).filter(Boolean);
      vars[n.name] = words.length === 1 ? words[0] : words;
    } else if (n.kind === 'param') {
      if (!(n.name in vars)) {
        if (n.value === undefined) throw new Error(`${n.at}: this fragment needs ${n.name} (set it on the #include line)`);
        vars[n.name] = n.value;
      }
    } else if (n.kind === 'if') {
      await run(holds(n.cond, vars, n.at) ? n.body : n.else, vars, load, out, depth);
    } else if (n.kind === 'for') {
      const a = Number(term(n.from, vars, n.at));
      const b = Number(term(n.to, vars, n.at));
      for (let i = a; i < b; i++) {
        const inner = Object.create(vars);
        inner[n.name] = String(i);
        await run(n.body, inner, load, out, depth);
      }
    } else if (n.kind === 'include') {
      if (depth >= MAX_DEPTH) throw new Error(`${n.at}: includes nested deeper than ${MAX_DEPTH} (a cycle?)`);
      const inner = Object.assign(Object.create(vars), n.args);
      try {   // an error inside says where it was included from
        await run(await parseFile(`lib/${n.name}`, load), inner, load, out, depth + 1);
      } catch (e) {
        throw new Error(`${n.at}: #include ${n.name}: ${e.message}`);
      }
    }
  }
}
