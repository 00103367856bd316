import { afterEach, expect } from 'vitest'
import type { Runner } from 'jobtable'
import { createApi, listen, type ApiOptions, type Listening } from 'jobtable/http'
import { conforms } from './schema-check.js'

/** One HTTP answer, read whole. */
export interface Answer {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  readonly json: any // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** Servers started by a test file, closed after each test (before the harness closes runners). */
export function servers() {
  let open: Listening[] = []
  afterEach(async () => {
    for (const l of open) await l.close()
    open = []
  })
  return {
    /** Serves runner's API on a free loopback port and returns a client for it. */
    async serve(runner: Runner, options: Omit<ApiOptions, 'runner'> = {}) {
      const listening = await listen(createApi({ runner, ...options }), { port: 0 })
      open.push(listening)
      return { ...client(listening.url), close: () => listening.close() }
    },
  }
}

/** A fetch client whose every answer is checked against the OpenAPI document; `basePath` is the path the API is mounted under, inside `base`. */
export function client(base: string, basePath = '') {
  const call = async (method: string, path: string, init: { body?: string; headers?: Record<string, string>; token?: string } = {}): Promise<Answer> => {
    const headers: Record<string, string> = { ...init.headers }
    if (init.token) headers.authorization = `Bearer ${init.token}`
    if (init.body !== undefined && !Object.keys(headers).some((k) => k.toLowerCase() === 'content-type')) headers['content-type'] = 'application/json'
    const res = await fetch(base + path, { method, headers, body: init.body })
    const text = await res.text()
    const contentType = res.headers.get('content-type') ?? ''
    const mismatches = conforms(method, new URL(base + path).pathname.slice(basePath.length), res.status, contentType, text)
    expect(mismatches, `${method} ${path} → ${res.status} ${text}`).toEqual([])
    if (res.status >= 400) {
      expect(contentType).toBe('application/problem+json')
      expect(text).not.toMatch(/stack|at .*\.ts:\d+|SyntaxError|Unexpected token/)
    }
    let json: unknown
    try {
      json = text ? JSON.parse(text) : undefined
    } catch {
      json = undefined
    }
    return { status: res.status, headers: res.headers, text, json }
  }
  return {
    base,
    call,
    get: (path: string, token?: string) => call('GET', path, { token }),
    post: (body: unknown, token?: string) => call('POST', '/api/v1/jobs', { body: JSON.stringify(body), token }),
    /** Opens a job's event stream and returns its events as they arrive. */
    events: (id: string, token?: string) => openEvents(`${base}/api/v1/jobs/${id}/events`, token),
  }
}

/** A parsed Server-Sent Event. */
export interface Sse {
  readonly event: string
  readonly data: string
}

/** Reads an event stream: next() resolves with each event in turn, undefined once the stream has ended. */
export async function openEvents(url: string, token?: string) {
  const res = await fetch(url, { headers: token ? { authorization: `Bearer ${token}` } : {} })
  const reader = res.body!.getReader()
  const decoder = new TextDecoder()
  let buffer = ''
  const events: Sse[] = []
  const next = async (): Promise<Sse | undefined> => {
    for (;;) {
      const end = buffer.indexOf('\n\n')
      if (end >= 0) {
        const block = buffer.slice(0, end)
        buffer = buffer.slice(end + 2)
        let event = 'message'
        const data: string[] = []
        for (const line of block.split('\n')) {
          if (line.startsWith('event: ')) event = line.slice(7)
          else if (line.startsWith('data: ')) data.push(line.slice(6))
        }
        if (data.length === 0) continue // a comment (keep-alive) or a bare retry
        const e = { event, data: data.join('\n') }
        events.push(e)
        return e
      }
      const { done, value } = await reader.read()
      if (done) return undefined
      buffer += decoder.decode(value, { stream: true })
    }
  }
  return {
    response: res,
    events,
    next,
    /** Reads every remaining event until the stream ends. */
    async rest(): Promise<Sse[]> {
      while ((await next()) !== undefined);
      return events
    },
    cancel: () => reader.cancel().catch(() => undefined),
  }
}
