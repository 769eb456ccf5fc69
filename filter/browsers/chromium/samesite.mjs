// A visitor holding a clearance cookie and the origin's SameSite=Strict session cookie clicks a
// link on another site to the edge's verify endpoint, with a return path of that site's choosing
// (/account/delete). The click is a cross-site navigation: Chromium does not send the Strict
// cookie. The verification fails; the failure page then moves on by itself, a same-site
// navigation that would carry the Strict cookie wherever it went. Prints one JSON line: every
// request the edge received (path, whether it carried the Strict cookie) and where the page
// ended.
//
//   node samesite.mjs <edge url>
//
// The edge is reached as http://edge.example.test:<port> (mapped to loopback); the other site,
// http://attacker.test/, is served by the driver itself.
import { launch } from "./solve.mjs";

async function main() {
  const [url] = process.argv.slice(2);
  if (!url) throw new Error("usage: node samesite.mjs <edge url>");
  const edge = `http://edge.example.test:${new URL(url).port}`;
  const browser = await launch(["--host-resolver-rules=MAP edge.example.test 127.0.0.1"]);
  try {
    const context = await browser.newContext();
    const page = await context.newPage();
    // The visitor passes the challenge once, then logs in (the Strict session cookie).
    await page.goto(`${edge}/`);
    await page.waitForSelector("#origin", { timeout: 120_000 });
    await context.addCookies([{
      name: "session", value: "strict-1", domain: "edge.example.test", path: "/",
      httpOnly: true, sameSite: "Strict",
    }]);
    const requests = [];
    page.on("request", async (request) => {
      if (!request.url().startsWith(edge)) return;
      const headers = await request.allHeaders();
      requests.push({
        path: new URL(request.url()).pathname,
        strict: (headers.cookie || "").includes("session=strict-1"),
      });
    });
    const link = `${edge}/.pow/verify?c=${"0".repeat(64)}&e=1&d=1&s=${"0".repeat(16)}` +
      `&n=${"0".repeat(16)}&r=%2Faccount%2Fdelete%3Fconfirm%3D1`;
    await context.route("http://attacker.test/**", (route) => route.fulfill({
      contentType: "text/html",
      body: `<!doctype html><title>win</title><a id="go" href="${link}">a prize</a>`,
    }));
    await page.goto("http://attacker.test/");
    await page.click("#go");
    await page.waitForURL((u) => u.pathname.startsWith("/.pow/"), { timeout: 30_000 });
    // The failure page moves on after 3 s.
    await page.waitForURL((u) => !u.pathname.startsWith("/.pow/"), { timeout: 30_000 });
    await page.waitForLoadState("load");
    console.log(JSON.stringify({ finalPath: new URL(page.url()).pathname, requests }));
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
