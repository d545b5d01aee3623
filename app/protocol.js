// The one place where worker message kinds are defined (page <-> worker).
// Requests: {id, kind, ...params}; replies: {id, ok: true, result} | {id, ok: false, error};
// one-way events (worker -> page) have kinds starting with 'event.'. Payload keys are snake_case.

import rules from '../static/rules.js';

export const REQ = Object.freeze({
  BOOT: 'boot',                 // {settings?} -> {backend, models, stages, active}
  GENERATE: 'generate',         // {prompt?, chat?, every setting of static/rules.js (drafter, k, mode, bridge,
                                //  grammar_draft, ...), response_format?: {type: 'json_object'} | {type: 'json_schema',
                                //  schema}, continue?, backend?: 'webgpu' | 'cpu', resume?: {answer, stream} (after a
                                //  worker restart: the answer's committed ids)} -> {text, token_ids, finish_reason,
                                //  stats, receipt, recovery?, notices?, faults_fired?}
  CANCEL: 'cancel',             // {} -> {cancelled: bool}   (stops the running generate at its last committed token)
  LIST_MODELS: 'list_models',   // {} -> [{name, size, sha256, role, source, loaded}]
  IMPORT_MODEL: 'import_model', // {url?, file?, files?, name?, role?} -> {name, size, sha256}
  DELETE_MODEL: 'delete_model', // {name} -> {deleted: bool}
  LOAD_MODEL: 'load_model',     // {name, role: 'champion' | 'draft'} -> {name, role, config}
  STATUS: 'status',             // {} -> {backend, active, stages, draft_provenance: {draft, champion, status} or null,
                                //        bridge: {draft, same, remap, shared, differences, auto: {coupled, rejection}}
                                //        or null (py/exactspec/session.py: bridge_info)}
  TIMINGS: 'timings',           // {prompt? | chat? | prompt_ids?, ks, reps, drafters, temperature, seed} -> pass times
                                //  of the loaded models for the break-even formula (exactspec.timing; benchmarks)
  MEMORY: 'memory',             // {} -> {models: {role: {backend, kernel?, threads?, weights, kv, features, scratch, total}},
                                //        gpu_buffers, wasm_heap, cpu_pool (the CPU kernel's shared memory),
                                //        js_heap_used, js_heap_total} bytes (null where unknown)
  BENCH_FIGURES: 'bench_figures', // {records, ttft, memory, ...} -> {summary, figures} (exactspec.benchmatrix)
  // fault injection and recovery (app/faults.js, py/exactspec/faults.py; issue 12)
  FAULTS: 'faults',             // {armed: [{id, kind, phase, round}]} -> {armed: n}  (the worker's copy of what is armed)
  REIMPORT_MODEL: 'reimport_model', // {name} -> {name, size, sha256}: a damaged stored default model, imported again
                                //  from this site (deleted first); other models: an error saying to pick the file again
});

export const EVT = Object.freeze({
  STAGE: 'event.stage',         // {stage, state: 'start' | 'done' | 'error', detail, ms}
  PROGRESS: 'event.progress',   // {task, name, loaded, total}
  TOKENS: 'event.tokens',       // {request_id, text, token_ids}  (newly committed tokens, decoded text delta)
  LOG: 'event.log',             // {level, message}
  ALIVE: 'event.alive',         // {lock}: the worker holds its liveness lock (Web Locks; released when it dies)
  FAULT: 'event.fault',         // {fault: {id, kind, phase, round, at_round, at_token, detail}}: an armed fault fired
  NOTICE: 'event.notice',       // {level, code, message, name?}: what the status line should say (a recovery at load,
                                //  a damaged stored file and its re-import offer, a refused import)
});

export const STAGES = Object.freeze(['runtime', 'packages', 'gpu', 'cpu', 'weights', 'ready']);

// Settings: names, defaults and limits come from the Python core (py/exactspec/settings.py), written by the build
// to /static/rules.js; nothing here spells them again.
export const RULES = Object.freeze(rules);
export const DRAFTERS = Object.freeze([...rules.drafters]);
export const MODES = Object.freeze([...rules.modes]);
export const BRIDGES = Object.freeze([...rules.bridges]);
export const DEFAULT_SETTINGS = Object.freeze({ ...rules.defaults });
export const SETTING_NAMES = Object.freeze(Object.keys(rules.defaults));

// Returns {ok: true, value} with every setting typed (missing ones from the defaults), or {ok: false, error:
// 'field: reason'}: the same checks and messages as settings.check in Python. The page sends settings as the person
// set them; the worker's Python applies the speculation-off rule (settings.effective), so toggling speculation
// keeps the drafter and k for later.
export function validateSettings(s) {
  const v = {};
  try {
    for (const name of SETTING_NAMES) {
      let x = s[name];
      if (x === undefined || x === null) x = rules.defaults[name];
      const lim = rules.limits[name];
      if (lim) {
        const num = typeof x === 'string' ? (x.trim() === '' ? NaN : Number(x)) : (typeof x === 'number' ? x : NaN);
        if (!Number.isFinite(num)) throw new Error(`${name}: must be a number`);
        if (lim.kind === 'int' && !Number.isInteger(num)) throw new Error(`${name}: must be a whole number`);
        if (num < lim.min || num > lim.max || (lim.min_exclusive && num === lim.min)) {
          throw new Error(`${name}: must be ${lim.min_exclusive ? `greater than ${lim.min} and at most ${lim.max}` : `between ${lim.min} and ${lim.max}`}`);
        }
        v[name] = num;
      } else if (rules.choices[name]) {
        if (!rules.choices[name].includes(x)) throw new Error(`${name}: must be one of ${rules.choices[name].join(', ')}`);
        v[name] = x;
      } else {
        if (typeof x !== 'boolean') throw new Error(`${name}: must be true or false`);
        v[name] = x;
      }
    }
  } catch (e) {
    return { ok: false, error: e.message };
  }
  return { ok: true, value: v };
}
