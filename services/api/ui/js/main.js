// The console's entry: the token (login form, or `#token=` taken into this tab's storage),
// the pages routed in the browser under /ui/, and the navigation between them.

import { ApiError, discovery, metricsServed, session } from './api.js';
import { clear, h, link } from './dom.js';

const main = document.getElementById('main');
const nav = document.getElementById('nav');
let current = null; // the mounted page: {stop()}
let served = null; // what discovery says the api serves

const ROUTES = [
  [/^\/ui\/?$/, async () => (await import('./cluster.js')).clusterPage(served)],
  [/^\/ui\/vms\/([^/]+)\/([^/]+)\/?$/, async (ns, name) => (await import('./vm.js')).objectPage('vm', ns, name)],
  [/^\/ui\/vmis\/([^/]+)\/([^/]+)\/?$/, async (ns, name) => (await import('./vm.js')).objectPage('vmi', ns, name)],
  [/^\/ui\/nodes\/([^/]+)\/?$/, async (name) => (await import('./node.js')).nodePage(name)],
  [/^\/ui\/metrics\/?$/, async () => (await import('./metrics.js')).metricsPage()],
  [/^\/ui\/shadow\/?$/, async () => (await import('./shadow.js')).shadowPage()],
  [/^\/ui\/whatif\/?$/, async () => (await import('./whatif.js')).whatIfPage()],
];

async function route() {
  if (current) current.stop();
  current = null;
  const path = decodeURI(location.pathname);
  for (const [re, page] of ROUTES) {
    const m = re.exec(path);
    if (!m) continue;
    clear(main);
    try {
      current = await page(...m.slice(1));
      main.append(current.el);
    } catch (e) {
      main.append(h('p', { class: 'error', role: 'alert' }, e instanceof ApiError ? e.line : String(e)));
    }
    markNav();
    return;
  }
  clear(main).append(h('p', { class: 'error' }, `No page at ${path}`), link('/ui/', 'Back to the cluster'));
}

export function navigate(href) {
  history.pushState(null, '', href);
  route();
}

document.addEventListener('click', (ev) => {
  const a = ev.target.closest('a[data-nav]');
  if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
  ev.preventDefault();
  navigate(a.getAttribute('href'));
});
window.addEventListener('popstate', route);

function markNav() {
  for (const a of nav.querySelectorAll('a')) {
    const here = a.getAttribute('href') === location.pathname || (a.dataset.root && location.pathname === '/ui/');
    a.classList.toggle('here', Boolean(here));
  }
}


function buildNav() {
  clear(nav).append(link('/ui/', 'Cluster', { 'data-root': 'true' }));
  const out = document.getElementById('logout');
  out.hidden = !session.token;
  out.onclick = () => { session.clear(); location.assign('/ui/'); };
  markNav();
  if (metricsServed()) { nav.append(link('/ui/metrics', 'Metrics')); markNav(); }
  nav.append(link('/ui/whatif', 'What-if'), link('/ui/shadow', 'Shadow'));
  markNav();
}

function loginForm(message) {
  const input = h('input', { type: 'password', name: 'token', autocomplete: 'off', placeholder: 'bearer token', required: true, id: 'token' });
  const err = h('p', { class: 'error', role: 'alert' }, message || '');
  const form = h('form', { class: 'login', id: 'login' },
    h('h2', {}, 'Log in'),
    h('p', { class: 'muted' }, 'A token from the api\'s auth file (`virtstream ui` prints a logged-in address). It is kept for this tab only.'),
    h('label', { for: 'token' }, 'Token'), input,
    h('button', { class: 'primary', type: 'submit' }, 'Log in'), err);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    session.set(input.value.trim());
    await boot();
  });
  clear(nav);
  clear(main).append(form);
  input.focus();
}

async function boot() {
  session.takeFromFragment();
  try {
    served = await discovery(); // authenticated: discovery needs a user
  } catch (e) {
    if (e instanceof ApiError && e.code === 401) {
      const had = Boolean(session.token);
      session.clear();
      loginForm(had ? e.line : '');
      return;
    }
    clear(main).append(h('p', { class: 'error', role: 'alert' }, e instanceof ApiError ? e.line : String(e)));
    return;
  }
  buildNav();
  await route();
}

boot();
