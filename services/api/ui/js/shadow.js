// The shadows' page: other versions of the controller's decider running beside the live one
// (`virtstream up --shadow controller=MODULE:FACTORY`), what each compared and its latest
// divergences, each with the live and the shadow decision. A shadow writes them about once
// a second; the page reads them again as often.

import { getJSON } from './api.js';
import { clear, clock, h, link } from './dom.js';

const PATH = '/apis/debug.virtstream.io/v1alpha1/shadows';
const EVERY = 2000;

function decision(side, event) {
  if (!side) return h('span', { class: 'muted' }, 'nothing');
  const where = side.node ? ` on ${side.node}` : '';
  const differ = (side.fields || []).length ? ` (${side.fields.join(', ')} differ)` : '';
  return h('span', { title: event ? JSON.stringify(event, null, 1) : '' }, `${side.type}${where}${differ}`);
}

function target(aggregate) {
  // vmi/<ns>/<name> and vm/<ns>/<name> have pages of their own
  const [kind, ns, name] = aggregate.split('/');
  return (kind === 'vmi' || kind === 'vm') && name ? link(`/ui/${kind}s/${ns}/${name}`, aggregate) : aggregate;
}

function section(doc) {
  const s = doc.status;
  const facts = h('dl', {},
    h('dt', {}, 'Decider'), h('dd', { class: 'decider' }, s.decider),
    h('dt', {}, 'Shadowing'), h('dd', {}, s.service),
    h('dt', {}, 'Compared'), h('dd', {}, `events ${s.since}..${s.upto}`),
    h('dt', {}, 'Decisions'), h('dd', { class: 'counts' }, `${s.decided} decided, ${s.reproduced} reproduced, ${s.ticks} live ones on ticks not compared`));
  const rows = s.divergences.length
    ? [h('h4', {}, `Latest divergences (${s.divergences.length}, newest first)`),
      h('table', { class: 'grid divergences' },
        h('thead', {}, h('tr', {}, ['When', 'Reason', 'Object', 'Cause', 'Live', 'Shadow'].map((x) => h('th', {}, x)))),
        h('tbody', {}, s.divergences.map((d) => h('tr', { dataset: { reason: d.reason, aggregate: d.aggregate } },
          h('td', {}, clock(d.at)), h('td', {}, d.reason), h('td', {}, target(d.aggregate)), h('td', {}, String(d.cause)),
          h('td', { class: 'live' }, decision(d.live, d.live_event)),
          h('td', { class: 'shadow' }, decision(d.shadow, d.shadow_event))))))]
    : [h('p', { class: 'none' }, 'No divergence: every decision compared is the live one.')];
  return h('section', { class: 'shadow-of', dataset: { name: doc.metadata.name } },
    h('h3', {}, doc.metadata.name), h('div', { class: 'summary' }, facts), ...rows);
}

export async function shadowPage() {
  const body = h('div', {});
  const el = h('div', { class: 'page shadows' }, h('h2', {}, 'Shadows'), body);
  let timer = null;
  let stopped = false;
  async function load() {
    try {
      const list = await getJSON(PATH);
      clear(body).append(...(list.items.length ? list.items.map(section)
        : [h('p', { class: 'muted', id: 'no-shadow' }, 'No shadow runs: start one with `virtstream up --shadow controller=MODULE:FACTORY`.')]));
    } catch (e) {
      clear(body).append(h('p', { class: 'error', role: 'alert' }, e.line || String(e)));
    }
    if (!stopped) timer = setTimeout(load, EVERY);
  }
  await load();
  return { el, stop: () => { stopped = true; clearTimeout(timer); } };
}
