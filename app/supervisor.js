// supervisor.js — the page's side of a worker crash (issue 12), used by app/client.js.
//
// The page keeps, for the answer being written, what it needs to finish it in another worker: the request it came
// from (its chat / prompt and settings), the ids the answer had committed before this request (a Continue), and the
// ids the worker streamed (event.tokens carries only committed tokens). When the worker dies (its liveness lock is
// released: app/worker.js), the client starts a new worker, which boots and reloads the models from OPFS, and sends
// the same request with `resume: {answer, stream}` and the tokens still to write: the new worker's session
// re-prefills the conversation and the committed part of the answer and finishes it (exactspec.session). The
// answer equals a clean run's (greedy and coupled are functions of the position), and the text the caller saw
// streamed is the prefix it then continues: nothing twice, nothing lost.

import { DEFAULT_SETTINGS } from './protocol.js';

const BASE_KEYS = ['chat', 'prompt', 'prompt_ids', 'response_format'];

export class Conversation {
  constructor() {
    // the last answer: {base, budget, answer: ids, stream: ids the live decoder holds (since its last reset),
    // generation}; budget: the max_new_tokens its first request kept free of the context (a chat too long for the
    // context left out its oldest turns for it: a resume leaves out the same ones, exactspec.session.fit_prompt)
    this.last = null;
  }

  /** How to send `req` to the worker of `generation`: {req, base, before: {answer, stream}, send}. A Continue of an
   * answer written by a worker that has since died becomes a resume (the new worker has no memory of it). */
  plan(req, generation) {
    if (req.continue && this.last) {
      const before = { answer: [...this.last.answer], stream: [...this.last.stream] };
      const budget = this.last.budget;
      let send = req;
      if (this.last.generation !== generation) send = this.resumeRequest({ req, base: this.last.base, before, budget }, []);
      return { req, base: this.last.base, before, budget, send };
    }
    const base = {};
    for (const k of BASE_KEYS) if (req[k] !== undefined) base[k] = req[k];
    const budget = req.max_new_tokens ?? DEFAULT_SETTINGS.max_new_tokens;
    return { req, base, before: { answer: [], stream: [] }, budget, send: req };
  }

  /** The request that finishes plan's answer after `committed` more ids (null when nothing is left to write). */
  resumeRequest(plan, committed) {
    const max = plan.req.max_new_tokens ?? DEFAULT_SETTINGS.max_new_tokens;
    const left = max - committed.length;
    if (left < 1) return null;
    const { continue: _c, resume: _r, ...settings } = plan.req;
    for (const k of BASE_KEYS) delete settings[k];
    return { ...settings, ...plan.base, max_new_tokens: left,
      resume: { answer: [...plan.before.answer, ...committed], stream: [...plan.before.stream, ...committed],
        budget: plan.budget } };
  }

  /** The answer after its last attempt `res` (earlier attempts: `earlier` ids and texts streamed before a worker
   * died; `restarts`: what the page did). Records the conversation for a later Continue. */
  finish(plan, res, earlier, restarts, generation) {
    let out = res;
    if (restarts.length) {
      const ids = [...earlier.ids, ...res.token_ids];
      const notices = restarts.map((r) => `The worker stopped mid-answer (${r.why}): the page restarted it, reloaded ` +
        `the models from storage in ${Math.round(r.ms)} ms and finished the answer from the last committed token ` +
        `(${r.at_token} tokens in).`);
      out = { ...res, text: earlier.texts.join('') + res.text, token_ids: ids,
        recovery: [...restarts.map((r) => ({ cause: r.cause, action: 'worker_restarted', at_token: r.at_token,
          backend: null })), ...(res.recovery || [])],
        notices: [...notices, ...(res.notices || [])],
        stats: { ...res.stats, new_tokens: ids.length, worker_restarts: restarts.length } };
      if (res.receipt) {
        const r = JSON.parse(JSON.stringify(res.receipt));
        r.recovery = [...restarts.map((x) => ({ cause: x.cause, action: 'worker_restarted', at_token: x.at_token,
          backend: null })), ...r.recovery].slice(0, 64);
        r.faults = [...restarts.filter((x) => x.fault).map((x) => ({ kind: 'worker_killed', phase: x.fault.phase,
          round: x.fault.round, at_round: x.fault.at_round || 0, at_token: x.at_token })), ...r.faults].slice(0, 64);
        r.policy.resumed = true;
        r.counts.new_tokens = ids.length;
        out.receipt = r;
      }
    }
    const all = [...earlier.ids, ...res.token_ids];
    const keep = ['cancelled', 'error'].includes(res.finish_reason);
    this.last = { base: plan.base, budget: plan.budget, answer: [...plan.before.answer, ...all],
      stream: keep ? [...plan.before.stream, ...all] : [], generation };
    return out;
  }

  reset() { this.last = null; }
}
