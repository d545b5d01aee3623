// bench_panel.js — "Benchmark this machine": the preregistered bench matrix's short subset (bench/matrix/spec.json,
// subset 'panel', served with its prompts as /bench/panel.json) on this page's own backend, through window.exactspec
// (the chat's API: generate, cancel, status, memory, benchFigures; never Pyodide or the GPU directly). The procedure
// is the spec's, as py/bench/matrix.py runs it through bench product: per prompt a warm-up answer, then the champion
// alone and each (drafter, k) in an order rotated per run, every speculative answer checked token for token against
// the champion alone's; then the cold time-to-first-token phase; memory after each stratum. The figures come from
// exactspec.benchmatrix in the worker (the CLI report's computation) and are drawn by app/bench_charts.js.
// The receipt (Download JSON) holds the spec's sha256, backend, adapter, artifacts' sha256 and sizes, and per answer
// its counters and timings: no answer text, no token ids, no model names or file names, no prompt but the workload's
// (by id).

import { exactspec } from './client.js';
import { figureElement } from './bench_charts.js';

const RECORD_STATS = ['tokens_per_s', 'elapsed_ms', 'ttft_ms', 'tau', 'rounds', 'target_passes', 'draft_passes',
  'prefill_passes', 'submissions', 'readback_bytes', 'ahead_passes', 'wasted_passes', 'proposed', 'accepted',
  'acceptance_by_position', 'spec_disabled_rounds', 'reused_prefix_tokens', 'backend', 'chain_rounds', 'chain_proposed',
  'device_wait_ms'];

const $ = (id) => document.getElementById(id);

function modeSettings(mode, seed, temperature) {   // exactspec.benchmatrix.mode_settings
  if (mode === 'greedy') return { temperature: 0, seed, mode: 'coupled' };
  return { temperature, seed, mode: 'coupled', top_k: 0, top_p: 1 };
}

function record(out, where) {       // py/bench/product.py: record (token ids kept only until the check)
  const st = out.stats || {};
  const r = { ...where, n_tokens: out.token_ids.length, token_ids: out.token_ids, finish_reason: out.finish_reason,
    prompt_tokens: out.prompt_tokens ?? null };
  for (const k of RECORD_STATS) r[k] = st[k] ?? null;
  return r;
}

const strip = ({ token_ids, text, ...r }) => r;   // what the receipt keeps of an answer

function fmtS(s) { return s >= 90 ? `${Math.round(s / 60)} min` : `${Math.round(s)} s`; }

/** The spec's drafters this page can run, and the departures that says: no draft loaded skips 'model' and 'head'; a
 * loaded draft head stands in for the draft model. */
async function chooseDrafters(sub, st) {
  const departures = [];
  let drafters = sub.drafters.filter((d) => {
    if ((d === 'model' || d === 'head') && !st.active.draft) { departures.push(`drafter '${d}' skipped: no draft loaded`); return false; }
    return true;
  });
  if (drafters.includes('model')) {   // the loaded draft may be a draft head: it then stands in for the draft model
    try {
      await exactspec.generate({ prompt: 'a', chat: false, max_new_tokens: 1, drafter: 'model', k: 1 });
    } catch (e) {
      if (/'head'/.test(e.message || '') && !drafters.includes('head')) {
        drafters = drafters.map((d) => (d === 'model' ? 'head' : d));
        departures.push("the loaded draft is a draft head: drafter 'head' in place of 'model'");
      } else {
        drafters = drafters.filter((d) => d !== 'model');
        departures.push(`drafter 'model' skipped: ${e.message}`);
      }
    }
  }
  return { drafters, departures };
}

/** The run as a privacy-safe receipt: the spec and its departures, the host's facts, the models' sha256 and sizes,
 * per answer its counters and timings (no text), the summary and figures. */
