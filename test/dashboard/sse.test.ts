import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SSE_JS } from '../../src/dashboard/sse-js.js'

interface Message {
  event: string
  data: string
  id: string
}
interface SseModule {
  EventParser: new (onEvent: (m: Message) => void) => { push(text: string): void; finish(): void }
  readEvents(body: ReadableStream<Uint8Array>, onEvent: (m: Message) => void): Promise<void>
}

/** The dashboard's event-stream reader, loaded as the browser loads it: the served text as an ES module. */
let sse: SseModule
let dir: string
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'jobtable-sse-'))
  const file = join(dir, 'sse.mjs')
  writeFileSync(file, SSE_JS)
  sse = (await import(/* @vite-ignore */ pathToFileURL(file).href)) as SseModule
})
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** Feeds `chunks` to a parser; returns the events it dispatched. */
function parse(chunks: string[]): Message[] {
  const out: Message[] = []
  const parser = new sse.EventParser((m) => out.push(m))
  for (const chunk of chunks) parser.push(chunk)
  parser.finish()
  return out
}

describe("the dashboard's event-stream reader", () => {
  const stream = 'retry: 5000\nevent: job\nid: 1\ndata: {"status":"queued"}\n\n: keep-alive\n\nevent: job\nid: 2\ndata: {"status":"running"}\n\n'

  it("reads the API's stream whole: each event with its name, data and id, comments and retry lines skipped", () => {
    expect(parse([stream])).toEqual([
      { event: 'job', data: '{"status":"queued"}', id: '1' },
      { event: 'job', data: '{"status":"running"}', id: '2' },
    ])
  })

  it('gives the same events however the stream is cut into chunks, one character at a time included', () => {
    const whole = parse([stream])
    for (let cut = 1; cut < stream.length; cut++) expect(parse([stream.slice(0, cut), stream.slice(cut)]), `cut at ${cut}`).toEqual(whole)
    expect(parse([...stream])).toEqual(whole)
  })

  it('takes CRLF, CR and LF line ends, a CRLF split between chunks counting as one line end', () => {
    const crlf = stream.replaceAll('\n', '\r\n')
    const cr = stream.replaceAll('\n', '\r')
    expect(parse([crlf])).toEqual(parse([stream]))
    expect(parse([cr])).toEqual(parse([stream]))
    for (let cut = 1; cut < crlf.length; cut++) expect(parse([crlf.slice(0, cut), crlf.slice(cut)]), `cut at ${cut}`).toEqual(parse([stream]))
  })

  it('joins data lines with a newline, takes a field without a colon, keeps a value without its one leading space, and drops an event without data', () => {
    expect(parse(['data: a\ndata:  b\ndata\n\nevent: empty\n\nevent\ndata:x\n\n'])).toEqual([
      { event: 'message', data: 'a\n b\n', id: '' },
      { event: 'message', data: 'x', id: '' },
    ])
  })

  it('dispatches nothing for an event the stream ends in the middle of', () => {
    expect(parse(['event: job\ndata: {"status":"running"}\n'])).toEqual([])
  })

  it('readEvents reads a byte stream to its end, a multi-byte character split between chunks included', async () => {
    const bytes = new TextEncoder().encode('event: job\ndata: {"result":"crème brûlée"}\n\n')
    const split = bytes.indexOf(0xc3) + 1 // inside the two bytes of è
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(bytes.slice(0, split))
        controller.enqueue(bytes.slice(split))
        controller.close()
      },
    })
    const out: Message[] = []
    await sse.readEvents(body, (m) => out.push(m))
    expect(out).toEqual([{ event: 'job', data: '{"result":"crème brûlée"}', id: '' }])
  })
})
