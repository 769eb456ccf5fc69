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
import { launch } from "./solve.mjs";
import { plantLookalike, visitEdge, LOOKALIKE } from "../lookalike-visit.mjs";

async function main() {
  const [url] = process.argv.slice(2);
  if (!url) throw new Error("usage: node lookalike.mjs <edge url>");
  const port = new URL(url).port;
  const edge = `https://edge.example.test:${port}`;
  const browser = await launch({
    acceptInsecureCerts: true,
    extraPrefsFirefox: { "network.dns.forceResolve": "127.0.0.1" },
  });
  try {
    const page = await browser.newPage();
    await plantLookalike(page, `https://evil.example.test:${port}`);
    const stored = await page.evaluate((name) => document.cookie.includes(`${name}=`), LOOKALIKE);
    const visit = await visitEdge(page, edge, (request) => request.headers().cookie);
    console.log(JSON.stringify({ stored, ...visit }));
  } finally {
    await browser.close();
  }
}

main().catch((e) => { console.error(String((e && e.stack) || e)); process.exit(1); });
