// Shared by the Chromium and Firefox lookalike proofs: the sibling's cookie, planted as its own
// script would plant it, and the visitor's two pages on the edge. The page is a playwright or a
// puppeteer one: only the calls both drivers take alike are made here.

// The clearance cookie's name behind U+2000 (a space character), and a well-formed value.
export const LOOKALIKE = "\u2000__Host-pow_clearance";
export const FORGED = `4102444800.32.${"0".repeat(64)}`;

// The sibling's own page (a bypassed path, so no challenge stands in the way), and its script
// setting the lookalike for the parent domain, as any script of that origin can.
export async function plantLookalike(page, sibling) {
  await page.goto(`${sibling}/robots.txt`);
  await page.evaluate(([name, value]) => {
    document.cookie = `${name}=${value}; Domain=example.test; Path=/; Secure; Max-Age=86400`;
  }, [LOOKALIKE, FORGED]);
}

// Whether a page loaded from `url` reaches the origin within `timeout` ms.
async function reachesOrigin(page, url, timeout) {
  await page.goto(url);
  try {
    await page.waitForSelector("#origin", { timeout });
    return true;
  } catch {
    return false;
  }
}

// The visitor opens the edge, solves the challenge, then opens /account/settings: whether the
// lookalike is sent to the edge, whether each page reached the origin, how many challenges the
// second met, and the cookie names of its request in the order sent. `cookieHeader(request)`
// reads a request's Cookie header with the driver's own call (undefined: none reported).
export async function visitEdge(page, edge, cookieHeader) {
  const firstReached = await reachesOrigin(page, `${edge}/`, 60_000);
  // What the edge's pages see: the lookalike is the parent domain's, so it is sent here.
  const sentToEdge = await page.evaluate((name) => document.cookie.includes(`${name}=`), LOOKALIKE);
  let challenges = 0;
  let sentOrder = null;
  page.on("response", (response) => {
    if (response.url().startsWith(`${edge}/account/`) && response.status() === 403) challenges++;
  });
  page.on("request", async (request) => {
    if (sentOrder === null && request.url().startsWith(`${edge}/account/settings`)) {
      const cookie = await cookieHeader(request);
      if (cookie !== undefined) sentOrder = cookie.split(";").map((p) => p.replace(/^[ \t]+/, "").split("=")[0]);
    }
  });
  const reachedOrigin = firstReached && (await reachesOrigin(page, `${edge}/account/settings`, 20_000));
  return { sentToEdge, firstReached, reachedOrigin, challenges, sentOrder };
}
