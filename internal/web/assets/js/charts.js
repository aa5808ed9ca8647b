// Live time-series charts on uPlot (vendored under assets/vendor/uplot). A chart's series are
// keyed (e.g. "revision · region"); a key seen for the first time adds a series, earlier points
// of it being gaps. Points come from the stream's samples, so the browser never asks for them.
import { el } from './dom.js';

const palette = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22'];
const maxPoints = 300; // five minutes at one sample a second

export class TimeChart {
  // opts: title, format(value) for the axis and legend, stepped (a line that holds its value).
  constructor(opts) {
    this.opts = opts;
    this.xs = [];
    this.series = new Map(); // key -> values aligned with xs
    this.plot = null;
    this.target = el('div', { class: 'chart' });
    this.root = el('div', { class: 'card', 'data-chart': opts.title }, el('h3', { text: opts.title }), this.target);
    this.dirty = false;
  }

  // push appends one point in time; values maps a key to a number (or null when unknown).
  push(t, values) {
    let added = false;
    for (const key of Object.keys(values)) {
      if (!this.series.has(key)) {
        this.series.set(key, new Array(this.xs.length).fill(null));
        added = true;
      }
    }
    this.xs.push(t);
    for (const [key, ys] of this.series) ys.push(key in values ? values[key] : null);
    if (this.xs.length > maxPoints) {
      this.xs.shift();
      for (const ys of this.series.values()) ys.shift();
    }
    if (added) this.rebuild();
    else this.schedule();
  }

  data() { return [this.xs, ...this.series.values()]; }

  schedule() {
    if (this.dirty || !this.plot) return;
    this.dirty = true;
    requestAnimationFrame(() => {
      this.dirty = false;
      this.plot.setData(this.data());
    });
  }

  rebuild() {
    if (this.plot) this.plot.destroy();
    if (typeof uPlot === 'undefined') return;
    const fmt = this.opts.format || ((v) => String(v));
    const stepped = this.opts.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined;
    const series = [{}];
    let i = 0;
    for (const key of this.series.keys()) {
      series.push({ label: key, stroke: palette[i++ % palette.length], width: 1.5, paths: stepped,
        value: (u, v) => (v === null || v === undefined ? '-' : fmt(v)) });
    }
    const width = Math.max(300, (this.root.clientWidth || 460) - 24);
    this.plot = new uPlot({ width, height: 170, series, scales: { x: { time: true } },
      axes: [{}, { size: 60, values: (u, vals) => vals.map((v) => fmt(v)) }] }, this.data(), this.target);
  }

  get keys() { return [...this.series.keys()]; }
}

export const fmt = {
  rate: (v) => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)) + '/s',
  ms: (v) => (v * 1000 >= 100 ? (v * 1000).toFixed(0) : (v * 1000).toFixed(1)) + ' ms',
  pct: (v) => v.toFixed(0) + '%',
  cores: (v) => v.toFixed(2),
  bytes: (v) => (v >= 1 << 30 ? (v / (1 << 30)).toFixed(2) + ' GiB' : (v / (1 << 20)).toFixed(0) + ' MiB'),
};
