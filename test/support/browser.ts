import { existsSync, mkdirSync } from 'node:fs'
import { join } from 'node:path'
import { chromium, type Browser, type Page } from 'playwright-core'

/**
 * Real headless Chromium for the dashboard's tests: Debian's `chromium`
 * package, driven by playwright-core, which never downloads a browser.
 * Without it the browser tests are skipped with a message, unless they
 * are required: under CI=true, or JOBTABLE_REQUIRE_BROWSER=1 (set by
 * .ci/run, which installs the package), as JOBTABLE_REQUIRE_POSTGRES does
 * for PostgreSQL.
 */
export const CHROMIUM = process.env['JOBTABLE_CHROMIUM'] ?? '/usr/bin/chromium'

const missing = existsSync(CHROMIUM) ? undefined : `no Chromium at ${CHROMIUM} (apt-get install chromium, or set JOBTABLE_CHROMIUM)`
/** Why the browser tests are skipped here, or undefined when they run. */
export const browserSkipReason: string | undefined = missing
if (missing !== undefined) {
  if (process.env['JOBTABLE_REQUIRE_BROWSER'] === '1' || process.env['CI'] === 'true') {
    throw new Error(`${missing}, and the browser tests are required here (JOBTABLE_REQUIRE_BROWSER=1 or CI=true)`)
  }
  console.warn(`jobtable tests: the browser tests were SKIPPED: ${missing}`)
}

/** Launches the browser: headless, no sandbox (containers), and nothing that reaches the network by itself. */
export function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  })
}

/** Where the tests' screenshots go (git-ignored): test-artifacts/dashboard/. */
export const ARTIFACTS = join(process.cwd(), 'test-artifacts', 'dashboard')

/** Saves a full-page screenshot of `page` as test-artifacts/dashboard/<name>.png. */
export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(ARTIFACTS, { recursive: true })
  const path = join(ARTIFACTS, `${name}.png`)
  await page.screenshot({ path, fullPage: true })
  return path
}

/** How long a test waits for the page to show something: generous, as the machine is shared; never a measure of speed. */
export const PATIENCE_MS = 20_000

/** Waits until the element `selector` shows exactly `text` (its textContent, trimmed). */
export async function waitForText(page: Page, selector: string, text: string): Promise<void> {
  await page.waitForFunction(
    ([s, t]) => document.querySelector(s!)?.textContent?.trim() === t,
    [selector, text] as const,
    { timeout: PATIENCE_MS, polling: 'raf' },
  )
}

/** Waits until the element `selector` contains `text`. */
export async function waitForContains(page: Page, selector: string, text: string): Promise<void> {
  await page.waitForFunction(
    ([s, t]) => document.querySelector(s!)?.textContent?.includes(t!) === true,
    [selector, text] as const,
    { timeout: PATIENCE_MS, polling: 'raf' },
  )
}
