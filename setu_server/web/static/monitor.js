// Setu's run monitor: live updates over Server-Sent Events. Pages work
// without this file; it only keeps them current. No framework, no build.
"use strict";

function follow(element, onMessage) {
  const source = new EventSource(element.dataset.live);
  const status = document.getElementById("live-status");
  source.addEventListener("open", () => { if (status) status.textContent = "live"; });
  source.addEventListener("error", () => { if (status) status.textContent = "reconnecting…"; });
  onMessage(source, status);
  return source;
}

function followRun(article) {
  follow(article, (source, status) => {
    source.addEventListener("run", (message) => {
      const run = JSON.parse(message.data);
      document.getElementById("run-header").innerHTML = run.header;
      document.getElementById("run-progress").innerHTML = run.progress;
      const placement = document.getElementById("run-placement");
      if (placement && run.placement) placement.innerHTML = run.placement;
      document.getElementById("run-events").insertAdjacentHTML("beforeend", run.events);
      article.dataset.state = run.state;
      if (run.state === "succeeded" || run.state === "failed" || run.state === "cancelled") {
        const cancel = article.querySelector("form.cancel");
        if (cancel) cancel.remove();
      }
    });
    source.addEventListener("end", () => {
      source.close();
      if (status) status.textContent = "ended";
    });
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
