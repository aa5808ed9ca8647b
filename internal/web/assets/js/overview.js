// The overview: every fleet as a card with its instances' grid per region, and the event stream.
import { el, clear, crumbs, fleetHref, markRendered } from './dom.js';
import { openStream } from './stream.js';
import { FleetGrid, legend } from './grid.js';
import { EventList } from './events.js';

export function overview(main) {
  crumbs(['fleets']);
  const cards = el('div', { class: 'cards', id: 'fleets' });
  const empty = el('p', { class: 'muted', text: 'No fleets yet: herd apply -f fleet.yaml', hidden: true });
  const events = new EventList();
  main.append(legend(), empty, cards, events.root);

  const fleets = new Map(); // name -> {fleet, grid, card, summary}
  const instanceFleet = new Map(); // instance -> fleet

  function entry(name) {
    let f = fleets.get(name);
    if (!f) {
      const grid = new FleetGrid();
      const summary = el('div', { class: 'row muted' });
      const card = el('section', { class: 'card', 'data-fleet': name },
        el('h2', {}, el('a', { href: fleetHref(name), text: name })), summary, grid.root);
      // Cards in name order.
      const after = [...fleets.keys()].sort().find((n) => n > name);
      cards.insertBefore(card, after ? fleets.get(after).card : null);
      f = { fleet: null, grid, card, summary };
      fleets.set(name, f);
    }
    return f;
  }

  function showFleet(fleet) {
    const f = entry(fleet.metadata.name);
    f.fleet = fleet;
    const st = fleet.status || {};
    clear(f.summary,
      el('span', { class: 'phase', text: st.phase || 'Pending' }),
      el('span', { class: 'ready', text: `${st.readyReplicas || 0}/${fleet.desired} ready` }),
      el('span', { text: (fleet.spec.regions || []).map((r) => r.name).join(', ') }),
      st.rollout && (st.rollout.phase === 'Progressing' || st.rollout.phase === 'Paused')
        ? el('span', { text: `rollout ${st.rollout.strategy} ${st.rollout.phase}` }) : null,
      st.message ? el('span', { class: 'error', text: st.message }) : null);
    f.grid.setCurrentRevision(st.currentRevision || '');
    empty.hidden = fleets.size > 0;
  }

  function setInstance(inst) {
    instanceFleet.set(inst.name, inst.fleet);
    entry(inst.fleet).grid.set(inst);
  }

  function removeInstance(name) {
    const fleet = instanceFleet.get(name);
    instanceFleet.delete(name);
    if (fleet && fleets.has(fleet)) fleets.get(fleet).grid.remove(name);
  }

  openStream('', {
    snapshot(s) {
      clear(cards);
      fleets.clear();
      instanceFleet.clear();
      for (const f of s.fleets) showFleet(f);
      for (const i of s.instances) setInstance(i);
      events.reset(s.events);
      empty.hidden = fleets.size > 0;
      markRendered();
    },
    fleet(c) {
      if (c.type === 'DELETED') {
        const f = fleets.get(c.fleet.metadata.name);
        if (f) f.card.remove();
        fleets.delete(c.fleet.metadata.name);
        empty.hidden = fleets.size > 0;
        return;
      }
      showFleet(c.fleet);
    },
    instance(c) {
      if (c.type === 'DELETED') removeInstance(c.instance.name);
      else setInstance(c.instance);
    },
    health(h) {
      for (const [name, state] of Object.entries(h)) {
        const fleet = instanceFleet.get(name);
        if (fleet && fleets.has(fleet)) fleets.get(fleet).grid.health(name, state);
      }
    },
    event(e) { events.add(e); },
  });
}
