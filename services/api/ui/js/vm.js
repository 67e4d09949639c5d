// A VM's (or a standalone VMI's) page: live status, actions, conditions, its VMI and
// migrations, why it is as it is, its timeline with time travel, its manifest (editable),
// and the guest's console and screen.

import { actionsFor, allowed, buttons } from './actions.js';
import { can, collection, getJSON, live } from './api.js';
import { append, bytes, clear, h, link, since, table, tabs } from './dom.js';
import { ManifestEditor } from './editor.js';
import { SerialConsole, Vnc } from './guest.js';
import { Timeline, Why } from './timeline.js';
import { whatIfTab } from './whatif.js';

const KINDS = {
  vm: { plural: 'virtualmachines', label: 'VirtualMachine', short: 'VM' },
  vmi: { plural: 'virtualmachineinstances', label: 'VirtualMachineInstance', short: 'VMI' },
};

function one(path, name, onChange, onError) {
  // a live single object: the collection watched with a field selector on its name
  return live(path, {
    params: { fieldSelector: `metadata.name=${name}` },
    onReset: (list) => onChange((list.items || [])[0] || null),
    onEvent: (type, obj) => onChange(type === 'DELETED' ? null : obj),
    onError,
  });
}

const HYPERVISOR = 'virtstream.io/hypervisor';

async function qemuNodes() {
  // the nodes whose guests have a serial console and a screen (qemu; the test driver's
  // have neither); null when this user may not list nodes (then the api's answer tells)
  try {
    const list = await getJSON('/api/v1/nodes');
    return new Set((list.items || []).filter((n) => ((n.metadata.annotations || {})[HYPERVISOR]) === 'qemu').map((n) => n.metadata.name));
  } catch {
    return null;
  }
}

function conditions(obj, title) {
  const list = (obj && obj.status && obj.status.conditions) || [];
  if (!list.length) return null;
  return h('div', {}, h('h4', {}, title), table(['Type', 'Status', 'Reason', 'Message', 'Last transition'],
    list.map((c) => [c.type, c.status, c.reason || '', c.message || '', c.lastTransitionTime ? `${since(c.lastTransitionTime)} ago` : ''])));
}

function migrationView(m) {
  const st = m.status || {};
  const ms = st.migrationState || {};
  const total = ms.dataTotalBytes;
  const done = ms.dataProcessedBytes;
  const progress = total ? h('progress', { max: total, value: Math.min(done || 0, total) }) : null;
  const phases = (st.phaseTransitionTimestamps || []).map((p) => p.phase).join(' → ');
  return h('div', { class: 'migration', dataset: { phase: st.phase || '' } },
    h('b', {}, m.metadata.name), ' ', h('span', { class: `status s-${String(st.phase || '').toLowerCase()}` }, st.phase || 'Pending'), ' ',
    ms.sourceNode ? `${ms.sourceNode} → ${ms.targetNode || '?'}` : '', ' ',
    progress, total ? ` ${bytes(done || 0)} of ${bytes(total)} (${bytes(ms.dataRemainingBytes || 0)} left)` : '',
    h('div', { class: 'muted' }, phases), ms.failureReason ? h('div', { class: 'error' }, ms.failureReason) : null);
}