async function buildReceipt(p, st, ready, ctx, doc, departures, fig, wall) {
  const models = await exactspec.listModels();
  const art = (role) => {
    const m = models.find((x) => x.loaded === role);
    return m ? { sha256: m.sha256, size: m.size, default: m.source === 'default' } : null;
  };
  const gpuStage = (ready.stages || []).find((s) => s.stage === 'gpu') || {};
  return {
    kind: 'exactspec.bench_matrix.receipt', schema: 1,
    spec: { ...p.spec, departures: [...departures, ...ctx.skipped.map((x) => `${x.prompt_id} skipped: ${x.reason}`)] },
    meta: { host: 'page', backend: st.backend, adapter: gpuStage.adapter || null,
      started: new Date(Date.now() - wall * 1000).toISOString(),
      wall_s: wall, cancelled: ctx.cancelledAt !== null, answers_done: ctx.done, answers_planned: ctx.total,
      user_agent: navigator.userAgent, logical_cores: navigator.hardwareConcurrency ?? null,
      device_memory_gb: navigator.deviceMemory ?? null,
      artifacts: { champion: art('champion'), draft: art('draft'), workload: { sha256: p.workload.sha256 },
        spec: { sha256: p.spec.sha256 } } },
    records: doc.records, ttft: doc.ttft, warmups: ctx.warmups, memory: ctx.memory, errors: ctx.errors,
    skipped: ctx.skipped, summary: fig.summary, figures: fig.figures,
  };
}

class Panel {
  constructor(root) {
    this.root = root;
    this.running = false;
    this.cancelled = false;
    this.receipt = null;
    this.build();
  }

  build() {
    const r = this.root;
    r.classList.add('bench-panel');
    r.innerHTML = '';
    const h = document.createElement('h2');
    h.id = 'bench-title';
    h.textContent = 'Benchmark this machine';
    this.about = document.createElement('p');
    this.about.id = 'bench-about';
    this.about.textContent = 'Runs the preregistered short bench matrix on this page\'s own backend …';
    const buttons = document.createElement('div');
    buttons.className = 'buttons';
    this.runBtn = Object.assign(document.createElement('button'), { type: 'button', id: 'bench-run', textContent: 'Run the benchmark', disabled: true });
    this.cancelBtn = Object.assign(document.createElement('button'), { type: 'button', id: 'bench-cancel', textContent: 'Cancel', disabled: true });
    this.saveBtn = Object.assign(document.createElement('button'), { type: 'button', id: 'bench-download', textContent: 'Download JSON receipt', disabled: true });
    this.cancelBtn.setAttribute('aria-keyshortcuts', 'Escape');
    buttons.append(this.runBtn, this.cancelBtn, this.saveBtn);
    this.bar = Object.assign(document.createElement('progress'), { id: 'bench-progress', max: 1, value: 0 });
    this.bar.setAttribute('aria-label', 'Benchmark progress');
    this.status = document.createElement('p');
    this.status.id = 'bench-status';
    this.status.setAttribute('role', 'status');
    this.status.setAttribute('aria-live', 'polite');
    this.results = document.createElement('div');
    this.results.id = 'bench-results';
    this.results.tabIndex = -1;
    r.append(h, this.about, buttons, this.bar, this.status, this.results);
    r.setAttribute('aria-labelledby', 'bench-title');
    this.runBtn.onclick = () => this.run();
    this.cancelBtn.onclick = () => this.cancel();
    this.saveBtn.onclick = () => this.download();
    r.addEventListener('keydown', (e) => { if (e.key === 'Escape' && this.running) { e.preventDefault(); this.cancel(); } });
  }

  async loadSpec() {
    if (!this.panel) {
      const res = await fetch('/bench/panel.json', { cache: 'no-cache' });
      if (!res.ok) throw new Error(`cannot read /bench/panel.json (HTTP ${res.status})`);
      const p = await res.json();
      if (p.error) throw new Error(p.error);
      this.panel = p;
    }
    return this.panel;
  }

