// reliability_ui.js — the page's reliability pieces (issue 12), wired by app/main.js: faults armed from the URL
// (?faults=kind@phase:round,...), what the status line says when something failed and was recovered (worker
// restarts, device loss, a dropped draft, a damaged stored file), the re-import offer for a damaged stored model,
// and the metrics panel's "Download receipt" button (exactspec.receipt(): privacy-safe, py/exactspec/receipts.py).

import { exactspec } from './client.js';

const $ = (id) => document.getElementById(id);
let pending = [];       // notices since the last takeNotices() (boot's, shown after "Ready")

/** The notices since the last call, as one sentence ('' when none). */
export function takeNotices() {
  const out = pending.join(' ');
  pending = [];
  return out;
}

/** Arm the URL's faults (before boot, so load-phase faults fire at boot). Returns an error message or ''. */
export async function armFromUrl(search) {
  const spec = new URLSearchParams(search).get('faults');
  if (!spec) return '';
  try {
    const armed = await exactspec.faults.arm(spec);
    document.body.dataset.faults = armed.map((f) => `${f.kind}@${f.phase}:${f.round}`).join(',');
    return '';
  } catch (e) {
    return `?faults: ${e.message}`;
  }
}

/** The status line's notices: {level, code, message} events from the worker and the client. */
export function wireNotices({ setStatus, showError, renderModels }) {
  const offers = $('reimport-offers');
  exactspec.on('notice', (e) => {
    setStatus(e.message);
    pending.push(e.message);
    document.body.dataset.notice = e.code || '';
    if (e.code === 'damaged' && e.name && offers) {
      if ([...offers.children].some((li) => li.dataset.name === e.name)) return;
      const li = document.createElement('li');
      li.dataset.name = e.name;
      const label = document.createElement('span');
      label.textContent = e.message;
      li.append(label);
      if (e.reimport === 'site') {
        const b = document.createElement('button');
        b.type = 'button';
        b.textContent = `Re-import ${e.name}`;
        b.className = 'reimport';
        b.onclick = async () => {
          b.disabled = true;
          setStatus(`Re-importing ${e.name}…`);
          try {
            const r = await exactspec.reimportModel(e.name);
            li.remove();
            offers.hidden = !offers.children.length;
            setStatus(`Re-imported ${r.name}${r.loaded ? ` (the ${r.loaded} again)` : ''}: its sha256 checks out.`);
          } catch (err) {
            showError(`Re-import failed: ${err.message}`);
            b.disabled = false;
          }
          renderModels();
        };
        li.append(b);
      }
      offers.append(li);
      offers.hidden = false;
    }
  });
  exactspec.on('worker', (e) => {
    if (e.state === 'lost') setStatus('The worker stopped: restarting it (the models reload from storage)…');
    else if (e.state === 'restarted') setStatus(`The worker was restarted (${Math.round(e.ms)} ms).`);
    else if (e.state === 'failed') showError(`The worker could not be restarted: ${e.why}`);
  });
}

/** The metrics panel's receipt button: the last answer's receipt as a JSON file (no prompt, no output, no names). */
export function wireReceipt() {
  const b = $('receipt-download');
  if (!b) return;
  b.onclick = () => {
    const r = exactspec.receipt();
    if (!r) return;
    const url = URL.createObjectURL(new Blob([JSON.stringify(r, null, 1)], { type: 'application/json' }));
    const a = document.createElement('a');
    a.href = url;
    a.download = 'exactspec-receipt.json';
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  };
}

/** After an answer: enable the receipt button; the status line's text when the answer needed a recovery. */
export function afterAnswer(res) {
  const b = $('receipt-download');
  if (b) b.disabled = !exactspec.receipt();
  const notes = (res && res.notices) || [];
  pending = [];
  document.body.dataset.recovery = ((res && res.recovery) || []).map((r) => r.action).join(',');
  return notes.length ? notes.join(' ') : '';
}
