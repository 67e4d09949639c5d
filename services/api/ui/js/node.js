// A node's page: capacity and allocation, heartbeat age, conditions, and its VMIs (a live
// table with the field selector `status.nodeName`).

import { getJSON, live, metricsServed, url } from './api.js';
import { ago, append, clear, h, link, quantity, since, table } from './dom.js';
import { LiveTable } from './livetable.js';

function meter(label, used, total, text) {
  const pct = total ? Math.round((100 * used) / total) : 0;
  return h('div', { class: 'meter' }, h('span', {}, label), h('progress', { max: 100, value: pct }), h('span', {}, `${text} (${pct}%)`));
}

export async function nodePage(name) {
  let node = null;
  const head = h('h2', {}, h('span', { class: 'muted' }, 'Node '), name, ' ');
  const facts = h('div', { class: 'summary' });
  const conds = h('div', { class: 'conditions' });
  const vmis = new LiveTable({
    group: 'kubevirt.io', version: 'v1', plural: 'virtualmachineinstances', label: 'VMIs on this node',
    namespaced: true, namespace: '', fieldSelector: `status.nodeName=${name}`, link: 'vmis', kindLabel: 'VMI',
  }).start();
  const el = h('div', { class: 'page node', dataset: { name } },
    h('div', { class: 'crumbs' }, link('/ui/', 'Cluster'), ' / ', link('/ui/?tab=nodes', 'nodes')), head,
    h('div', { class: 'cols' }, facts, conds), vmis.el);

  let liveAge = '— (Prometheus: up --metrics)';
  async function liveHeartbeat() {
    // the heartbeat itself lives in a key-value bucket, not the log: its age comes from the
    // controller's metric, through the api's Prometheus relay, when Prometheus runs
    try {
      const q = `virtstream_node_heartbeat_age_seconds{node="${name}"}`;
      const doc = await getJSON(url('/prometheus/api/v1/query', { query: q }));
      const v = ((doc.data || {}).result || [])[0];
      liveAge = v ? `${Number(v.value[1]).toFixed(1)}s (Prometheus)` : '— (no sample yet)';
    } catch {
      return false;
    }
    const dd = el.querySelector('#heartbeat-live');
    if (dd) dd.textContent = liveAge;
    return true;
  }

  function heartbeat() {
    return ((node && node.metadata.annotations) || {})['kubevirt.io/heartbeat'];
  }

  function render() {
    if (!node) { clear(facts).append(h('p', { class: 'error' }, `node ${name} not found`)); return; }
    const st = node.status || {};
    const cap = st.capacity || {};
    const alloc = st.allocated || {};
    const ready = (st.conditions || []).find((c) => c.type === 'Ready') || {};
    append(clear(head), [h('span', { class: 'muted' }, 'Node '), name, ' ',
      h('span', { class: `status s-${ready.status === 'True' ? 'ready' : 'notready'}` }, ready.status === 'True' ? 'Ready' : 'NotReady'),
      st.schedulable === false ? h('span', { class: 'badge' }, 'SchedulingDisabled') : null]);
    const hb = heartbeat();
    clear(facts).append(h('h4', {}, 'Capacity and allocation'),
      meter('CPU', quantity(alloc.cpu || '0'), quantity(cap.cpu), `${alloc.cpu || 0} of ${cap.cpu} cores`),
      meter('Memory', quantity(alloc.memory || '0'), quantity(cap.memory), `${((quantity(alloc.memory || '0')) / 1024 ** 3).toFixed(2)} of ${(quantity(cap.memory) / 1024 ** 3).toFixed(2)} GiB`),
      h('dl', {},
        h('dt', {}, 'VMIs'), h('dd', {}, String(alloc.vmis ?? 0)),
        h('dt', {}, 'Allocatable'), h('dd', {}, `${(st.allocatable || {}).cpu} cores, ${(quantity((st.allocatable || {}).memory) / 1024 ** 3).toFixed(2)} GiB`),
        h('dt', { title: 'heartbeats are not events: the log records one when a node joins or turns responsive or unresponsive' }, 'Heartbeat in the log'),
        h('dd', { id: 'heartbeat', dataset: { at: hb || '' } }, hb ? `${since(hb)} ago` : '—'),
        h('dt', { title: 'virtstream_node_heartbeat_age_seconds, the controller\'s view of the heartbeat bucket (up --metrics)' }, 'Heartbeat age'),
        h('dd', { id: 'heartbeat-live' }, liveAge),
        h('dt', {}, 'Hypervisor'), h('dd', {}, ((node.metadata.annotations || {})['virtstream.io/hypervisor']) || ''),
        h('dt', {}, 'Address'), h('dd', {}, ((st.addresses || [])[0] || {}).address || ''),
        h('dt', {}, 'Created'), h('dd', {}, `${since(node.metadata.creationTimestamp)} ago`)));
    clear(conds).append(h('h4', {}, 'Conditions'), table(['Type', 'Status', 'Reason', 'Message'],
      (st.conditions || []).map((c) => [c.type, c.status, c.reason || '', c.message || ''])));
  }

  const watch = live('/api/v1/nodes', {
    params: { fieldSelector: `metadata.name=${name}` },
    onReset: (list) => { node = (list.items || [])[0] || null; render(); },
    onEvent: (type, obj) => { node = type === 'DELETED' ? null : obj; render(); },
    onError: (e) => clear(facts).append(h('p', { class: 'error', role: 'alert' }, e.line)),
  });
  let prometheus = metricsServed() && await liveHeartbeat();
  let n = 0;
  // the heartbeat's age grows with the clock, not with events
  const tick = setInterval(() => {
    if (prometheus && ++n % 5 === 0) liveHeartbeat().then((ok) => { prometheus = ok; });
    const dd = el.querySelector('#heartbeat');
    if (dd && dd.dataset.at) dd.textContent = `${ago((Date.now() - Date.parse(dd.dataset.at)) / 1000)} ago`;
    vmis.tickAges();
  }, 1000);
  return { el, stop() { watch.stop(); vmis.stop(); clearInterval(tick); } };
}
