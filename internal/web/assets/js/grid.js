// The instance grid: one small square per instance, in rows per region, coloured by what the
// instance is doing (its phase and the load balancer's view of it). Cells are links to the
// instance's page; data-state carries the colour's meaning for people using the keyboard and
// for tests.
import { el, clear, instanceHref } from './dom.js';

// cellState is an instance's colour: ok (Ready and healthy), starting, degraded (Unhealthy, or
// Ready but failing the load balancer's checks), failed, or leaving (terminating or draining).
export function cellState(inst) {
  switch (inst.phase) {
    case 'Failed': return 'failed';
    case 'Terminating': return 'leaving';
    case 'Unhealthy': return 'degraded';
    case 'Pending': case 'Booting': return 'starting';
  }
  switch (inst.lbHealth) {
    case 'unhealthy': case 'ejected': return 'degraded';
    case 'draining': return 'leaving';
  }
  return 'ok';
}

export function legend() {
  return el('div', { class: 'legend' },
    el('span', { class: 'ok', text: 'serving' }), el('span', { class: 'starting', text: 'starting' }),
    el('span', { class: 'degraded', text: 'unhealthy' }), el('span', { class: 'failed', text: 'failed' }),
    el('span', { class: 'leaving', text: 'leaving' }));
}

// FleetGrid is the grid of one fleet's instances.
export class FleetGrid {
  constructor() {
    this.root = el('div', { class: 'grid' });
    this.regions = new Map(); // region -> .cells element
    this.cells = new Map();   // instance name -> {inst, cell}
    this.currentRevision = '';
  }

  regionCells(region) {
    let cells = this.regions.get(region);
    if (!cells) {
      cells = el('div', { class: 'cells' });
      const row = el('div', { class: 'region', 'data-region': region }, el('span', { class: 'label', title: region, text: region }), cells);
      // Rows in region order.
      const after = [...this.regions.keys()].sort().find((r) => r > region);
      this.root.insertBefore(row, after ? this.regions.get(after).parentElement : null);
      this.regions.set(region, cells);
    }
    return cells;
  }

  // set adds or updates an instance.
  set(inst) {
    let entry = this.cells.get(inst.name);
    if (!entry) {
      entry = { inst, cell: el('a', { class: 'cell', href: instanceHref(inst.name), 'data-name': inst.name }) };
      this.cells.set(inst.name, entry);
      this.regionCells(inst.region).append(entry.cell);
    }
    entry.inst = inst;
    this.paint(entry);
  }

  paint({ inst, cell }) {
    const state = cellState(inst);
    if (cell.dataset.state !== state) cell.dataset.state = state;
    cell.classList.toggle('old', !!this.currentRevision && inst.revision !== this.currentRevision);
    cell.title = `${inst.name} · ${inst.region} · ${inst.revision}\n${inst.phase}${inst.lbHealth ? ' · LB ' + inst.lbHealth : ''}` +
      (inst.lastError ? '\n' + inst.lastError : '');
  }

  health(name, lbHealth) {
    const entry = this.cells.get(name);
    if (entry) {
      entry.inst = { ...entry.inst, lbHealth };
      this.paint(entry);
    }
  }

  remove(name) {
    const entry = this.cells.get(name);
    if (!entry) return;
    this.cells.delete(name);
    const cells = entry.cell.parentElement;
    entry.cell.remove();
    if (cells && cells.childElementCount === 0) {
      for (const [region, c] of this.regions) {
        if (c === cells) {
          this.regions.delete(region);
          cells.parentElement.remove();
        }
      }
    }
  }

  setCurrentRevision(rev) {
    if (rev === this.currentRevision) return;
    this.currentRevision = rev;
    for (const entry of this.cells.values()) this.paint(entry);
  }

  reset() {
    clear(this.root);
    this.regions.clear();
    this.cells.clear();
  }

  get size() { return this.cells.size; }
}
