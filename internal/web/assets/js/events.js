// The event stream of a page: newest first, at most a few hundred kept.
import { el, clear, time, instanceHref, fleetHref } from './dom.js';

const keep = 300;

export class EventList {
  constructor() {
    this.body = el('tbody');
    this.root = el('div', { class: 'card' }, el('h2', { text: 'Events' }),
      el('div', { class: 'events' }, el('table', {},
        el('thead', {}, el('tr', {}, el('th', { text: 'time' }), el('th', { text: 'object' }), el('th', { text: 'reason' }), el('th', { text: 'message' }))),
        this.body)));
  }

  reset(events) {
    clear(this.body);
    for (const e of events) this.add(e);
  }

  add(e) {
    const [kind, name] = e.object.split('/', 2);
    const href = kind === 'Instance' ? instanceHref(name) : kind === 'Fleet' ? fleetHref(name) : null;
    const row = el('tr', { class: e.type },
      el('td', { class: 'muted', text: time(e.time), title: e.time }),
      el('td', {}, href ? el('a', { href, text: e.object }) : e.object),
      el('td', { class: 'reason', text: e.reason }),
      el('td', { class: 'msg', text: e.message }));
    this.body.prepend(row);
    while (this.body.childElementCount > keep) this.body.lastElementChild.remove();
  }
}
