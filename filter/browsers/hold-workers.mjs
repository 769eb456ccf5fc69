// Shared by the Chromium and Firefox proofs: an init script that holds the page's workers'
// start (Worker.postMessage) until the script calls window.__powRelease(), so that reading or
// photographing the challenge page never races a quick solve that moves the page on.
// The browser runs it from its source text: it must not refer to anything outside itself.
export function holdWorkers() {
  const send = Worker.prototype.postMessage;
  const held = [];
  window.__powHold = true;
  window.__powRelease = () => { window.__powHold = false; for (const [w, a] of held) send.apply(w, a); };
  Worker.prototype.postMessage = function (...args) {
    if (window.__powHold) held.push([this, args]); else send.apply(this, args);
  };
}
