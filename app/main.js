// UI only: renders the chat, settings, metrics and models; every action goes through window.exactspec.

import { exactspec } from './client.js';
import { DEFAULT_SETTINGS, SETTING_NAMES, STAGES, validateSettings } from './protocol.js';
import { afterAnswer, armFromUrl, takeNotices, wireNotices, wireReceipt } from './reliability_ui.js';

const $ = (id) => document.getElementById(id);
const SETTINGS_KEY = 'exactspec.settings.v1';
const JSON_KEY = 'exactspec.json.v1';     // JSON mode: {on, schema} (the schema's text as typed)
const FIELDS = SETTING_NAMES;   // one form control per setting, id = the setting's name

const ui = {
  messages: [],        // [{role, content}] the chat so far (what the template renders)
  busy: false,
  lastFinish: null,    // finish_reason of the last answer
  settings: loadSettings(),
  json: loadJsonMode(),
};

// ---- settings ---------------------------------------------------------------------------------------------------
function loadSettings() {
  try {
    const s = JSON.parse(localStorage.getItem(SETTINGS_KEY) || 'null');
    const v = validateSettings({ ...DEFAULT_SETTINGS, ...(s || {}) });
    if (v.ok) return v.value;
  } catch (e) { /* fall through to defaults */ }
  return { ...DEFAULT_SETTINGS };
}

function renderSettings() {
  for (const f of FIELDS) {
    const el = $(f);
    if (el.type === 'checkbox') el.checked = Boolean(ui.settings[f]);
    else el.value = String(ui.settings[f]);
  }
  syncSpeculationFields();
}

function syncSpeculationFields() {
  const on = $('speculation').checked;
  $('drafter').disabled = !on;
  $('k').disabled = !on;
  $('k_schedule').disabled = !on;
  $('draft_stop').disabled = !on;
  $('adaptive').disabled = !on;
  $('grammar_draft').disabled = !on;
  $('bridge').disabled = !on || $('drafter').value !== 'model';
  $('head_copy').disabled = !on || $('drafter').value !== 'head';
  renderBridge();
}

// Which bridge the draft model uses with the champion (exactspec.vocab): what the last answer used, else what the
// settings will pick for the loaded pair; and what differs between the two tokenizers.
const bridgeState = { info: null, used: null };
function renderBridge() {
  const el = $('bridge-info');
  const b = bridgeState.info;
  const s = ui.settings;
  if (!b || s.drafter !== 'model' || !s.speculation) { el.textContent = ''; el.dataset.bridge = 'none'; return; }
  const mode = s.temperature === 0 ? 'coupled' : s.mode;
  const pick = s.bridge === 'auto' ? b.auto[mode] : s.bridge;
  const used = bridgeState.used;
  const name = used || pick;
  el.dataset.bridge = name;
  el.textContent = b.same
    ? `Bridge in use: none — the draft ${b.draft} shares the champion's vocabulary.`
    : `Bridge in use: ${name}${used ? ' (last answer)' : s.bridge === 'auto' ? ' (auto)' : ''} — the draft ${b.draft} ` +
      `has another tokenizer: ${b.differences.join('; ')}.`;
}

// ---- JSON mode: the toggle and the schema box (the subset is checked by the worker's Python before generation) --
function loadJsonMode() {
  try {
    const j = JSON.parse(localStorage.getItem(JSON_KEY) || 'null');
    if (j && typeof j.on === 'boolean' && typeof j.schema === 'string') return j;
  } catch (e) { /* fall through */ }
  return { on: false, schema: '' };
}

// {ok, value: response_format | null} or {ok: false, error}
function responseFormat() {
  if (!ui.json.on) return { ok: true, value: null };
  const text = ui.json.schema.trim();
  if (!text) return { ok: true, value: { type: 'json_object' } };
  let schema;
  try { schema = JSON.parse(text); } catch (e) { return { ok: false, error: `the schema is not valid JSON: ${e.message}` }; }
  if (schema === null || Array.isArray(schema) || (typeof schema !== 'object' && typeof schema !== 'boolean')) {
    return { ok: false, error: 'the schema must be a JSON object, like {"type": "object", "properties": {...}}' };
  }
  return { ok: true, value: { type: 'json_schema', schema } };
}

function showSchemaError(msg) {
  const el = $('json-schema-error');
  el.textContent = msg ? `JSON mode: ${msg}` : '';
  el.hidden = !msg;
  $('json_schema').setAttribute('aria-invalid', msg ? 'true' : 'false');
}

