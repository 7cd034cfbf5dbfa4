// The operator's page, kept fresh: local times, and a refresh in place that stops while
// the page is hidden. Served by courier web as /page.js (the page loads nothing else).
(function () {
  "use strict";

  function pad(value, width) {
    return String(value).padStart(width, "0");
  }

  // A time in the browser's zone: 2026-01-02T08:34:05.678+05:30.
  function localIso(ms) {
    const d = new Date(ms);
    const offset = -d.getTimezoneOffset();
    const sign = offset >= 0 ? "+" : "-";
    const zone = `${sign}${pad(Math.floor(Math.abs(offset) / 60), 2)}:${pad(Math.abs(offset) % 60, 2)}`;
    return (
      `${pad(d.getFullYear(), 4)}-${pad(d.getMonth() + 1, 2)}-${pad(d.getDate(), 2)}` +
      `T${pad(d.getHours(), 2)}:${pad(d.getMinutes(), 2)}:${pad(d.getSeconds(), 2)}` +
      `.${pad(d.getMilliseconds(), 3)}${zone}`
    );
  }

  function localTimes(root) {
    root.querySelectorAll("time[data-ms]").forEach(function (element) {
      element.textContent = localIso(Number(element.dataset.ms));
    });
  }

  const body = document.body;
  const every = Number(body.dataset.refreshS || 0);
  const state = document.getElementById("refresh-state");
  let timer = null;
  let running = false;
  body.dataset.refreshes = "0";
  localTimes(document);
  if (!(every > 0)) {
    return;
  }

  // Someone is typing (a note, a filter): leave the page alone until they are done.
  function typing() {
    const active = document.activeElement;
    if (active && ["INPUT", "SELECT", "TEXTAREA"].includes(active.tagName)) {
      return true;
    }
    return Array.from(document.querySelectorAll("input:not([type=hidden])")).some(function (input) {
      return input.value !== input.defaultValue;
    });
  }

  async function refresh() {
    if (document.hidden || running || typing()) {
      return;
    }
    running = true;
    try {
      const answer = await fetch(location.href, { cache: "no-store", credentials: "same-origin" });
      const page = new DOMParser().parseFromString(await answer.text(), "text/html");
      const fresh = page.getElementById("live");
      const live = document.getElementById("live");
      if (fresh && live) {
        live.replaceWith(fresh);
        localTimes(fresh);
      }
      const read = page.getElementById("read-at");
      if (read && read.textContent) {
        document.getElementById("read-at").replaceWith(read);
        localTimes(read);
      }
      if (state) {
        state.textContent = answer.ok ? `every ${every} s` : `the queue did not answer (${answer.status})`;
      }
      body.dataset.refreshes = String(Number(body.dataset.refreshes) + 1);
    } catch (error) {
      if (state) {
        state.textContent = `the page server did not answer (${error})`;
      }
    } finally {
      running = false;
    }
  }

  function start() {
    if (timer === null) {
      timer = setInterval(refresh, every * 1000);
    }
    body.dataset.refreshing = "yes";
  }

  function stop() {
    if (timer !== null) {
      clearInterval(timer);
      timer = null;
    }
    body.dataset.refreshing = "no";
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      stop();
    } else {
      refresh();
      start();
    }
  });
  if (state) {
    state.textContent = `every ${every} s`;
  }
  if (document.hidden) {
    stop();
  } else {
    start();
  }
})();
