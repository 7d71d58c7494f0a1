// The CPU trainer's Web Worker (issue 55). Where the page is cross-origin
// isolated and the browser has no WebGPU, the app (src/app/training/remote.rs)
// trains its run here instead of on the page's one thread: this worker loads
// the threaded build of the crate's core (worker/tinygpt_worker.js, built by
// web/build.sh from src/web_trainer.rs), starts its rayon pool on
// `threads` Web Workers of its own (wasm-bindgen-rayon), and answers the
// page's messages in order:
//
//   {kind: "init", threads}                      → {kind: "ready", threads}
//   {kind: "start", checkpoint, name, train, val, align}
//                                                → {kind: "started", step}
//   {kind: "steps", steps, budgetMs}             → {kind: "steps", ron}
//   {kind: "read", names}                        → {kind: "read", values}
//   {kind: "recall"}                             → {kind: "checkpoint", bytes}
//   {kind: "bench", preset, seconds}             → {kind: "bench", json}
//     (`tinygpt bench --backend cpu` here: the browser test's measurement)
//
// and {kind: "error", message} for any that failed; every reply to a
// message that names its `run` names it too (the page drops replies about
// a run it has replaced). A call for steps blocks
// this worker for about budgetMs (a worker may wait; the page may not); the
// messages that arrive meanwhile wait in the queue.

import init, { initThreadPool, WebTrainer, bench } from "./worker/tinygpt_worker.js?v=__APP_STAMP__";

let trainer = null;
const queue = [];
let draining = false;

self.onmessage = (e) => {
  queue.push(e.data);
  drain();
};

async function drain() {
  if (draining) return;
  draining = true;
  try {
    while (queue.length) {
      const m = queue.shift();
      try {
        await handle(m);
      } catch (e) {
        postMessage({ kind: "error", run: m.run, message: String(e && e.message ? e.message : e) });
      }
    }
  } finally {
    draining = false;
  }
}

async function handle(m) {
  switch (m.kind) {
    case "init":
      // The build's own wasm, by its versioned name (the service worker
      // keeps it with the build's other files).
      await init({ module_or_path: new URL("./worker/tinygpt_worker_bg.wasm?v=__APP_STAMP__", import.meta.url) });
      await initThreadPool(m.threads);
      postMessage({ kind: "ready", threads: m.threads });
      break;
    case "start":
      if (trainer) trainer.free();
      trainer = null;
      trainer = new WebTrainer(m.checkpoint, m.name, m.train, m.val, m.align);
      postMessage({ kind: "started", run: m.run, step: trainer.step() });
      break;
    case "steps":
      postMessage({ kind: "steps", run: m.run, ron: need().steps(m.steps, m.budgetMs) });
      break;
    case "read": {
      const values = need().read(m.names);
      postMessage({ kind: "read", run: m.run, values }, [values.buffer]);
      break;
    }
    case "recall": {
      const bytes = need().checkpoint();
      trainer.free();
      trainer = null;
      postMessage({ kind: "checkpoint", run: m.run, bytes }, [bytes.buffer]);
      break;
    }
    case "bench":
      postMessage({ kind: "bench", json: bench(m.preset, m.seconds) });
      break;
    default:
      throw new Error(`unknown message ${JSON.stringify(m.kind)}`);
  }
}

function need() {
  if (!trainer) throw new Error("no run has been handed to the worker");
  return trainer;
}
