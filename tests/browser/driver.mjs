// A small remote control for Debian's chromium, for the Python tests and the docs' screenshots.
// Reads one JSON command a line on stdin, answers one JSON line on stdout:
//   {"op": "open", "url": U}                   -> {"ok": true, "loadMs": N}   (first call starts the browser)
//   {"op": "wait", "selector": S, "text": T}    -> {"ok": true, "text": ...}   (S visible, holding T if given)
//   {"op": "count", "selector": S}              -> {"ok": true, "value": N}
//   {"op": "eval", "expression": E}             -> {"ok": true, "value": ...}
//   {"op": "screenshot", "path": P, "selector": S?, "width": W?, "height": H?}
//   {"op": "navigations"}                       -> {"ok": true, "value": N}   (main-frame loads since open's)
//   {"op": "viewport", "width": W, "height": H} -> {"ok": true}   (the window's size from now on)
//   {"op": "close"}
// Errors answer {"ok": false, "error": "..."}. The browser is chromium at $CHROMIUM (default /usr/bin/chromium)
// with an empty profile; no browser is downloaded.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

const FLAGS = [
  "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
  "--disable-component-update", "--disable-sync",
];
const profile = mkdtempSync(join(tmpdir(), "gpudra-chromium-"));
let context = null;
let page = null;
let navigations = 0;

async function open(url, width, height) {
  if (context === null) {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
      headless: true,
      args: FLAGS,
      viewport: { width: width || 1400, height: height || 900 },
    });
    // Every EventSource the page opens is kept in window.__eventSources, so a test can make one fail as a broken
    // connection does (dispatchEvent(new Event("error"))) and come back ("open").
    await context.addInitScript(() => {
      const Original = window.EventSource;
      window.__eventSources = [];
      window.EventSource = function (...args) {
        const source = new Original(...args);
        window.__eventSources.push(source);
        return source;
      };
    });
    page = context.pages()[0] || (await context.newPage());
    page.on("framenavigated", (frame) => { if (frame === page.mainFrame()) navigations += 1; });
  }
  const started = Date.now();
  await page.goto(url, { waitUntil: "load" });
  navigations = 0;  // count only what happens after this load
  return { loadMs: Date.now() - started };
}

async function run(command) {
  const timeout = command.timeoutMs || 20000;
  switch (command.op) {
    case "open":
      return open(command.url, command.width, command.height);
    case "wait": {
      let locator = page.locator(command.selector);
      if (command.text) locator = locator.filter({ hasText: command.text });
      await locator.first().waitFor({ state: "attached", timeout });
      return { text: await locator.first().innerText() };
    }
    case "count":
      return { value: await page.locator(command.selector).count() };
    case "eval":
      return { value: await page.evaluate(command.expression) };
    case "screenshot": {
      if (command.width) await page.setViewportSize({ width: command.width, height: command.height || 900 });
      const target = command.selector ? page.locator(command.selector).first() : page;
      await target.screenshot({ path: command.path, fullPage: !command.selector && !!command.fullPage });
      return {};
    }
    case "navigations":
      return { value: navigations };
    case "viewport":
      await page.setViewportSize({ width: command.width, height: command.height || 900 });
      return {};
    case "close":
      return {};
    default:
      throw new Error(`unknown op ${command.op}`);
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let command = {};
  try {
    command = JSON.parse(line);
    const result = await run(command);
    process.stdout.write(JSON.stringify({ ok: true, ...result }) + "\n");
  } catch (error) {
    process.stdout.write(JSON.stringify({ ok: false, error: String(error && error.message || error) }) + "\n");
  }
  if (command.op === "close") break;
}
if (context !== null) await context.close();
rmSync(profile, { recursive: true, force: true });
process.exit(0);  // stdin may still be open: end here rather than wait for its end
