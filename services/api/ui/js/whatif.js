// What-if: the log replayed through the controller's decider with a scheduler change
// (`GET /apis/debug.virtstream.io/v1alpha1/whatif`, which runs `virtstream whatif`'s
// replay) or a MigrationPolicy put in place as the log begins (a `POST` of a WhatIf whose
// spec holds it), each decision that differs from the one the log records. The cluster's page
// (`/ui/whatif`) shows the summary; a VM's page shows what concerns its VMI and migrations.

import { load } from '../vendor/js-yaml/js-yaml.mjs';
import { ApiError, getJSON, url } from './api.js';
import { clear, h, link } from './dom.js';

const PATH = '/apis/debug.virtstream.io/v1alpha1/whatif';

// `change`: { policy, weights } (a scheduler change) or { migrationPolicy } (YAML or JSON)
export function fetchWhatIf(change) {
  if (!change.migrationPolicy) {
    return getJSON(url(PATH, { schedulerPolicy: change.policy, schedulerWeights: change.weights }));
  }
  let manifest;
  try {
    manifest = load(change.migrationPolicy);
  } catch (e) {
    return Promise.reject(new ApiError(400, { message: `the migration policy is not YAML: ${e.message}`, reason: 'BadRequest' }));
  }
  const body = { apiVersion: 'debug.virtstream.io/v1alpha1', kind: 'WhatIf', spec: { migrationPolicy: manifest } };
  return getJSON(PATH, { method: 'POST', body });
}

function side(s) {
  if (!s) return h('span', { class: 'muted' }, 'nothing');
  const where = s.node ? ` on ${s.node}` : '';
  const differ = (s.fields || []).length ? ` (${s.fields.join(', ')} differ)` : '';
  return h('span', {}, `${s.type}${where}${differ}`);
}

function target(aggregate) {
  const [kind, ns, name] = aggregate.split('/');
  return (kind === 'vmi' || kind === 'vm') && name ? link(`/ui/${kind}s/${ns}/${name}`, aggregate) : aggregate;
}

export function differencesTable(differences) {
  return h('table', { class: 'grid differences' },
    h('thead', {}, h('tr', {}, ['Cause', 'Seq', 'Object', 'Live', 'What-if'].map((x) => h('th', {}, x)))),
    h('tbody', {}, differences.map((d) => h('tr', { dataset: { aggregate: d.aggregate } },
      h('td', {}, d.cause ? String(d.cause) : 'tick'), h('td', {}, String(d.seq)), h('td', {}, target(d.aggregate)),
      h('td', { class: 'live' }, side(d.live)), h('td', { class: 'whatif' }, side(d.whatif))))));
}

// the change's inputs and a Run button; `onRun(change)` when pressed (`fetchWhatIf`'s)
export function whatIfForm(onRun) {
  const policy = h('select', { name: 'policy', id: 'whatif-policy' },
    h('option', { value: 'pack' }, 'pack (the most allocated node)'),
    h('option', { value: 'spread' }, 'spread (the least allocated node: today\'s)'));
  const weights = h('input', { name: 'weights', id: 'whatif-weights', placeholder: 'cpu=1,memory=1 (optional)' });
  const migration = h('textarea', {
    name: 'migration-policy', id: 'whatif-migration-policy', rows: '4', spellcheck: 'false',
    placeholder: 'or a MigrationPolicy (YAML), in place from the log\'s start, instead of the scheduler change',
  });
  const form = h('form', { class: 'whatif-form' },
    h('label', { for: 'whatif-policy' }, 'Scheduler policy '), policy, ' ',
    h('label', { for: 'whatif-weights' }, 'weights '), weights, ' ',
    h('button', { type: 'submit', class: 'primary' }, 'What if?'),
    h('div', {}, h('label', { for: 'whatif-migration-policy' }, 'Migration policy'), migration));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const text = migration.value.trim();
    onRun(text ? { migrationPolicy: text } : { policy: policy.value, weights: weights.value.trim() });
  });
  return form;
}

// runs the replay and hands its document to `show`, saying so while it runs
export async function run(out, change, show) {
  clear(out).append(h('p', { class: 'muted', id: 'whatif-running' }, 'Replaying the log through the changed decider…'));
  try {
    show(await fetchWhatIf(change));
  } catch (e) {
    clear(out).append(h('p', { class: 'error', role: 'alert' }, e.line || String(e)));
  }
}

function summaryOf(s) {
  return `change: ${s.change}; events ${s.window[0]}..${s.window[1]}: ${s.live_decisions} live decisions, ${s.reproduced} reproduced, ${s.ticks_left_out} made on ticks left out`;
}

export function whatIfPage() {
  const out = h('div', {});
  const show = (doc) => {
    const st = doc.status;
    const nodes = [...new Set([...Object.keys(st.summary.placements.live), ...Object.keys(st.summary.placements.whatif)])].sort();
    clear(out).append(
      h('p', { id: 'whatif-summary' }, summaryOf(st.summary)),
      h('h4', {}, 'Placements per node'),
      h('table', { class: 'grid placements' },
        h('thead', {}, h('tr', {}, ['Node', 'Live', 'What-if'].map((x) => h('th', {}, x)))),
        h('tbody', {}, nodes.map((n) => h('tr', { dataset: { node: n } },
          h('td', {}, link(`/ui/nodes/${n}`, n)),
          h('td', { class: 'live' }, String(st.summary.placements.live[n] || 0)),
          h('td', { class: 'whatif' }, String(st.summary.placements.whatif[n] || 0)))))),
      h('h4', {}, `Differences (${st.differences.length})`),
      st.differences.length ? differencesTable(st.differences) : h('p', { class: 'none' }, 'None: the change decides as the live controller did.'),
      st.summary.first_divergence ? h('p', {}, `First divergence at event ${st.summary.first_divergence.cause} (${st.summary.first_divergence.aggregate})`) : '');
  };
  const el = h('div', { class: 'page whatif' }, h('h2', {}, 'What-if'),
    h('p', { class: 'muted' }, 'The cluster\'s whole retained log, replayed through the controller with a scheduler change or a migration policy: each decision that would have differed. Nothing is appended.'),
    whatIfForm((change) => run(out, change, show)), out);
  return { el, stop() {} };
}

// a VM's tab: the differences about its VMI (`vmi/<ns>/<name>`) and its migrations
export function whatIfTab(ns, name, migrationNames) {
  const out = h('div', {});
  const show = (doc) => {
    const mine = new Set([`vmi/${ns}/${name}`, ...migrationNames().map((m) => `migration/${ns}/${m}`)]);
    const diffs = doc.status.differences.filter((d) => mine.has(d.aggregate));
    clear(out).append(h('p', { id: 'whatif-summary' }, summaryOf(doc.status.summary)),
      diffs.length ? differencesTable(diffs)
        : h('p', { class: 'none' }, 'The change would have scheduled and migrated this VM as the live controller did.'));
  };
  return h('div', { class: 'whatif-tab' },
    h('p', { class: 'muted' }, 'What a scheduler change or a migration policy would have done with this VM\'s scheduling and migrations, on the cluster as it was.'),
    whatIfForm((change) => run(out, change, show)), out);
}
