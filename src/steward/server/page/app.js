// Steward's web page: follow one run live (with its relation graph), start runs, browse
// sessions, watch the job queue, and inspect, search and forget long-term memory.
//
// Plain ES module, no build step and no external assets, so it works offline next to
// `steward serve`. Everything that comes from the server goes into the page through
// textContent / createElement: tool outputs and model text are untrusted and must never
// become markup.

const TOKEN_KEY = 'steward.token';
const POLL_MS = 4000; // jobs and workers refresh while the page is visible
const RECONNECT_LIMIT = 8; // failed reconnects in a row before we stop and offer a button
const RECONNECT_CAP_MS = 10000;
const STREAM_HEALTHY_MS = 30000; // a stream that lasted this long was fine, whatever ended it
const TERMINAL = new Set(['done', 'failed', 'cancelled', 'dead']);
// What an end status that is not plain from its name means (said next to the answer).
const END_MEANS = { answered: 'the agent answered without saying the goal was done' };

/** A run's tokens: "~1,234 tokens (estimated)" when counted here because the server reported none. */
function tokensLabel(usage) {
  const tokens = (usage?.input_tokens ?? 0) + (usage?.output_tokens ?? 0);
  return usage?.estimated ? `~${tokens.toLocaleString('en-US')} tokens (estimated)` : `${tokens.toLocaleString('en-US')} tokens`;
}
// Resolved against the page, not the host root: works behind a path prefix too.
const BASE = new URL('.', location.href);

// ---------------------------------------------------------------- DOM helpers

/** Build an element. Strings among `children` become text nodes, never markup. */
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else if (key === 'testid') node.dataset.testid = value;
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  node.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

const SVG_NS = 'http://www.w3.org/2000/svg';

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  node.append(...children);
  return node;
}

const $ = (selector, root = document) => root.querySelector(selector);
const byTestId = (id, root = document) => root.querySelector(`[data-testid="${id}"]`);

function json(value) {
  return JSON.stringify(value, null, 2);
}

function short(text, limit) {
  const line = String(text ?? '').trim().split('\n')[0];
  return line.length > limit ? `${line.slice(0, limit - 1)}…` : line;
}

function ago(ts) {
  if (!ts) return '';
  const s = Math.max(0, Date.now() / 1000 - ts);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return new Date(ts * 1000).toLocaleDateString();
}

function clock(seconds) {
  const s = Math.max(0, Math.round(seconds));
  const m = Math.floor(s / 60);
  return m ? `${m}:${String(s % 60).padStart(2, '0')}` : `${s} s`;
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

let noticeTimer = 0;

/** A short message at the top of the page (errors from the API, confirmations). */
function notice(message, kind = 'error') {
  const box = $('#notice');
  box.textContent = message;
  box.className = `notice ${kind}`;
  box.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { box.hidden = true; }, 8000);
}

// ---------------------------------------------------------------- URL state
// The hash holds `run=<id>` (so a reload reopens the run) and, once, `token=<token>`.

