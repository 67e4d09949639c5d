// An object's history from the log (`debug.virtstream.io`): the timeline of its events,
// each with the change it made and links to the events it caused; time travel, a slider
// over those events showing the object as it was; and `why`, the causal chain of its
// state with each hop's latency and the slowest marked.

import { ApiError, getJSON, url } from './api.js';
import { clear, clock, h, latency, short } from './dom.js';
import { editable } from './editor.js';

const DEBUG = '/apis/debug.virtstream.io/v1alpha1';
const NEWEST = 100; // built at once: more than the list shows
const OLDER = 300; // then per task, before them

export function debugPath(plural, ns, name, what) {
  return ns ? `${DEBUG}/namespaces/${ns}/${plural}/${name}/${what}` : `${DEBUG}/${plural}/${name}/${what}`;
}

function change(c) {
  if (c.before === null || c.before === undefined) return `+ ${c.path}: ${short(c.after)}`;
  if (c.after === null || c.after === undefined) return `- ${c.path}: ${short(c.before)}`;
  return `  ${c.path}: ${short(c.before)} → ${short(c.after)}`;
}

function errorLine(e) {
  return h('p', { class: 'error', role: 'alert' }, e instanceof ApiError ? e.line : String(e));
}

export class Why {
  constructor(plural, ns, name, onSeq) {
    this.path = (seq) => url(debugPath(plural, ns, name, 'why'), { seq: seq || '' });
    this.onSeq = onSeq;
    this.el = h('section', { class: 'why', id: 'why' }, h('h3', {}, 'Why'), h('p', { class: 'muted' }, 'Loading…'));
  }

  async load(seq = 0) {
    try {
      this.render(await getJSON(this.path(seq)), seq);
    } catch (e) {
      clear(this.el).append(h('h3', {}, 'Why'), errorLine(e));
    }
  }

  render(chain, seq) {
    const title = h('h3', {}, seq ? `Why #${seq}` : 'Why its current state', ' ');
    if (seq) title.append(h('button', { class: 'link', onclick: () => this.load(0) }, '(current state)'));
    const hops = chain.hops.map((hop, i) => {
      const slowest = i === chain.slowest;
      const seqText = hop.seq ? h('a', { href: `#ev-${hop.seq}`, class: 'seq', onclick: (ev) => { ev.preventDefault(); this.onSeq(hop.seq); } }, `#${hop.seq}`) : h('span', { class: 'seq' }, '-');
      return h('li', { class: `hop${slowest ? ' slowest' : ''}`, dataset: { seq: hop.seq, link: hop.link } },
        seqText, ' ', h('time', {}, clock(hop.at)), ' ', h('span', { class: 'latency' }, latency(hop.latency)), ' ',
        h('span', { class: 'actor' }, hop.actor), ' ', h('b', {}, hop.type), ' ', h('span', { class: 'agg' }, hop.aggregate), ' ',
        h('span', { class: 'fields' }, hop.detail),
        hop.link !== 'causation' && hop.link !== 'anchor' ? h('span', { class: 'muted' }, ` (${hop.link})`) : null,
        slowest ? h('span', { class: 'badge slow' }, 'slowest') : null);
    });
    const foot = h('p', { class: 'muted' }, `${chain.hops.length} hops, ${chain.total.toFixed(3)}s from the first to the last`,
      chain.missing ? `; cause ${chain.missing} not found in the stream` : '');
    clear(this.el).append(title, h('p', { class: 'explain' }, chain.explanation), h('ol', { class: 'chain' }, hops), foot);
  }
}

export class Timeline {
  constructor(plural, ns, name, onWhy) {
    this.path = debugPath(plural, ns, name, 'history');
    this.onWhy = onWhy;
    this.steps = [];
    this.el = h('section', { class: 'timeline', id: 'timeline' }, h('h3', {}, 'Timeline'), h('p', { class: 'muted' }, 'Loading…'));
  }

  async load() {
    try {
      performance.mark('virtstream:history-asked');
      const doc = await getJSON(this.path);
      performance.mark('virtstream:history-read');
      this.render(doc.steps);
      performance.mark('virtstream:history-rendered');
    } catch (e) {
      clear(this.el).append(h('h3', {}, 'Timeline'), errorLine(e));
    }
  }

