// A lookalike of the clearance cookie's name: a sibling subdomain (evil.example.test) runs
//   document.cookie = "\u2000__Host-pow_clearance=...; Domain=example.test; Path=/; Secure"
// which Chromium stores as an ordinary cookie for the parent domain (the prefix rules read the
// name byte for byte) and, being older and as long in path, sends before the edge's own on
// every path. The visitor then opens https://edge.example.test/, solves the challenge, and
// opens /account/settings. Prints one JSON line: whether the lookalike was stored and is sent to
// the edge, whether the visitor reached the origin each time, how many challenges it met on the
// second page, and the cookie names of that request in the order Chromium sent them (the
// driver reports the header's bytes as Latin-1: U+2000 shows as "â€€").
//
//   node lookalike.mjs <edge url>
//
// The edge's certificate is self-signed (the test makes it): certificate errors are ignored.
import { launch } from "./solve.mjs";

export const LOOKALIKE = "\u2000__Host-pow_clearance";
export const FORGED = `4102444800.32.${"0".repeat(64)}`;

async function main() {
  const [url] = process.argv.slice(2);
  if (!url) throw new Error("usage: node lookalike.mjs <edge url>");
  const port = new URL(url).port;
  const edge = `https://edge.example.test:${port}`;
  const sibling = `https://evil.example.test:${port}`;
  const browser = await launch([
    "--host-resolver-rules=MAP *.example.test 127.0.0.1",
    "--ignore-certificate-errors",
  ]);
  try {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const page = await context.newPage();
    // The sibling's own page (a bypassed path, so no challenge stands in the way), and its
    // script setting the cookie, as any script of that origin can.
    await page.goto(`${sibling}/robots.txt`);
    await page.evaluate(([name, value]) => {
      document.cookie = `${name}=${value}; Domain=example.test; Path=/; Secure; Max-Age=86400`;
    }, [LOOKALIKE, FORGED]);
    const stored = (await context.cookies(edge)).some((c) => c.name === LOOKALIKE);
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
    page.on("request", async (request) => {
      if (sentOrder === null && request.url().startsWith(`${edge}/account/settings`)) {
        const cookie = (await request.allHeaders()).cookie || "";
        sentOrder = cookie.split(";").map((p) => p.replace(/^[ \t]+/, "").split("=")[0]);
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

if (import.meta.url === `file://${process.argv[1]}`) {
  main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
}
