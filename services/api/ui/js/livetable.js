// A live table of one kind: listed once, then kept current by the watch API (no polling).
// With `table` (the default) the api renders the rows as a meta.k8s.io Table with the
// kind's printer columns (KubeVirt's, as kubectl shows them); `columns` instead renders
// full objects with the console's own columns (nodes, whose printer columns are few).
// Rows are updated in place, so a change costs one row, not the table.

import { actionsFor, allowed, buttons } from './actions.js';
import { ApiError, collection, live } from './api.js';
import { ago, clear, h, link } from './dom.js';

const FIRST_ROWS = 60; // more than a screen shows
const LATER_ROWS = 250;

function keyOf(meta) {
  return meta.namespace ? `${meta.namespace}/${meta.name}` : meta.name;
}

export class LiveTable {
  // opts: group, version, plural, label, namespaced, namespace, labelSelector,
  // fieldSelector, link (page prefix for the name), columns (object mode), actions
  constructor(opts) {
    this.o = opts;
    this.rows = new Map();
    this.trs = new Map();
    this.order = [];
    this.search = '';
    this.defs = [];
    this.el = h('section', { class: 'live', dataset: { plural: opts.plural } });
    this.state = h('span', { class: 'state' });
    this.count = h('span', { class: 'count' });
    this.body = h('div', { class: 'table-wrap' }, h('p', { class: 'muted' }, 'Loading…'));
    this.el.append(h('h3', {}, opts.label, ' ', this.count, ' ', this.state), this.body);
    this.actions = opts.actions || actionsFor(opts.group, opts.version, opts.plural);
    this.painted = false;
  }

  start() {
    const o = this.o;
    const path = collection(o.group, o.version, o.plural, o.namespaced ? o.namespace || '' : '');
    const params = { labelSelector: o.labelSelector || '', fieldSelector: o.fieldSelector || '' };
    this.watch = live(path, {
      params,
      table: !o.columns,
      onReset: (doc) => this.reset(doc),
      onEvent: (type, obj) => this.event(type, obj),
      onState: (s) => { this.state.textContent = s === 'live' ? '' : '(reconnecting…)'; },
      onError: (e) => this.refused(e),
    });
    return this;
  }

  stop() {
    if (this.watch) this.watch.stop();
    clearTimeout(this.pending);
  }

  // ------------------------------------------------------------------ model
  model(obj) {
    // a row from a Table row ({cells, object}) or a whole object
    if (this.o.columns) {
      const meta = obj.metadata || {};
      return { key: keyOf(meta), meta, cells: this.o.columns.map((c) => c.value(obj)), state: this.o.state ? this.o.state(obj) : {} };
    }
    const meta = (obj.object && obj.object.metadata) || {};
    const cells = obj.cells.map((v, i) => {
      const def = this.defs[i] || {};
      if (def.name === 'Age' && meta.creationTimestamp) return { age: meta.creationTimestamp };
      return v === null || v === undefined ? '' : String(v);
    });
    const at = (name) => cells[this.defs.findIndex((d) => d.name === name)];
    const state = { status: at('Status') || at('Phase') || '', paused: at('Paused') === 'true' };
    return { key: keyOf(meta), meta, cells, state };
  }

  visibleColumns() {
    if (this.o.columns) return this.o.columns.map((c, i) => ({ name: c.name, index: i }));
    return this.defs.map((d, i) => ({ name: d.name, index: i, priority: d.priority })).filter((d) => !d.priority);
  }

  // ----------------------------------------------------------------- events
  reset(doc) {
    if (!this.painted) performance.mark(`virtstream:list-read:${this.o.plural}`);
    if (!this.o.columns) this.defs = doc.columnDefinitions || [];
    const items = this.o.columns ? doc.items || [] : doc.rows || [];
    this.rows = new Map(items.map((it) => { const m = this.model(it); return [m.key, m]; }));
    this.order = [...this.rows.keys()].sort();
    this.render();
  }

  event(type, obj) {
    const items = this.o.columns ? [obj] : obj.rows || [];
    for (const it of items) {
      const m = this.model(it);
      if (type === 'DELETED') this.remove(m.key);
      else this.upsert(m);
    }
    this.count.textContent = `(${this.rows.size})`;
  }

  refused(e) {
    clear(this.body).append(h('p', { class: 'error', role: 'alert' }, e instanceof ApiError ? e.line : String(e)));
  }