  render(steps) {
    const keep = this.slider && Number(this.slider.value) < this.steps.length - 1 ? Number(this.slider.value) : null;
    this.steps = steps;
    // the object after each step: a step that changed nothing carries the last one on
    let last = null;
    this.objects = steps.map((s) => {
      if (s.object !== undefined) last = s.object;
      else if (!s.exists) last = null;
      return last;
    });
    this.items = new Map();
    this.index = new Map(steps.map((s, i) => [s.seq, i]));
    clearTimeout(this.pending);
    const list = h('ol', { class: 'events' });
    this.list = list;
    this.from = steps.length;
    this.older(NEWEST); // the newest at once (the list opens at its end), the rest after
    this.slider = h('input', { type: 'range', id: 'travel', min: 0, max: Math.max(0, steps.length - 1), value: keep ?? Math.max(0, steps.length - 1), 'aria-label': 'Time travel' });
    this.pointLabel = h('span', { class: 'point' });
    this.pointView = h('pre', { class: 'yaml at-point', id: 'at-point' });
    this.slider.addEventListener('input', () => this.show(Number(this.slider.value)));
    const present = h('button', { class: 'link', onclick: () => { this.slider.value = this.slider.max; this.show(Number(this.slider.max)); } }, 'now');
    clear(this.el).append(
      h('h3', {}, 'Timeline ', h('span', { class: 'count' }, `(${steps.length} events)`)),
      h('div', { class: 'travel' }, h('label', { for: 'travel' }, 'Time travel'), this.slider, present, this.pointLabel),
      h('div', { class: 'split' }, h('div', { class: 'events-wrap' }, list), this.pointView));
    this.show(Number(this.slider.value), keep === null);
    this.later();
  }

  // items [from - n, from) put before the ones built, the list's view kept where it was
  older(n) {
    const start = Math.max(0, this.from - n);
    if (start >= this.from) return;
    const frag = document.createDocumentFragment();
    for (let i = start; i < this.from; i++) {
      const li = this.item(this.steps[i], i);
      this.items.set(this.steps[i].seq, li);
      frag.append(li);
    }
    const wrap = this.list.parentElement;
    const height = wrap ? wrap.scrollHeight : 0;
    this.list.prepend(frag);
    if (wrap) wrap.scrollTop += wrap.scrollHeight - height;
    this.from = start;
    this.el.dataset.complete = String(this.from === 0);
  }

  later() {
    // two frames on: the newest (and what the page marks as painted) are painted first
    const next = () => { this.pending = setTimeout(() => { this.older(OLDER); this.later(); }, 0); };
    if (this.from > 0) requestAnimationFrame(() => requestAnimationFrame(next));
  }

  built(i) {
    if (i < this.from) this.older(this.from - i);
  }

  item(s, i) {
    const links = [];
    if (s.causedBy) links.push('caused by ', this.seqLink(s.causedBy));
    if (s.caused.length) links.push(links.length ? ' · ' : '', 'caused ', ...s.caused.flatMap((q, j) => [j ? ' ' : '', this.seqLink(q)]));
    return h('li', { id: `ev-${s.seq}`, class: s.own ? 'own' : 'related', dataset: { seq: s.seq, index: i, type: s.type } },
      h('div', { class: 'ev-head' },
        h('a', { class: 'seq', href: `#ev-${s.seq}`, onclick: (ev) => { ev.preventDefault(); this.travelTo(s.seq); } }, `#${s.seq}`), ' ',
        h('time', { title: new Date(s.occurredAt * 1000).toISOString() }, clock(s.occurredAt)), ' ',
        h('b', { class: 'type' }, s.type), ' ', h('span', { class: 'actor' }, s.actor),
        s.own ? null : h('span', { class: 'agg' }, ` (via ${s.aggregate})`), ' ',
        h('span', { class: 'fields' }, s.fields), ' ',
        h('button', { class: 'link why-btn', title: 'the causal chain of this event', onclick: () => this.onWhy(s.seq) }, 'why')),
      s.changes.length ? h('pre', { class: 'changes' }, s.changes.map(change).join('\n')) : null,
      links.length ? h('div', { class: 'links' }, links) : null);
  }

  seqLink(seq) {
    return h('a', { href: `#ev-${seq}`, class: 'seq-link', dataset: { target: seq }, onclick: (ev) => { ev.preventDefault(); this.travelTo(seq); } }, `#${seq}`);
  }

  travelTo(seq) {
    if (!this.index.has(seq)) return;
    this.built(this.index.get(seq));
    const li = this.items.get(seq);
    this.slider.value = li.dataset.index;
    this.show(Number(li.dataset.index), true);
    li.classList.remove('flash');
    void li.offsetWidth; // restart the highlight
    li.classList.add('flash');
  }

  show(i, scroll = true) {
    const s = this.steps[i];
    for (const li of this.list.querySelectorAll('li.at')) li.classList.remove('at');
    if (!s) {
      this.pointLabel.textContent = 'no events';
      this.pointView.textContent = '';
      return;
    }
    this.built(i);
    const li = this.items.get(s.seq);
    li.classList.add('at');
    if (scroll) {
      // within the list only: the page stays where the reader has it
      const wrap = this.list.parentElement;
      const top = li.offsetTop - wrap.offsetTop;
      if (top < wrap.scrollTop || top + li.offsetHeight > wrap.scrollTop + wrap.clientHeight) {
        wrap.scrollTop = Math.max(0, top - wrap.clientHeight / 3);
      }
    }
    const latest = i === this.steps.length - 1;
    this.pointLabel.textContent = `${latest ? 'now: ' : ''}after #${s.seq} ${s.type} at ${new Date(s.occurredAt * 1000).toISOString()}`;
    const obj = this.objects[i];
    this.pointView.textContent = obj ? editable(obj) : '(the object does not exist at this point)';
    this.pointView.dataset.seq = s.seq;
  }
}
