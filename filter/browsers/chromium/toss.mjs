// Cookie tossing: a sibling subdomain (evil.example.test) sets clearance cookies for the parent
// domain on a longer path (/account), which Chromium sends before the edge's own. The visitor
// has solved the challenge on https://edge.example.test; it then opens /account/settings.
// Prints one JSON line: whether it reached the origin, how many challenges it met there, the
// cookie names of the request in the order Chromium sent them, and the edge's cookie attributes.
//
//   node toss.mjs <edge url>
//
// The edge's certificate is self-signed (the test makes it): certificate errors are ignored.
import { launchAtExampleTest } from "./solve.mjs";

async function main() {
  const [url] = process.argv.slice(2);
  if (!url) throw new Error("usage: node toss.mjs <edge url>");
  const edge = `https://edge.example.test:${new URL(url).port}`;
  const browser = await launchAtExampleTest();
  try {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const page = await context.newPage();
    await page.goto(`${edge}/`);
    await page.waitForSelector("#origin", { timeout: 120_000 });
    const own = (await context.cookies(edge)).map((c) => ({ name: c.name, secure: c.secure, domain: c.domain, path: c.path }));
    // What evil.example.test can set: Domain=example.test, any path; well-formed, fresh, forged.
    // Three paths, three cookies: as many as a filter reading the first three would check.
    const tossed = ["/account", "/account/", "/account/settings"].map((path, i) => ({
      name: "pow_clearance", value: `4102444800.32.${String(i).repeat(64)}`,
      domain: ".example.test", path, secure: true, sameSite: "Lax",
    }));
    await context.addCookies(tossed);
    let challenges = 0;
    let sentOrder = null;
    page.on("response", (response) => {
      if (response.url().includes("/account/") && response.status() === 403) challenges++;
    });
    page.on("request", async (request) => {
      if (sentOrder === null && request.url().startsWith(`${edge}/account/settings`)) {
        const cookie = (await request.allHeaders()).cookie || "";
        sentOrder = cookie.split(";").map((p) => p.trim().split("=")[0]);
      }
    });
    await page.goto(`${edge}/account/settings`);
    let reachedOrigin = true;
    try {
      await page.waitForSelector("#origin", { timeout: 20_000 });
    } catch {
      reachedOrigin = false;
    }
    console.log(JSON.stringify({ reachedOrigin, challenges, sentOrder, own }));
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
