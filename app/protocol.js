// The one place where worker message kinds are defined (page <-> worker).
// Requests: {id, kind, ...params}; replies: {id, ok: true, result} | {id, ok: false, error};
// one-way events (worker -> page) have kinds starting with 'event.'. Payload keys are snake_case.

export const REQ = Object.freeze({
  BOOT: 'boot',                 // {settings?} -> {backend, models, stages, active}
  GENERATE: 'generate',         // {prompt?, chat?, max_new_tokens, temperature, top_k, top_p, seed, drafter, k, mode,
                                //  continue?, backend?: 'webgpu' | 'cpu'} -> {text, token_ids, finish_reason, stats}
  CANCEL: 'cancel',             // {} -> {cancelled: bool}   (stops the running generate at its last committed token)
  LIST_MODELS: 'list_models',   // {} -> [{name, size, sha256, role, source, loaded}]
  IMPORT_MODEL: 'import_model', // {url?, file?, files?, name?, role?} -> {name, size, sha256}
  DELETE_MODEL: 'delete_model', // {name} -> {deleted: bool}
  LOAD_MODEL: 'load_model',     // {name, role: 'champion' | 'draft'} -> {name, role, config}
  STATUS: 'status',             // {} -> {backend, active, stages, draft_provenance: {draft, champion, status} or null}
});

export const EVT = Object.freeze({
  STAGE: 'event.stage',         // {stage, state: 'start' | 'done' | 'error', detail, ms}
  PROGRESS: 'event.progress',   // {task, name, loaded, total}
  TOKENS: 'event.tokens',       // {request_id, text, token_ids}  (newly committed tokens, decoded text delta)
  LOG: 'event.log',             // {level, message}
});

export const STAGES = Object.freeze(['runtime', 'packages', 'gpu', 'weights', 'ready']);

export const DRAFTERS = Object.freeze(['none', 'model', 'ngram']);
export const MODES = Object.freeze(['coupled', 'rejection']);

// Generation settings: default and validation (shared by the UI and the API).
export const DEFAULT_SETTINGS = Object.freeze({
  speculation: true, adaptive: true, drafter: 'ngram', k: 4, mode: 'coupled', temperature: 0, top_k: 0, top_p: 1,
  seed: 0, max_new_tokens: 128,
});

// Returns {ok: true, value} with normalised numbers, or {ok: false, error: 'field: reason'}.
export function validateSettings(s) {
  const v = { ...s };
  const num = (name, lo, hi, int) => {
    const x = Number(v[name]);
    if (v[name] === '' || v[name] === null || v[name] === undefined || !Number.isFinite(x)) {
      throw new Error(`${name}: must be a number`);
    }
    if (int && !Number.isInteger(x)) throw new Error(`${name}: must be a whole number`);
    if (x < lo || x > hi) throw new Error(`${name}: must be between ${lo} and ${hi}`);
    v[name] = x;
  };
  try {
    num('k', 0, 16, true);
    num('temperature', 0, 10, false);
    num('top_k', 0, 1000000, true);
    num('top_p', 0, 1, false);
    if (v.top_p === 0) throw new Error('top_p: must be greater than 0');
    num('seed', 0, 2 ** 32 - 1, true);
    num('max_new_tokens', 1, 8192, true);
    if (!DRAFTERS.includes(v.drafter)) throw new Error(`drafter: must be one of ${DRAFTERS.join(', ')}`);
    if (!MODES.includes(v.mode)) throw new Error(`mode: must be one of ${MODES.join(', ')}`);
    v.speculation = Boolean(v.speculation);
    v.adaptive = v.adaptive === undefined ? true : Boolean(v.adaptive);
  } catch (e) {
    return { ok: false, error: e.message };
  }
  return { ok: true, value: v };
}