  async describe() {
    try {
      const p = await this.loadSpec();
      const d = p.spec.definition;
      this.about.textContent = `The preregistered short bench matrix (${p.spec.name} v${p.spec.version}, subset `
        + `"${p.spec.subset}", spec sha256 ${p.spec.sha256.slice(0, 12)}…): ${p.items.length} workload prompts, one per `
        + `stratum; the champion alone and with each drafter (${d.drafters.filter((x) => x !== 'none').join(', ')}) at `
        + `k = ${d.ks.join(', ')}, ${d.modes.join(' and ')}, up to ${d.max_new_tokens} tokens; then the time to first `
        + 'token with each prompt\'s prefill. On this page\'s own backend, through the chat\'s API; every answer is '
        + 'checked to be identical with and without speculation. Seconds on a GPU, minutes on the CPU fallback.';
    } catch (e) {
      this.about.textContent = `The benchmark is unavailable: ${e.message}`;
      return;
    }
    try {
      await exactspec.ready();
      this.runBtn.disabled = false;
    } catch (e) {
      this.status.textContent = `The benchmark needs a started page: ${e.message}`;
    }
  }

  setRunning(on) {
    this.running = on;
    this.runBtn.disabled = on;
    this.cancelBtn.disabled = !on;
    const composer = $('composer');            // no chat answer while the benchmark runs (one session, one answer)
    if (composer) composer.inert = on;
    if (on) this.cancelBtn.focus();              // Escape or Enter cancels from here
  }

  cancel() {
    if (!this.running || this.cancelled) return;
    this.cancelled = true;
    this.status.textContent = 'Cancelling…';
    exactspec.cancel().catch(() => {});
  }

  async run() {
    if (this.running) return;
    const stop = $('stop');
    if (stop && !stop.disabled) { this.status.textContent = 'An answer is being generated: wait for it (or stop it) first.'; return; }
    let p;
    try { p = await this.loadSpec(); } catch (e) { this.status.textContent = e.message; return; }
    this.cancelled = false;
    this.receipt = null;
    this.saveBtn.disabled = true;
    this.results.replaceChildren();
    this.setRunning(true);
    const t0 = performance.now();
    try {
      await this.execute(p, t0);
    } catch (e) {
      this.status.textContent = `The benchmark failed: ${e.message}`;
    } finally {
      this.setRunning(false);
    }
  }

  async execute(p, t0) {
    const sub = p.spec.definition;
    const ready = await exactspec.ready();
    const st = await exactspec.status();
    const { drafters, departures } = await chooseDrafters(sub, st);
    const ctx = this.newRun(sub, p.items, drafters, t0);
    try {
      await ctx.sample('start');
      for (const stratum of ctx.strata) await this.measureStratum(ctx, stratum);
      await this.coldPhase(ctx);
      await ctx.sample('cold TTFT');
    } catch (e) {
      if (!(e instanceof CancelledError)) { ctx.errors.push(String(e.message || e)); throw e; }
      ctx.cancelledAt = ctx.done;
    }
    const wall = (performance.now() - t0) / 1000;
    const doc = { records: ctx.records.map(strip), ttft: ctx.cold.map(strip), memory: ctx.memory };
    const fig = ctx.records.length || ctx.cold.length ? await exactspec.benchFigures(doc) : { summary: null, figures: [] };
    this.receipt = await buildReceipt(p, st, ready, ctx, doc, departures, fig, wall);
    this.render(fig, ctx.cancelledAt, ctx.total, wall);
  }

