// The refresh tier in Chromium with JavaScript turned off: the edge answers with a page
// without script whose <meta http-equiv="refresh"> goes to the verify endpoint after a delay;
// the browser follows it by itself, gets the clearance cookie, and reaches the origin; a second
// visit passes on the cookie alone. Prints one JSON line; exits non-zero on failure.
//
//   node refresh.mjs <edge url>
import { launch } from "./solve.mjs";

async function main() {
  const [url] = process.argv.slice(2);
  if (!url) throw new Error("usage: node refresh.mjs <edge url>");
  const browser = await launch();
  try {
    const context = await browser.newContext({ javaScriptEnabled: false });
    const page = await context.newPage();
    const first = await page.goto(url, { waitUntil: "domcontentloaded" });
    const challengeStatus = first.status();
    const scripts = await page.locator("script").count();
    await page.waitForSelector("#origin", { timeout: 60_000 });
    const origin = (await page.textContent("#origin")).trim();
    const again = await page.goto(url);
    const secondStatus = again.status();
    console.log(JSON.stringify({ challengeStatus, scripts, origin, secondStatus, finalUrl: page.url() }));
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