function renderJsonMode() {
  $('json_mode').checked = ui.json.on;
  $('json_schema').value = ui.json.schema;
  const r = responseFormat();
  showSchemaError(r.ok ? '' : r.error);
}

function onJsonModeChange() {
  ui.json = { on: $('json_mode').checked, schema: $('json_schema').value };
  localStorage.setItem(JSON_KEY, JSON.stringify(ui.json));
  const r = responseFormat();
  showSchemaError(r.ok ? '' : r.error);
}

function readSettingsForm() {
  const raw = {};
  for (const f of FIELDS) {
    const el = $(f);
    raw[f] = el.type === 'checkbox' ? el.checked : el.value.trim();
  }
  return raw;
}

function onSettingsChange() {
  syncSpeculationFields();
  const v = validateSettings(readSettingsForm());
  const err = $('settings-error');
  if (!v.ok) {
    err.textContent = `Invalid setting — ${v.error}. The previous value stays in use.`;
    err.hidden = false;
    return;
  }
  err.hidden = true;
  ui.settings = v.value;
  localStorage.setItem(SETTINGS_KEY, JSON.stringify(ui.settings));
  bridgeState.used = null;
  renderDraftProvenance();     // refreshes the loaded pair's bridge info (models may change through the API too)
}

// The settings as set; the worker applies the speculation-off rule (py/exactspec/settings.py: effective).
function genParams() {
  const rf = responseFormat();
  return rf.ok && rf.value ? { ...ui.settings, response_format: rf.value } : { ...ui.settings };
}

// ---- boot -------------------------------------------------------------------------------------------------------
function renderStages(events) {
  const byStage = new Map();
  for (const e of events) byStage.set(e.stage, e);
  const ol = $('stages');
  ol.replaceChildren(...STAGES.map((name) => {
    const e = byStage.get(name);
    const li = document.createElement('li');
    li.dataset.stage = name;
    li.dataset.state = e ? e.state : 'waiting';
    let text = name;
    if (e && e.state === 'done') text += ` ✓ ${e.ms} ms`;
    if (e && e.state === 'error') text += ` ✗ ${e.detail && e.detail.error}`;
    if (e && e.state === 'start') text += ' …';
    if (name === 'gpu' && e && e.detail && e.detail.backend === 'cpu') text += ' (CPU fallback)';
    if (name === 'cpu' && e && e.state === 'done' && e.detail && e.detail.threads) {
      text += ` (${e.detail.threads} thread${e.detail.threads > 1 ? 's' : ''}${e.detail.why ? ': ' + e.detail.why : ''})`;
    }
    li.textContent = text;
    return li;
  }));
}

function showError(msg) {
  const el = $('error');
  el.textContent = msg;
  el.hidden = !msg;
}

function setStatus(msg) { $('status').textContent = msg; }

