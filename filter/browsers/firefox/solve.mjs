// Headless Firefox opens the demo edge like a person would: it gets the challenge page (403),
// the page's own workers solve it, the browser follows the page to the origin; a second visit
// passes on the clearance cookie alone. Prints one JSON line on stdout; exits non-zero on failure.
//
//   node solve.mjs <edge url>
//
// FIREFOX overrides the browser binary (default /usr/bin/firefox-esr). puppeteer-core drives it
// over WebDriver BiDi and downloads nothing.
import puppeteer from "puppeteer-core";
import { holdWorkers } from "../hold-workers.mjs";

// Headless Firefox over WebDriver BiDi, with these extra launch options (preferences go in
// `extraPrefsFirefox`).
export async function launch(options = {}) {
  return puppeteer.launch({
    browser: "firefox",
    executablePath: process.env.FIREFOX || "/usr/bin/firefox-esr",
    headless: true,
    protocol: "webDriverBiDi",
    ...options,
  });
}

async function main() {
  const [url] = process.argv.slice(2);
  if (!url) throw new Error("usage: node solve.mjs <edge url>");
  const browser = await launch();
  try {
    const page = await browser.newPage();
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
    // Hold the workers' start until the challenge page has been read (see hold-workers.mjs).
    await page.evaluateOnNewDocument(holdWorkers);
    const first = await page.goto(url, { waitUntil: "domcontentloaded" });
    const challengeStatus = first.status();
    const lang = await page.$eval("html", (e) => e.lang);
    await page.evaluate(() => window.__powRelease());
    await page.waitForSelector("#origin", { timeout: 120_000 });
    const origin = (await page.$eval("#origin", (e) => e.textContent)).trim();
    const again = await page.goto(url);
    const secondStatus = again.status();
    const secondOrigin = (await page.$$("#origin")).length;
    console.log(JSON.stringify({ challengeStatus, lang, origin, finalUrl: page.url(), secondStatus, secondOrigin, errors }));
  } finally {
    await browser.close();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e) => { console.error(String((e && e.stack) || e)); process.exit(1); });
}
