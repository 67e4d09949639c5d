// The api, as the console talks to it: the token (kept for this tab only), requests whose
// refusals are Kubernetes Status objects, live lists (a list, then a watch from its
// resourceVersion, resumed where it ended), and access reviews for what to offer.

const TOKEN_KEY = 'virtstream.token';
export const TABLE = 'application/json;as=Table;v=v1;g=meta.k8s.io,application/json';
export const SUB = '/apis/subresources.kubevirt.io/v1';

export const session = {
  get token() { return sessionStorage.getItem(TOKEN_KEY) || ''; },
  set(token) { sessionStorage.setItem(TOKEN_KEY, token); canCache.clear(); },
  clear() { sessionStorage.removeItem(TOKEN_KEY); canCache.clear(); },
  // `/ui/#token=…`: taken into this tab's storage and out of the address (and history)
  takeFromFragment() {
    const params = new URLSearchParams(location.hash.slice(1));
    const token = params.get('token');
    if (!token) return false;
    this.set(token);
    history.replaceState(history.state, '', location.pathname + location.search);
    return true;
  },
};

export class ApiError extends Error {
  constructor(code, status) {
    super((status && status.message) || `HTTP ${code}`);
    this.code = code;
    this.status = status || {};
    this.reason = this.status.reason || '';
    this.causes = (this.status.details && this.status.details.causes) || [];
  }

  get line() {
    return `${this.reason || 'Error'} (${this.code}): ${this.message}`;
  }
}

function headers(extra = {}) {
  const out = { ...extra };
  if (session.token) out.Authorization = `Bearer ${session.token}`;
  return out;
}

async function errorOf(r) {
  let status = null;
  try { status = await r.json(); } catch { /* not a Status */ }
  if (!status || status.kind !== 'Status') {
    status = { message: r.statusText || `HTTP ${r.status}`, reason: r.statusText, code: r.status };
  }
  return new ApiError(r.status, status);
}

export async function request(path, opts = {}) {
  const { method = 'GET', body, contentType = 'application/json', accept = 'application/json', signal } = opts;
  const init = { method, headers: headers({ Accept: accept }), signal, cache: 'no-store' };
  if (body !== undefined) {
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
    init.headers['Content-Type'] = contentType;
  }
  let r;
  try {
    r = await fetch(path, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, { message: `the api did not answer (${e.message})`, reason: 'Unreachable' });
  }
  if (!r.ok) throw await errorOf(r);
  return r;
}

export async function getJSON(path, opts) {
  const r = await request(path, opts);
  return r.json();
}

export function url(path, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== '' && v !== undefined && v !== null) q.set(k, v);
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

export function collection(group, version, plural, namespace = '') {
  const base = group ? `/apis/${group}/${version}` : `/api/${version}`;
  return namespace ? `${base}/namespaces/${namespace}/${plural}` : `${base}/${plural}`;
}

async function* lines(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        if (line.trim()) yield JSON.parse(line);
      }
    }
  } finally {
    reader.releaseLock();
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const WATCH_SECONDS = 600;
const FINAL = new Set([401, 403, 404, 405]); // a refusal: said once, not retried

function rvOf(obj) {
  return (obj && obj.metadata && obj.metadata.resourceVersion) || '';
}

// A live list: `onReset(listDoc)` with the whole list (a Table when `table`), then
// `onEvent(type, object)` per change. The watch resumes from the last resourceVersion when
// it ends; a 410 (too old) lists again. Network failures retry with a growing pause and
// say so through `onState`; refusals end it through `onError`.
export function live(path, { params = {}, table = false, onReset, onEvent, onState = () => {}, onError = () => {} }) {
  const accept = table ? TABLE : 'application/json';
  const ctrl = new AbortController();
  let rv = '';
  let pause = 1000;
  (async () => {
    while (!ctrl.signal.aborted) {
      try {
        if (!rv) {
          const doc = await getJSON(url(path, params), { accept, signal: ctrl.signal });
          rv = rvOf(doc);
          onReset(doc);
          onState('live');
        }
        const wparams = { ...params, watch: 'true', resourceVersion: rv, allowWatchBookmarks: 'true', timeoutSeconds: WATCH_SECONDS };
        const r = await request(url(path, wparams), { accept, signal: ctrl.signal });
        onState('live');
        pause = 1000;
        for await (const ev of lines(r.body)) {
          if (ev.type === 'ERROR') {
            const st = ev.object || {};
            if (st.code === 410) { rv = ''; break; }
            throw new ApiError(st.code || 500, st);
          }
          rv = rvOf(ev.object) || rv;
          if (ev.type !== 'BOOKMARK') onEvent(ev.type, ev.object);
        }
      } catch (e) {
        if (ctrl.signal.aborted || e.name === 'AbortError') return;
        if (e instanceof ApiError && FINAL.has(e.code)) { onError(e); return; }
        onState('reconnecting', e);
        await sleep(pause);
        pause = Math.min(pause * 2, 30000);
      }
    }
  })();
  return { stop: () => ctrl.abort() };
}

// SelfSubjectAccessReview: may this user do it? Cached for the tab's token.
const canCache = new Map();
export function can(verb, group, resource, subresource = '', namespace = '', name = '') {
  const key = [verb, group, resource, subresource, namespace, name].join('|');
  if (!canCache.has(key)) {
    const body = {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SelfSubjectAccessReview',
      spec: { resourceAttributes: { verb, group, resource, subresource, namespace, name } },
    };
    canCache.set(key, request('/apis/authorization.k8s.io/v1/selfsubjectaccessreviews', { method: 'POST', body })
      .then((r) => r.json())
      .then((d) => Boolean(d.status && d.status.allowed))
      .catch(() => false));
  }
  return canCache.get(key);
}

export async function discovery() {
  // the served groups' preferred versions and the core resources (events when served)
  const [groups, core] = await Promise.all([getJSON('/apis'), getJSON('/api/v1')]);
  const versions = {};
  for (const g of groups.groups || []) versions[g.name] = g.preferredVersion.version;
  const coreResources = new Set((core.resources || []).map((r) => r.name));
  return { versions, coreResources };
}

export function metricsServed() {
  // the api names its Prometheus relay in the page it serves: none, no Metrics page and
  // nothing asked of a Prometheus that is not there
  const meta = document.querySelector('meta[name="virtstream-metrics"]');
  return Boolean(meta && meta.content);
}

export function websocketProtocols() {
  // Kubernetes' way to carry a bearer token on a browser's WebSocket (no headers there)
  const out = ['plain.kubevirt.io'];
  if (session.token) {
    const b64 = btoa(session.token).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
    out.unshift(`base64url.bearer.authorization.k8s.io.${b64}`);
  }
  return out;
}

export function websocketURL(path) {
  return `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}${path}`;
}
