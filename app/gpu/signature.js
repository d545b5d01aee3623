// signature.js — a kernel's interface read from its WGSL: the `@group(0) @binding(N) var<...> NAME: TYPE;`
// declarations and the uniform structs they use. The WGSL is the one declaration: JS builds bind group layouts,
// bind groups and uniform parameter blocks BY NAME from it, so binding numbers and field order are never spelled
// again in JS.
//
//   parseSignature(wgsl) -> {bindings: [{name, binding, space: 'uniform'|'read'|'read_write', type, dynamic, size}],
//                            structs: {Name: [{name, type}]}, overrides: Set of the `override NAME` constants}
//     A uniform of struct type `Step` (one slot per chunk/pass of a submission) is bound with a dynamic offset.
//   packStruct(fields, values, what) -> Uint32Array   scalar fields (u32 / i32 / f32) by name; fields whose name
//     starts with `_` (padding) are 0; a missing or unknown name is an error naming it.

const SCALAR = new Set(['u32', 'i32', 'f32']);

/** WGSL without comments (line and nested block comments). */
function stripComments(src) {
  let out = '';
  let depth = 0;
  for (let i = 0; i < src.length; i++) {
    const two = src.slice(i, i + 2);
    if (depth === 0 && two === '//') {
      while (i < src.length && src[i] !== '\n') i++;
      out += '\n';
    } else if (two === '/*') { depth++; i++; }
    else if (depth > 0 && two === '*/') { depth--; i++; }
    else if (depth === 0) out += src[i];
  }
  return out;
}

export function parseSignature(wgsl, what = 'kernel') {
  const src = stripComments(wgsl);
  const structs = {};
  for (const m of src.matchAll(/\bstruct\s+(\w+)\s*\{([^}]*)\}/g)) {
    structs[m[1]] = m[2].split(',').map((f) => f.trim()).filter(Boolean).map((f) => {
      const fm = /^(?:@\w+(?:\([^)]*\))?\s*)*(\w+)\s*:\s*(.+)$/.exec(f);
      if (!fm) throw new Error(`${what}: cannot read struct ${m[1]} field "${f}"`);
      return { name: fm[1], type: fm[2].trim() };
    });
  }
  const overrides = new Set([...src.matchAll(/\boverride\s+(\w+)/g)].map((m) => m[1]));
  const bindings = [];
  const re = /@group\(\s*0\s*\)\s*@binding\(\s*(\d+)\s*\)\s*var\s*(?:<([^>]*)>)?\s*(\w+)\s*:\s*([^;]+);/g;
  for (const m of src.matchAll(re)) {
    const [as, access] = (m[2] ?? 'handle').split(',').map((s) => s.trim());
    const type = m[4].trim();
    let space;
    if (as === 'uniform') space = 'uniform';
    else if (as === 'storage') space = access === 'read_write' ? 'read_write' : 'read';
    else throw new Error(`${what}: binding ${m[3]} in address space ${as} is not supported`);
    const b = { name: m[3], binding: Number(m[1]), space, type, dynamic: space === 'uniform' && type === 'Step' };
    if (space === 'uniform') {
      if (!structs[type]) throw new Error(`${what}: uniform ${b.name} has type ${type}, not a struct of this file`);
      b.size = structBytes(structs[type], `${what} ${type}`);
    }
    bindings.push(b);
  }
  if (!bindings.length) throw new Error(`${what}: no @group(0) @binding declarations found`);
  const seen = new Map();
  for (const b of bindings) {
    if (seen.has(b.binding)) throw new Error(`${what}: bindings ${seen.get(b.binding)} and ${b.name} share @binding(${b.binding})`);
    seen.set(b.binding, b.name);
  }
  bindings.sort((a, b) => a.binding - b.binding);
  return { bindings, structs, overrides };
}

function structBytes(fields, what) {
  for (const f of fields) {
    if (!SCALAR.has(f.type)) throw new Error(`${what}: field ${f.name} is ${f.type}; uniform structs hold u32/i32/f32 only`);
  }
  return Math.ceil((fields.length * 4) / 16) * 16;
}

/** Pack `values` into the struct's scalar fields, by name (a Uint32Array of the struct's padded size). */
export function packStruct(fields, values, what) {
  const words = new Uint32Array(Math.ceil(fields.length / 4) * 4);
  const f32 = new Float32Array(words.buffer);
  const i32 = new Int32Array(words.buffer);
  const known = new Set(fields.map((f) => f.name));
  for (const k of Object.keys(values)) {
    if (!known.has(k)) throw new Error(`${what}: no field ${k} (fields: ${[...known].join(', ')})`);
  }
  fields.forEach((f, i) => {
    const v = values[f.name];
    if (f.name.startsWith('_')) return;
    if (v === undefined) throw new Error(`${what}: field ${f.name} not given`);
    if (f.type === 'f32') f32[i] = v;
    else if (f.type === 'i32') i32[i] = v;
    else {
      if (!Number.isInteger(v) || v < 0 || v > 0xffffffff) throw new Error(`${what}: field ${f.name} = ${v} is not a u32`);
      words[i] = v;
    }
  });
  return words;
}
