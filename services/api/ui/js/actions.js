// What a user may do to an object: each action names the request RBAC decides on (asked
// with a SelfSubjectAccessReview before it is offered), when it applies, and the call.
// Every action asks for a confirmation first; a refusal is shown as the api words it.

import { ApiError, SUB, can, collection, request } from './api.js';
import { h } from './dom.js';

const VM = 'virtualmachines';
const VMI = 'virtualmachineinstances';
const MIG = 'virtualmachineinstancemigrations';

function sub(resource, name, ns, action, body = {}) {
  return request(`${SUB}/namespaces/${ns}/${resource}/${name}/${action}`, { method: 'PUT', body });
}

function del(group, version, plural) {
  return {
    id: 'delete', label: 'Delete', danger: true,
    rule: { verb: 'delete', group, resource: plural },
    when: () => true,
    run: (ns, name) => request(`${collection(group, version, plural, ns)}/${name}`, { method: 'DELETE', body: {} }),
  };
}

const running = (s) => s.status === 'Running';

const VM_ACTIONS = [
  { id: 'start', label: 'Start', rule: { verb: 'update', group: 'subresources.kubevirt.io', resource: VM, subresource: 'start' },
    when: (s) => s.status === 'Stopped', run: (ns, n) => sub(VM, n, ns, 'start') },
  { id: 'stop', label: 'Stop', rule: { verb: 'update', group: 'subresources.kubevirt.io', resource: VM, subresource: 'stop' },
    when: (s) => !['Stopped', 'Stopping'].includes(s.status), run: (ns, n) => sub(VM, n, ns, 'stop') },
  { id: 'restart', label: 'Restart', rule: { verb: 'update', group: 'subresources.kubevirt.io', resource: VM, subresource: 'restart' },
    when: running, run: (ns, n) => sub(VM, n, ns, 'restart') },
  { id: 'pause', label: 'Pause', rule: { verb: 'update', group: 'subresources.kubevirt.io', resource: VMI, subresource: 'pause' },
    when: running, run: (ns, n) => sub(VMI, n, ns, 'pause') },
  { id: 'unpause', label: 'Unpause', rule: { verb: 'update', group: 'subresources.kubevirt.io', resource: VMI, subresource: 'unpause' },
    when: (s) => s.status === 'Paused', run: (ns, n) => sub(VMI, n, ns, 'unpause') },
  { id: 'migrate', label: 'Migrate', rule: { verb: 'update', group: 'subresources.kubevirt.io', resource: VM, subresource: 'migrate' },
    when: running, run: (ns, n) => sub(VM, n, ns, 'migrate') },
  del('kubevirt.io', 'v1', VM),
];

const VMI_ACTIONS = [
  { id: 'pause', label: 'Pause', rule: { verb: 'update', group: 'subresources.kubevirt.io', resource: VMI, subresource: 'pause' },
    when: (s) => running(s) && !s.paused, run: (ns, n) => sub(VMI, n, ns, 'pause') },
  { id: 'unpause', label: 'Unpause', rule: { verb: 'update', group: 'subresources.kubevirt.io', resource: VMI, subresource: 'unpause' },
    when: (s) => s.paused, run: (ns, n) => sub(VMI, n, ns, 'unpause') },
  { id: 'migrate', label: 'Migrate', rule: { verb: 'create', group: 'kubevirt.io', resource: MIG },
    when: running,
    run: (ns, n) => request(collection('kubevirt.io', 'v1', MIG, ns), {
      method: 'POST',
      body: { apiVersion: 'kubevirt.io/v1', kind: 'VirtualMachineInstanceMigration', metadata: { generateName: `${n}-migration-`, namespace: ns }, spec: { vmiName: n } },
    }) },
  del('kubevirt.io', 'v1', VMI),
];

export function actionsFor(group, version, plural) {
  if (plural === VM) return VM_ACTIONS;
  if (plural === VMI) return VMI_ACTIONS;
  if (plural === 'nodes' || plural === 'events') return [];
  return [del(group, version, plural)];
}

// the actions this user may take in `namespace` (one review each, kept for the tab)
const mayCache = new WeakMap();
function may(actions, namespace) {
  let byNs = mayCache.get(actions);
  if (!byNs) mayCache.set(actions, (byNs = new Map()));
  if (!byNs.has(namespace)) {
    byNs.set(namespace, Promise.all(actions.map((a) => can(a.rule.verb, a.rule.group, a.rule.resource, a.rule.subresource || '', namespace)))
      .then((ok) => actions.filter((_, i) => ok[i])));
  }
  return byNs.get(namespace);
}

// ... of which those that apply to an object in state `state` ({status, paused})
export async function allowed(actions, namespace, state) {
  return (await may(actions, namespace)).filter((a) => a.when(state));
}

export function confirm(text) {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.showModal();
  });
}

export function toast(text, kind = 'info') {
  const box = document.getElementById('toasts');
  const el = h('div', { class: `toast ${kind}`, role: kind === 'error' ? 'alert' : 'status' }, text);
  box.append(el);
  setTimeout(() => el.remove(), kind === 'error' ? 12000 : 5000);
}

export async function perform(action, kindLabel, ns, name) {
  const what = `${kindLabel} ${ns ? `${ns}/` : ''}${name}`;
  if (!(await confirm(`${action.label} ${what}?`))) return false;
  try {
    await action.run(ns, name);
    toast(`${action.label}: ${what}`);
    return true;
  } catch (e) {
    toast(e instanceof ApiError ? e.line : String(e), 'error');
    return false;
  }
}

export function buttons(actions, kindLabel, ns, name) {
  return actions.map((a) => h('button', {
    class: `action${a.danger ? ' danger' : ''}`,
    dataset: { action: a.id },
    onclick: (ev) => { ev.stopPropagation(); perform(a, kindLabel, ns, name); },
  }, a.label));
}
