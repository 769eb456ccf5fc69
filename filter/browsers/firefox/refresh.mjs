// The refresh tier in Firefox with JavaScript turned off (javascript.enabled false): the page
// without script goes on to the verify endpoint after its delay by <meta http-equiv="refresh">,
// the browser reaches the origin, and a second visit passes on the cookie alone. Prints one JSON
// line; exits non-zero on failure.
//
//   node refresh.mjs <edge url>
import http from "node:http";
import { launch } from "./solve.mjs";

// The challenge page as a browser gets it, read with node's client: the page goes on by itself
// within a second, which would invalidate a driver's handles into it.
function fetchPage(url) {
  return new Promise((resolve, reject) => {
    http.get(url, { headers: { accept: "text/html" } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk) => { body += chunk; });
      res.on("end", () => resolve(body));
    }).on("error", reject);
  });
}

async function main() {
  const [url] = process.argv.slice(2);
  if (!url) throw new Error("usage: node refresh.mjs <edge url>");
  const browser = await launch({ extraPrefsFirefox: { "javascript.enabled": false } });
  try {
    const page = await browser.newPage();
    const first = await page.goto(url, { waitUntil: "domcontentloaded" });
    const challengeStatus = first.status();
    const scripts = ((await fetchPage(url)).match(/<script/g) || []).length;
    // With JavaScript off the driver's selector queries do not run in the page: read its
    // content until the origin's page is there (bounded).
    let origin = null;
    for (let i = 0; i < 120 && origin === null; i++) {
      await new Promise((r) => setTimeout(r, 500));
      const html = await page.content().catch(() => "");
      const found = html.match(/<h1 id="origin">([^<]*)<\/h1>/);
      if (found) origin = found[1].trim();
    }
    if (origin === null) throw new Error("the origin's page never came");
    const again = await page.goto(url);
    const secondStatus = again.status();
    console.log(JSON.stringify({ challengeStatus, scripts, origin, secondStatus, finalUrl: page.url() }));
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(String((e && e.stack) || e)); process.exit(1); });
