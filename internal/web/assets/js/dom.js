// DOM helpers. Everything that comes from the server is inserted as text (textContent, text
// nodes), never parsed as markup: an event message holding HTML shows as that HTML's text.

// el builds an element. attrs: "class", "text" (its text), "on<event>" (a listener), or an
// attribute. children: nodes, or strings inserted as text.
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c !== undefined && c !== null && c !== false) e.append(c);
  }
  return e;
}

// clear empties an element, then appends children as el does: nodes, or strings as text;
// null, undefined and false are left out (Element.append would insert them as the text "null").
export function clear(e, ...children) {
  e.replaceChildren(...children.filter((c) => c !== undefined && c !== null && c !== false));
  return e;
}

export const fleetHref = (name) => '/ui/fleets/' + encodeURIComponent(name);
export const instanceHref = (name) => '/ui/instances/' + encodeURIComponent(name);

// ago says how long ago an ISO time was.
export function ago(iso) {
  if (!iso) return '';
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.round(s) + 's';
  if (s < 3600) return Math.round(s / 60) + 'm';
  if (s < 86400) return Math.round(s / 3600) + 'h';
  return Math.round(s / 86400) + 'd';
}

export function time(iso) {
  return iso ? new Date(iso).toLocaleTimeString() : '';
}

// crumbs sets the header's breadcrumbs: [text, href] pairs, the last one without a link.
export function crumbs(...parts) {
  const nav = clear(document.getElementById('crumbs'));
  parts.forEach(([text, href], i) => {
    if (i > 0) nav.append(' / ');
    nav.append(href ? el('a', { href, text }) : el('span', { text }));
  });
  document.title = parts.map((p) => p[0]).concat('herd').join(' · ');
}

// markRendered records, once, when the page's first snapshot has been drawn: the browser tests
// read it (performance mark "herd-rendered", and the body's data-rendered in ms since navigation).
let rendered = false;
export function markRendered() {
  if (rendered) return;
  rendered = true;
  requestAnimationFrame(() => setTimeout(() => {
    performance.mark('herd-rendered');
    document.body.dataset.rendered = String(Math.round(performance.now()));
  }));
}
