// The cluster page: one tab per area, each a few live tables, with namespace and label
// filters (asked of the api: a namespace-scoped user lists one namespace) and a search.
// Only the open tab watches: a browser keeps six connections per host, and each watch
// holds one.

import { getJSON } from './api.js';
import { ago, clear, h, quantity, tabs } from './dom.js';
import { LiveTable } from './livetable.js';

function nodeColumns() {
  const cond = (o) => ((o.status && o.status.conditions) || []).find((c) => c.type === 'Ready') || {};
  const heartbeat = (o) => ((o.metadata && o.metadata.annotations) || {})['kubevirt.io/heartbeat'];
  return [
    { name: 'Name', value: (o) => o.metadata.name },
    { name: 'Status', value: (o) => (cond(o).status === 'True' ? 'Ready' : 'NotReady') + (o.status && o.status.schedulable === false ? ',SchedulingDisabled' : '') },
    { name: 'VMIs', value: (o) => String(((o.status || {}).allocated || {}).vmis ?? '') },
    { name: 'CPU allocated', value: (o) => `${(o.status.allocated || {}).cpu || 0} / ${(o.status.capacity || {}).cpu || '?'}` },
    { name: 'Memory allocated', value: (o) => {
      const a = quantity((o.status.allocated || {}).memory); const c = quantity((o.status.capacity || {}).memory);
      return Number.isFinite(a) && c ? `${Math.round((100 * a) / c)}% of ${(c / 1024 ** 3).toFixed(1)} GiB` : '';
    } },
    { name: 'Heartbeat', value: (o) => (heartbeat(o) ? `${ago((Date.now() - Date.parse(heartbeat(o))) / 1000)} ago` : '') },
    { name: 'Age', value: (o) => ({ age: o.metadata.creationTimestamp }) },
  ];
}

// [id, label, [[group, plural, label, namespaced, link?]]]
const AREAS = [
  ['vms', 'Virtual machines', [['kubevirt.io', 'virtualmachines', 'Virtual machines', true, 'vms', 'VM']]],
  ['vmis', 'Instances', [['kubevirt.io', 'virtualmachineinstances', 'Virtual machine instances', true, 'vmis', 'VMI']]],
  ['migrations', 'Migrations', [['kubevirt.io', 'virtualmachineinstancemigrations', 'Migrations', true, '', 'migration']]],
  ['nodes', 'Nodes', [['', 'nodes', 'Nodes', false, 'nodes', 'node']]],
  ['instancetypes', 'Instance types', [
    ['instancetype.kubevirt.io', 'virtualmachineclusterinstancetypes', 'Cluster instance types', false, '', 'instance type'],
    ['instancetype.kubevirt.io', 'virtualmachineinstancetypes', 'Instance types', true, '', 'instance type'],
    ['instancetype.kubevirt.io', 'virtualmachineclusterpreferences', 'Cluster preferences', false, '', 'preference'],
    ['instancetype.kubevirt.io', 'virtualmachinepreferences', 'Preferences', true, '', 'preference'],
  ]],
  ['pools', 'Pools and replica sets', [
    ['pool.kubevirt.io', 'virtualmachinepools', 'VM pools', true, '', 'pool'],
    ['kubevirt.io', 'virtualmachineinstancereplicasets', 'VMI replica sets', true, '', 'replica set'],
  ]],
  ['snapshots', 'Snapshots', [
    ['snapshot.kubevirt.io', 'virtualmachinesnapshots', 'Snapshots', true, '', 'snapshot'],
    ['snapshot.kubevirt.io', 'virtualmachinerestores', 'Restores', true, '', 'restore'],
  ]],
  ['storage', 'Storage', [
    ['cdi.kubevirt.io', 'datavolumes', 'Data volumes', true, '', 'data volume'],
    ['', 'persistentvolumeclaims', 'Persistent volume claims', true, '', 'claim'],
    ['', 'persistentvolumes', 'Persistent volumes', false, '', 'volume'],
    ['storage.k8s.io', 'storageclasses', 'Storage classes', false, '', 'storage class'],
  ]],
  ['events', 'Events', [['', 'events', 'Events', true, '', 'event']]],
];

export async function clusterPage(served) {
  const params = new URLSearchParams(location.search);
  let area = params.get('tab') || 'vms';
  let namespace = params.get('ns') || '';
  let labels = params.get('labels') || '';
  let search = '';
  let tables = [];
  const areas = AREAS.filter(([id, , kinds]) => kinds.some(([g, plural]) => (g ? served.versions[g] : served.coreResources.has(plural))));

  const nsSelect = h('select', { id: 'ns', 'aria-label': 'Namespace' }, h('option', { value: '' }, 'All namespaces'));
  const labelInput = h('input', { id: 'labels', type: 'search', placeholder: 'label selector: app=web,tier!=db', value: labels, 'aria-label': 'Label selector' });
  const searchInput = h('input', { id: 'search', type: 'search', placeholder: 'search', 'aria-label': 'Search' });
  const bar = h('div', { class: 'filters' }, nsSelect, labelInput, searchInput);
  const tabBar = h('div');
  const body = h('div', { class: 'tables' });
  const el = h('div', { class: 'page cluster' }, tabBar, bar, body);

  function remember() {
    const q = new URLSearchParams();
    if (area !== 'vms') q.set('tab', area);
    if (namespace) q.set('ns', namespace);
    if (labels) q.set('labels', labels);
    const s = q.toString();
    history.replaceState(null, '', s ? `/ui/?${s}` : '/ui/');
  }

  function show() {
    for (const t of tables) t.stop();
    clear(tabBar).append(tabs(areas.map(([id, label]) => [id, label]), area, (id) => { area = id; remember(); show(); }));
    const [, , kinds] = areas.find(([id]) => id === area) || areas[0];
    tables = kinds
      .filter(([g, plural]) => (g ? served.versions[g] : served.coreResources.has(plural)))
      .map(([group, plural, label, namespaced, pageLink, kindLabel]) => new LiveTable({
        group, version: group ? served.versions[group] : 'v1', plural, label, namespaced,
        namespace: namespaced ? namespace : '', labelSelector: labels, link: pageLink, kindLabel,
        columns: plural === 'nodes' ? nodeColumns() : null,
      }).start());
    for (const t of tables) t.setSearch(search);
    clear(body).append(...tables.map((t) => t.el));
  }

  nsSelect.addEventListener('change', () => { namespace = nsSelect.value; remember(); show(); });
  labelInput.addEventListener('change', () => { labels = labelInput.value.trim(); remember(); show(); });
  searchInput.addEventListener('input', () => { search = searchInput.value; for (const t of tables) t.setSearch(search); });

  getJSON('/api/v1/namespaces').then((list) => {
    for (const n of list.items || []) nsSelect.append(h('option', { value: n.metadata.name }, n.metadata.name));
    nsSelect.value = namespace;
  }).catch(() => {
    // a user who may not list namespaces (bound in one, say) names the namespace instead
    const typed = h('input', { id: 'ns', type: 'search', placeholder: 'namespace (all: empty)', value: namespace, 'aria-label': 'Namespace' });
    typed.addEventListener('change', () => { namespace = typed.value.trim(); remember(); show(); });
    nsSelect.replaceWith(typed);
  });

  const ages = setInterval(() => { for (const t of tables) t.tickAges(); }, 10000);
  show();
  return { el, stop() { clearInterval(ages); for (const t of tables) t.stop(); } };
}
