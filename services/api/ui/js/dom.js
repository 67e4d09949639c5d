// DOM helpers. Text always goes in as text (never as HTML): what the api returns is data.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (v === true) el.setAttribute(k, '');
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  el.replaceChildren();
  return el;
}

// a link inside the console: routed in the page, not reloaded
export function link(href, text, attrs = {}) {
  return h('a', { href, 'data-nav': true, ...attrs }, text);
}

export function ago(seconds) {
  // apimachinery's HumanDuration, as kubectl prints AGE
  const s = Math.floor(seconds);
  if (s < 0) return '0s';
  if (s < 120) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 10) return s % 60 ? `${m}m${s % 60}s` : `${m}m`;
  if (m < 180) return `${m}m`;
  const hr = Math.floor(s / 3600);
  if (hr < 8) return m % 60 ? `${hr}h${m % 60}m` : `${hr}h`;
  if (hr < 48) return `${hr}h`;
  const d = Math.floor(hr / 24);
  if (hr < 24 * 8) return hr % 24 ? `${d}d${hr % 24}h` : `${d}d`;
  if (d < 730) return `${d}d`;
  const y = Math.floor(d / 365);
  return d % 365 && d < 365 * 8 ? `${y}y${d % 365}d` : `${y}y`;
}

export function since(timestamp) {
  const t = Date.parse(timestamp);
  return Number.isNaN(t) ? '' : ago((Date.now() - t) / 1000);
}

export function clock(epochSeconds) {
  // HH:MM:SS.mmm (UTC), the CLI's `events` and `why` format
  return new Date(epochSeconds * 1000).toISOString().slice(11, 23);
}

export function latency(seconds) {
  if (seconds === null || seconds === undefined) return '';
  return seconds < 1 ? `+${Math.round(seconds * 1000)}ms` : `+${seconds.toFixed(3)}s`;
}

export function short(value) {
  const text = typeof value === 'object' && value !== null ? JSON.stringify(value) : String(value);
  return text.length <= 80 ? text : `${text.slice(0, 77)}...`;
}

export function bytes(n) {
  if (typeof n !== 'number') return '';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

// a quantity as Kubernetes writes it (`2`, `500m`, `1048576Ki`) → a number (cores, bytes)
export function quantity(text) {
  const m = /^([0-9.]+)([a-zA-Z]*)$/.exec(String(text || ''));
  if (!m) return NaN;
  const mult = { '': 1, m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4 }[m[2]];
  return mult === undefined ? NaN : parseFloat(m[1]) * mult;
}

export function table(headers, rows, attrs = {}) {
  return h('table', { class: 'grid', ...attrs },
    h('thead', {}, h('tr', {}, headers.map((x) => h('th', {}, x)))),
    h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c))))));
}

export function tabs(items, active, onPick) {
  // items: [[id, label]]; a bar of buttons, the active one pressed
  return h('div', { class: 'tabs', role: 'tablist' }, items.map(([id, label]) =>
    h('button', { role: 'tab', 'aria-selected': String(id === active), dataset: { tab: id }, onclick: () => onPick(id) }, label)));
}
