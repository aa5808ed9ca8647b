// Live time-series charts on uPlot (vendored under assets/vendor/uplot). A chart's series are
// keyed (e.g. "revision · region"); a key seen for the first time adds a series, earlier points
// of it being gaps. Points come from the stream's samples, so the browser never asks for them.
// A chart with no value in its window says so instead of drawing empty axes, and it follows its
// card's width as the window changes.
import { el } from './dom.js';

const palette = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22'];
const maxPoints = 300; // five minutes at one sample a second
const height = 170;

export class TimeChart {
  // opts: title, format(value) for the axis and legend, stepped (a line that holds its value),
  // empty (what the chart says while it has no value: why there is none).
  constructor(opts) {
    this.opts = opts;
    this.xs = [];
    this.series = new Map(); // key -> values aligned with xs
    this.plot = null;
    this.target = el('div', { class: 'chart' });
    this.empty = el('div', { class: 'nodata', text: opts.empty || 'no data yet' });
    this.root = el('div', { class: 'card', 'data-chart': opts.title, 'data-empty': 'true' },
      el('h3', { text: opts.title }), this.empty, this.target);
    this.dirty = false;
    this.width = 0;
    new ResizeObserver(() => this.resize()).observe(this.target);
  }

  // setEmptyText changes what the chart says while it has no value.
  setEmptyText(text) {
    if (this.empty.textContent !== text) this.empty.textContent = text;
  }

  // hasData reports whether any point in the window has a value.
  hasData() {
    for (const ys of this.series.values()) {
      if (ys.some((v) => v !== null && v !== undefined)) return true;
    }
    return false;
  }

  // showState shows the plot or, with nothing to draw, the chart's empty text.
  showState() {
    const empty = !this.hasData();
    if (this.root.dataset.empty !== String(empty)) this.root.dataset.empty = String(empty);
  }

  // plotWidth is the width the plot has: its card's, which the window sets. uPlot's own padding
  // keeps the time labels at the edges inside it.
  plotWidth() { return Math.max(200, Math.floor(this.target.clientWidth || 440)); }

  resize() {
    const width = this.plotWidth();
    if (!this.plot || width === this.width) return;
    this.width = width;
    this.plot.setSize({ width, height });
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
    this.showState();
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
    this.width = this.plotWidth();
    this.plot = new uPlot({ width: this.width, height, series, scales: { x: { time: true } },
      axes: [{}, { size: 64, values: (u, vals) => vals.map((v) => fmt(v)) }] }, this.data(), this.target);
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