function fmtBytes(n) {
  const u = ['B', 'KB', 'MB', 'GB'];
  let i = 0;
  while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

exactspec.on('stage', () => renderStages(exactspec.stages));
exactspec.on('progress', (e) => {
  const bar = $('progress');
  bar.hidden = false;
  bar.max = e.total || 1;
  bar.value = e.loaded;
  $('progress-text').textContent = `Importing ${e.name}: ${fmtBytes(e.loaded)}${e.total ? ' of ' + fmtBytes(e.total) : ''}`;
  if (e.total && e.loaded >= e.total) setTimeout(() => { bar.hidden = true; $('progress-text').textContent = ''; }, 500);
});

// ---- chat -------------------------------------------------------------------------------------------------------
function bubble(role, text) {
  const div = document.createElement('div');
  div.className = `msg ${role}`;
  div.dataset.role = role;
  div.textContent = text;
  $('transcript').append(div);
  div.scrollIntoView({ block: 'end' });
  return div;
}

function renderTranscript() {
  $('transcript').replaceChildren();
  for (const m of ui.messages) {
    const div = bubble(m.role, m.content);
    if (m.tokens !== undefined) div.dataset.tokens = String(m.tokens);   // kept across re-renders (e.g. a failed Continue)
    if (m.outOfContext) {     // the last answer's prompt left it out: the chat is longer than the context
      div.classList.add('out-of-context');
      div.title = 'Left out of the model\'s context: the chat is longer than the model can read at once.';
    }
  }
}

function setBusy(b) {
  ui.busy = b;
  $('send').disabled = b;
  $('stop').disabled = !b;
  const hasAnswer = ui.messages.length && ui.messages[ui.messages.length - 1].role === 'assistant';
  $('continue').disabled = b || !hasAnswer || !['cancelled', 'length', 'error'].includes(ui.lastFinish);
  $('regenerate').disabled = b || !hasAnswer;
  $('copy').disabled = !hasAnswer;
  $('prompt').disabled = b;
  $('models-panel').inert = b;
}

async function runAnswer({ cont = false } = {}) {
  showError('');
  let target;
  if (cont) {
    target = ui.messages[ui.messages.length - 1];
  } else {
    target = { role: 'assistant', content: '' };
  }
  const chat = ui.messages.slice();
  if (!cont) ui.messages.push(target);
  renderTranscript();
  const el = $('transcript').lastElementChild;
  el.classList.add('streaming');
  setBusy(true);
  try {
    const params = { ...genParams(), ...(cont ? { continue: true } : { chat }) };
    const res = await exactspec.generate(params, {
      onToken: (text) => { target.content += text; el.textContent = target.content; el.scrollIntoView({ block: 'end' }); },
    });
    target.content = cont ? target.content : res.text;
    target.tokens = (cont ? target.tokens || 0 : 0) + res.token_ids.length;
    el.textContent = target.content;
    el.dataset.tokens = String(target.tokens);
    ui.lastFinish = res.finish_reason;
    if (!cont) {              // the messages this answer's prompt left out (exactspec.session.fit_prompt)
      const head = chat.length && chat[0].role === 'system' ? 1 : 0;
      let changed = false;
      chat.forEach((m, i) => {
        const out = i >= head && i < head + (res.dropped_messages || 0);
        if (!!m.outOfContext !== out) { m.outOfContext = out; changed = true; }
      });
      if (changed) renderTranscript();      // (most answers leave nothing out: the transcript stays as it is)
    }
    renderMetrics(res.stats);
    if (res.finish_reason === 'error') {
      showError(`The model failed mid-answer (${res.error}); the answer ends at the last committed token`
        + (res.fallback ? ' and the chat switched to the CPU fallback: Continue finishes it there.' : '.'));
    }
    const recovered = afterAnswer(res);     // what failed and how the answer was finished (reliability_ui.js)
    setStatus(res.finish_reason === 'cancelled' ? 'Stopped. Continue or send a new message.'
      : res.fallback ? 'Ready (switched to the CPU fallback after a GPU failure).' : recovered || 'Ready.');
  } catch (e) {
    showError(e.message);
    const jsonRefused = /JSON mode:/.test(e.message);
    if (jsonRefused) { showSchemaError(e.message.replace(/^.*?JSON mode:\s*/, '')); openSide(); }
    if (!cont && !target.content) {
      ui.messages.pop();
      // refused before generation because of the schema: give the message back to the box to send again
      if (jsonRefused && ui.messages.length && ui.messages[ui.messages.length - 1].role === 'user' && !$('prompt').value) {
        $('prompt').value = ui.messages.pop().content;
      }
      renderTranscript();
    }
    setStatus('Ready.');
  } finally {
    el.classList.remove('streaming');
    setBusy(false);
  }
}

function openSide() {
  document.body.classList.add('side-open');
  $('toggle-side').setAttribute('aria-expanded', 'true');
}

function send() {
  const text = $('prompt').value.trim();
  if (!text || ui.busy) return;
  const rf = responseFormat();
  if (!rf.ok) {                  // keep the message in the box; say what is wrong with the schema
    showSchemaError(rf.error);
    showError(`JSON mode: ${rf.error}`);
    openSide();
    return;
  }
  $('prompt').value = '';
  ui.messages.push({ role: 'user', content: text });
  setStatus('Answering…');
  runAnswer();
}

function renderMetrics(s) {
  if (!s) return;
  $('metrics').hidden = false;
  const f = (x, d = 2) => (x === null || x === undefined || Number.isNaN(x) ? '–' : Number(x).toFixed(d));
  $('m-tau').textContent = f(s.tau);
  $('m-tps').textContent = f(s.tokens_per_s, 1);
  $('m-target').textContent = s.target_passes ?? '–';
  $('m-draft').textContent = s.draft_passes ?? '–';
  $('m-off').textContent = s.spec_disabled_rounds ?? '–';
  $('m-forced').textContent = s.forced_proposed ? `${s.forced_accepted} / ${s.forced_proposed}` : '–';
  $('m-ttft').textContent = s.ttft_ms === undefined || s.ttft_ms === null ? '–' : `${f(s.ttft_ms, 0)} ms`;
  $('m-backend').textContent = s.backend || '–';
  bridgeState.used = s.bridge || null;
  renderBridge();
  const acc = s.acceptance_by_position || [];
  const bars = $('m-accept');
  bars.setAttribute('aria-label', `Acceptance by position: ${acc.map((a) => f(a)).join(', ') || 'no speculation'}`);
  bars.replaceChildren(...acc.map((a, i) => {
    const b = document.createElement('div');
    b.className = 'bar';
    b.style.setProperty('--h', `${Math.round(100 * (a || 0))}%`);
    b.title = `position ${i + 1}: ${f(a)}`;
    b.dataset.pos = String(i + 1);
    return b;
  }));
}

// ---- models -----------------------------------------------------------------------------------------------------
const PROVENANCE_TEXT = {
  verified: 'verified: its provenance manifest names this champion',
  unverified: 'unverified: no provenance manifest (answers stay exact; only speed depends on the draft)',
  'other-champion': 'unverified for this champion: its manifest names another champion',
};

async function renderDraftProvenance() {
  let p = null;
  try {
    const st = await exactspec.status();
    p = st.draft_provenance;
    if (JSON.stringify(st.bridge) !== JSON.stringify(bridgeState.info)) bridgeState.used = null;   // another pair
    bridgeState.info = st.bridge;
    renderBridge();
  } catch (e) { /* worker not ready */ }
  const el = $('draft-provenance');
  el.textContent = p ? `Draft ${p.draft} — ${PROVENANCE_TEXT[p.status] || p.status}` : 'No draft model loaded.';
  el.dataset.status = p ? p.status : 'none';
}

async function renderModels() {
  renderDraftProvenance();
  let list = [];
  try { list = await exactspec.listModels(); } catch (e) { showError(e.message); }
  $('models').replaceChildren(...list.map((m) => {
    const li = document.createElement('li');
    li.dataset.name = m.name;
    const label = document.createElement('span');
    label.textContent = `${m.name} — ${fmtBytes(m.size)}${m.loaded ? ` (${m.loaded})` : ''}`;
    const use = document.createElement('button');
    use.type = 'button';
    use.textContent = 'Use';
    use.disabled = m.loaded === 'champion';
    use.setAttribute('aria-label', `Chat with ${m.name}`);
    use.onclick = () => useModel(m.name);
    const asDraft = document.createElement('button');
    asDraft.type = 'button';
    asDraft.textContent = 'As draft';
    asDraft.disabled = Boolean(m.loaded);
    asDraft.setAttribute('aria-label', `Use ${m.name} as the draft model`);
    asDraft.onclick = async () => {
      try { await exactspec.loadModel(m.name, 'draft'); setStatus(`Draft: ${m.name}.`); } catch (e) { showError(e.message); }
      renderModels();
    };
    const del = document.createElement('button');
    del.type = 'button';
    del.textContent = 'Delete';
    del.setAttribute('aria-label', `Delete ${m.name}`);
    del.onclick = () => deleteModel(m.name);
    li.append(label, use, asDraft, del);
    return li;
  }));
}

async function useModel(name) {
  setStatus(`Loading ${name}…`);
  try {
    await exactspec.loadModel(name, 'champion');
    localStorage.setItem('exactspec.champion', name);
    newChat();
    setStatus(`Ready: ${name}.`);
  } catch (e) { showError(e.message); setStatus('Ready.'); }
  renderModels();
}

async function deleteModel(name) {
  try { await exactspec.deleteModel(name); } catch (e) { showError(e.message); }
  renderModels();
}

async function importModel(src) {
  const st = $('import-status');
  st.textContent = 'Importing…';
  try {
    const r = await exactspec.importModel(src);
    st.textContent = `Imported ${r.name} (${fmtBytes(r.size)}). Press "Use" to chat with it.`;
  } catch (e) {
    st.textContent = `Import failed: ${e.message}`;
  }
  $('progress').hidden = true;
  $('progress-text').textContent = '';
  renderModels();
}

function newChat() {
  ui.messages = [];
  ui.lastFinish = null;
  renderTranscript();
  setBusy(false);
}

// ---- wiring -----------------------------------------------------------------------------------------------------
function wire() {
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $('stop').onclick = () => exactspec.cancel();
  $('continue').onclick = () => runAnswer({ cont: true });
  $('regenerate').onclick = () => {
    if (ui.messages.length && ui.messages[ui.messages.length - 1].role === 'assistant') ui.messages.pop();
    runAnswer();
  };
  $('copy').onclick = async () => {
    const last = [...ui.messages].reverse().find((m) => m.role === 'assistant');
    if (!last) return;
    try { await navigator.clipboard.writeText(last.content); setStatus('Copied.'); } catch (e) { showError(`copy failed: ${e.message}`); }
  };
  $('new-chat').onclick = newChat;
  $('settings').addEventListener('input', onSettingsChange);
  $('settings').addEventListener('change', onSettingsChange);
  $('json_mode').addEventListener('change', onJsonModeChange);
  $('json_schema').addEventListener('input', onJsonModeChange);
  $('toggle-side').onclick = () => {
    const open = document.body.classList.toggle('side-open');
    $('toggle-side').setAttribute('aria-expanded', String(open));
  };
  $('import-file').addEventListener('change', (e) => {
    const f = e.target.files && e.target.files[0];
    if (f) importModel({ file: f });
    e.target.value = '';
  });
  $('import-folder').addEventListener('change', (e) => {
    const files = Array.from(e.target.files || []);
    if (files.length) importModel({ files });
    e.target.value = '';
  });
  const dz = $('dropzone');
  dz.addEventListener('keydown', (e) => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); $('import-file').click(); } });
  dz.addEventListener('dragover', (e) => { e.preventDefault(); dz.classList.add('over'); });
  dz.addEventListener('dragleave', () => dz.classList.remove('over'));
  dz.addEventListener('drop', async (e) => {
    e.preventDefault();
    dz.classList.remove('over');
    const items = Array.from(e.dataTransfer.items || []);
    const entries = items.map((it) => (it.webkitGetAsEntry ? it.webkitGetAsEntry() : null));
    let files = Array.from(e.dataTransfer.files || []);
    const dir = entries.find((en) => en && en.isDirectory);
    if (dir) {   // a dropped folder: its files (one level)
      files = await new Promise((resolve, reject) => dir.createReader().readEntries((es) => Promise.all(
        es.filter((x) => x.isFile).map((x) => new Promise((res, rej) => x.file(res, rej)))).then(resolve, reject), reject));
      if (files.length) importModel({ files, name: dir.name.replace(/[^A-Za-z0-9._-]+/g, '-') });
      return;
    }
    if (files.length) importModel(files.length === 1 ? { file: files[0] } : { files });
  });
  $('import-url-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const url = $('import-url').value.trim();
    if (url) importModel({ url });
  });
}

