// Setu's run monitor: live updates over Server-Sent Events. Pages work
// without this file; it only keeps them current. No framework, no build.
"use strict";

function follow(element, onMessage) {
  const source = new EventSource(element.dataset.live);
  const status = document.getElementById("live-status");
  source.addEventListener("open", () => { if (status) status.textContent = "live"; });
  onMessage(source, status);
  // After onMessage's handlers, which may have closed the stream for good.
  source.addEventListener("error", () => {
    if (!status || element.dataset.stream) return;
    // CLOSED: the server refused the stream (signed out, say); EventSource
    // does not retry that. Otherwise it is retrying already.
    status.textContent =
      source.readyState === EventSource.CLOSED ? "stopped: reload the page" : "reconnecting…";
  });
  return source;
}

const TERMINAL = ["succeeded", "failed", "cancelled"];

// A run's stream closes for good, and the page says so: data-stream is
// "ended" after the server's `end`, "closed" after a drop once the run was
// over (what a test waits on). It is never opened again.
function ended(article, source, status, how) {
  source.close();
  if (status) status.textContent = "ended";
  article.dataset.stream = how;
}

function followRun(article) {
  follow(article, (source, status) => {
    // A stream that drops once the run is over has nothing left to send:
    // reconnecting would only ask again. A run still going reconnects
    // (EventSource does it, resuming from Last-Event-ID).
    source.addEventListener("error", () => {
      if (TERMINAL.includes(article.dataset.state)) ended(article, source, status, "closed");
    });
    source.addEventListener("run", (message) => {
      const run = JSON.parse(message.data);
      document.getElementById("run-header").innerHTML = run.header;
      document.getElementById("run-progress").innerHTML = run.progress;
      const placement = document.getElementById("run-placement");
      if (placement && run.placement) placement.innerHTML = run.placement;
      document.getElementById("run-events").insertAdjacentHTML("beforeend", run.events);
      article.dataset.state = run.state;
      if (TERMINAL.includes(run.state)) {
        const cancel = article.querySelector("form.cancel");
        if (cancel) cancel.remove();
      }
    });
    source.addEventListener("end", () => ended(article, source, status, "ended"));
  });
}

function followRuns(body) {
  follow(body, (source) => {
    source.addEventListener("rows", (message) => {
      body.innerHTML = JSON.parse(message.data).html;
    });
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const run = document.getElementById("run");
  if (run && run.dataset.live) followRun(run);
  const rows = document.getElementById("run-rows");
  if (rows && rows.dataset.live) followRuns(rows);
});
