// The challenge page's solver speed in headless Chromium, and, in the same run, a faithful
// re-implementation of Anubis's solver algorithm for comparison. Prints one JSON line.
//
//   node hashrate.mjs <edge url of a demo at a difficulty never reached in the window> <seconds>
//
// The page runs unchanged: its own workers, its own chunking. An init script only wraps the
// Worker constructor to add up the attempt counts the workers report (`{n: ...}` messages),
// and, for the one-worker figure, reports navigator.hardwareConcurrency as 1 (the page starts
// one worker per core). Counting starts at the first report, so start-up is not measured.
import http from "node:http";
import { launch } from "./solve.mjs";

const COUNT_WORKERS = `
  (() => {
    const Native = window.Worker;
    window.__pow = { count: 0, first: 0, last: 0, workers: 0 };
    window.Worker = function (url, opts) {
      const w = new Native(url, opts);
      window.__pow.workers++;
      w.addEventListener("message", (ev) => {
        const n = ev.data && ev.data.n;
        if (typeof n !== "number") return;
        const now = performance.now();
        if (!window.__pow.first) { window.__pow.first = now; return; }
        window.__pow.count += n; window.__pow.last = now;
      });
      return w;
    };
    window.Worker.prototype = Native.prototype;
  })();`;

const ONE_CORE = `Object.defineProperty(Navigator.prototype, "hardwareConcurrency", { get: () => 1 });`;

// Anubis's algorithm (its sha256-webcrypto worker, re-implemented here, not its code): SHA-256
// over the challenge string followed by the decimal nonce, one awaited crypto.subtle.digest per
// nonce, difficulty in leading zero hex digits, progress every 1024 nonces; one worker, its
// default on a 2-vCPU machine.
const ANUBIS_WORKER = `
  const encoder = new TextEncoder();
  self.onmessage = async (ev) => {
    const { data, difficulty, nonce: first, threads } = ev.data;
    const zeroBytes = Math.floor(difficulty / 2), odd = difficulty % 2 !== 0;
    let nonce = first, tried = 0;
    for (;;) {
      const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", encoder.encode(data + nonce)));
      tried++;
      let valid = true;
      for (let j = 0; j < zeroBytes; j++) if (hash[j] !== 0) { valid = false; break; }
      if (valid && odd && (hash[zeroBytes] >> 4) !== 0) valid = false;
      if (valid) { self.postMessage({ found: nonce }); return; }
      nonce += threads;
      if (tried % 1024 === 0) self.postMessage({ n: 1024 });
    }
  };`;

const ANUBIS_PAGE = `<!doctype html><meta charset="utf-8"><title>Anubis algorithm (re-implementation)</title>
<script>
  const url = URL.createObjectURL(new Blob([${JSON.stringify(ANUBIS_WORKER)}], { type: "text/javascript" }));
  const w = new Worker(url);
  // 64 hex digits like Anubis's challenges; 16 zero hex digits: never reached in the window.
  w.postMessage({ data: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", difficulty: 16, nonce: 0, threads: 1 });
</script>`;

async function measure(browser, url, seconds, initScripts) {
  const context = await browser.newContext();
  for (const s of initScripts) await context.addInitScript(s);
  const page = await context.newPage();
  // Never follow an answer (a lucky find would navigate away): keep the page solving.
  await page.route((u) => u.searchParams.has("n") && u.searchParams.has("c"), (route) => route.abort());
  await page.goto(url);
  await page.waitForFunction(() => window.__pow && window.__pow.first > 0, null, { timeout: 30_000 });
  await page.waitForTimeout(seconds * 1000);
  const s = await page.evaluate(() => window.__pow);
  await context.close();
  const elapsed = (s.last - s.first) / 1000;
  return { hashes: s.count, seconds: elapsed, rate: elapsed > 0 ? s.count / elapsed : 0, workers: s.workers };
}

async function main() {
  const [url, secondsArg] = process.argv.slice(2);
  const seconds = Number(secondsArg || 5);
  if (!url) throw new Error("usage: node hashrate.mjs <edge url> <seconds>");
  const server = http.createServer((_, res) => { res.writeHead(200, { "content-type": "text/html" }); res.end(ANUBIS_PAGE); });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const anubisUrl = `http://127.0.0.1:${server.address().port}/`;
  const browser = await launch();
  try {
    const pageOne = await measure(browser, url, seconds, [ONE_CORE, COUNT_WORKERS]);
    const pageAll = await measure(browser, url, seconds, [COUNT_WORKERS]);
    const anubis = await measure(browser, anubisUrl, seconds, [COUNT_WORKERS]);
    console.log(JSON.stringify({ pageOne, pageAll, anubis }));
  } finally {
    await browser.close();
    server.close();
  }
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
