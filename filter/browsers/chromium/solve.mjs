// Headless Chromium opens the demo edge like a person would: it gets the challenge page (403),
// the page's own workers solve it, the browser follows the page to the origin; a second visit
// passes on the clearance cookie alone. Prints one JSON line on stdout; exits non-zero on failure.
//
//   node solve.mjs <edge url> <screenshot.png>
//
// CHROMIUM overrides the browser binary (default /usr/bin/chromium).
import { chromium } from "playwright-core";
import { holdWorkers } from "../hold-workers.mjs";

export const CHROMIUM_ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

export async function launch(extraArgs = []) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: [...CHROMIUM_ARGS, ...extraArgs],
  });
}

// Every *.example.test name on loopback and the edge's self-signed certificate accepted: for
// the proofs that need a sibling subdomain of the edge (contexts still ignore HTTPS errors).
export async function launchAtExampleTest() {
  return launch(["--host-resolver-rules=MAP *.example.test 127.0.0.1", "--ignore-certificate-errors"]);
}

async function main() {
  const [url, shot] = process.argv.slice(2);
  if (!url || !shot) throw new Error("usage: node solve.mjs <edge url> <screenshot.png>");
  const browser = await launch();
  try {
    const page = await browser.newPage({ viewport: { width: 1000, height: 720 } });
    // Hold the workers' start until the screenshot of the challenge page is taken, so the
    // picture never races the solver; then let them go, and the page goes on by itself.
    await page.addInitScript(holdWorkers);

    const first = await page.goto(url, { waitUntil: "domcontentloaded" });
    const challengeStatus = first.status();
    const title = await page.title();
    await page.waitForSelector("#pow-status");
    await page.screenshot({ path: shot });
    await page.evaluate(() => window.__powRelease());

    await page.waitForSelector("#origin", { timeout: 120_000 });
    const origin = (await page.textContent("#origin")).trim();
    const cookies = (await page.context().cookies()).map((c) => ({ name: c.name, httpOnly: c.httpOnly, sameSite: c.sameSite }));
    const again = await page.goto(url);
    const secondStatus = again.status();
    const secondOrigin = await page.locator("#origin").count();
    console.log(JSON.stringify({ challengeStatus, title, origin, finalUrl: page.url(), cookies, secondStatus, secondOrigin }));
  } finally {
    await browser.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
}
