// The manifest editor: the object as YAML (managed fields left out, as `kubectl edit`
// shows it), saved with a PUT of that YAML. The api decides: its refusal (a Status, with
// the fields it names) is shown under the editor and on the lines those fields are on.

import { dump } from '../vendor/js-yaml/js-yaml.mjs';
import { ApiError, request, url } from './api.js';
import { append, clear, h } from './dom.js';
import { toast } from './actions.js';

// `spec.template.spec.domain.devices.disks[0].name` → ['spec', ..., 'disks', 0, 'name']
export function fieldPath(field) {
  const out = [];
  for (const m of String(field || '').matchAll(/([^.[\]]+)|\[(\d+)\]/g)) out.push(m[2] !== undefined ? Number(m[2]) : m[1]);
  return out;
}

// the 0-based line of `field` in block YAML as js-yaml writes it, or -1
export function lineOf(text, field) {
  const lines = text.split('\n');
  const info = lines.map((l) => {
    const m = /^(\s*)((?:- )*)("?)([^:"]*)\3:(?:\s|$)/.exec(l);
    const dash = /^(\s*)- /.exec(l);
    return { indent: m ? m[1].length + m[2].length : -1, key: m ? m[4] : null, dash: dash ? dash[1].length : -1 };
  });
  let from = 0;
  let to = lines.length;
  let parentIndent = -1;
  let found = -1;
  for (const part of fieldPath(field)) {
    found = -1;
    if (typeof part === 'number') {
      let n = -1;
      let itemIndent = -1;
      for (let i = from; i < to; i++) {
        if (info[i].dash < 0 || info[i].dash <= parentIndent - 1) continue;
        if (itemIndent < 0) itemIndent = info[i].dash;
        if (info[i].dash !== itemIndent) continue;
        n++;
        if (n === part) { found = i; break; }
      }
      if (found < 0) return -1;
      parentIndent = itemIndent + 1;
    } else {
      let depth = -1;
      for (let i = from; i < to; i++) {
        if (info[i].indent < 0 || info[i].indent <= parentIndent) continue;
        if (depth < 0) depth = info[i].indent;
        if (info[i].indent === depth && info[i].key === part) { found = i; break; }
      }
      if (found < 0) return -1;
      parentIndent = info[found].indent;
    }
    // the block below the found line: until a line indented no deeper
    from = typeof part === 'number' ? found : found + 1;
    let end = found + 1;
    while (end < lines.length && (lines[end].trim() === '' || /^\s*/.exec(lines[end])[0].length > (typeof part === 'number' ? parentIndent - 1 : parentIndent))) end++;
    to = end;
  }
  return found;
}

export function editable(obj) {
  const copy = structuredClone(obj);
  if (copy.metadata) delete copy.metadata.managedFields;
  return dump(copy, { noRefs: true, lineWidth: -1 });
}

export class ManifestEditor {
  constructor(path, fieldManager = 'virtstream-console') {
    this.path = path;
    this.fieldManager = fieldManager;
    this.text = h('textarea', { class: 'yaml-edit', id: 'manifest', spellcheck: 'false', 'aria-label': 'Manifest' });
    this.gutter = h('pre', { class: 'gutter', 'aria-hidden': 'true' });
    this.errors = h('div', { class: 'errors', id: 'manifest-errors' });
    this.note = h('span', { class: 'muted' });
    this.save = h('button', { class: 'primary', id: 'save', onclick: () => this.submit() }, 'Save');
    const revert = h('button', { onclick: () => this.load(this.latest, true) }, 'Revert');
    this.el = h('section', { class: 'editor' },
      h('div', { class: 'toolbar' }, this.save, revert, this.note),
      this.errors, h('div', { class: 'edit-area' }, this.gutter, this.text));
    this.text.addEventListener('input', () => { this.dirty = true; this.lines(); });
    this.text.addEventListener('scroll', () => { this.gutter.scrollTop = this.text.scrollTop; });
    this.marked = new Set();
  }

  set readOnly(ro) {
    this.text.readOnly = ro;
    this.save.hidden = ro;
  }

  load(obj, force = false) {
    this.latest = obj;
    if (this.dirty && !force) {
      this.note.textContent = 'changed on the server since you began editing: Revert loads it';
      return;
    }
    this.dirty = false;
    this.note.textContent = '';
    this.text.value = editable(obj);
    this.marked = new Set();
    clear(this.errors);
    this.lines();
  }

  lines() {
    const n = this.text.value.split('\n').length;
    const out = [];
    for (let i = 0; i < n; i++) out.push(this.marked.has(i) ? `! ${i + 1}` : String(i + 1));
    this.gutter.textContent = out.join('\n');
  }

  async submit() {
    clear(this.errors);
    try {
      await request(url(this.path, { fieldManager: this.fieldManager }), { method: 'PUT', body: this.text.value, contentType: 'application/yaml' });
      this.dirty = false;
      toast('Saved');
    } catch (e) {
      this.show(e);
    }
  }

  show(e) {
    const text = this.text.value;
    this.marked = new Set();
    const items = (e instanceof ApiError ? e.causes : []).map((c) => {
      const line = c.field ? lineOf(text, c.field) : -1;
      if (line >= 0) this.marked.add(line);
      return h('li', { dataset: { line } },
        c.field ? h('code', {}, c.field) : null, c.field ? ': ' : '', c.message || c.reason || '',
        line >= 0 ? h('button', { class: 'link', onclick: () => this.select(line) }, ` line ${line + 1}`) : null);
    });
    append(this.errors, [h('p', { class: 'error', role: 'alert' }, e instanceof ApiError ? e.line : String(e)), items.length ? h('ul', {}, items) : null]);
    this.lines();
  }

  select(line) {
    const all = this.text.value.split('\n');
    const start = all.slice(0, line).reduce((n, l) => n + l.length + 1, 0);
    this.text.focus();
    this.text.setSelectionRange(start, start + all[line].length);
    const lh = parseFloat(getComputedStyle(this.text).lineHeight) || 18;
    this.text.scrollTop = Math.max(0, line * lh - this.text.clientHeight / 2);
  }
}
