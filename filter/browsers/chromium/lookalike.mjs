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
import { launchAtExampleTest } from "./solve.mjs";
import { plantLookalike, visitEdge, LOOKALIKE } from "../lookalike-visit.mjs";

async function main() {
  const [url] = process.argv.slice(2);
  if (!url) throw new Error("usage: node lookalike.mjs <edge url>");
  const port = new URL(url).port;
  const edge = `https://edge.example.test:${port}`;
  const browser = await launchAtExampleTest();
  try {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const page = await context.newPage();
    await plantLookalike(page, `https://evil.example.test:${port}`);
    const stored = (await context.cookies(edge)).some((c) => c.name === LOOKALIKE);
    const visit = await visitEdge(page, edge, async (request) => (await request.allHeaders()).cookie || "");
    console.log(JSON.stringify({ stored, ...visit }));
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(1); });
