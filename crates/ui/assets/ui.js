// The live view: on each server-sent event, fetch the server-rendered fragment of this page
// and swap it in. No framework; the server renders (and escapes) all markup.
(() => {
  const main = document.querySelector("main[data-fragment]");
  const live = document.getElementById("live");
  if (!main || !live || !main.dataset.events) return; // a snapshot (?live=0)
  let busy = false;
  let again = false;
  let stale = false;
  let refreshes = 0;

  // What a person changed on the page and a swap would undo: the Jobs unfolded in the
  // timeline, and how far it is scrolled.
  function remember() {
    const open = new Map([...main.querySelectorAll("details[data-job]")].map((d) => [d.dataset.job, d.open]));
    const left = main.querySelector("#timeline")?.scrollLeft ?? 0;
    return () => {
      for (const d of main.querySelectorAll("details[data-job]")) {
        if (open.has(d.dataset.job)) d.open = open.get(d.dataset.job);
      }
      const timeline = main.querySelector("#timeline");
      if (timeline) timeline.scrollLeft = left;
    };
  }

  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const r = await fetch(main.dataset.fragment, { credentials: "same-origin" });
      if (r.status === 401) { location.assign("/ui/login?next=" + encodeURIComponent(location.pathname)); return; }
      if (r.ok) {
        const html = await r.text();
        const restore = remember();
        main.innerHTML = html;
        restore();
        main.dataset.refreshes = String(++refreshes);
      }
    } catch (e) {
      live.dataset.state = "offline";
    } finally {
      busy = false;
    }
    if (again) { again = false; refresh(); }
  }

  // A hidden tab fetches nothing; it catches up once shown.
  function changed() {
    if (document.hidden) { stale = true; return; }
    refresh();
  }
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && stale) { stale = false; refresh(); }
  });

  const events = new EventSource(main.dataset.events);
  // "ready": the server's watches are running; refresh once, since changes may have happened
  // since this page (or the last connection) was served.
  events.addEventListener("ready", () => { live.dataset.state = "live"; changed(); });
  events.addEventListener("change", changed);
  events.onerror = () => { live.dataset.state = events.readyState === EventSource.CLOSED ? "offline" : "connecting"; };
})();