  /** The run's plan (exactspec.benchmatrix's order: per stratum and run a warm-up, then per mode group the champion
   * alone and each config, rotated by run; then the cold-TTFT phase), its counters, and the helpers that advance it. */
  newRun(sub, items, drafters, t0) {
    const groups = sub.modes.flatMap((m) => (m === 'coupled' ? sub.seeds : sub.seeds.slice(0, 1)).map((s) => [m, s]));
    const configs = drafters.filter((d) => d !== 'none').flatMap((d) => sub.ks.map((k) => ({ drafter: d, k, adaptive: false })));
    const ttft = sub.ttft;
    const ttftSettings = ttft ? [['none', 0], ...drafters.filter((d) => d !== 'none').map((d) => [d, ttft.k])] : [];
    const ttftRuns = ttft ? (ttft.runs ?? sub.runs) : 0;        // exactspec.benchmatrix.ttft_runs / ttft_items
    const ttftItems = ttft ? items.filter((it) => (ttft.strata ?? 'all') === 'all' || ttft.strata.includes(it.stratum)) : [];
    const total = sub.runs * items.length * (1 + groups.length * (1 + configs.length)) + ttftRuns * ttftSettings.length * ttftItems.length;
    const ctx = { sub, items, strata: [...new Set(items.map((it) => it.stratum))], drafters, groups, configs, ttft,
      ttftSettings, ttftRuns, ttftItems, total, done: 0, records: [], cold: [], memory: [], warmups: [], errors: [],
      skipped: [], cancelledAt: null };
    this.bar.max = total;
    this.bar.value = 0;
    ctx.tick = (what) => {
      ctx.done += 1;
      this.bar.value = ctx.done;
      const el = (performance.now() - t0) / 1000;
      this.status.textContent = `Answer ${ctx.done} of ${total}: ${what} · ${fmtS(el)} so far, about ${fmtS((el / ctx.done) * (total - ctx.done))} left`;
    };
    ctx.sample = async (after) => {
      try { ctx.memory.push({ after, t_s: (performance.now() - t0) / 1000, ...(await exactspec.memory()) }); } catch (e) { /* not offered */ }
    };
    ctx.gen = async (params) => {
      const out = await exactspec.generate({ chat: true, adaptive: false, ...params });
      if (out.finish_reason === 'cancelled' || this.cancelled) throw new CancelledError();
      if (out.finish_reason === 'error') throw new Error(out.error || 'the answer failed');
      return out;
    };
    return ctx;
  }

  /** One stratum's runs: per prompt a warm-up (a prompt beyond the champion's context is skipped and named), then
   * each mode group's answers, their exactness against the champion alone of the same group. */
  async measureStratum(ctx, stratum) {
    const { sub, groups, configs, drafters } = ctx;
    const sItems = ctx.items.filter((it) => it.stratum === stratum);
    for (let run = 0; run < sub.runs; run++) {
      for (const it of sItems) {
        const maxNew = Math.min(it.max_new_tokens, sub.max_new_tokens);
        const base = { chat: it.messages, max_new_tokens: maxNew };
        let w;
        try {
          w = await ctx.gen({ ...base, max_new_tokens: 2, temperature: 0,
            ...(drafters.includes('model') ? { drafter: 'model', k: 1 } : { drafter: 'none' }) });
        } catch (e) {     // a prompt longer than this champion's context: skipped, and said so
          if (!/context length/.test(e.message || '')) throw e;
          if (run === 0) ctx.skipped.push({ prompt_id: it.id, stratum, reason: e.message.replace(/^\w*Error: /, '') });
          ctx.done += groups.length * (1 + configs.length);
          ctx.tick(`${stratum}, skipped`);
          continue;
        }
        ctx.warmups.push({ run, stratum, prompt_id: it.id, prompt_tokens: w.prompt_tokens ?? null, ttft_ms: w.stats.ttft_ms ?? null });
        ctx.tick(`${stratum}, warm-up`);
        for (const [mode, seed] of groups) {
          const order = [null, ...configs];
          const shift = run % order.length;
          const rotated = [...order.slice(shift), ...order.slice(0, shift)];
          let alone = null;
          const group = [];
          for (const c of rotated) {
            const spec = c || { drafter: 'none', k: 0, adaptive: false };
            const out = await ctx.gen({ ...base, ...modeSettings(mode, seed, sub.temperature), ...spec });
            const r = record(out, { run, stratum, prompt_id: it.id, mode, seed, max_new_tokens: maxNew, ...spec });
            if (!c) alone = r;
            group.push(r);
            ctx.tick(`${stratum}, ${spec.drafter === 'none' ? 'champion alone' : `${spec.drafter} k=${spec.k}`} (${mode})`);
          }
          for (const r of group) {
            r.identical = r.drafter === 'none' ? null : JSON.stringify(r.token_ids) === JSON.stringify(alone.token_ids);
            ctx.records.push(r);
          }
        }
      }
      await ctx.sample(`${stratum} run ${run + 1}`);
    }
  }

