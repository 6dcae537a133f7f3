// The dashboard's only script: it follows the page's event stream (server-sent events) and puts
// each fragment it sends into the element of the same id. Everything else is plain HTML drawn by
// the server; without this script a reload shows the same page.
"use strict";
(function () {
  const main = document.querySelector("main[data-events]");
  const live = document.getElementById("live");
  if (!main || !window.EventSource) {
    return;
  }
  const source = new EventSource(main.dataset.events);
  source.addEventListener("update", function (event) {
    const fragments = JSON.parse(event.data);
    for (const [id, html] of Object.entries(fragments)) {
      const element = document.getElementById(id);
      if (element) {
        element.innerHTML = html;
      }
    }
    live.textContent = "live";
    live.className = "live on";
  });
  source.addEventListener("error", function () {
    // EventSource tries again by itself; say so meanwhile.
    live.textContent = "dashboard unreachable, retrying";
    live.className = "live off";
  });
})();
