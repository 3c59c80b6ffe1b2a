// Keeps the page live: the server sends, over server-sent events, each fragment that changed (by its
// data-frag id) and a section's new order when fragments come or go. Nothing reloads.
(() => {
  const frags = new Map();
  document.querySelectorAll("[data-frag]").forEach((el) => frags.set(el.dataset.frag, el));
  const live = document.getElementById("live");
  const parse = (html) => {
    const t = document.createElement("template");
    t.innerHTML = html;
    return t.content.firstElementChild;
  };
  const apply = (update) => {
    for (const [section, change] of Object.entries(update.sections)) {
      const box = document.getElementById(section);
      for (const [id, html] of Object.entries(change.set || {})) {
        const el = parse(html);
        const old = frags.get(id);
        if (old) {
          el.querySelectorAll("details").forEach((d, i) => {
            const was = old.querySelectorAll("details")[i];
            if (was && was.open) d.open = true;
          });
          old.replaceWith(el);
        } else {
          box.appendChild(el);
        }
        frags.set(id, el);
      }
      if (change.order) {
        const keep = new Set(change.order);
        for (const el of Array.from(box.children)) {
          if (!keep.has(el.dataset.frag)) {
            frags.delete(el.dataset.frag);
            el.remove();
          }
        }
        change.order.forEach((id) => box.appendChild(frags.get(id)));
      }
      box.parentElement.classList.toggle("empty", box.children.length === 0);
    }
    document.body.dataset.version = update.version;
  };
  const events = new EventSource("events?since=" + document.body.dataset.version);
  events.onmessage = (message) => apply(JSON.parse(message.data));
  // While it reconnects, what the page shows may be out of date: it is greyed out until the stream is back.
  events.onopen = () => { live.textContent = "live"; live.className = "live on"; document.body.classList.remove("stale"); };
  events.onerror = () => {
    live.textContent = "reconnecting"; live.className = "live off"; document.body.classList.add("stale");
  };
})();
