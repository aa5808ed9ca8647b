// The page's one live connection: a Server-Sent Events stream of a snapshot, then changes and
// samples. EventSource reconnects by itself when the connection drops, and every reconnect starts
// with a fresh snapshot, so handlers treat "snapshot" as "start over".
export function openStream(query, handlers) {
  const conn = document.getElementById('conn');
  const status = (text, cls) => { conn.textContent = text; conn.className = 'conn ' + cls; };
  let es;
  const open = () => {
    es = new EventSource('/ui/api/stream' + query);
    es.onopen = () => status('live', 'live');
    es.onerror = async () => {
      status('reconnecting', 'down');
      if (es.readyState !== EventSource.CLOSED) return; // EventSource retries by itself
      // Refused outright: logged out (401) goes to the login page, anything else retries.
      const r = await fetch('/ui/api/v1/version').catch(() => null);
      if (r && r.status === 401) {
        location.assign('/ui/login');
        return;
      }
      setTimeout(open, 3000);
    };
    for (const [name, fn] of Object.entries(handlers)) {
      es.addEventListener(name, (ev) => fn(JSON.parse(ev.data)));
    }
  };
  open();
}
