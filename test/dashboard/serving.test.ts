import { execFile } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterEach, describe, expect, it } from 'vitest'
import { bearerTokens, createApi, listen, type ApiOptions, type Listening } from 'jobtable/http'
import { sqliteBackend, type Store } from '../support/backends.js'
import { captureLogs } from '../support/logs.js'
import { Runner } from 'jobtable'
import { APP_JS } from '../../src/dashboard/app-js.js'
import { SSE_JS } from '../../src/dashboard/sse-js.js'
import { CHART_JS } from '../../src/dashboard/chart-js.js'
import { DASHBOARD_CSP } from '../../src/dashboard/index.js'

const TOKEN = 'token-for-household-a-0001'

describe('the dashboard as served', () => {
  let open: Listening[] = []
  let stores: Store[] = []
  afterEach(async () => {
    for (const l of open) await l.close()
    for (const s of stores) await s.drop()
    open = []
    stores = []
  })

  async function serve(options: Omit<ApiOptions, 'runner'> = {}) {
    const store = await sqliteBackend.store()
    stores.push(store)
    const runner = new Runner({ driver: store.driver(), logger: captureLogs() })
    const listening = await listen(createApi({ runner, ...options }), { port: 0 })
    open.push(listening)
    return listening.url
  }

  it('serves the page and its assets at / with a strict policy, no inline script or style, and 304 for a version the browser has', async () => {
    const url = await serve({ dashboard: true })
    const page = await fetch(`${url}/`)
    expect(page.status).toBe(200)
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8')
    const csp = page.headers.get('content-security-policy')!
    expect(csp).toBe(DASHBOARD_CSP)
    for (const directive of ["default-src 'self'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "connect-src 'self'", "frame-ancestors 'none'"]) {
      expect(csp).toContain(directive)
    }
    expect(page.headers.get('x-content-type-options')).toBe('nosniff')
    const html = await page.text()
    // Every script has a src, nothing is styled inline, no handler attribute, nothing from another origin.
    expect(html.match(/<script\b[^>]*>/g)).toEqual(['<script type="module" src="/dashboard/app.js">'])
    expect(html).not.toMatch(/<style|\sstyle=|\son[a-z]+=|https?:\/\//i)
    for (const [path, type] of [
      ['/dashboard/app.js', 'text/javascript; charset=utf-8'],
      ['/dashboard/sse.js', 'text/javascript; charset=utf-8'],
      ['/dashboard/chart.js', 'text/javascript; charset=utf-8'],
      ['/dashboard/style.css', 'text/css; charset=utf-8'],
    ] as const) {
      const res = await fetch(url + path)
      expect([res.status, res.headers.get('content-type')], path).toEqual([200, type])
      const body = await res.text()
      expect(body, path).not.toMatch(/https?:\/\/|@import|innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(/)
      const again = await fetch(url + path, { headers: { 'if-none-match': res.headers.get('etag')! } })
      expect(again.status, path).toBe(304)
    }
    expect((await fetch(`${url}/dashboard/other.js`)).status).toBe(404)
    const post = await fetch(`${url}/`, { method: 'POST' })
    expect([post.status, post.headers.get('allow')]).toEqual([405, 'GET, HEAD'])
  })

  it('is off by default: / answers 404 route_not_found, and a dashboard option that is not a boolean is refused', async () => {
    const url = await serve()
    const res = await fetch(`${url}/`)
    expect([res.status, ((await res.json()) as { code: string }).code]).toEqual([404, 'route_not_found'])
    expect((await fetch(`${url}/dashboard/app.js`)).status).toBe(404)
    const store = await sqliteBackend.store()
    stores.push(store)
    const runner = new Runner({ driver: store.driver(), logger: captureLogs() })
    expect(() => createApi({ runner, dashboard: 'yes' as never })).toThrow(/dashboard must be true or false/)
  })

  it('under a base path: the page at /jobs (and /jobs/ sent there), its assets and the API under /jobs', async () => {
    const url = await serve({ dashboard: true, basePath: '/jobs' })
    const page = await fetch(`${url}/jobs`)
    expect(page.status).toBe(200)
    const html = await page.text()
    expect(html).toContain('<script type="module" src="/jobs/dashboard/app.js">')
    expect(html).toContain('<link rel="stylesheet" href="/jobs/dashboard/style.css">')
    const slash = await fetch(`${url}/jobs/`, { redirect: 'manual' })
    expect([slash.status, slash.headers.get('location')]).toEqual([302, '/jobs'])
    expect((await fetch(`${url}/jobs/dashboard/app.js`)).status).toBe(200)
    expect((await fetch(`${url}/`)).status).toBe(404)
    expect((await fetch(`${url}/dashboard/app.js`)).status).toBe(404)
    expect((await fetch(`${url}/jobs/api/v1/stats`)).status).toBe(200)
  })

  it('with tokens, the page and assets need none (they hold no data) while every API route still does; the host check applies to both', async () => {
    const url = await serve({ dashboard: true, authorize: bearerTokens({ [TOKEN]: 'household-a' }), allowedHosts: ['127.0.0.1'] })
    expect((await fetch(`${url}/`)).status).toBe(200)
    expect((await fetch(`${url}/dashboard/app.js`)).status).toBe(200)
    expect((await fetch(`${url}/api/v1/stats`)).status).toBe(401)
    expect((await fetch(`${url}/api/v1/stats`, { headers: { authorization: `Bearer ${TOKEN}` } })).status).toBe(200)
    const port = new URL(url).port
    const elsewhere = await fetch(`http://localhost:${port}/`)
    expect(elsewhere.status).toBe(403)
  })

  it('its three scripts are valid ES modules', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'jobtable-dashboard-'))
    try {
      for (const [name, text] of [['app.mjs', APP_JS], ['sse.mjs', SSE_JS], ['chart.mjs', CHART_JS]] as const) {
        writeFileSync(join(dir, name), text)
        // Throws (exit 1, with the syntax error) unless it parses as a module.
        await promisify(execFile)(process.execPath, ['--check', join(dir, name)])
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