function hashParams() {
  return new URLSearchParams(location.hash.replace(/^#/, ''));
}

function writeHash(params, { replace = false } = {}) {
  const hash = params.toString();
  const url = `${location.pathname}${location.search}${hash ? `#${hash}` : ''}`;
  if (replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
}

/** Move a `#token=` into localStorage and out of the address bar (and its history). */
function takeTokenFromUrl() {
  const params = hashParams();
  const token = params.get('token');
  if (token === null) return false;
  if (token) localStorage.setItem(TOKEN_KEY, token);
  params.delete('token');
  writeHash(params, { replace: true });
  return Boolean(token);
}

// ---------------------------------------------------------------- API

class AuthError extends Error {}

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function showTokenForm(message) {
  $('#token-message').textContent = message;
  $('#token-panel').hidden = false;
  $('#token-input').focus();
}

/** Call the API with the stored token; JSON in and out, or the raw Response with `stream`. */
async function api(path, { method = 'GET', body, headers = {}, signal, stream = false } = {}) {
  const token = localStorage.getItem(TOKEN_KEY);
  if (!token) {
    showTokenForm('Paste the API token of this server (the one `steward serve` was started with).');
    throw new AuthError('no token');
  }
  const init = { method, signal, headers: { Authorization: `Bearer ${token}`, ...headers } };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  const res = await fetch(new URL(path, BASE), init);
  if (res.status === 401) {
    showTokenForm('The server refused this token (401 Unauthorized). Paste the right one.');
    throw new AuthError('unauthorized');
  }
  if (!res.ok) throw await problem(res);
  return stream ? res : res.json();
}

/** The server's problem+json as one readable message ("title: detail"). */
async function problem(res) {
  let message = `${res.status} ${res.statusText}`;
  try {
    const body = await res.json();
    message = [body.title, body.detail].filter(Boolean).join(': ') || message;
  } catch {
    // not JSON: the status line is all we have
  }
  return new ApiError(res.status, message);
}

/** Show what went wrong, except what the token form or a deliberate abort already covers. */
function report(err) {
  if (err instanceof AuthError || err?.name === 'AbortError') return;
  notice(err?.message || String(err));
}

// ---------------------------------------------------------------- SSE over fetch
// EventSource cannot send an Authorization header, so the stream is read by hand.

/** Yield `{id, event, data}` for each message of a text/event-stream body. */
async function* readSse(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let id = null;
  let type = '';
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      // A trailing '\r' may be the first half of '\r\n': leave it for the next chunk.
      const cut = buffer.endsWith('\r') ? buffer.length - 1 : buffer.length;
      const lines = buffer.slice(0, cut).split(/\r\n|\r|\n/);
      buffer = lines.pop() + buffer.slice(cut);
      for (const line of lines) {
        if (line === '') {
          if (data.length) yield { id, event: type || 'message', data: data.join('\n') };
          id = null;
          type = '';
          data = [];
        } else if (!line.startsWith(':')) { // ':' lines are keep-alive comments
          const colon = line.indexOf(':');
          const field = colon < 0 ? line : line.slice(0, colon);
          let value = colon < 0 ? '' : line.slice(colon + 1);
          if (value.startsWith(' ')) value = value.slice(1);
          if (field === 'data') data.push(value);
          else if (field === 'event') type = value;
          else if (field === 'id') id = value;
        }
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// ---------------------------------------------------------------- one run, live

/** Everything shown about one run; it owns its stream, timers and DOM. */
class RunView {
  constructor(runId) {
    this.id = runId;
    this.abort = new AbortController();
    this.lastSeq = 0; // the highest seq applied: replays and resumes skip up to it
    this.finished = false;
    this.following = false; // its event stream is being read
    this.status = '';
    this.statusFromEvents = false;
    this.mode = '';
    this.firstTs = 0;
    this.lastTs = 0;
    this.steps = new Map(); // step -> {start, end, input, output}
    this.calls = new Map(); // call_id -> its timeline entry
    this.cards = new Map(); // pending id -> approval or question card
    this.meta = {};
    this.live = null; // the timeline entry that streamed text deltas grow
    this.chartTimer = 0;
    this.tick = 0;
    this.dom = null;
  }

  mount(container) {
    const root = $('#run-template').content.firstElementChild.cloneNode(true);
    const part = (id) => byTestId(id, root);
    this.dom = {
      root,
      goal: part('run-goal'),
      meta: part('run-meta'),
      status: part('run-status'),
      mode: part('mode'),
      cancel: part('cancel'),
      stream: part('stream-state'),
      pending: part('pending'),
      final: part('final'),
      answer: part('final-answer'),
      finalMeta: part('final-meta'),
      planGoal: part('plan-goal'),
      plan: part('plan'),
      facts: part('facts'),
      tasks: part('tasks'),
      notes: part('notes'),
      chart: part('chart'),
      spent: part('spent'),
      spentTable: part('spent-table'),
      timeline: part('timeline'),
      graphPanel: part('graph-panel'),
      graphState: part('graph-state'),
      graph: part('graph'),
    };
    root.dataset.runId = this.id;
    this.dom.goal.textContent = `Run ${this.id}`;
    this.dom.mode.addEventListener('change', () => this.switchMode(this.dom.mode.value));
    this.dom.cancel.addEventListener('click', () => this.cancel());
    // Drawn when opened (one request, not one per run shown), and again at the run's end.
    this.dom.graphPanel.addEventListener('toggle', () => { if (this.dom.graphPanel.open) this.loadGraph(); });
    container.replaceChildren(root);
    // One timer for every countdown on the page: deadlines are shown to the second.
    this.tick = setInterval(() => this.updateDeadlines(), 1000);
    this.drawChart();
  }

  dispose() {
    this.abort.abort();
    clearInterval(this.tick);
    clearTimeout(this.chartTimer);
  }

  async start() {
    try {
      this.showRun(await api(`v1/runs/${encodeURIComponent(this.id)}`, { signal: this.abort.signal }));
    } catch (err) {
      report(err);
      if (err instanceof ApiError && err.status === 404) {
        this.setStream(`No run ${this.id} on this server.`);
        return;
      }
    }
    await this.follow();
  }

  // ---- the stream

  /** Read the event stream to its end, reconnecting from the last seq when it drops. */
  async follow() {
    if (this.following) return;
    this.following = true;
    try {
      await this.followStream();
    } finally {
      this.following = false;
    }
  }

  /** The job list says the run is active again after its stream ended (it was retried): go on. */
  goOnIfActive(status) {
    if (this.following || this.abort.signal.aborted || TERMINAL.has(status)) return;
    this.finished = false;
    this.follow();
  }

  async followStream() {
    const { signal } = this.abort;
    let failures = 0;
    while (!signal.aborted && !this.finished) {
      try {
        const headers = { Accept: 'text/event-stream' };
        if (this.lastSeq > 0) headers['Last-Event-ID'] = String(this.lastSeq);
        const res = await api(`v1/runs/${encodeURIComponent(this.id)}/events`, { headers, signal, stream: true });
        const opened = Date.now();
        this.setStream('live');
        for await (const message of readSse(res.body)) {
          if (this.receive(message)) failures = 0; // progress: a later drop starts a fresh backoff
        }
        // A proxy that cuts idle streams (a long wait for approval) is no failing server.
        if (Date.now() - opened > STREAM_HEALTHY_MS) failures = 0;
      } catch (err) {
        if (signal.aborted || err instanceof AuthError) return;
        if (err instanceof ApiError && err.status < 500) { report(err); return; }
      }
      if (this.finished || signal.aborted) break;
      // The stream ended without `done`: a cancelled or dead job has none, so ask the run.
      const run = await api(`v1/runs/${encodeURIComponent(this.id)}`, { signal }).catch(() => null);
      if (run) this.showRun(run);
      if (run && TERMINAL.has(run.status)) break;
      failures += 1;
      if (failures > RECONNECT_LIMIT) {
        this.offerReconnect();
        return;
      }
      const wait = Math.min(RECONNECT_CAP_MS, 500 * 2 ** (failures - 1)) * (0.75 + Math.random() / 2);
      this.setStream(`connection lost; reconnecting in ${(wait / 1000).toFixed(1)} s (try ${failures} of ${RECONNECT_LIMIT})`);
      await sleep(wait, signal);
    }
    if (!signal.aborted) this.setStream(this.finished ? 'ended' : `ended (${this.status})`);
  }

  offerReconnect() {
    this.setStream('connection lost. ');
    this.dom.stream.append(el('button', {
      type: 'button', class: 'link', testid: 'reconnect', text: 'Reconnect', onclick: () => this.follow(),
    }));
  }

  setStream(text) {
    this.dom.stream.textContent = `stream: ${text}`;
  }

  /** Apply one SSE message; true when it was new. */
  receive(message) {
    let event;
    try {
      event = JSON.parse(message.data);
    } catch {
      return false; // not ours; nothing to show
    }
    const seq = Number(event.seq ?? message.id ?? 0);
    // seq 0: a live-only piece (a streamed text delta); everything else is applied once.
    if (seq > 0) {
      if (seq <= this.lastSeq) return false;
      this.lastSeq = seq;
    }
    try {
      this.apply(event);
    } catch (err) {
      console.error('could not show event', event, err); // one odd event must not stop the stream
    }
    return true;
  }

  // ---- events

  apply(event) {
    const d = event.data ?? {};
    if (this.finished && event.type !== 'done') {
      // A run retried after it ended goes on in the same log: live again from here.
      this.finished = false;
      this.dom.final.hidden = true;
    }
    if (event.ts) {
      this.firstTs ||= event.ts;
      this.lastTs = Math.max(this.lastTs, event.ts);
    }
    switch (event.type) {
      case 'run_start': return this.onRunStart(d);
      case 'step':
      case 'step_start': return this.onStep(d, event.ts);
      case 'model_reply': return this.onUsage(d);
      case 'thinking': return d.partial ? undefined : this.add(event, 'thinking', thinkingBody(d.text));
      case 'text': return this.onText(event, d);
      case 'phase': return this.add(event, 'phase', el('span', { class: `badge phase-${d.phase}`, text: d.phase }), ` ${d.summary ?? ''}`);
      case 'plan': return this.onPlan(d);
      case 'key_fact': return this.onFact(d);
      case 'tool_use': return this.onToolUse(event, d);
      case 'tool_result': this.onWorkResult(d); return this.onToolResult(event, d);
      case 'signal': return this.add(event, `signal ${d.level}`, d.message);
      case 'error': return this.add(event, d.recoverable ? 'error recoverable' : 'error', `${d.code}: ${d.message}`);
      case 'waiting': return this.onWaiting(event, d);
      case 'approval_gate': return this.onApprovalGate(event, d);
      case 'approval_result': return this.onApprovalResult(event, d);
      case 'answer': return this.onAnswer(event, d);
      case 'compaction': return this.add(event, 'muted', `context compacted (${d.kind} ${d.ref}, ${d.chars_before} chars)`);
      case 'mode': return this.onMode(event, d);
      case 'rewind': return this.add(event, 'muted', `workspace rewound to checkpoint ${d.checkpoint}`);
      case 'continuation': return this.onContinuation(event, d);
      case 'done': return this.onDone(event, d);
      default: return this.add(event, 'muted', `${event.type} ${short(JSON.stringify(d), 160)}`);
    }
  }

  /** Append one timeline entry, stamped with the time since the run began. */
  add(event, kind, ...body) {
    const offset = event.ts && this.firstTs ? `+${(event.ts - this.firstTs).toFixed(1)}s` : '';
    const item = el('li', { class: `entry ${kind}`, 'data-seq': event.seq || null, 'data-type': event.type },
      el('span', { class: 'when', text: offset, title: event.ts ? new Date(event.ts * 1000).toLocaleString() : null }),
      el('div', { class: 'body' }, ...body));
    this.dom.timeline.append(item);
    return item;
  }

  onRunStart(d) {
    this.dom.goal.textContent = d.goal || `Run ${this.id}`;
    this.setMeta({ model: d.model, persona: d.persona, workspace: d.workspace });
    this.liveStatus('running');
  }

  onStep(d, ts) {
    const previous = this.steps.get(d.step - 1);
    if (previous && !previous.end) previous.end = ts;
    const step = this.steps.get(d.step) ?? { input: 0, output: 0 };
    this.steps.set(d.step, { ...step, start: ts, end: 0 });
    this.dom.timeline.append(el('li', { class: 'step-mark', text: `step ${d.step} of ${d.max_steps}` }));
    this.scheduleChart();
  }

  onUsage(d) {
    const step = this.steps.get(d.step) ?? { start: 0, end: 0, input: 0, output: 0 };
    step.input += d.usage?.input_tokens ?? 0;
    step.output += d.usage?.output_tokens ?? 0;
    this.steps.set(d.step, step);
    this.scheduleChart();
  }

  onText(event, d) {
    if (d.partial) {
      // Deltas are live-only; show them in one growing line until the whole text arrives.
      this.live ??= this.add(event, 'text live', '');
      this.live.querySelector('.body').append(d.text);
      return;
    }
    this.live?.remove();
    this.live = null;
    this.add(event, 'text', el('div', { class: 'prose', text: d.text }));
  }

  onPlan(d) {
    this.dom.planGoal.textContent = `v${d.version}: ${d.goal}`;
    const tasks = d.sub_tasks ?? d.tasks ?? [];
    this.dom.plan.replaceChildren(...tasks.map((task) => {
      const current = task.id === d.current && task.status !== 'done';
      const box = el('input', { type: 'checkbox', disabled: true, 'aria-label': task.status });
      box.checked = task.status === 'done';
      const needs = task.status === 'pending' && task.depends_on?.length ? ` (needs ${task.depends_on.join(', ')})` : '';
      return el('li', {
        class: `task ${task.status}${current ? ' current' : ''}`,
        testid: 'plan-task',
        'data-status': task.status,
        'data-task-id': task.id,
      }, box, el('span', { text: `${task.id}. ${task.title}${needs}` }),
      task.status === 'failed' ? el('span', { class: 'badge bad', text: 'failed' }) : null);
    }));
  }

  onFact(d) {
    const source = d.source_tool ? ` (step ${d.source_step}, ${d.source_tool})` : ` (step ${d.source_step})`;
    this.dom.facts.append(el('li', { testid: 'fact' }, d.fact, el('span', { class: 'muted', text: source })));
  }

  onToolUse(event, d) {
    const item = this.add(event, 'tool', el('div', { class: 'tool-head' },
      el('span', { class: 'badge tool-name', testid: 'tool-name', text: d.tool }),
      el('span', { class: 'tool-state muted', text: 'running…' })),
    el('pre', { class: 'args', testid: 'tool-input', text: json(d.input) }));
    item.dataset.testid = 'tool-call';
    item.dataset.callId = d.call_id;
    item.dataset.input = JSON.stringify(d.input ?? {});
    item.dataset.status = 'running';
    this.calls.set(d.call_id, item);
  }

  onToolResult(event, d) {
    // A result without its call (resumed mid-call) still gets an entry of its own.
    if (!this.calls.has(d.call_id)) this.onToolUse(event, { ...d, input: {} });
    const item = this.calls.get(d.call_id);
    const ok = d.status === 'completed';
    item.dataset.status = ok ? 'completed' : 'failed';
    const state = item.querySelector('.tool-state');
    state.textContent = `${ok ? '✓' : '✗'} ${Math.round(d.duration_ms ?? 0)} ms${d.error_category ? ` · ${d.error_category}` : ''}`;
    state.className = `tool-state ${ok ? 'ok' : 'bad'}`;
    const output = String(d.output ?? '');
    const lines = output ? output.split('\n').length : 0;
    item.querySelector('.body').append(el('details', { class: 'output', testid: 'tool-output' },
      el('summary', { text: `output · ${lines} line${lines === 1 ? '' : 's'} · ${short(output, 90) || '(empty)'}` }),
      el('pre', { text: output })));
  }

  /** The gate names the tool, not the call: it is the newest call of that tool in `from`. */
  setCallState(tool, from, to, text) {
    const call = [...this.calls.values()].reverse()
      .find((item) => item.dataset.status === from && item.querySelector('.tool-name').textContent === tool);
    if (!call) return;
    call.dataset.status = to;
    call.querySelector('.tool-state').textContent = text;
  }

  onWaiting(event, d) {
    this.liveStatus('waiting');
    if (d.kind === 'question') {
      this.add(event, 'waiting', `asks: ${d.question}`);
      this.showQuestion(d);
    } else if (d.kind === 'job') {
      this.add(event, 'waiting muted', `waits for a job it delegated: ${d.question}`);
    }
    // kind "approval": its approval_gate event came just before and shows the card.
  }

  /** The call a gate stops: the newest call of its tool with its input, not yet answered. */
  gatedCall(d) {
    const input = JSON.stringify(d.input ?? {});
    const calls = [...this.calls.values()];
    // Asked again (a run retried while it waited): the call it stopped the first time.
    const again = calls.find((item) => item.dataset.approvalId === d.id);
    if (again) return again;
    return calls.reverse().find((item) => item.dataset.status === 'running' && !item.dataset.approvalId
      && item.querySelector('.tool-name').textContent === d.tool && item.dataset.input === input) ?? null;
  }

  /** A line of the call's own entry: its approval, where it happened (before its output). */
  approvalLine(event, call, kind, text) {
    const offset = event.ts && this.firstTs ? `+${(event.ts - this.firstTs).toFixed(1)}s ` : '';
    const line = el('div', { class: `call-approval ${kind}`, testid: 'call-approval', 'data-seq': event.seq || null }, offset + text);
    const output = call.querySelector('.output');
    if (output) output.before(line);
    else call.querySelector('.body').append(line);
  }

  onApprovalGate(event, d) {
    const call = d.waits_for ? null : this.gatedCall(d);
    if (call) {
      call.dataset.approvalId = d.id;
      call.dataset.status = 'waiting';
      call.querySelector('.tool-state').textContent = 'waits for approval…';
      this.approvalLine(event, call, 'gate', `${d.tool} needs approval: ${d.reason}`);
    } else {
      this.add(event, 'gate', `${d.tool} needs approval: ${d.reason}`);
      this.setCallState(d.tool, 'running', 'waiting', d.waits_for ? `waits for job ${d.waits_for}…` : 'waits for approval…');
    }
    if (this.finished) return;
    if (d.waits_for) {
      // A delegation waits for its job, not for a person: nothing to click but the job itself.
      this.putCard(d.id, el('div', { class: 'card', testid: 'job-wait' },
        `Waiting for job ${d.waits_for} (${d.tool}). `,
        el('a', { href: `#run=${encodeURIComponent(d.waits_for)}`, text: 'open that job' })));
      return;
    }
    this.putCard(d.id, approvalCard(d, {
      approve: () => this.decide(d.id, 'approve', {}),
      deny: (reason) => this.decide(d.id, 'deny', { reason }),
    }));
    this.updateDeadlines();
  }

  onApprovalResult(event, d) {
    this.dropCard(d.id);
    const who = d.by === 'timeout' ? 'at its deadline' : `by ${d.by}`;
    const text = `${d.tool} ${d.decision} ${who}${d.reason ? `: ${d.reason}` : ''}`;
    const call = [...this.calls.values()].find((item) => item.dataset.approvalId === d.id);
    if (call) {
      if (d.decision === 'approved' && call.dataset.status === 'waiting') {
        call.dataset.status = 'running';
        call.querySelector('.tool-state').textContent = 'running…';
      }
      this.approvalLine(event, call, `decision ${d.decision}`, text);
    } else {
      if (d.decision === 'approved') this.setCallState(d.tool, 'waiting', 'running', 'running…');
      this.add(event, `decision ${d.decision}`, text);
    }
    this.liveStatus('running');
  }

  onAnswer(event, d) {
    this.dropCard(d.id);
    this.add(event, 'answer', `answered: ${d.answer}`);
    this.liveStatus('running');
  }

  onMode(event, d) {
    this.mode = d.mode;
    this.dom.mode.value = d.mode;
    this.add(event, 'muted', `mode switched to ${d.mode}`);
  }

  onDone(event, d) {
    this.finished = true;
    const last = [...this.steps.values()].at(-1);
    if (last && !last.end) last.end = event.ts;
    for (const id of [...this.cards.keys()]) this.dropCard(id);
    this.setStatus(d.status, d.end_status);
    this.dom.final.hidden = false;
    this.dom.final.dataset.status = d.status;
    this.dom.final.dataset.end = d.end_status ?? '';
    this.dom.answer.textContent = d.message;
    const ended = END_MEANS[d.end_status] ? `${d.end_status} (${END_MEANS[d.end_status]})` : (d.end_status ?? d.status);
    this.dom.finalMeta.textContent =
      `${ended} · ${d.steps} steps · ${d.tool_calls} tool calls · ${tokensLabel(d.usage)}`;
    this.add(event, `done ${d.status}`, `run ${d.status}${d.end_status ? ` (${d.end_status})` : ''}`);
    this.scheduleChart();
    if (this.dom.graphPanel.open) this.loadGraph();
    this.loadWork();
    this.loadSpent();
    refreshSoon();
  }

  // ---- what the run spent, and its budgets (issue 24)

  async loadSpent() {
    try {
      const s = await api(`v1/runs/${encodeURIComponent(this.id)}/spent`, { signal: this.abort.signal });
      const money = (v) => (v === null || v === undefined ? 'cost unknown' : `$${v.toFixed(4)}`);
      this.dom.spent.textContent =
        `${s.tokens.toLocaleString()} tokens · ${money(s.cost_usd)} · ${s.time_s.toFixed(1)} s · ${s.tool_calls} tool calls`;
      const row = (tag, cells) => el('tr', {}, cells.map((c) => el(tag, { text: String(c) })));
      const lines = (title, unit, list) => list.map((l) => row('td', [
        title, l.name, `${l.count} ${unit}`, l.tokens.toLocaleString(), money(l.cost_usd), `${l.time_s.toFixed(1)} s`,
      ]));
      const budgets = s.budgets.map((b) => row('td', [
        'budget', b.scope,
        Object.entries(b.limits).filter(([, v]) => v > 0).map(([k, v]) => `${k} ${b.spent[k].toFixed(k === 'cost_usd' ? 4 : 0)} of ${v}`).join(', '),
        '', '', '',
      ]));
      this.dom.spentTable.replaceChildren(
        row('th', ['', 'name', 'count', 'tokens', 'cost', 'time']),
        ...lines('phase', 'steps', s.phases), ...lines('tool', 'calls', s.tools), ...budgets,
      );
    } catch (err) {
      report(err);
    }
  }

  // ---- tasks, notes and continuations (issue 23)

  /** A tasks or note call changed what the run keeps: fetch it again. */
  onWorkResult(d) {
    if (d.tool === 'tasks' || d.tool === 'note') this.loadWork();
  }

  onContinuation(event, d) {
    const why = (d.reasons || []).join('; ');
    const said = d.asked
      ? `asked whether it is done (continuation ${d.number}): ${why}`
      : `not asked again after ${d.number} continuation(s): ${why}`;
    return this.add(event, d.asked ? 'signal warning continuation' : 'muted continuation', said);
  }

  async loadWork() {
    try {
      const work = await api(`v1/runs/${encodeURIComponent(this.id)}/work`, { signal: this.abort.signal });
      const tasks = work.tasks.map((t) => el('li', { class: t.done ? 'task done' : 'task', text: `${t.done ? '✓' : '○'} ${t.id}. ${t.text}` }));
      this.dom.tasks.replaceChildren(...(tasks.length ? tasks : [el('li', { class: 'muted', text: 'No tasks.' })]));
      const notes = work.notes.map((n) => el('li', { class: 'note', text: `#${n.id} [${n.about}] ${n.text}` }));
      this.dom.notes.replaceChildren(...(notes.length ? notes : [el('li', { class: 'muted', text: 'No notes.' })]));
    } catch (err) {
      report(err);
    }
  }

  // ---- relation graph

  async loadGraph() {
    this.dom.graphState.textContent = 'loading…';
    try {
      const graph = await api(`v1/runs/${encodeURIComponent(this.id)}/graph`, { signal: this.abort.signal });
      this.dom.graph.replaceChildren(graphTree(graph));
      const truncated = graph.truncated ? ' (cut at its bounds)' : '';
      this.dom.graphState.textContent = `${graph.nodes.length} nodes, ${graph.edges.length} edges${truncated}`;
    } catch (err) {
      this.dom.graphState.textContent = err instanceof ApiError ? `no graph: ${err.message}` : '';
      report(err);
    }
  }

  // ---- run header and status

  showRun(run) {
    if (run.goal && !this.dom.goal.dataset.set) {
      this.dom.goal.textContent = run.goal;
      this.dom.goal.dataset.set = '1';
    }
    this.setMeta(run);
    if (run.mode) {
      this.mode = run.mode;
      this.dom.mode.value = run.mode;
    }
    // Once events flow they say what the run is doing; a reply to a click may be older.
    if (!this.finished && (!this.statusFromEvents || TERMINAL.has(run.status))) this.setStatus(run.status, run.end_status);
    if (TERMINAL.has(run.status) && !this.finished) {
      // A job that ended without a `done` event (cancelled while it waited, dead): say so,
      // and take away what can no longer be answered.
      for (const id of [...this.cards.keys()]) this.dropCard(id);
      this.dom.final.hidden = false;
      this.dom.final.dataset.status = run.status;
      this.dom.answer.textContent = run.output || run.error || `The run ended ${run.status}.`;
    }
    if (run.session_id) showSession(run.session_id, { quiet: true });
  }

  setMeta({ session_id: session, model, persona, workspace }) {
    this.meta = { ...this.meta, ...Object.fromEntries(
      Object.entries({ session, model, persona, workspace }).filter(([, v]) => v)) };
    const m = this.meta;
    // Paths are long and say little at a glance: the last folder (or file) is shown, the whole
    // path is in the tooltip.
    const short = (path) => String(path).replace(/\/+$/, '').split('/').pop() || path;
    const shownModel = m.model && (m.model.startsWith('scripted:') ? `scripted:${short(m.model.slice(9))}` : m.model);
    this.dom.meta.textContent = [`id ${this.id}`, m.session && `session ${m.session}`, m.persona && `persona ${m.persona}`,
      shownModel && `model ${shownModel}`, m.workspace && `workspace ${short(m.workspace)}`].filter(Boolean).join(' · ');
    this.dom.meta.title = [m.model && `model ${m.model}`, m.workspace && `workspace ${m.workspace}`]
      .filter(Boolean).join('\n');
  }

  liveStatus(status) {
    this.statusFromEvents = true;
    if (!this.finished) this.setStatus(status);
  }

  setStatus(status, endStatus) {
    if (!status) return;
    this.status = status;
    const s = this.dom.status;
    s.textContent = endStatus ? `${status} · ${endStatus}` : status;
    s.dataset.status = status;
    s.dataset.end = endStatus ?? '';
    s.className = `status status-${status}`;
    const ended = TERMINAL.has(status);
    this.dom.cancel.disabled = ended;
    this.dom.mode.disabled = ended;
  }

  // ---- pending cards (approval, question)

  putCard(id, card) {
    this.dropCard(id);
    card.dataset.pendingId = id;
    this.cards.set(id, card);
    this.dom.pending.append(card);
  }

  dropCard(id) {
    this.cards.get(id)?.remove();
    this.cards.delete(id);
  }

  showQuestion(d) {
    const text = el('textarea', { testid: 'answer', rows: 3, 'aria-label': 'Your answer' });
    const send = el('button', { type: 'submit', testid: 'answer-send', text: 'Send answer' });
    const form = el('form', { class: 'card question', testid: 'question-card' },
      el('h3', { text: 'The agent asks' }),
      el('p', { class: 'prose', testid: 'question', text: d.question }),
      text, send);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      if (!text.value.trim()) { text.focus(); return; }
      send.disabled = true;
      try {
        this.showRun(await api(`v1/runs/${encodeURIComponent(this.id)}/answer`, { method: 'POST', body: { text: text.value } }));
      } catch (err) {
        send.disabled = false;
        report(err);
      }
    });
    this.putCard(d.id, form);
  }

  updateDeadlines() {
    for (const node of this.dom.pending.querySelectorAll('[data-deadline]')) {
      const left = Number(node.dataset.deadline) - Date.now() / 1000;
      const then = node.dataset.default === 'allow' ? 'then it is allowed' : 'then it is denied';
      node.textContent = left > 0 ? `${clock(left)} left, ${then}` : `deadline passed: ${then.replace('then it is ', '')}`;
      node.classList.toggle('urgent', left < 30);
    }
    if (!this.finished) this.scheduleChart(); // the open step's bar grows with time
  }

  // ---- actions

  async decide(approvalId, action, body) {
    const card = this.cards.get(approvalId);
    card?.querySelectorAll('button').forEach((b) => { b.disabled = true; });
    try {
      const run = await api(`v1/runs/${encodeURIComponent(this.id)}/${action}`, { method: 'POST', body: { ...body, approval_id: approvalId } });
      this.showRun(run);
      card?.classList.add('sent');
    } catch (err) {
      card?.querySelectorAll('button').forEach((b) => { b.disabled = false; });
      report(err);
    }
  }

  async switchMode(mode) {
    try {
      this.showRun(await api(`v1/runs/${encodeURIComponent(this.id)}/mode`, { method: 'POST', body: { mode } }));
    } catch (err) {
      if (this.mode) this.dom.mode.value = this.mode;
      report(err);
    }
  }

  async cancel() {
    this.dom.cancel.disabled = true;
    try {
      this.showRun(await api(`v1/runs/${encodeURIComponent(this.id)}/cancel`, { method: 'POST' }));
    } catch (err) {
      this.dom.cancel.disabled = false;
      report(err);
    }
  }

  // ---- chart

  scheduleChart() {
    // Replaying a long run applies hundreds of events at once: draw once they have settled.
    clearTimeout(this.chartTimer);
    this.chartTimer = setTimeout(() => this.drawChart(), 150);
  }

  drawChart() {
    const rows = [...this.steps.entries()].sort(([a], [b]) => a - b).map(([step, s]) => {
      const end = s.end || (this.finished ? this.lastTs : Math.max(this.lastTs, Date.now() / 1000));
      return { step, input: s.input, output: s.output, seconds: s.start ? Math.max(0, end - s.start) : 0, open: !s.end };
    });
    this.dom.chart.replaceChildren(stepChart(rows));
  }
}

function thinkingBody(text) {
  return el('details', { class: 'thinking' }, el('summary', { text: `thinking · ${short(text, 90)}` }),
    el('div', { class: 'prose', text }));
}

/** The card for a call that waits for approval: the exact tool and input, and the clock. */
function approvalCard(d, { approve, deny }) {
  const reason = el('input', { testid: 'deny-reason', placeholder: 'Why deny? (the agent reads this)', 'aria-label': 'Reason to deny' });
  const denyButton = el('button', { type: 'button', class: 'danger', testid: 'deny', text: 'Deny' });
  denyButton.addEventListener('click', () => {
    if (!reason.value.trim()) {
      reason.focus();
      notice('Say why you deny the call: the agent reads the reason and can try something else.');
      return;
    }
    deny(reason.value.trim());
  });
  reason.addEventListener('keydown', (e) => { if (e.key === 'Enter') denyButton.click(); });
  const deadline = d.deadline
    ? el('p', { class: 'deadline', testid: 'deadline', 'data-deadline': d.deadline, 'data-default': d.default })
    : el('p', { class: 'deadline', testid: 'deadline', text: 'no deadline' });
  return el('section', { class: 'card approval', testid: 'approval-card', role: 'group', 'aria-label': 'Approval needed' },
    el('h3', {}, 'Approve ', el('code', { testid: 'approval-tool', text: d.tool }), '?'),
    // A push or a pull request shows what would leave the machine, line by line (steward-forge).
    d.description && d.description.includes('\n')
      ? el('pre', { class: 'args', testid: 'approval-detail', text: d.description })
      : d.description ? el('p', { class: 'muted', text: d.description }) : null,
    el('pre', { class: 'args', testid: 'approval-input', text: json(d.input) }),
    el('p', { testid: 'approval-reason', text: `Why it asks: ${d.reason}` }),
    d.suggestion ? el('p', { class: 'muted', text: `Rule it would match: ${d.suggestion}` }) : null,
    deadline,
    el('div', { class: 'actions' },
      el('button', { type: 'button', class: 'primary', testid: 'approve', text: 'Approve', onclick: approve }),
      reason, denyButton));
}

/** Two rows of bars per step: tokens (input + output, stacked) and seconds. Inline SVG. */
function stepChart(rows) {
  if (!rows.length) return el('p', { class: 'muted', text: 'No model calls yet.' });
  const width = 640;
  const rowHeight = 64;
  const top = 16;
  const gap = 26;
  const slot = width / Math.max(rows.length, 8); // a short run keeps narrow bars on the left
  const bar = Math.max(2, slot * 0.7);
  const maxTokens = Math.max(1, ...rows.map((r) => r.input + r.output));
  const maxSeconds = Math.max(0.001, ...rows.map((r) => r.seconds));
  const tokensBase = top + rowHeight;
  const secondsBase = tokensBase + gap + rowHeight;
  const chart = svg('svg', {
    viewBox: `0 0 ${width} ${secondsBase + 16}`, class: 'step-chart', role: 'img',
    'aria-label': `Tokens and seconds for ${rows.length} steps`,
  });
  const label = (y, text) => svg('text', { x: 0, y, class: 'chart-label' }, text);
  chart.append(label(top - 4, `tokens per step (max ${maxTokens.toLocaleString()}) · input / output`),
    label(tokensBase + gap - 4, `seconds per step (max ${maxSeconds.toFixed(1)})`));
  rows.forEach((r, i) => {
    const x = i * slot + (slot - bar) / 2;
    const hIn = (rowHeight * r.input) / maxTokens;
    const hOut = (rowHeight * r.output) / maxTokens;
    const hTime = (rowHeight * r.seconds) / maxSeconds;
    const tip = `step ${r.step}: ${r.input} input + ${r.output} output tokens, ${r.seconds.toFixed(1)} s${r.open ? ' so far' : ''}`;
    chart.append(svg('g', { class: 'chart-step', 'data-step': r.step },
      svg('title', {}, tip),
      svg('rect', { x, y: tokensBase - hIn, width: bar, height: hIn, class: 'bar-in' }),
      svg('rect', { x, y: tokensBase - hIn - hOut, width: bar, height: hOut, class: 'bar-out' }),
      svg('rect', { x, y: secondsBase - hTime, width: bar, height: hTime, class: r.open ? 'bar-time open' : 'bar-time' }),
      rows.length <= 40 ? svg('text', { x: x + bar / 2, y: secondsBase + 12, class: 'chart-tick' }, String(r.step)) : ''));
  });
  return chart;
}

// ---------------------------------------------------------------- relation graph

// Outgoing edges are drawn in this order under each node; other kinds follow.
const EDGE_ORDER = ['plans', 'depends_on', 'child_job', 'subtask_of', 'touched', 'read', 'remembered'];
const GRAPH_DEPTH = 8; // nesting shown at most; deeper nodes are listed by name only

/**
 * The graph as nested lists from its root: each node, then its outgoing edges ("→ touched")
 * with the node each leads to. A node met a second time is named, not expanded again.
 */
function graphTree(graph) {
  const nodes = new Map(graph.nodes.map((n) => [n.id, n]));
  const out = new Map();
  for (const edge of graph.edges) {
    if (!out.has(edge.source)) out.set(edge.source, []);
    out.get(edge.source).push(edge);
  }
  const rank = (kind) => (EDGE_ORDER.includes(kind) ? EDGE_ORDER.indexOf(kind) : EDGE_ORDER.length);
  for (const edges of out.values()) edges.sort((a, b) => rank(a.kind) - rank(b.kind));
  const seen = new Set();

  const branch = (id, depth) => {
    const node = nodes.get(id) ?? { id, kind: id.split(':')[0], label: id, status: null };
    const again = seen.has(id);
    seen.add(id);
    const item = el('li', { class: 'graph-item' }, graphNode(node, again));
    const edges = again || depth >= GRAPH_DEPTH ? [] : out.get(id) ?? [];
    if (edges.length) {
      item.append(el('ul', { class: 'graph-children' }, ...edges.map((edge) => {
        const child = branch(edge.target, depth + 1);
        child.prepend(el('span', { class: `graph-edge edge-${edge.kind}`, testid: 'graph-edge', 'data-kind': edge.kind,
          text: `→ ${edge.kind.replace('_', ' ')}${edgeNote(edge)} ` }));
        return child;
      })));
    }
    return item;
  };

  const roots = [graph.root, ...graph.nodes.map((n) => n.id).filter((id) => id !== graph.root)];
  const tree = el('ul', { class: 'graph-tree' });
  for (const id of roots) if (!seen.has(id)) tree.append(branch(id, 0)); // unreached ones at the top level
  return tree;
}

function graphNode(node, again) {
  const label = node.kind === 'memory' ? `“${short(node.label, 80)}”` : short(node.label, 120);
  const runId = node.kind === 'run' ? node.id.slice('run:'.length) : '';
  // Another run (a child job, a parent) opens with a click; the one shown is plain text.
  const name = runId && runId !== current?.id
    ? el('button', { type: 'button', class: 'link', testid: 'graph-open-run', text: label, onclick: () => openRun(runId) })
    : label;
  return el('span', { class: `graph-node node-${node.kind}${again ? ' again' : ''}`, testid: 'graph-node',
    'data-node-id': node.id, 'data-kind': node.kind, title: node.id },
  el('span', { class: 'badge', text: node.kind }), ' ', name,
  node.status ? el('span', { class: `muted status-${node.status}`, text: ` ${node.status}` }) : null,
  again ? el('span', { class: 'muted', text: ' (above)' }) : null);
}

function edgeNote(edge) {
  const d = edge.data ?? {};
  if (d.calls) return ` (${d.calls} call${d.calls === 1 ? '' : 's'}${d.tools?.length ? `: ${d.tools.join(', ')}` : ''})`;
  if (d.role) return ` (${d.role})`;
  return '';
}

// ---------------------------------------------------------------- long-term memory

const MEMORY_PAGE = 25;
// The pages of the memory list: the `before` cursor of each page shown so far ('' = the newest).
const memoryPages = [''];

/** The scope fields as query parameters; empty ones are left out ("any" in the list). */
function memoryScope() {
  const data = new FormData($('#memory-filters'));
  const params = new URLSearchParams();
  for (const key of ['user', 'persona', 'workspace']) {
    const value = String(data.get(key) ?? '').trim();
    if (value) params.set(key, value);
  }
  return { params, data };
}

function memoryListQuery(before) {
  const { params, data } = memoryScope();
  if (data.get('kind')) params.set('kind', String(data.get('kind')));
  if (data.get('hidden')) params.set('hidden', 'true');
  params.set('limit', String(MEMORY_PAGE));
  if (before) params.set('before', before);
  return params;
}

async function loadMemory() {
  const before = memoryPages.at(-1);
  const { items, next } = await api(`v1/memory?${memoryListQuery(before)}`);
  $('#memory-items').replaceChildren(...items.map((item) => memoryItem(item)));
  if (!items.length) $('#memory-items').append(el('li', { class: 'muted', text: before ? 'No older items.' : 'Nothing remembered in this scope.' }));
  $('#memory-count').textContent = `${items.length}${next ? '+' : ''} shown`;
  $('#memory-older').hidden = !next;
  $('#memory-older').onclick = () => { memoryPages.push(String(next)); loadMemory().catch(report); };
  $('#memory-newer').hidden = memoryPages.length < 2;
  $('#memory-page').textContent = memoryPages.length > 1 ? `page ${memoryPages.length}` : '';
}

function scopeText(scope) {
  return `${scope.user} · ${scope.persona || '(no persona)'} · ${scope.workspace}`;
}

/** One item: its id as the tools name it (m12), kind, scope, tags and text; hide and purge. */
function memoryItem(item, extra = null) {
  const state = item.hidden_at ? 'hidden' : item.expires_at && item.expires_at * 1000 < Date.now() ? 'expired' : 'visible';
  return el('li', { class: `memory-item ${state}`, testid: 'memory-item', 'data-id': item.id, 'data-state': state },
    el('div', { class: 'memory-head' },
      el('code', { testid: 'memory-id', text: `m${item.id}` }),
      el('span', { class: 'badge', text: item.kind }),
      state !== 'visible' ? el('span', { class: 'badge bad', testid: 'memory-state', text: state }) : null,
      el('span', { class: 'muted', testid: 'memory-scope', text: scopeText(item.scope) }),
      item.tags.length ? el('span', { class: 'muted', text: `tags: ${item.tags.join(' ')}` }) : null,
      item.merged > 1 ? el('span', { class: 'muted', text: `merged ×${item.merged}` }) : null,
      item.run_id ? el('button', { type: 'button', class: 'link', testid: 'memory-run', text: `from run ${item.run_id}`,
        onclick: () => { showView('', { push: true }); openRun(item.run_id); } }) : null,
      el('span', { class: 'muted', text: ago(item.created_at), title: new Date(item.created_at * 1000).toLocaleString() }),
      el('span', { class: 'memory-actions' },
        item.hidden_at ? null : el('button', { type: 'button', class: 'link', testid: 'memory-hide', text: 'Hide',
          title: 'Forget: kept, never recalled', onclick: () => forgetMemory(item, false) }),
        el('button', { type: 'button', class: 'link danger-link', testid: 'memory-purge', text: 'Purge',
          title: 'Delete for good', onclick: () => forgetMemory(item, true) }))),
    extra,
    el('div', { class: 'prose memory-text', testid: 'memory-text', text: item.text }));
}

async function forgetMemory(item, purge) {
  const what = short(item.text, 60);
  const question = purge
    ? `Purge m${item.id} (“${what}”)? Its text is deleted from the store for good.`
    : `Hide m${item.id} (“${what}”)? It is kept (listed with "hidden") but never recalled again.`;
  if (!window.confirm(question)) return;
  try {
    await api(`v1/memory/${item.id}${purge ? '?purge=true' : ''}`, { method: 'DELETE' });
    notice(`m${item.id} ${purge ? 'purged' : 'hidden'}.`, 'info');
    for (const shown of document.querySelectorAll(`#memory-results [data-id="${item.id}"]`)) shown.remove();
    await loadMemory();
  } catch (err) {
    report(err);
  }
}

async function searchMemory(event) {
  event.preventDefault();
  const form = new FormData(event.currentTarget);
  const { params } = memoryScope();
  params.set('q', String(form.get('q') ?? ''));
  params.set('k', String(form.get('k') || 5));
  const explain = Boolean(form.get('explain'));
  if (explain) params.set('explain', 'true');
  try {
    const found = await api(`v1/memory/search?${params}`);
    $('#memory-mode').textContent = found.mode === 'hybrid'
      ? `By words and meaning (vectors: ${found.vector_backend}), in ${scopeText(found.scope)}.`
      : `By words only: no [memory] embedder is configured (set one for recall by meaning). In ${scopeText(found.scope)}.`;
    $('#memory-results').replaceChildren(found.hits.length ? memoryHits(found.hits, explain)
      : el('p', { class: 'muted', testid: 'memory-none', text: `Nothing in this scope matches “${found.query}”.` }));
  } catch (err) {
    report(err);
  }
}

function rankText(value) {
  return value === null || value === undefined ? '–' : String(value);
}

/** The hits, best first; with explain, each says its ranks in both lists and the fused score. */
function memoryHits(hits, explain) {
  return el('ol', { class: 'memory-items hits' }, ...hits.map((hit) => {
    const why = explain && hit.explain ? el('div', { class: 'explain', testid: 'memory-explain-row' },
      el('span', { testid: 'explain-keyword', text: `keyword rank ${rankText(hit.explain.keyword_rank)}` }),
      el('span', { testid: 'explain-vector', text: `vector rank ${rankText(hit.explain.vector_rank)}` }),
      el('span', { testid: 'explain-score', text: `fused ${hit.explain.score.toFixed(4)}` }),
      el('span', { testid: 'explain-similarity', text: `similarity ${hit.explain.similarity === null ? '–' : hit.explain.similarity.toFixed(3)}` }))
      : null;
    const item = memoryItem(hit.item, why);
    item.dataset.testid = 'memory-hit';
    return item;
  }));
}

/** The export as a file: fetched with the token (a plain link could not send it). */
async function exportMemory() {
  const { params, data } = memoryScope();
  if (data.get('kind')) params.set('kind', String(data.get('kind')));
  try {
    const res = await api(`v1/memory/export?${params}`, { stream: true });
    const url = URL.createObjectURL(await res.blob());
    const link = el('a', { href: url, download: 'steward-memory.jsonl' });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (err) {
    report(err);
  }
}

// ---------------------------------------------------------------- views

/** Runs (the default) or memory, as the hash's `view=` says. */
function showView(view, { push = false } = {}) {
  const memory = view === 'memory';
  $('#app').hidden = memory;
  $('#memory-view').hidden = !memory;
  $('#nav-runs').toggleAttribute('aria-current', !memory);
  $('#nav-memory').toggleAttribute('aria-current', memory);
  if (push) {
    const params = hashParams();
    if (memory) params.set('view', 'memory');
    else params.delete('view');
    writeHash(params);
  }
  if (memory && localStorage.getItem(TOKEN_KEY)) loadMemory().catch(report);
}

// ---------------------------------------------------------------- sessions, personas, new runs

let current = null; // the RunView on screen
let shownSession = '';

function openRun(runId, { push = true } = {}) {
  if (current?.id === runId) return;
  current?.dispose();
  current = null;
  if (push) {
    const params = hashParams();
    if (runId) params.set('run', runId);
    else params.delete('run');
    writeHash(params);
  }
  if (!runId) {
    $('#run-view').replaceChildren(el('p', { class: 'placeholder', text: 'Start a run or pick one from a session to follow it here.' }));
    return;
  }
  current = new RunView(runId);
  current.mount($('#run-view'));
  current.start();
}

const SESSIONS_PAGE = 20;
// The pages of the sessions list: the `before` cursor of each page shown so far ('' = the newest).
const sessionPages = [''];

/** What a session's list entry says of it: its newest run's state, or that it is closed. */
function sessionState(s) {
  if (s.status === 'closed') return 'closed';
  if (!s.last_run) return 'no runs yet';
  return s.last_run.end_status || s.last_run.status;
}

async function loadSessions() {
  const before = sessionPages.at(-1);
  const query = `limit=${SESSIONS_PAGE}${before ? `&before=${encodeURIComponent(before)}` : ''}`;
  const { sessions, next } = await api(`v1/sessions?${query}`);
  const select = byTestId('session-select');
  const chosen = select.value;
  select.replaceChildren(el('option', { value: '', text: '(new session)' }),
    ...sessions.map((s) => el('option', { value: s.id, text: `${s.title || s.id} (${s.id})` })));
  if (chosen && !sessions.some((s) => s.id === chosen)) select.append(el('option', { value: chosen, text: chosen }));
  select.value = chosen;
  $('#sessions').replaceChildren(...sessions.map((s) => el('li', {},
    el('button', {
      type: 'button', class: `item${s.id === shownSession ? ' selected' : ''}`, testid: 'session', 'data-session-id': s.id,
      'data-state': sessionState(s), onclick: () => showSession(s.id),
    }, el('span', { text: s.title || '(untitled)' }),
    el('span', { class: `muted status-${s.last_run?.status ?? 'none'}`, testid: 'session-state', text: ` ${sessionState(s)}` }),
    el('span', { class: 'muted', text: ` · ${ago(s.updated_at)}`, title: new Date(s.updated_at * 1000).toLocaleString() })))));
  if (!sessions.length) $('#sessions').append(el('li', { class: 'muted', text: before ? 'No older sessions.' : 'No sessions yet.' }));
  $('#sessions-older').hidden = !next;
  $('#sessions-older').onclick = () => { sessionPages.push(next); loadSessions().catch(report); };
  $('#sessions-newer').hidden = sessionPages.length < 2;
  $('#sessions-page').textContent = sessionPages.length > 1 ? `page ${sessionPages.length}` : '';
}

function newerSessions() {
  if (sessionPages.length > 1) sessionPages.pop();
  loadSessions().catch(report);
}

/**
 * Show a session's turns. `quiet` (opened with a run): no reload of the one shown, no errors;
 * `refresh` (the poll): reload it, no errors.
 */
async function showSession(id, { quiet = false, refresh = false } = {}) {
  if (quiet && id === shownSession) return;
  quiet ||= refresh;
  shownSession = id;
  for (const b of document.querySelectorAll('[data-testid="session"]')) b.classList.toggle('selected', b.dataset.sessionId === id);
  // Only a click chooses the session new runs go to; following a run there does not.
  if (!quiet) byTestId('session-select').value = id;
  try {
    const session = await api(`v1/sessions/${encodeURIComponent(id)}`);
    $('#session-detail').hidden = false;
    $('#session-title').textContent = session.title || `Session ${session.id}`;
    $('#session-summary').textContent = session.summary || '';
    $('#turns').replaceChildren(...(session.turns ?? []).map((t) => el('li', {},
      el('button', { type: 'button', class: 'item', testid: 'turn', 'data-run-id': t.run_id, onclick: () => openRun(t.run_id) },
        el('span', { text: short(t.goal, 80) }),
        el('span', { class: `muted status-${t.status}`, text: ` ${t.end_status || t.status}` })))));
  } catch (err) {
    if (!quiet) report(err);
  }
}

async function loadPersonas() {
  const { personas } = await api('v1/personas');
  const select = byTestId('persona');
  const chosen = select.value;
  select.replaceChildren(el('option', { value: '', text: '(none)' }),
    ...personas.map((p) => el('option', { value: p.name, text: p.name, title: p.goal || p.description || '' })));
  select.value = personas.some((p) => p.name === chosen) ? chosen : '';
}

async function startRun(event) {
  event.preventDefault();
  const form = event.currentTarget;
  const data = new FormData(form);
  const body = { goal: String(data.get('goal')).trim() };
  for (const key of ['persona', 'workspace', 'mode']) {
    const value = String(data.get(key) ?? '').trim();
    if (value) body[key] = value; // "not given" is left out, so the server's default applies
  }
  const session = String(data.get('session') ?? '');
  const button = byTestId('start');
  button.disabled = true;
  try {
    const run = await api(session ? `v1/sessions/${encodeURIComponent(session)}/runs` : 'v1/runs', { method: 'POST', body });
    form.elements.goal.value = '';
    openRun(run.id);
    poll(); // the new session and job show at once
  } catch (err) {
    report(err);
  } finally {
    button.disabled = false;
  }
}

// ---------------------------------------------------------------- jobs and workers

const JOBS_PAGE = 20;
// The pages of the jobs list: the `before` cursor of each page shown so far ('' = the newest).
const jobPages = [''];

function jobsPage(change) {
  if (change === 'older' && jobPages.next) jobPages.push(jobPages.next);
  else if (change === 'newer' && jobPages.length > 1) jobPages.pop();
  else if (change === 'first') jobPages.splice(1);
  poll();
}

async function loadJobs() {
  const active = $('#jobs-filter').value === 'active';
  const before = jobPages.at(-1);
  const query = `${active ? 'status=queued&status=running&status=waiting&' : ''}limit=${JOBS_PAGE}`
    + (before ? `&before=${encodeURIComponent(before)}` : '');
  const [{ jobs, next }, { workers }] = await Promise.all([api(`v1/jobs?${query}`), api('v1/workers')]);
  jobPages.next = next;
  const shown = jobs.find((j) => j.id === current?.id);
  if (shown) current.goOnIfActive(shown.status);
  $('#jobs-older').hidden = !next;
  $('#jobs-newer').hidden = jobPages.length < 2;
  $('#jobs-page').textContent = jobPages.length > 1 ? `page ${jobPages.length}` : '';
  $('#jobs').replaceChildren(...jobs.map((j) => el('li', {},
    el('button', { type: 'button', class: 'item', testid: 'job', 'data-job-id': j.id, onclick: () => openRun(j.id) },
      el('span', { class: `badge status-${j.status}`, text: j.status }),
      el('span', { text: ` ${j.role} · ${short(j.goal, 60)}` }),
      el('span', { class: 'muted', text: ` · ${j.id} · try ${j.attempts}/${j.max_attempts}${j.lease_owner ? ` · ${j.lease_owner}` : ''}` })))));
  if (!jobs.length) $('#jobs').append(el('li', { class: 'muted', text: active ? 'No active jobs.' : 'No jobs.' }));
  $('#workers').replaceChildren(...workers.map((w) => el('li', { testid: 'worker' },
    el('code', { text: w.id }),
    el('span', { class: 'muted', text: ` holds ${(w.jobs ?? []).join(', ') || 'no job'}` }))));
  if (!workers.length) $('#workers').append(el('li', { class: 'muted', text: 'No worker holds a job now.' }));
  $('#conn').textContent = `connected · ${new Date().toLocaleTimeString()}`;
}

let pollTimer = 0;
let pollRound = 0; // only the newest round schedules the next: no parallel polling chains

/** Refresh the job list every few seconds, only while the page is visible. */
function poll() {
  clearTimeout(pollTimer);
  const round = ++pollRound;
  if (document.visibilityState !== 'visible' || !$('#token-panel').hidden) return;
  // Runs started elsewhere add sessions, and the shown session's turns move on too.
  loadSessions().catch(() => {}); // its errors are the jobs' errors: reported once, below
  if (shownSession) showSession(shownSession, { refresh: true });
  loadJobs().catch((err) => {
    $('#conn').textContent = 'not connected';
    report(err);
  }).finally(() => {
    if (round === pollRound) pollTimer = setTimeout(poll, POLL_MS);
  });
}

function refreshSoon() {
  setTimeout(poll, 300); // sessions and the shown session's turns come with it
}

// ---------------------------------------------------------------- start

/** Load everything that needs the token; called again after a new token is pasted. */
function boot() {
  if (!localStorage.getItem(TOKEN_KEY)) {
    showTokenForm('Paste the API token of this server (the one `steward serve` was started with).');
    return;
  }
  loadPersonas().catch(report);
  loadSessions().catch(report);
  poll();
  showView(hashParams().get('view') ?? '');
  const runId = hashParams().get('run');
  if (runId) {
    current?.dispose(); // after a 401 the old view stopped; start it again from seq 0
    current = null;
    openRun(runId, { push: false });
  }
}

/** The address changed (back/forward, an edited hash): follow it. */
function syncFromUrl() {
  if (takeTokenFromUrl()) {
    $('#token-panel').hidden = true;
    boot();
    return;
  }
  const view = hashParams().get('view') ?? '';
  if ((view === 'memory') === $('#memory-view').hidden) showView(view);
  const runId = hashParams().get('run') ?? '';
  if (runId !== (current?.id ?? '')) openRun(runId, { push: false });
}

function init() {
  takeTokenFromUrl();
  $('#token-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const token = $('#token-input').value.trim();
    if (!token) return;
    localStorage.setItem(TOKEN_KEY, token);
    $('#token-input').value = '';
    $('#token-panel').hidden = true;
    boot();
  });
  $('#forget-token').addEventListener('click', () => {
    localStorage.removeItem(TOKEN_KEY);
    current?.dispose();
    showTokenForm('Token forgotten. Paste a token to go on.');
  });
  $('#new-run').addEventListener('submit', startRun);
  $('#sessions-refresh').addEventListener('click', () => loadSessions().catch(report));
  $('#sessions-newer').addEventListener('click', newerSessions);
  $('#jobs-filter').addEventListener('change', () => jobsPage('first'));
  $('#jobs-older').addEventListener('click', () => jobsPage('older'));
  $('#jobs-newer').addEventListener('click', () => jobsPage('newer'));
  $('#nav-runs').addEventListener('click', () => showView('', { push: true }));
  $('#nav-memory').addEventListener('click', () => showView('memory', { push: true }));
  $('#memory-filters').addEventListener('submit', (e) => { e.preventDefault(); memoryPages.splice(1); loadMemory().catch(report); });
  $('#memory-search-form').addEventListener('submit', searchMemory);
  $('#memory-newer').addEventListener('click', () => { if (memoryPages.length > 1) memoryPages.pop(); loadMemory().catch(report); });
  $('#memory-export').addEventListener('click', exportMemory);
  document.addEventListener('visibilitychange', poll);
  window.addEventListener('popstate', syncFromUrl);
  window.addEventListener('hashchange', syncFromUrl);
  boot();
}

init();
