// The guest in the page: its serial console (xterm.js) and its screen (noVNC), each over
// the api's WebSocket (KubeVirt's `console` and `vnc` subresources, the token carried as a
// subprotocol), and a screenshot (`vnc/screenshot`). A browser cannot read why an upgrade
// was refused: the api tells a browser in the close instead (code 4000 + the HTTP status,
// the Status's message as the reason), shown as worded.

import { ApiError, SUB, request, websocketProtocols, websocketURL } from './api.js';
import { clear, h } from './dom.js';

function vmiPath(ns, name, what) {
  return `${SUB}/namespaces/${ns}/virtualmachineinstances/${name}/${what}`;
}

const REASONS = { 400: 'BadRequest', 403: 'Forbidden', 404: 'NotFound', 409: 'Conflict', 500: 'InternalError', 503: 'ServiceUnavailable' };

function refusal(ev) {
  // the api's refusal carried by the close ('' for any other end), as its Status line
  if (ev.code < 4000 || ev.code >= 5000) return '';
  const code = ev.code - 4000;
  return `${REASONS[code] || 'Error'} (${code}): ${ev.reason}`;
}

function refuse(status, screen, line) {
  status.dataset.state = 'refused';
  status.className = 'error';
  status.setAttribute('role', 'alert');
  status.replaceChildren(line);
  screen.hidden = true;
}

function socket(ns, name, what) {
  const ws = new WebSocket(websocketURL(vmiPath(ns, name, what)), websocketProtocols());
  ws.binaryType = 'arraybuffer';
  return ws;
}

export class SerialConsole {
  constructor(ns, name) {
    this.ns = ns;
    this.name = name;
    this.status = h('p', { class: 'muted', id: 'console-status' }, 'Connecting…');
    this.screen = h('div', { class: 'serial', id: 'terminal' });
    this.el = h('section', { class: 'guest' }, this.status, this.screen);
  }

  async start() {
    const [{ Terminal }, { FitAddon }] = await Promise.all([
      import('../vendor/xterm/xterm.mjs'), import('../vendor/xterm-addon-fit/addon-fit.mjs')]);
    if (!document.querySelector('link[data-xterm]')) {
      document.head.append(h('link', { rel: 'stylesheet', href: '/ui/vendor/xterm/xterm.css', 'data-xterm': 'true' }));
    }
    this.term = new Terminal({ convertEol: false, cursorBlink: true, fontSize: 14, scrollback: 5000 });
    this.fit = new FitAddon();
    this.term.loadAddon(this.fit);
    this.term.open(this.screen);
    this.fit.fit();
    this.onResize = () => this.fit.fit();
    window.addEventListener('resize', this.onResize);
    this.connect();
  }

  connect() {
    const ws = socket(this.ns, this.name, 'console');
    this.ws = ws;
    const encoder = new TextEncoder();
    ws.onopen = () => {
      this.screen.hidden = false;
      this.status.textContent = `Connected to the serial console of ${this.ns}/${this.name}`;
      this.status.dataset.state = 'open';
      this.term.focus();
    };
    ws.onmessage = (ev) => this.term.write(new Uint8Array(ev.data));
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      const refused = refusal(ev);
      if (refused) {
        refuse(this.status, this.screen, refused);
        this.status.append(' ', h('button', { class: 'link', onclick: () => { this.status.className = 'muted'; this.connect(); } }, 'try again'));
        return;
      }
      this.status.dataset.state = 'closed';
      this.status.replaceChildren(`Disconnected${ev.reason ? `: ${ev.reason}` : ''} `,
        h('button', { class: 'link', onclick: () => this.connect() }, 'reconnect'));
    };
    this.input = this.input || this.term.onData((data) => {
      if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(encoder.encode(data));
    });
  }

  stop() {
    if (this.ws) { const ws = this.ws; this.ws = null; ws.close(); }
    if (this.onResize) window.removeEventListener('resize', this.onResize);
    if (this.term) this.term.dispose();
  }
}

export class Vnc {
  constructor(ns, name) {
    this.ns = ns;
    this.name = name;
    this.status = h('p', { class: 'muted', id: 'vnc-status' }, 'Connecting…');
    this.screen = h('div', { class: 'vnc-screen', id: 'vnc-screen' });
    this.shot = h('div', { class: 'shot' });
    const button = h('button', { id: 'screenshot', onclick: () => this.screenshot() }, 'Screenshot');
    this.el = h('section', { class: 'guest' }, h('div', { class: 'toolbar' }, this.status, button), this.screen, this.shot);
  }

  async start() {
    const { default: RFB } = await import('../vendor/novnc/core/rfb.js');
    const ws = socket(this.ns, this.name, 'vnc');
    let refused = '';
    ws.addEventListener('close', (ev) => { refused = refusal(ev); });
    this.rfb = new RFB(this.screen, ws, { shared: true });
    this.rfb.scaleViewport = true;
    this.rfb.addEventListener('connect', () => { this.status.textContent = `Connected to the screen of ${this.ns}/${this.name}`; this.status.dataset.state = 'open'; });
    this.rfb.addEventListener('disconnect', (ev) => {
      if (refused) { refuse(this.status, this.screen, refused); return; }
      this.status.dataset.state = 'closed';
      this.status.textContent = ev.detail.clean ? 'Disconnected' : 'The connection to the screen failed or was refused';
    });
  }

  async screenshot() {
    try {
      const r = await request(vmiPath(this.ns, this.name, 'vnc/screenshot'), { accept: 'image/png' });
      const blob = await r.blob();
      if (this.url) URL.revokeObjectURL(this.url);
      this.url = URL.createObjectURL(blob);
      const file = `${this.name}-${new Date().toISOString().replace(/[:.]/g, '-')}.png`;
      clear(this.shot).append(h('a', { href: this.url, download: file }, `Download ${file}`), h('img', { src: this.url, alt: `screenshot of ${this.name}`, id: 'screenshot-img' }));
    } catch (e) {
      clear(this.shot).append(h('p', { class: 'error', role: 'alert' }, e instanceof ApiError ? e.line : String(e)));
    }
  }

  stop() {
    if (this.rfb) this.rfb.disconnect();
    if (this.url) URL.revokeObjectURL(this.url);
  }
}