  /** The cold time-to-first-token phase: per run each setting (rotated) on every prompt of the phase. */
  async coldPhase(ctx) {
    const { sub, ttft, ttftSettings } = ctx;
    for (let run = 0; run < ctx.ttftRuns; run++) {
      const shift = run % ttftSettings.length;
      const order = [...ttftSettings.slice(shift), ...ttftSettings.slice(0, shift)];
      const group = [];
      for (const [drafter, k] of order) {
        for (const it of ctx.ttftItems) {
          if (ctx.skipped.some((x) => x.prompt_id === it.id)) { ctx.tick(`${it.stratum}, skipped`); continue; }
          const maxNew = Math.min(it.max_new_tokens, ttft.max_new_tokens);
          const out = await ctx.gen({ chat: it.messages, max_new_tokens: maxNew, ...modeSettings('greedy', sub.seeds[0], 0), drafter, k });
          group.push(record(out, { run, stratum: it.stratum, prompt_id: it.id, mode: 'greedy', seed: sub.seeds[0],
            max_new_tokens: maxNew, drafter, k, adaptive: false, phase: 'ttft' }));
          ctx.tick(`${it.stratum}, cold time to first token (${drafter === 'none' ? 'champion alone' : `${drafter} k=${k}`})`);
        }
      }
      const alone = new Map(group.filter((r) => r.drafter === 'none').map((r) => [r.prompt_id, r.token_ids]));
      for (const r of group) {
        r.identical = r.drafter === 'none' || !alone.has(r.prompt_id) ? null
          : JSON.stringify(r.token_ids) === JSON.stringify(alone.get(r.prompt_id));
        ctx.cold.push(r);
      }
    }
  }

  render(fig, cancelledAt, total, wall) {
    const s = fig.summary;
    const head = document.createElement('p');
    head.id = 'bench-verdict';
    if (!s) head.textContent = 'Cancelled before any answer was measured.';
    else {
      head.className = s.all_identical ? 'ok' : 'flag';
      const bad = Object.entries(s.exactness).filter(([, e]) => e.failed.length).map(([k]) => k);
      head.textContent = (cancelledAt !== null ? `Cancelled after ${cancelledAt} of ${total} answers. ` : '')
        + (s.all_identical ? 'Every speculative answer was identical to the champion alone\'s.'
          : `EXACTNESS CHECK FAILED in: ${bad.join(', ')}`);
    }
    this.results.replaceChildren(head, ...fig.figures.map(figureElement));
    this.saveBtn.disabled = !this.receipt;
    this.status.textContent = cancelledAt !== null ? `Cancelled (${cancelledAt} of ${total} answers, ${fmtS(wall)}).`
      : `Done: ${total} answers in ${fmtS(wall)}.`;
    this.results.focus();
  }

  download() {
    if (!this.receipt) return;
    const blob = new Blob([JSON.stringify(this.receipt, null, 1)], { type: 'application/json' });
    const url = URL.createObjectURL(blob);
    const a = document.createElement('a');
    a.href = url;
    a.download = `exactspec-bench-${this.receipt.meta.backend}-${this.receipt.meta.started.slice(0, 19).replace(/[:T]/g, '-')}.json`;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }
}

class CancelledError extends Error {}

const root = document.getElementById('bench');
if (root) {
  const panel = new Panel(root);
  globalThis.exactspecBench = panel;   // tests and the console
  panel.describe();
}