export async function objectPage(kind, ns, name) {
  const k = KINDS[kind];
  const path = collection('kubevirt.io', 'v1', k.plural, ns);
  let obj = null;
  let vmi = null;
  const migrations = new Map();
  let area = new URLSearchParams(location.search).get('tab') || 'overview';
  let guest = null;
  let vmiKnown = false; // the instance's first answer came (a guest tab waits for it)

  const status = h('span', { class: 'status' });
  const actionBox = h('span', { class: 'actions' });
  const header = h('div', { class: 'page-head' },
    h('div', { class: 'crumbs' }, link('/ui/', 'Cluster'), ' / ', link(`/ui/?tab=${kind}s&ns=${encodeURIComponent(ns)}`, ns)),
    h('h2', {}, h('span', { class: 'muted' }, `${k.short} `), name, ' ', status), actionBox);
  const tabBar = h('div');
  const summary = h('div', { class: 'summary' });
  const conds = h('div', { class: 'conditions' });
  const instance = h('div', { class: 'instance' });
  const body = h('div', { class: 'page-body' });
  const el = h('div', { class: 'page object', dataset: { kind, namespace: ns, name } }, header, tabBar, body);

  const why = new Why(k.plural, ns, name, (seq) => timeline.travelTo(seq));
  const timeline = new Timeline(k.plural, ns, name, (seq) => { why.load(seq); why.el.scrollIntoView({ block: 'nearest' }); });
  const editor = new ManifestEditor(`${path}/${name}`);
  const overview = h('div', { class: 'overview' },
    h('div', { class: 'cols' }, h('div', {}, summary, conds), h('div', {}, instance, why.el)), timeline.el);

  const loaded = timeline.load(); // the longest read: asked first
  const [mayConsole, mayUpdate, guestNodes] = await Promise.all([
    can('get', 'subresources.kubevirt.io', 'virtualmachineinstances', 'console', ns),
    can('update', 'kubevirt.io', k.plural, '', ns),
    qemuNodes(),
  ]);
  editor.readOnly = !mayUpdate;

  function areas() {
    // Console and VNC where the guest has them: a qemu node (its own, once placed), and
    // the devices its spec does not leave out
    const out = [['overview', 'Overview'], ['yaml', 'YAML'], ['whatif', 'What-if']];
    if (!mayConsole) return out;
    const v = kind === 'vm' ? vmi : obj;
    const node = v && (v.status || {}).nodeName;
    if (guestNodes !== null && !(node ? guestNodes.has(node) : guestNodes.size > 0)) return out;
    const devices = ((((kind === 'vm' ? (obj && obj.spec && obj.spec.template) : obj) || {}).spec || {}).domain || {}).devices || {};
    if (devices.autoattachSerialConsole !== false) out.push(['console', 'Console']);
    if (devices.autoattachGraphicsDevice !== false) out.push(['vnc', 'VNC']);
    return out;
  }
  let shownAreas = '';

  function statusOf() {
    if (!obj) return { status: 'Gone' };
    if (kind === 'vm') return { status: (obj.status || {}).printableStatus || '' };
    const paused = ((obj.status || {}).conditions || []).some((c) => c.type === 'Paused' && c.status === 'True');
    return { status: (obj.status || {}).phase || '', paused };
  }

  async function refreshActions() {
    const st = statusOf();
    status.textContent = st.status;
    status.className = `status s-${st.status.toLowerCase()}`;
    if (!obj) { clear(actionBox); return; }
    const acts = await allowed(actionsFor('kubevirt.io', 'v1', k.plural), ns, st);
    clear(actionBox).append(...buttons(acts, k.short, ns, name));
    actionBox.dataset.checked = 'true';
  }

  function renderSummary() {
    if (!obj) { clear(summary).append(h('p', { class: 'error' }, `${k.label} ${ns}/${name} does not exist (its history stays below)`)); return; }
    const spec = obj.spec || {};
    const rows = [
      ['Created', `${since(obj.metadata.creationTimestamp)} ago (${obj.metadata.creationTimestamp})`],
      ['Resource version', obj.metadata.resourceVersion],
    ];
    if (kind === 'vm') rows.push(['Run strategy', spec.runStrategy || (spec.running ? 'Always' : 'Halted')], ['Ready', String((obj.status || {}).ready ?? false)]);
    const labels = Object.entries(obj.metadata.labels || {}).map(([a, b]) => `${a}=${b}`).join(', ');
    if (labels) rows.push(['Labels', labels]);
    clear(summary).append(h('h4', {}, 'Summary'), h('dl', {}, rows.flatMap(([a, b]) => [h('dt', {}, a), h('dd', {}, b)])));
    append(clear(conds), [conditions(obj, `${k.short} conditions`), kind === 'vm' ? conditions(vmi, 'VMI conditions') : null]);
  }

  function renderInstance() {
    const v = kind === 'vm' ? vmi : obj;
    const parts = [h('h4', {}, kind === 'vm' ? 'Instance' : 'Placement')];
    if (!v) parts.push(h('p', { class: 'muted' }, 'No instance: the VM is not running'));
    else {
      const st = v.status || {};
      const ips = (st.interfaces || []).map((i) => i.ipAddress).filter(Boolean).join(', ');
      const phases = (st.phaseTransitionTimestamps || []).map((p) => p.phase).join(' → ');
      parts.push(h('dl', {},
        h('dt', {}, 'Phase'), h('dd', { class: `status s-${String(st.phase || '').toLowerCase()}` }, st.phase || ''),
        h('dt', {}, 'Node'), h('dd', {}, st.nodeName ? link(`/ui/nodes/${st.nodeName}`, st.nodeName) : '—'),
        h('dt', {}, 'IP'), h('dd', {}, ips || '—'),
        h('dt', {}, 'Phases'), h('dd', {}, phases || '—')));
      if (kind === 'vm') parts.push(h('p', {}, link(`/ui/vmis/${ns}/${name}`, 'the VMI\'s own page')));
    }
    const mine = [...migrations.values()].sort((a, b) => String(b.metadata.creationTimestamp).localeCompare(String(a.metadata.creationTimestamp)));
    if (mine.length) parts.push(h('h4', {}, 'Migrations'), ...mine.map(migrationView));
    clear(instance).append(...parts);
  }

  let whatIf = null; // the What-if tab, made when first shown
  let refetch = null;
  function historyChanged() {
    // the log has news about the object: read its history and cause again, once
    clearTimeout(refetch);
    refetch = setTimeout(() => { timeline.load(); why.load(); }, 400);
  }

  const watches = [];
  let started = false;
  const onError = (e) => clear(summary).append(h('p', { class: 'error', role: 'alert' }, e.line || String(e)));
  watches.push(one(path, name, (o) => {
    obj = o;
    if (kind === 'vmi') { vmiKnown = true; guestChanged(); } else showTabs();
    refreshActions();
    renderSummary();
    if (kind === 'vmi') renderInstance();
    editor.load(o || {});
    if (started) historyChanged();
    else started = true;
  }, onError));
  if (kind === 'vm') {
    watches.push(one(collection('kubevirt.io', 'v1', 'virtualmachineinstances', ns), name, (o) => {
      vmi = o;
      vmiKnown = true;
      guestChanged();
      renderInstance();
      renderSummary();
    }, () => {}));
  }
  watches.push(live(collection('kubevirt.io', 'v1', 'virtualmachineinstancemigrations', ns), {
    onReset: (list) => { migrations.clear(); for (const m of list.items || []) if ((m.spec || {}).vmiName === name) migrations.set(m.metadata.name, m); renderInstance(); },
    onEvent: (type, m) => {
      if ((m.spec || {}).vmiName !== name) return;
      if (type === 'DELETED') migrations.delete(m.metadata.name); else migrations.set(m.metadata.name, m);
      renderInstance();
      historyChanged();
    },
  }));

  function guestRunning() {
    const v = kind === 'vm' ? vmi : obj;
    return v && (v.status || {}).phase === 'Running';
  }

  function guestChanged() {
    // a guest tab opened before the instance was known, or while it was not running
    if ((area === 'console' || area === 'vnc') && !guest && guestRunning()) show();
    else showTabs();
  }

  function showTabs() {
    // again only when the offered areas changed (the instance moved to another node)
    const now = areas();
    if (JSON.stringify(now) === shownAreas) return;
    shownAreas = JSON.stringify(now);
    clear(tabBar).append(tabs(now, area, (id) => { area = id; const q = id === 'overview' ? '' : `?tab=${id}`; history.replaceState(null, '', location.pathname + q); show(); }));
  }

  function show() {
    if (guest) { guest.stop(); guest = null; }
    shownAreas = '';
    showTabs();
    if (area === 'yaml') clear(body).append(editor.el);
    else if (area === 'whatif') clear(body).append(whatIf || (whatIf = whatIfTab(ns, name, () => [...migrations.keys()])));
    else if (area === 'console' || area === 'vnc') {
      if (!guestRunning()) {
        const text = vmiKnown ? 'The VMI is not running: its console and screen are there while it runs.' : 'Looking for the VMI…';
        clear(body).append(h('p', { class: 'muted', id: 'guest-off' }, text));
        return;
      }
      guest = area === 'console' ? new SerialConsole(ns, name) : new Vnc(ns, name);
      clear(body).append(guest.el);
      guest.start();
    } else clear(body).append(overview);
  }

  renderInstance();
  show();
  // the timeline first (its history the api keeps up to date), then why: both read the
  // object's events from the log, and one at a time each finishes sooner
  loaded.then(() => requestAnimationFrame(() => setTimeout(() => {
    performance.mark('virtstream:object-page');
    el.dataset.painted = 'true';
    why.load();
  }, 0)));
  return {
    el,
    stop() {
      for (const w of watches) w.stop();
      clearTimeout(refetch);
      if (guest) guest.stop();
    },
  };
}
