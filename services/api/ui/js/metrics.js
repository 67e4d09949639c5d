// Charts of the dashboards' key panels (ops/grafana/dashboards/), from Prometheus' query
// API as the api relays it: VMIs by phase, creation → Running latency, migrations, and the
// event bus. Prometheus has no push, so the charts are read again every scrape or so.

import uPlot from '../vendor/uplot/uPlot.esm.js';
import { ApiError, getJSON, url } from './api.js';
import { clear, h } from './dom.js';

const PANELS = [
  { id: 'vmis', title: 'VMIs by phase', unit: '',
    queries: [['{{phase}}', 'sum by (phase) (kubevirt_vmi_info)']] },
  { id: 'latency', title: 'VMI creation → Running (s)', unit: 's',
    queries: [50, 95, 99].map((p) => [`p${p}`, `histogram_quantile(0.${p}, sum by (le) (rate(kubevirt_vmi_phase_transition_time_from_creation_seconds_bucket{phase="Running"}[2m])))`]) },
  { id: 'migrations', title: 'Migrations', unit: '',
    queries: [
      ['pending', 'sum(kubevirt_vmi_migrations_in_pending_phase)'],
      ['scheduling', 'sum(kubevirt_vmi_migrations_in_scheduling_phase)'],
      ['running', 'sum(kubevirt_vmi_migrations_in_running_phase)'],
      ['succeeded', 'count(kubevirt_vmi_migration_succeeded == 1) or vector(0)'],
      ['failed', 'count(kubevirt_vmi_migration_failed == 1) or vector(0)'],
    ] },
  { id: 'bus', title: 'Event bus: events / s', unit: '/s',
    queries: [
      ['appended {{service}}', 'sum by (service) (rate(virtstream_events_appended_total[1m]))'],
      ['handled {{service}}', 'sum by (service) (rate(virtstream_events_handled_total[1m]))'],
    ] },
];
const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#d97706', '#7c3aed', '#0891b2', '#db2777', '#4b5563'];
const RANGE = 30 * 60;
const STEP = 15;

function legend(template, metric) {
  return template.replace(/\{\{(\w+)\}\}/g, (_, k) => metric[k] || '');
}

async function series(panel, start, end) {
  // one aligned table for uPlot: [times, ...one array per series]
  const times = [];
  for (let t = start; t <= end; t += STEP) times.push(t);
  const index = new Map(times.map((t, i) => [t, i]));
  const out = [];
  for (const [template, query] of panel.queries) {
    const doc = await getJSON(url('/prometheus/api/v1/query_range', { query, start, end, step: STEP }));
    for (const r of doc.data.result) {
      const values = new Array(times.length).fill(null);
      for (const [t, v] of r.values) { const i = index.get(Math.round(t)); if (i !== undefined) values[i] = Number(v); }
      out.push({ label: legend(template, r.metric) || template, values });
    }
  }
  return { times, out };
}

export async function metricsPage() {
  const grid = h('div', { class: 'charts' });
  const note = h('p', { class: 'muted' }, `The last ${RANGE / 60} minutes, every ${STEP} s, from Prometheus through the api.`);
  const el = h('div', { class: 'page metrics' }, h('h2', {}, 'Metrics'), note, grid);
  const boxes = PANELS.map((p) => {
    const box = h('div', { class: 'chart', dataset: { panel: p.id } }, h('h4', {}, p.title), h('div', { class: 'plot' }));
    grid.append(box);
    return box;
  });
  const plots = new Map();

  async function draw() {
    const end = Math.floor(Date.now() / 1000 / STEP) * STEP;
    const start = end - RANGE;
    await Promise.all(PANELS.map(async (p, i) => {
      const target = boxes[i].querySelector('.plot');
      try {
        const { times, out } = await series(p, start, end);
        if (!out.length) { clear(target).append(h('p', { class: 'muted' }, 'no data yet')); plots.delete(p.id); return; }
        const opts = {
          width: Math.max(300, target.clientWidth || 480), height: 220,
          series: [{}, ...out.map((s, j) => ({ label: s.label, stroke: COLORS[j % COLORS.length], width: 2, spanGaps: true }))],
          axes: [{}, { size: 60, values: (u, vals) => vals.map((v) => `${+v.toFixed(3)}${p.unit}`) }],
        };
        const old = plots.get(p.id);
        if (old && old.series.length === out.length + 1) { old.setData([times, ...out.map((s) => s.values)]); return; }
        if (old) old.destroy();
        clear(target);
        plots.set(p.id, new uPlot(opts, [times, ...out.map((s) => s.values)], target));
      } catch (e) {
        clear(target).append(h('p', { class: 'error', role: 'alert' }, e instanceof ApiError ? e.line : String(e)));
      }
    }));
    el.dataset.drawn = 'true';
  }

  if (!document.querySelector('link[data-uplot]')) {
    document.head.append(h('link', { rel: 'stylesheet', href: '/ui/vendor/uplot/uPlot.min.css', 'data-uplot': 'true' }));
  }
  draw();
  const timer = setInterval(draw, STEP * 1000);
  return { el, stop() { clearInterval(timer); for (const p of plots.values()) p.destroy(); } };
}
