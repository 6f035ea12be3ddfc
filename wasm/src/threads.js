// The Web Worker side of the multi-threaded build (wasm/src/threads.rs).
// wasm-bindgen copies this file into the package as a snippet; it is both
// the module threads.rs imports and the script of every pool Worker, which
// is how a Worker finds it without a bundler.

export function inWorker() {
  return typeof WorkerGlobalScope !== "undefined" && self instanceof WorkerGlobalScope;
}

export function crossOriginIsolated() {
  return globalThis.crossOriginIsolated === true;
}

export function hardwareConcurrency() {
  return globalThis.navigator?.hardwareConcurrency || 1;
}

// Starts `count` pool Workers on the module and its shared memory; resolves
// once each has instantiated the module and waits for its rayon thread
// (threads.rs then builds the pool, which hands them their threads).
export function startWorkers(module, memory, count) {
  const started = [];
  for (let i = 0; i < count; i++) {
    const worker = new Worker(import.meta.url, { type: "module", name: "dentate-pool" });
    started.push(new Promise((resolve, reject) => {
      worker.onmessage = ({ data }) => (data === "dentate-ready" ? resolve() : reject(new Error(`dentate pool thread ${i + 1}: ${data}`)));
      worker.onerror = (e) => reject(new Error(`dentate pool thread ${i + 1}: ${e.message ?? "failed to start"}`));
    }));
    worker.postMessage({ module, memory });
  }
  return Promise.all(started);
}

// In a pool Worker: instantiate the module on the shared memory (the glue
// sits three folders up: pkg/snippets/<crate>-<hash>/src/threads.js), say
// so, then wait for a rayon thread and run its loop, which returns only
// when the pool could not be built (the Worker then closes).
if (inWorker() && self.name === "dentate-pool") {
  self.onmessage = async ({ data }) => {
    self.onmessage = null;
    let glue;
    try {
      glue = await import(new URL("../../../dentate_wasm.js", import.meta.url).href);
      await glue.default({ module_or_path: data.module, memory: data.memory });
      postMessage("dentate-ready");
    } catch (e) {
      postMessage(String(e?.message ?? e));
      return;
    }
    glue.__dentateRunWorker();
    close();
  };
}