  // ----------------------------------------------------------------- render
  render() {
    const cols = this.visibleColumns();
    const allNs = this.o.namespaced && !this.o.namespace;
    const head = h('tr', {}, allNs ? h('th', {}, 'Namespace') : null, cols.map((c) => h('th', {}, c.name)),
      this.actions.length ? h('th', { class: 'actions-col' }, '') : null);
    this.tbody = h('tbody');
    this.trs = new Map();
    this.built = 0;
    this.el.dataset.complete = 'false';
    this.build(FIRST_ROWS);
    this.tableEl = h('table', { class: 'grid live-table' }, h('thead', {}, head), this.tbody);
    this.empty = h('p', { class: 'muted empty' }, `No ${this.o.label.toLowerCase()}`);
    this.empty.hidden = this.rows.size > 0;
    clear(this.body).append(this.tableEl, this.empty);
    this.count.textContent = `(${this.rows.size})`;
    if (!this.painted) {
      this.painted = true;
      requestAnimationFrame(() => setTimeout(() => {
        performance.mark(`virtstream:table:${this.o.plural}`);
        this.el.dataset.painted = 'true';
      }, 0));
    }
    this.rest();
  }

  // The first screenful is built at once, the rest in later tasks, so the page paints
  // before a long table is complete; a change that arrives meanwhile completes it first.
  build(n) {
    const frag = document.createDocumentFragment();
    const end = Math.min(this.order.length, this.built + n);
    for (; this.built < end; this.built++) {
      const k = this.order[this.built];
      const tr = this.row(this.rows.get(k));
      this.trs.set(k, tr);
      frag.append(tr);
    }
    this.tbody.append(frag);
  }

  rest() {
    clearTimeout(this.pending);
    if (this.built >= this.order.length) {
      this.el.dataset.complete = 'true';
      return;
    }
    // after the next frame: the rows built so far are painted first
    requestAnimationFrame(() => { this.pending = setTimeout(() => { this.build(LATER_ROWS); this.rest(); }, 0); });
  }

  complete() {
    if (this.tbody && this.built < this.order.length) {
      this.build(this.order.length);
      this.rest();
    }
  }

  row(m) {
    const tr = h('tr', { dataset: { key: m.key } });
    this.fill(tr, m);
    return tr;
  }

  fill(tr, m) {
    const cols = this.visibleColumns();
    const allNs = this.o.namespaced && !this.o.namespace;
    const cells = [];
    if (allNs) cells.push(h('td', {}, m.meta.namespace || ''));
    for (const c of cols) {
      const v = m.cells[c.index];
      let content = v && typeof v === 'object' && v.age ? h('span', { class: 'age', dataset: { since: v.age } }, ago((Date.now() - Date.parse(v.age)) / 1000)) : v;
      if (c.name === 'Name' && this.o.link) {
        const href = m.meta.namespace ? `/ui/${this.o.link}/${m.meta.namespace}/${m.meta.name}` : `/ui/${this.o.link}/${m.meta.name}`;
        content = link(href, m.meta.name);
      }
      cells.push(h('td', { class: c.name === 'Status' || c.name === 'Phase' ? `status s-${String(v).toLowerCase()}` : null }, content));
    }
    if (this.actions.length) {
      const td = h('td', { class: 'actions' });
      cells.push(td);
      // a later change of the row fills a new cell; this one is then detached
      allowed(this.actions, m.meta.namespace || '', m.state).then((acts) => {
        td.replaceChildren(...buttons(acts, this.o.kindLabel || this.o.plural, m.meta.namespace || '', m.meta.name));
        td.dataset.checked = 'true';
      });
    }
    tr.replaceChildren(...cells);
    tr.dataset.search = [m.key, ...m.cells.map((c) => (typeof c === 'string' ? c : ''))].join(' ').toLowerCase();
    tr.hidden = Boolean(this.search) && !tr.dataset.search.includes(this.search);
  }

  upsert(m) {
    if (!this.tbody) return;
    this.complete();
    const existing = this.trs.get(m.key);
    this.rows.set(m.key, m);
    if (existing) {
      this.fill(existing, m);
      return;
    }
    // insert in order (binary search over the sorted keys)
    let lo = 0;
    let hi = this.order.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.order[mid] < m.key) lo = mid + 1; else hi = mid;
    }
    this.order.splice(lo, 0, m.key);
    this.built = this.order.length;
    const tr = this.row(m);
    this.trs.set(m.key, tr);
    const before = this.order[lo + 1] !== undefined ? this.trs.get(this.order[lo + 1]) : null;
    this.tbody.insertBefore(tr, before || null);
    this.empty.hidden = true;
  }

  remove(key) {
    this.complete();
    const tr = this.trs.get(key);
    if (tr) tr.remove();
    this.trs.delete(key);
    this.rows.delete(key);
    const i = this.order.indexOf(key);
    if (i >= 0) this.order.splice(i, 1);
    this.built = this.order.length;
    if (this.empty) this.empty.hidden = this.rows.size > 0;
  }

  setSearch(text) {
    this.search = text.trim().toLowerCase();
    this.applySearch();
  }

  applySearch() {
    for (const tr of this.trs.values()) tr.hidden = Boolean(this.search) && !tr.dataset.search.includes(this.search);
  }

  tickAges() {
    for (const span of this.el.querySelectorAll('span.age')) span.textContent = ago((Date.now() - Date.parse(span.dataset.since)) / 1000);
  }
}
