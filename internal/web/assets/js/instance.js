// An instance's page: what it is, its node's figures over time (from herd up's scrapes of its
// agent) and the load balancer's figures, its pods, and the tail of its pods' logs.
import { el, clear, crumbs, fleetHref, time, ago, markRendered } from './dom.js';
import { openStream } from './stream.js';
import { cellState } from './grid.js';
import { EventList } from './events.js';
import { TimeChart, fmt } from './charts.js';

const maxLogLines = 500;

export function instancePage(main, name) {
  crumbs(['fleets', '/ui/'], [name]);
  const head = el('section', { class: 'card', id: 'instance' });
  const charts = {
    cpu: new TimeChart({ title: 'CPU (cores)', format: fmt.cores, empty: 'no figures from the instance\'s agent yet' }),
    mem: new TimeChart({ title: 'memory (working set)', format: fmt.bytes, empty: 'no figures from the instance\'s agent yet' }),
    rps: new TimeChart({ title: 'requests/s', format: fmt.rate }),
    p95: new TimeChart({ title: 'p95 latency', format: fmt.ms }),
  };
  const pods = el('section', { class: 'card', id: 'pods' }, el('h2', { text: 'Pods' }));
  const logs = el('pre', { class: 'logs', id: 'logs' });
  const logStatus = el('span', { class: 'muted' });
  const events = new EventList();
  main.append(head, el('div', { class: 'charts' }, charts.cpu.root, charts.mem.root, charts.rps.root, charts.p95.root),
    pods, el('section', { class: 'card' }, el('h2', {}, 'Logs ', logStatus), logs), events.root);

  let inst = null;
  let fleet = null; // the instance's fleet, for its listeners
  let kubeLoaded = false;

  function show() {
    clear(head);
    if (!inst) {
      head.append(el('h1', { text: name }), el('p', { class: 'error', text: 'No such instance (deleted, or never created).' }));
      return;
    }
    crumbs(['fleets', '/ui/'], [inst.fleet, fleetHref(inst.fleet)], [name]);
    if (inst.provider === 'fake') {
      for (const c of [charts.cpu, charts.mem]) c.setEmptyText('a fake instance has no agent: no CPU or memory figures');
    }
    const listeners = fleet ? (fleet.spec.listeners || []).length : 1;
    for (const c of [charts.rps, charts.p95]) {
      c.setEmptyText(listeners ? 'no requests in the last five minutes'
        : 'no listeners: the load balancer counts requests only for fleets with listeners');
    }
    head.append(el('h1', { text: name }), el('dl', { class: 'props' },
      ...prop('state', el('span', { class: 'phase', id: 'instance-state', 'data-state': cellState(inst), text: inst.phase + (inst.lbHealth ? ' · LB ' + inst.lbHealth : '') })),
      ...prop('fleet', el('a', { href: fleetHref(inst.fleet), text: inst.fleet })),
      ...prop('region', inst.region), ...prop('revision', inst.revision), ...prop('provider', inst.provider || ''),
      ...prop('address', inst.address || '-'),
      ...prop('created', inst.createdAt ? `${time(inst.createdAt)} (${ago(inst.createdAt)} ago)` : '-'),
      ...prop('ready since', inst.readyAt ? time(inst.readyAt) : '-'),
      ...(inst.lastError ? prop('last error', el('span', { class: 'error', text: inst.lastError })) : [])));
    if (!kubeLoaded && inst.phase === 'Ready') {
      kubeLoaded = true;
      loadPods();
      followLogs();
    }
  }

  function prop(k, v) { return [el('dt', { text: k }), el('dd', {}, v)]; }

  async function apiError(r) {
    const body = await r.json().catch(() => ({}));
    return body.error || `${r.status} ${r.statusText}`;
  }

  async function loadPods() {
    const r = await fetch(`/ui/api/v1/instances/${encodeURIComponent(name)}/pods`);
    clear(pods).append(el('h2', { text: 'Pods' }));
    if (!r.ok) {
      pods.append(el('p', { class: 'muted', text: await apiError(r) }));
      return;
    }
    const list = await r.json();
    pods.append(el('table', {},
      el('thead', {}, el('tr', {}, ...['namespace', 'name', 'phase', 'ready', 'restarts', 'IP', 'age'].map((h) => el('th', { text: h })))),
      el('tbody', {}, ...list.map((p) => el('tr', {},
        el('td', { text: p.namespace }), el('td', { text: p.name }), el('td', { text: p.phase }),
        el('td', { text: `${p.ready}/${p.containers}` }), el('td', { text: String(p.restarts) }),
        el('td', { text: p.podIP || '' }), el('td', { text: ago(p.startTime) }))))));
  }

  // followLogs reads the logs route (the one herd logs uses) with follow: JSON lines, appended
  // as text.
  async function followLogs() {
    logStatus.textContent = '(following)';
    const r = await fetch(`/ui/api/v1/instances/${encodeURIComponent(name)}/logs?tail=100&follow=true`);
    if (!r.ok) {
      logStatus.textContent = '(' + (await apiError(r)) + ')';
      return;
    }
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read().catch(() => ({ done: true }));
      if (done) break;
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line) appendLog(JSON.parse(line));
      }
    }
    logStatus.textContent = '(ended)';
  }

  function appendLog(l) {
    const text = l.error ? `${l.pod}/${l.container}: log ended: ${l.error}` : `${l.pod}/${l.container} ${l.message}`;
    logs.append(text + '\n');
    while (logs.childNodes.length > maxLogLines) logs.firstChild.remove();
    logs.scrollTop = logs.scrollHeight;
  }

  openStream('?instance=' + encodeURIComponent(name), {
    snapshot(s) {
      inst = s.instances[0] || null;
      fleet = s.fleets[0] || null;
      show();
      events.reset(s.events);
      markRendered();
    },
    instance(c) {
      inst = c.type === 'DELETED' ? null : c.instance;
      show();
    },
    fleet(c) {
      fleet = c.type === 'DELETED' ? null : c.fleet;
      show();
    },
    health(h) {
      if (inst && name in h) {
        inst = { ...inst, lbHealth: h[name] };
        show();
      }
    },
    event(e) { events.add(e); },
    sample(s) {
      const f = s.instance || {};
      const t = Date.parse(s.time) / 1000;
      charts.cpu.push(t, { cpu: f.cpuCores ?? null });
      charts.mem.push(t, { memory: f.memoryBytes ?? null });
      charts.rps.push(t, { requests: f.requestsPerSecond ?? null });
      charts.p95.push(t, { p95: f.latencyP95Seconds ?? null });
    },
  });
}