async function main() {
  let started = 'failed';      // body[data-ready] once the page is drawn: 'true', or 'failed' after a failed start
  wire();
  wireReceipt();
  wireNotices({ setStatus, showError, renderModels });
  renderSettings();
  renderJsonMode();
  renderStages([]);
  setBusy(false);
  $('prompt').disabled = true;
  $('send').disabled = true;
  if (navigator.storage && navigator.storage.persist) navigator.storage.persist().catch(() => {});
  try {
    const params = new URLSearchParams(location.search);
    const bootParams = {};
    const champ = params.get('model') || localStorage.getItem('exactspec.champion');
    if (champ) bootParams.champion = champ;
    if (params.get('draft')) bootParams.draft = params.get('draft');
    if (params.get('cpu') === '1') bootParams.force_cpu = true;
    if (params.get('threads')) bootParams.threads = Number(params.get('threads'));   // the CPU kernel's (1: one)
    const faultError = await armFromUrl(location.search);     // ?faults=kind@phase:round,... (before boot)
    if (faultError) showError(faultError);
    const r = await exactspec.boot(bootParams);
    setStatus(`Ready (${r.backend === 'webgpu' ? 'WebGPU' : 'CPU fallback'}${r.active.champion ? ', ' + r.active.champion : ', no model: import one'}).`);
    if (!localStorage.getItem(SETTINGS_KEY) && r.active.draft) {   // first visit with a draft model: use it
      ui.settings = { ...ui.settings, drafter: 'model' };
      renderSettings();
    }
    const w = r.stages.find((x) => x.stage === 'weights');
    if (w && w.errors && w.errors.length) showError(`Some models could not be used: ${w.errors.join('; ')}`);
    const notes = takeNotices();             // a recovery at load (a dropped draft, the CPU fallback...) says so
    if (notes) setStatus(`${$('status').textContent} ${notes}`);
    setBusy(false);
    $('prompt').focus();
    started = 'true';
  } catch (e) {
    showError(`Start-up failed: ${e.message}`);
    setStatus('Start-up failed.');
  }
  await renderModels();
  document.body.dataset.ready = started;      // every part of the page drawn: what tests wait for before a click
}

main();
