// A fleet's page: its state, its instances' grid, live charts of its traffic per revision and
// region, its rollout (steps, revisions, weights over time) and its events.
import { el, clear, crumbs, time, markRendered } from './dom.js';
import { openStream } from './stream.js';
import { FleetGrid, legend } from './grid.js';
import { EventList } from './events.js';
import { TimeChart, fmt } from './charts.js';

// conditionTone says what a condition's status means for the fleet: good, bad or neutral. For
// most conditions True is good; for Degraded, True is bad; Progressing is work under way either
// way; Unknown is neither.
export function conditionTone(c) {
  if (c.status !== 'True' && c.status !== 'False') return 'neutral';
  if (c.type === 'Progressing') return 'neutral';
  const good = c.type === 'Degraded' ? c.status === 'False' : c.status === 'True';
  return good ? 'good' : 'bad';
}

export function fleetPage(main, name) {
  crumbs(['fleets', '/ui/'], [name]);
  const head = el('section', { class: 'card', id: 'fleet' });
  const grid = new FleetGrid();
  const rollout = el('section', { class: 'card', id: 'rollout' });
  const charts = {
    rps: new TimeChart({ title: 'requests/s', format: fmt.rate }),
    p95: new TimeChart({ title: 'p95 latency', format: fmt.ms }),
    errors: new TimeChart({ title: '5xx/s', format: fmt.rate }),
    weights: new TimeChart({ title: 'traffic weight per revision', format: fmt.pct, stepped: true, empty: 'no revision serves yet' }),
  };
  const events = new EventList();
  main.append(head, el('section', { class: 'card' }, el('h2', { text: 'Instances' }), legend(), grid.root), rollout,
    el('div', { class: 'charts' }, charts.rps.root, charts.p95.root, charts.errors.root, charts.weights.root), events.root);

  let fleet = null;

  function showFleet() {
    clear(head);
    if (!fleet) {
      head.append(el('h1', { text: name }), el('p', { class: 'error', text: 'No such fleet (deleted, or not applied yet).' }));
      clear(rollout);
      return;
    }
    const sp = fleet.spec, st = fleet.status || {}, rp = sp.replicas || {};
    clear(head, el('h1', { text: name }),
      el('div', { class: 'row' },
        el('span', { class: 'phase', id: 'fleet-phase', text: st.phase || 'Pending' }),
        el('span', { id: 'fleet-ready', text: `${st.readyReplicas || 0}/${fleet.desired} ready (min ${rp.min ?? '?'}, max ${rp.max ?? '?'})` }),
        el('span', { class: 'muted', text: 'image ' + sp.image }),
        el('span', { class: 'muted', text: 'revision ' + (st.currentRevision || '-') }),
        sp.autoscaling ? el('span', { class: 'muted', text: `autoscaling on ${sp.autoscaling.metric || 'requestsPerSecond'}, target ${sp.autoscaling.target}` }) : null),
      st.message ? el('p', { class: 'error', text: st.message }) : null,
      conditions(st.conditions || []));
    grid.setCurrentRevision(st.currentRevision || '');
    const why = (sp.listeners || []).length ? 'no requests in the last five minutes'
      : 'no listeners: the load balancer counts requests only for fleets with listeners';
    for (const c of [charts.rps, charts.p95, charts.errors]) c.setEmptyText(why);
    showRollout();
  }

  function conditions(conds) {
    if (!conds.length) return null;
    return el('div', { class: 'row', id: 'conditions' }, ...conds.map((c) => el('span', {
      class: 'condition', 'data-tone': conditionTone(c), 'data-type': c.type,
      title: [c.reason, c.message].filter(Boolean).join(': '), text: `${c.type}=${c.status}` })));
  }

  // showRollout draws the rollout's progress: the strategy's steps with the current one marked,
  // the new revision's share of ready instances, and every revision with its weight.
  function showRollout() {
    clear(rollout);
    const sp = fleet.spec, st = fleet.status || {}, ro = st.rollout;
    const revs = st.revisions || [];
    const strategy = (sp.rollout && sp.rollout.strategy) || 'Rolling';
    rollout.append(el('h2', { text: 'Rollout' }));
    const current = revs.find((r) => r.name === st.currentRevision);
    const desired = fleet.desired;
    const rolling = revs.length > 1 || (ro && (ro.phase === 'Progressing' || ro.phase === 'Paused'));
    const line = el('div', { class: 'row', id: 'rollout-state' },
      el('span', { class: 'phase', text: ro && ro.revision === st.currentRevision ? `${ro.strategy} ${ro.phase}` : rolling ? `${strategy} in progress` : 'no rollout in progress' }),
      current ? el('span', { text: `${st.currentRevision}: ${current.readyReplicas}/${desired} ready, weight ${current.weight}%` }) : null,
      ro && ro.message ? el('span', { class: 'muted', text: ro.message }) : null);
    rollout.append(line);
    if (current && desired > 0) {
      const bar = el('div');
      bar.style.width = Math.min(100, Math.round((100 * current.readyReplicas) / desired)) + '%';
      rollout.append(el('div', { class: 'progress', title: 'ready instances of the current revision' }, bar));
    }
    const steps = strategy === 'Canary' ? (sp.rollout.steps || []).map((s) => `${s.weight}%`).concat('promote')
      : strategy === 'BlueGreen' ? ['preview', 'switch'] : [];
    if (steps.length && ro) {
      rollout.append(el('ol', { class: 'steps', id: 'rollout-steps' }, ...steps.map((s, i) =>
        el('li', { class: i < ro.step || ro.phase === 'Succeeded' ? 'done' : i === ro.step ? 'current' : '', text: s }))));
    }
    if (revs.length) {
      rollout.append(el('table', { id: 'revisions' },
        el('thead', {}, el('tr', {}, ...['revision', 'image', 'ready', 'weight'].map((h) => el('th', { text: h })))),
        el('tbody', {}, ...revs.map((r) => el('tr', { 'data-revision': r.name },
          el('td', { text: r.name + (r.name === st.currentRevision ? ' (current)' : '') }), el('td', { text: r.image }),
          el('td', { text: `${r.readyReplicas}/${r.replicas}` }), el('td', { text: r.weight + '%' }))))));
    }
    const hist = st.history || [];
    if (hist.length) {
      rollout.append(el('h3', { text: 'History' }), el('table', {},
        el('tbody', {}, ...hist.map((h) => el('tr', {}, el('td', { text: h.revision }), el('td', { class: 'muted', text: h.image }),
          el('td', { class: 'muted', text: `${time(h.since)} - ${h.until ? time(h.until) : 'now'}` }))))));
    }
  }

  openStream('?fleet=' + encodeURIComponent(name), {
    snapshot(s) {
      fleet = s.fleets[0] || null;
      grid.reset();
      showFleet();
      for (const i of s.instances) grid.set(i);
      events.reset(s.events);
      markRendered();
    },
    fleet(c) {
      fleet = c.type === 'DELETED' ? null : c.fleet;
      showFleet();
    },
    instance(c) {
      if (c.type === 'DELETED') grid.remove(c.instance.name);
      else grid.set(c.instance);
    },
    health(h) {
      for (const [n, state] of Object.entries(h)) grid.health(n, state);
    },
    event(e) { events.add(e); },
    sample(s) {
      const t = Date.parse(s.time) / 1000;
      const rps = {}, p95 = {}, errs = {};
      for (const g of s.groups || []) {
        const key = `${g.revision} · ${g.region}`;
        rps[key] = g.requestsPerSecond ?? null;
        p95[key] = g.latencyP95Seconds ?? null;
        errs[key] = g.errors5xxPerSecond ?? null;
      }
      charts.rps.push(t, rps);
      charts.p95.push(t, p95);
      charts.errors.push(t, errs);
      charts.weights.push(t, s.weights || {});
    },
  });
}
