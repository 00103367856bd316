import { createHash } from 'node:crypto'
import type { Hono } from 'hono'
import { problem } from '../http/problem.js'
import { APP_JS } from './app-js.js'
import { CHART_JS } from './chart-js.js'
import { pageHtml } from './page-html.js'
import { SSE_JS } from './sse-js.js'
import { STYLE_CSS } from './style-css.js'

/**
 * The dashboard: a web page for people, served by the API it reads
 * (createApi's `dashboard` option). It is plain HTML, CSS and three small
 * ES modules, kept as strings in TypeScript modules so they ship in the
 * built package without a copy step. No framework: the page is a few
 * hundred lines, and a framework would be a dependency to keep up (and a
 * build step) for no gain.
 *
 * The page holds no data: everything it shows comes from the public HTTP
 * API, with the caller's credentials, so it shows and does only what the
 * caller may.
 */

/**
 * The page's policy: its own scripts, styles and connections only, no
 * inline script or style (the page has none), and no framing.
 */
export const DASHBOARD_CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

/** One asset as served: its bytes, media type and entity tag. */
interface Asset {
  readonly body: string
  readonly type: string
  readonly etag: string
}

function asset(body: string, type: string): Asset {
  return { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"` }
}

/**
 * Adds the dashboard's routes to an API's Hono app (whose own base path,
 * if any, prefixes them): the page at `/` (that is, at the base path
 * itself, `/jobs` under `/jobs`, which `/jobs/` redirects to), and its
 * assets under `/dashboard/`. Every answer is public: none holds data.
 */
export function mountDashboard(app: Hono, basePath: string): void {
  const page = asset(pageHtml(basePath), 'text/html; charset=utf-8')
  const files = new Map<string, Asset>([
    ['app.js', asset(APP_JS, 'text/javascript; charset=utf-8')],
    ['sse.js', asset(SSE_JS, 'text/javascript; charset=utf-8')],
    ['chart.js', asset(CHART_JS, 'text/javascript; charset=utf-8')],
    ['style.css', asset(STYLE_CSS, 'text/css; charset=utf-8')],
  ])
  const allow = 'GET, HEAD'
  app.get('/', (c) => serve(c.req.raw, page))
  app.all('/', () => problem('method_not_allowed', {}, { allow }))
  app.get('/dashboard/:file', (c) => {
    const file = files.get(c.req.param('file'))
    return file === undefined ? problem('route_not_found') : serve(c.req.raw, file)
  })
  app.all('/dashboard/:file', (c) => (files.has(c.req.param('file')) ? problem('method_not_allowed', {}, { allow }) : problem('route_not_found')))
}

/** Whether a request is for the page with a trailing slash (`/jobs/` under `/jobs`), which redirects to the page. */
export function isPageWithSlash(pathname: string, basePath: string): boolean {
  return basePath !== '' && pathname === `${basePath}/`
}

/** Answers with an asset, or 304 when the browser already has this version. */
function serve(request: Request, file: Asset): Response {
  const headers: Record<string, string> = {
    'content-type': file.type,
    // Checked again at every load, so a new version of jobtable is picked up at once; 304 while unchanged.
    'cache-control': 'no-cache',
    etag: file.etag,
    'content-security-policy': DASHBOARD_CSP,
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    'x-frame-options': 'DENY',
  }
  const seen = request.headers.get('if-none-match')
  if (seen !== null && seen.split(',').some((tag) => tag.trim() === file.etag)) return new Response(null, { status: 304, headers })
  return new Response(file.body, { status: 200, headers })
}
